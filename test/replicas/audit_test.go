package replicas

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditLog is the apiserver's audit log (JSON lines), written
// synchronously (--audit-log-mode=blocking, the default): what every
// replica asked of the apiserver, by whom, with what answer. It is how
// the failover tests count writes — including attempts that failed,
// which no watch sees.
var auditLog string

// auditPolicy records, at Metadata level, every write that enforcing a
// deadline, a TTL or a Training restart makes: TrainJob status patches and
// deletes, JobSet deletes, PodCliqueSet status and PodClique patches, pod
// deletes; and the Workload and PodGroup creates of the Workload
// controller. Nothing else (the log stays small).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["delete", "deletecollection", "patch", "update"]
  resources:
  - group: trainer.kubeflow.org
    resources: ["trainjobs", "trainjobs/status"]
  - group: jobset.x-k8s.io
    resources: ["jobsets"]
  - group: grove.io
    resources: ["podcliquesets", "podcliquesets/status", "podcliques"]
- level: Metadata
  verbs: ["create"]
  resources:
  - group: scheduling.k8s.io
    resources: ["workloads", "podgroups"]
- level: Metadata
  verbs: ["delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["pods"]
- level: None
`

// auditFlags writes the audit policy into a temporary directory and
// returns the apiserver flags that turn the audit log on. Called from
// TestMain before the control plane starts.
func auditFlags() (map[string]string, error) {
	dir, err := os.MkdirTemp("", "shepherd-replicas-audit-")
	if err != nil {
		return nil, err
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	auditLog = filepath.Join(dir, "audit.log")
	return map[string]string{
		"audit-policy-file":   policy,
		"audit-log-path":      auditLog,
		"audit-log-maxsize":   "0",
		"audit-log-maxbackup": "0",
	}, nil
}

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// OK reports whether the apiserver carried the request out (2xx).
func (e auditEvent) OK() bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code >= 200 && e.ResponseStatus.Code < 300
}

// audited returns the completed requests (stage ResponseComplete) of verb
// on resource/subresource in namespace ns, oldest first.
func audited(t *testing.T, ns, verb, resource, subresource string) []auditEvent {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		if e.Stage != "ResponseComplete" || e.Verb != verb || e.ObjectRef == nil ||
			e.ObjectRef.Namespace != ns || e.ObjectRef.Resource != resource || e.ObjectRef.Subresource != subresource {
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	return out
}

// kubeconfigAs writes a kubeconfig for a new user of the control plane
// (system:masters, a client certificate of its own) into a temporary
// directory and returns its path. Each replica runs as its own user, so
// the audit log tells which replica made each write.
func kubeconfigAs(t *testing.T, user string) string {
	t.Helper()
	u, err := env.Env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding user %s: %v", user, err)
	}
	b, err := kubeconfigFor(u.Config(), user)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func kubeconfigFor(cfg *rest.Config, user string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: user}
	kc.CurrentContext = "envtest"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig of %s: %w", user, err)
	}
	return b, nil
}
