package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// object parses a manifest into an unstructured object in namespace ns, so
// fields shepherd does not model travel exactly as written.
func object(t *testing.T, ns, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("parsing manifest: %v", err)
	}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

// namespace creates a namespace with labels and returns its name.
func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wh-", Labels: labels}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

func hasCause(causes []metav1.StatusCause, field, msgPart string) bool {
	for _, c := range causes {
		if c.Field == field && strings.Contains(c.Message, msgPart) {
			return true
		}
	}
	return false
}

var (
	auditorOnce sync.Once
	auditorTok  string
	auditorErr  error
	outsiderTok string
)

// tokens returns a bearer token of a ServiceAccount allowed to GET /audit
// and /metrics (by RBAC on non-resource URLs), and one of a ServiceAccount
// with no such permission.
func tokens(t *testing.T) (auditor, outsider string) {
	t.Helper()
	auditorOnce.Do(func() {
		ctx := context.Background()
		ns := "default"
		for _, name := range []string{"shepherd-auditor", "outsider"} {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
			if err := env.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
				auditorErr = err
				return
			}
		}
		role := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "shepherd-audit-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/audit", "/metrics"}, Verbs: []string{"get"}}},
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "shepherd-audit-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "shepherd-auditor", Namespace: ns}},
		}
		if err := env.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			auditorErr = err
			return
		}
		if err := env.Client.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
			auditorErr = err
			return
		}
		tok := func(name string) (string, error) {
			tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
			}, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			return tr.Status.Token, nil
		}
		if auditorTok, auditorErr = tok("shepherd-auditor"); auditorErr != nil {
			return
		}
		outsiderTok, auditorErr = tok("outsider")
	})
	if auditorErr != nil {
		t.Fatalf("creating the audit reader's token: %v", auditorErr)
	}
	return auditorTok, outsiderTok
}

// getMetrics GETs path on shepherd's metrics server with token (if any).
func getMetrics(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, metrics+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// auditRecords polls /audit with q until cond holds for the records.
func auditRecords(t *testing.T, q string, cond func([]audit.Record) bool) []audit.Record {
	t.Helper()
	tok, _ := tokens(t)
	var last []audit.Record
	testkit.Eventually(t, timeout, fmt.Sprintf("audit records for %q satisfying the condition", q), func() (bool, string) {
		code, body := getMetrics(t, "/audit?"+q, tok)
		if code != http.StatusOK {
			return false, fmt.Sprintf("GET /audit: HTTP %d: %s", code, body)
		}
		var l audit.List
		if err := json.Unmarshal(body, &l); err != nil {
			return false, err.Error()
		}
		last = l.Items
		return cond(l.Items), fmt.Sprintf("last: %+v", last)
	})
	return last
}
