package app

import (
	"encoding/json"
	"encoding/xml"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOutputFormatsAgree (issue 33 item 9): every command that prints a
// report takes -o text, json and yaml (test adds junit); its help, its Use
// line and its shell completion list exactly those; each runs; json and
// yaml parse, to the same structure; any other value exits 2 naming the
// valid ones. audit still takes its old "table", hidden, as text with a
// notice on stderr only.
func TestOutputFormatsAgree(t *testing.T) {
	srv, _ := auditServer(t)
	common := []string{"text", "json", "yaml"}
	for _, tc := range []struct {
		name string
		path []string
		// args make a run of the command that exits 0.
		args  []string
		extra []string
	}{
		{"check", []string{"check"}, []string{"-f", filepath.Join(repoRoot, "examples", "valid", "jobset.yaml")}, nil},
		{"export rules", []string{"export", "rules"}, nil, nil},
		{"test", []string{"test"}, []string{filepath.Join(shippedSuites, "trainingruntime-no-workload-api-test.yaml")}, []string{"junit"}},
		{"version", []string{"version"}, nil, nil},
		{"audit", []string{"audit"}, []string{"--server", srv.URL, "--kubeconfig", filepath.Join(t.TempDir(), "none")}, nil},
		{"audit --policy", []string{"audit"}, []string{"--policy", impactFile("policy-audit.yaml"), "-f", impactFile("objects.yaml")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := append(slices.Clone(common), tc.extra...)
			listed := strings.Join(want[:len(want)-1], ", ") + " or " + want[len(want)-1]

			cmd := findCommand(t, tc.path)
			f := cmd.Flags().ShorthandLookup("o")
			if f == nil || f.Name != "output" {
				t.Fatalf("shepherd %v has no -o/--output", tc.path)
			}
			if f.DefValue != "text" || f.Usage != "output format: "+listed {
				t.Errorf("-o defaults to %q with help %q; want text and the formats %s", f.DefValue, f.Usage, listed)
			}
			if strings.Contains(cmd.Use, "-o ") && !strings.Contains(cmd.Use, "[-o "+strings.Join(want, "|")+"]") {
				t.Errorf("Use %q does not list -o %s", cmd.Use, strings.Join(want, "|"))
			}

			complete := append(append([]string{"__complete"}, tc.path...), "-o", "")
			code, out, errOut := runMain(complete...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || lines[len(lines)-1] != ":4" || !slices.Equal(lines[:len(lines)-1], want) {
				t.Errorf("shepherd %v: exit %d, completions %q (%s); want %v and no file names (:4)", complete, code, lines, errOut, want)
			}

			run := func(format string) (int, string, string) {
				return runMain(append(append(slices.Clone(tc.path), tc.args...), "-o", format)...)
			}
			outputs := map[string]string{}
			for _, format := range want {
				code, out, errOut := run(format)
				if code != 0 || out == "" || errOut != "" {
					t.Fatalf("-o %s: exit %d, stderr %q, stdout:\n%s\nwant 0, output, no stderr", format, code, errOut, out)
				}
				outputs[format] = out
			}
			var fromJSON, fromYAML any
			if err := json.Unmarshal([]byte(outputs["json"]), &fromJSON); err != nil {
				t.Errorf("-o json does not parse: %v\n%s", err, outputs["json"])
			}
			if err := yaml.Unmarshal([]byte(outputs["yaml"]), &fromYAML); err != nil {
				t.Errorf("-o yaml does not parse: %v\n%s", err, outputs["yaml"])
			}
			// Times differ from run to run; the structure may not.
			if !reflect.DeepEqual(shape(fromJSON), shape(fromYAML)) {
				t.Errorf("-o yaml is not the structure -o json is:\njson:\n%s\nyaml:\n%s", outputs["json"], outputs["yaml"])
			}
			if json.Valid([]byte(outputs["text"])) {
				t.Errorf("-o text printed JSON:\n%s", outputs["text"])
			}
			if junit, ok := outputs["junit"]; ok {
				if err := xml.Unmarshal([]byte(junit), new(struct{})); err != nil {
					t.Errorf("-o junit does not parse: %v\n%s", err, junit)
				}
			}

			code, out, errOut = run("xml")
			if wantErr := `--output "xml": want ` + listed; code != 2 || out != "" || !strings.Contains(errOut, wantErr) {
				t.Errorf("-o xml: exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, wantErr)
			}

			code, out, errOut = run("table")
			if tc.path[0] != "audit" {
				if code != 2 {
					t.Errorf("-o table: exit %d, want 2 (only audit had it)", code)
				}
				return
			}
			if code != 0 || out != outputs["text"] || !strings.Contains(errOut, `"table" has been deprecated, use "text"`) {
				t.Errorf("-o table: exit %d, stderr %q, stdout:\n%s\nwant 0, the text output and a deprecation notice on stderr", code, errOut, out)
			}
		})
	}
}

// shape is v, decoded from JSON, with every scalar dropped: what json and
// yaml outputs of two runs must share.
func shape(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = shape(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = shape(e)
		}
		return out
	}
	return nil
}
