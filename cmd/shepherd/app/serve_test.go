package app

import (
	"bytes"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// TestAdmissionModeFlag: serve has the native mode's flags, and refuses an
// unknown mode before it touches a cluster, naming the flag and the values.
func TestAdmissionModeFlag(t *testing.T) {
	var out bytes.Buffer
	if code := Main([]string{"serve", "--help"}, &out, &out); code != 0 {
		t.Fatalf("serve --help exited %d: %s", code, out.String())
	}
	for _, f := range []string{"--admission-mode", "--audit-sink-token-file", "--audit-sink-max-bytes"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("serve --help does not list %s", f)
		}
	}
	out.Reset()
	code := Main([]string{"serve", "--admission-mode=vap", "--kubeconfig=/nonexistent"}, &out, &out)
	if code != 2 || !strings.Contains(out.String(), `--admission-mode must be webhook or native, got "vap"`) {
		t.Errorf("exit %d, output %q: want 2 naming the flag and its values", code, out.String())
	}
}

// TestExportVAPAudit: `export vap --audit` adds Audit to every binding's
// actions, beside Deny or Warn (deploy/native's policies), so the apiserver
// reports every failure in its audit events.
func TestExportVAPAudit(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"export", "vap", "--audit"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	bindings := 0
	for _, doc := range strings.Split(out.String(), "---\n") {
		if !strings.Contains(doc, "kind: ValidatingAdmissionPolicyBinding") {
			continue
		}
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		if err := yaml.Unmarshal([]byte(doc), &b); err != nil {
			t.Fatal(err)
		}
		bindings++
		a := b.Spec.ValidationActions
		if len(a) == 0 || a[len(a)-1] != admissionregistrationv1.Audit || (len(a) == 2 && a[0] == admissionregistrationv1.Audit) {
			t.Errorf("binding %s validationActions %v: want its action, then Audit", b.Name, a)
		}
	}
	if bindings < 20 {
		t.Errorf("%d bindings exported", bindings)
	}
}
