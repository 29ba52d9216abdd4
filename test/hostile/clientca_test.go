package hostile

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// forgedUser is the user the forged AdmissionReviews claim.
const forgedUser = "system:admin-FORGED"

// deniedPodCliqueSet is examples/valid's Training PodCliqueSet with a
// minAvailable above its replicas: denied (V-PCS-4, "minAvailable must be
// at least 1 and at most the clique's replicas") whoever sends it.
func deniedPodCliqueSet(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "valid", "podcliqueset-training-minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(ns)
	obj.SetName(name)
	cliques, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "cliques")
	if err := unstructured.SetNestedField(cliques[0].(map[string]any), int64(5), "spec", "minAvailable"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(obj.Object, cliques, "spec", "template", "cliques"); err != nil {
		t.Fatal(err)
	}
	return obj
}

// reviewOf is the AdmissionReview of a CREATE of obj by user.
func reviewOf(t *testing.T, obj *unstructured.Unstructured, user string) []byte {
	t.Helper()
	raw, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("review-" + obj.GetName()),
			Kind:      metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"},
			Resource:  metav1.GroupVersionResource{Group: "grove.io", Version: "v1alpha1", Resource: "podcliquesets"},
			Namespace: obj.GetNamespace(), Name: obj.GetName(), Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: user, Groups: []string{"system:masters"}},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// policyViolations are the PolicyViolation Events of ns about objects
// whose name holds substr.
func policyViolations(t *testing.T, ns, substr string) []eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Reason == "PolicyViolation" && strings.Contains(e.Regarding.Name, substr) {
			out = append(out, e)
		}
	}
	return out
}

// scraped is the value of a counter without labels on a serve's /metrics
// (plain HTTP).
func scraped(t *testing.T, metrics, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// clientCAWebhook registers a ValidatingWebhookConfiguration sending the
// CREATEs of PodCliqueSets in namespace ns to the serve at addr, as the
// shared serve's configurations do for every namespace; it is deleted when
// the test ends.
func clientCAWebhook(t *testing.T, addr, ns string) {
	t.Helper()
	ctx := context.Background()
	fail, none, timeoutSeconds := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun, int32(5)
	url := "https://" + addr + server.ValidatePath
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "shepherd-client-ca-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "client-ca.shepherd.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: env.Env.WebhookInstallOptions.LocalServingCAData},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"grove.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"podcliquesets"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeoutSeconds,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, cfg)
		_ = env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
}

// With --webhook-client-ca (a serve of its own, in a child process), 200
// forged AdmissionReviews posted without a client certificate — each
// claiming system:admin-FORGED, each denied if admitted — are answered 401
// and write no Event and no audit record; a certificate of another CA
// fails the handshake. The apiserver, which presents the CA's certificate
// (AdmissionConfiguration), still gets its verdicts, recorded as from an
// authenticated caller, as does a client holding that certificate.
func TestForgedRequestsWithTheClientCAWriteNothing(t *testing.T) {
	const forged = 200
	r := env.StartReplica(t, "--leader-elect=false", "--disable-reconcilers", "--metrics-secure=false",
		"--webhook-client-ca="+clientPKI.caFile)
	run := fmt.Sprint(time.Now().UnixNano())
	ns := "client-ca-" + run
	clientCAWebhook(t, r.Webhook, ns)

	// The forged requests, without a certificate.
	noCert := tlsConfig(t)
	noCert.Certificates = nil
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: noCert}, Timeout: timeout}
	defer c.CloseIdleConnections()
	codes := make(chan int, forged)
	bodies := make(chan string, forged)
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for i := range work {
				body := reviewOf(t, deniedPodCliqueSet(t, "kube-system", fmt.Sprintf("forged-%s-%d", run, i)), forgedUser)
				resp, err := c.Post("https://"+r.Webhook+server.ValidatePath, "application/json", strings.NewReader(string(body)))
				if err != nil {
					codes <- 0
					bodies <- err.Error()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
				bodies <- string(b)
			}
		})
	}
	for i := range forged {
		work <- i
	}
	close(work)
	wg.Wait()
	close(codes)
	close(bodies)
	byCode := map[int]int{}
	for code := range codes {
		byCode[code]++
	}
	t.Logf("%d forged AdmissionReviews without a client certificate in %v: HTTP status counts %v", forged, time.Since(start), byCode)
	if byCode[http.StatusUnauthorized] != forged {
		t.Errorf("forged requests answered %v, want %d × 401", byCode, forged)
	}
	if b := <-bodies; !strings.Contains(b, "--webhook-client-ca") {
		t.Errorf("the 401 says %q, which does not name --webhook-client-ca", b)
	}
	if got := scraped(t, r.Metrics, "shepherd_webhook_unauthenticated_requests_total"); got != forged {
		t.Errorf("shepherd_webhook_unauthenticated_requests_total is %v, want %d", got, forged)
	}

	// A certificate of another CA: no handshake.
	other, err := certs.GenerateCA(time.Now(), time.Hour, "another CA")
	if err != nil {
		t.Fatal(err)
	}
	_, _, otherCert, err := clientCertFor(other)
	if err != nil {
		t.Fatal(err)
	}
	wrong := tlsConfig(t)
	wrong.Certificates = nil
	// Sent although the server names another CA (crypto/tls would keep it
	// back, and get a 401).
	wrong.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &otherCert, nil }
	if conn, err := tls.Dial("tcp", r.Webhook, wrong); err == nil {
		// TLS 1.3: the server's refusal arrives with the first read.
		_ = conn.SetReadDeadline(time.Now().Add(timeout))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a client certificate of another CA: %v, want the handshake refused", err)
		}
	}

	// A holder of the CA's certificate gets its verdict.
	holder := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(t)}, Timeout: timeout}
	defer holder.CloseIdleConnections()
	resp, err := holder.Post("https://"+r.Webhook+server.ValidatePath, "application/json",
		strings.NewReader(string(reviewOf(t, deniedPodCliqueSet(t, "kube-system", "holder-"+run), "cert-holder"))))
	if err != nil {
		t.Fatal(err)
	}
	var rv admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&rv)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || rv.Response == nil || rv.Response.Allowed {
		t.Fatalf("with the CA's certificate: HTTP %d, %+v, %v; want a denial", resp.StatusCode, rv.Response, err)
	}

	// The apiserver presents its certificate: in ns it calls this serve
	// too, whose failurePolicy is Fail, so a create is admitted only if
	// this serve answered it, and a denied one is denied by the rule.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ok := &unstructured.Unstructured{}
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "valid", "podcliqueset-training-minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &ok.Object); err != nil {
		t.Fatal(err)
	}
	ok.SetNamespace(ns)
	if err := env.Client.Create(ctx, ok, client.DryRunAll); err != nil {
		t.Errorf("a valid create through the apiserver, which must present its certificate: %v", err)
	}
	err = env.Client.Create(ctx, deniedPodCliqueSet(t, ns, "apiserver-"+run))
	if err == nil || !strings.Contains(err.Error(), "minAvailable must be") {
		t.Errorf("an invalid create through the apiserver: %v, want shepherd's V-PCS-4 denial", err)
	}

	// Records: none of the forged ones; the others authenticated.
	if recs := cluster.AuditRecords(t, r.Metrics, audit.Query{User: forgedUser}.Values()); len(recs) != 0 {
		t.Errorf("%d audit records of the forged user, want 0: %+v", len(recs), recs[0])
	}
	for _, q := range []audit.Query{{User: "cert-holder", Namespace: "kube-system"}, {Namespace: ns}} {
		recs := cluster.AuditRecords(t, r.Metrics, q.Values())
		if len(recs) == 0 {
			t.Errorf("no audit record for %+v", q)
		}
		for _, rec := range recs {
			if !rec.CallerAuthenticated {
				t.Errorf("record %s %s/%s by %s: callerAuthenticated false, want true", rec.Rule, rec.Namespace, rec.Name, rec.User)
			}
		}
	}

	// Events: the certificate holder's arrives; none of the forged ones.
	testkit.Eventually(t, timeout, "the PolicyViolation Event of the certificate holder", func() bool {
		return len(policyViolations(t, "kube-system", "holder-"+run)) > 0
	})
	if evs := policyViolations(t, "kube-system", "forged-"+run); len(evs) != 0 {
		t.Errorf("%d PolicyViolation Events of the forged requests, want 0: %q", len(evs), evs[0].Note)
	}
	for _, e := range policyViolations(t, "kube-system", "holder-"+run) {
		if strings.Contains(e.Note, "caller not authenticated") {
			t.Errorf("Event %s/%s says %q, but its caller presented the CA's certificate", e.Namespace, e.Name, e.Note)
		}
	}
}
