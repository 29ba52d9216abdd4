package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

func TestMalformedAdmissionReviewIsHTTP400(t *testing.T) {
	c := env.WebhookClient(t, nil)
	for _, path := range []string{"/mutate", "/validate"} {
		resp, err := c.Post("https://"+webhookA+path, "application/json", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":`))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "malformed AdmissionReview") {
			t.Errorf("%s: HTTP %d %q, want 400 naming the malformed AdmissionReview", path, resp.StatusCode, body)
		}
	}
}

func TestOversizedAdmissionReviewIsRejected(t *testing.T) {
	c := env.WebhookClient(t, nil)
	big := strings.Repeat("x", 9<<20)
	resp, err := c.Post("https://"+webhookA+"/validate", "application/json", strings.NewReader(`{"pad":"`+big+`"}`))
	if err != nil {
		// The server may answer 413 and close the connection while the
		// client still writes; the client then sees the closed connection.
		if !strings.Contains(err.Error(), "connection reset") && !strings.Contains(err.Error(), "broken pipe") && !strings.Contains(err.Error(), "EOF") {
			t.Fatalf("POST of 9 MiB: %v", err)
		}
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("HTTP %d, want 413", resp.StatusCode)
	}
}

func TestWebhookServerTLSPolicy(t *testing.T) {
	// HTTP/2 is not offered: ALPN settles on HTTP/1.1.
	resp, err := env.WebhookClient(t, func(c *tls.Config) { c.NextProtos = []string{"h2", "http/1.1"} }).
		Post("https://"+webhookA+"/validate", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Errorf("negotiated %s, want HTTP/1.1", resp.Proto)
	}
	// TLS 1.1 is refused.
	_, err = env.WebhookClient(t, func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS11, tls.VersionTLS11 }).
		Post("https://"+webhookA+"/validate", "application/json", strings.NewReader("{}"))
	if err == nil {
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

const trainingPCS = `
apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata:
  name: %s
spec:
  replicas: 1
  workloadType: Training
  template:
    headlessServiceConfig:
      publishNotReadyAddresses: true
    cliques:
    - name: worker
      x-grove-future-field: keep-me
      spec:
        roleName: worker
        replicas: 2
        podSpec:
          containers:
          - name: worker
            image: busybox
`

const brokenPCS = `
apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata:
  name: elastic-training
spec:
  replicas: 1
  workloadType: Training
  template:
    cliques:
    - name: worker
      spec:
        roleName: worker
        replicas: 4
        minAvailable: 5
        autoScalingConfig:
          minReplicas: 2
          maxReplicas: 8
        podSpec:
          restartPolicy: Always
          containers:
          - name: worker
            image: busybox
`

func pcs(t *testing.T, ns, name string) *unstructured.Unstructured {
	return object(t, ns, strings.Replace(trainingPCS, "%s", name, 1))
}

// Every violation comes in one 422 Invalid, one cause per field, and what
// kubectl prints of it names shepherd and the rule of each cause next to
// its field path.
func TestEveryViolationInOneInvalid(t *testing.T) {
	ns := namespace(t, nil)
	err := k.Create(context.Background(), object(t, ns, brokenPCS))
	causes := corpus.ShepherdCauses(t, err)
	if len(causes) < 3 {
		t.Fatalf("want the V-PCS-4, V-PCS-7 and V-PCS-8 violations at once, got %+v", causes)
	}
	for _, c := range causes {
		if c.Field == "" || !strings.HasPrefix(c.Field, "spec.") {
			t.Errorf("cause without a spec field path: %+v", c)
		}
	}
	printed := corpus.KubectlMessage(err)
	if !strings.HasPrefix(printed, `The PodCliqueSet "`) {
		t.Errorf("kubectl prints %q, want The PodCliqueSet ... is invalid", printed)
	}
	for _, id := range []string{"V-PCS-4", "V-PCS-7", "V-PCS-8"} {
		if !strings.Contains(printed, "(shepherd "+id+")") {
			t.Errorf("kubectl prints no %s:\n%s", id, printed)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(printed), "\n")[1:] {
		if !strings.HasPrefix(strings.TrimLeft(line, "* "), "spec.") || !strings.HasSuffix(line, ")") || !strings.Contains(line, "(shepherd V-PCS-") {
			t.Errorf("kubectl's line %q: want a field path and the rule that denied it", line)
		}
	}
}

func TestUnknownFieldsSurviveDefaulting(t *testing.T) {
	ns := namespace(t, nil)
	sent := pcs(t, ns, "unknown-fields")
	stored := sent.DeepCopy()
	if err := k.Create(context.Background(), stored); err != nil {
		t.Fatalf("create: %v", err)
	}
	// Fields shepherd does not model are stored as sent.
	v, _, _ := unstructured.NestedBool(stored.Object, "spec", "template", "headlessServiceConfig", "publishNotReadyAddresses")
	cliques, _, _ := unstructured.NestedSlice(stored.Object, "spec", "template", "cliques")
	if !v || len(cliques) != 1 || cliques[0].(map[string]any)["x-grove-future-field"] != "keep-me" {
		t.Fatalf("unknown fields were dropped: %v", stored.Object["spec"])
	}
	// The defaults of a Training PodCliqueSet were applied (D-PCS-2/3/4/6).
	for path, want := range map[string]any{
		"spec.template.terminationDelay":                      "0s",
		"spec.trainingSpec.maxRestarts":                       int64(0),
		"spec.template.cliques[0].spec.minAvailable":          int64(2),
		"spec.template.cliques[0].spec.podSpec.restartPolicy": "Never",
	} {
		if got := lookup(stored.Object, path); got != want {
			t.Errorf("%s = %#v, want %#v", path, got, want)
		}
	}
	// Nothing else changed: removing the defaults gives back what was sent.
	strip(stored.Object, "spec.template.terminationDelay", "spec.trainingSpec", "spec.template.cliques[0].spec.minAvailable", "spec.template.cliques[0].spec.podSpec.restartPolicy")
	a, _ := json.Marshal(sent.Object["spec"])
	b, _ := json.Marshal(stored.Object["spec"])
	if string(a) != string(b) {
		t.Errorf("stored spec differs from the sent one beyond the defaults:\nsent   %s\nstored %s", a, b)
	}
}

func TestDryRunIsAnsweredTheSameAndAuditedAsDryRun(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)

	// A denial: dry-run and real requests get the same causes.
	realErr := k.Create(ctx, object(t, ns, brokenPCS))
	dryErr := k.Create(ctx, object(t, ns, brokenPCS), client.DryRunAll)
	realCauses, dryCauses := corpus.ShepherdCauses(t, realErr), corpus.ShepherdCauses(t, dryErr)
	if len(realCauses) != len(dryCauses) {
		t.Errorf("real request denied with %d causes, dry run with %d", len(realCauses), len(dryCauses))
	}

	// An admission: a dry run returns the defaulted object and stores nothing.
	o := pcs(t, ns, "dry")
	if err := k.Create(ctx, o, client.DryRunAll); err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if got := lookup(o.Object, "spec.template.cliques[0].spec.podSpec.restartPolicy"); got != "Never" {
		t.Errorf("dry-run answer not defaulted: restartPolicy %v", got)
	}
	if err := k.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run object was stored: %v", err)
	}

	recs := auditRecords(t, "namespace="+ns, func(rs []audit.Record) bool {
		var real, dry bool
		for _, r := range rs {
			real = real || (!r.DryRun && r.Action == "Deny")
			dry = dry || (r.DryRun && r.Action == "Deny")
		}
		return real && dry
	})
	for _, r := range recs {
		if r.Kind != "PodCliqueSet" || r.Name != "elastic-training" || r.Operation != "CREATE" || r.User == "" || r.RequestUID == "" || r.Rule == "" || r.Message == "" {
			t.Errorf("incomplete audit record: %+v", r)
		}
	}
	// Events only for the real request (sideEffects: NoneOnDryRun).
	var evs eventsv1.EventList
	testkit.Eventually(t, timeout, "PolicyViolation events of the real request", func() (bool, error) {
		if err := k.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(evs.Items) > 0, nil
	})
	for _, e := range evs.Items {
		if e.Reason != api.EventPolicyViolation || e.Regarding.Kind != "PodCliqueSet" || e.Regarding.Name != "elastic-training" {
			t.Errorf("unexpected event %s/%s on %+v", e.Reason, e.Note, e.Regarding)
		}
		if strings.Contains(e.Note, "dry run") {
			t.Errorf("a dry-run request wrote an Event: %s", e.Note)
		}
	}
}

func TestAuditEndpointNeedsAuthorization(t *testing.T) {
	auditor, outsider := tokens(t)
	if code, body := getMetrics(t, "/audit", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d %s, want 401", code, body)
	}
	if code, body := getMetrics(t, "/audit", outsider); code != http.StatusForbidden {
		t.Errorf("token without RBAC: HTTP %d %s, want 403", code, body)
	}
	if code, body := getMetrics(t, "/audit?since=yesterday", auditor); code != http.StatusBadRequest {
		t.Errorf("bad filter: HTTP %d %s, want 400", code, body)
	}
	code, body := getMetrics(t, "/metrics", auditor)
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	for _, m := range []string{"shepherd_admission_requests_total", "shepherd_admission_duration_seconds", "shepherd_rule_evaluation_duration_seconds"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// lookup reads a dotted path with [i] list indexes.
func lookup(obj map[string]any, path string) any {
	var cur any = obj
	for _, part := range splitPath(path) {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[part.key]
		case []any:
			if part.idx < 0 || part.idx >= len(c) {
				return nil
			}
			cur = c[part.idx]
		default:
			return nil
		}
	}
	return cur
}

// strip deletes dotted paths (the last element must be a map key).
func strip(obj map[string]any, paths ...string) {
	for _, p := range paths {
		parts := splitPath(p)
		parentPath := parts[:len(parts)-1]
		var cur any = obj
		for _, part := range parentPath {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[part.key]
			case []any:
				cur = c[part.idx]
			}
		}
		if m, ok := cur.(map[string]any); ok {
			delete(m, parts[len(parts)-1].key)
		}
	}
}

type pathPart struct {
	key string
	idx int
}

func splitPath(p string) []pathPart {
	var out []pathPart
	for _, seg := range strings.Split(p, ".") {
		key := seg
		if i := strings.Index(seg, "["); i >= 0 {
			key = seg[:i]
			out = append(out, pathPart{key: key, idx: -1})
			var n int
			for _, ch := range seg[i+1 : len(seg)-1] {
				n = n*10 + int(ch-'0')
			}
			out = append(out, pathPart{idx: n})
			continue
		}
		out = append(out, pathPart{key: key, idx: -1})
	}
	return out
}

func TestUndecodableObjectIsDeniedWithTheDecodeError(t *testing.T) {
	c := env.WebhookClient(t, nil)
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	  "uid":"u-1","kind":{"group":"grove.io","version":"v1alpha1","kind":"PodCliqueSet"},
	  "resource":{"group":"grove.io","version":"v1alpha1","resource":"podcliquesets"},
	  "namespace":"default","name":"p","operation":"CREATE","userInfo":{"username":"tester"},
	  "object":["not","an","object"]}}`
	for _, path := range []string{"/mutate", "/validate"} {
		resp, err := c.Post("https://"+webhookA+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var rv struct {
			Response struct {
				UID     string `json:"uid"`
				Allowed bool   `json:"allowed"`
				Status  struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"status"`
			} `json:"response"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rv)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d, %v", path, resp.StatusCode, err)
		}
		if rv.Response.UID != "u-1" || rv.Response.Allowed || rv.Response.Status.Code != http.StatusUnprocessableEntity || !strings.Contains(rv.Response.Status.Message, "cannot decode the object: want a JSON object, got an array") {
			t.Errorf("%s: want a 422 denial with the decode error, got %+v", path, rv.Response)
		}
	}
}

func TestReadinessCoversCertificatesCachesPoliciesAndDiscovery(t *testing.T) {
	resp, err := http.Get(health + "/readyz?verbose")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: HTTP %d: %s", resp.StatusCode, body)
	}
	for _, check := range []string{"webhook", "certificates", "caches", "policies", "workloadapi"} {
		if !strings.Contains(string(body), "[+]"+check+" ok") {
			t.Errorf("/readyz lacks a passing %q check:\n%s", check, body)
		}
	}
}
