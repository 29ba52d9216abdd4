package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestServeAsServiceAccountBecomesReady runs the real `shepherd serve`
// binary the way deploy/default does — as shepherd's ServiceAccount, with
// only the RBAC of the manifests — and waits for /readyz: every informer
// the webhook and the reconcilers start must list and watch, the
// certificate Secret must be created and the bundle injected. Any
// "forbidden" in its log fails the test.
func TestServeAsServiceAccountBecomesReady(t *testing.T) {
	applyIdentityAndWebhooks(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "shepherd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shepherd")
	build.Dir = cluster.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shepherd: %v\n%s", err, out)
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["shepherd"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: env.Config.CertData,
		ClientKeyData:         env.Config.KeyData,
		Impersonate:           serviceAccount.UserName,
		ImpersonateGroups:     serviceAccount.Groups,
	}
	kc.Contexts["shepherd"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "shepherd"}
	kc.CurrentContext = "shepherd"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	healthPort := cluster.FreePort()
	serve := exec.Command(bin, "serve",
		"--kubeconfig="+kubeconfig,
		"--webhook-host=127.0.0.1",
		"--webhook-port="+strconv.Itoa(cluster.FreePort()),
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(healthPort),
		"--leader-election-namespace="+shepherdNS,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--shutdown-drain-period=0s", // nothing routes to it but the test
	)
	serve.Env = append(os.Environ(), "POD_NAMESPACE="+shepherdNS)
	var logs syncBuffer
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		_ = serve.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("shepherd serve log:\n%s", logs.String())
		}
	}()

	url := "http://127.0.0.1:" + strconv.Itoa(healthPort) + "/readyz"
	if err := testkit.Poll(200*time.Millisecond, 90*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			return testkit.Stop(fmt.Errorf("shepherd serve exited: %v", err))
		default:
		}
		return cluster.Healthy(url)
	}); err != nil {
		t.Fatalf("shepherd serve not ready: %v", err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("RBAC denied shepherd something: %s", line)
		}
	}
}

// syncBuffer collects a process's output safely while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
