package app

import (
	"bytes"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/printers"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// ruleIDCommands are the commands that take built-in rule IDs.
var ruleIDCommands = [][]string{{"serve"}, {"check"}, {"test"}, {"export", "rules"}, {"export", "vap"}, {"export", "map"}, {"audit"}}

// findCommand returns the command at path in a fresh command tree.
func findCommand(t *testing.T, path []string) *cobra.Command {
	t.Helper()
	cmd, rest, err := NewRootCommand(io.Discard, io.Discard).Find(path)
	if err != nil || len(rest) != 0 || cmd.Name() != path[len(path)-1] {
		t.Fatalf("no command %v: %v (rest %v)", path, err, rest)
	}
	return cmd
}

// TestDisableRuleSpellings (issue 33 item 6): every command that takes rule
// IDs spells the flag --disable-rule, repeatable and comma-separated, and
// still takes serve's old spelling --disable-rules, hidden and deprecated;
// the two spellings mixed collect every ID (the alias shares the flag's
// value, so neither replaces what the other collected).
func TestDisableRuleSpellings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"one", []string{"--disable-rule=V-JS-5"}, []string{"V-JS-5"}},
		{"repeated", []string{"--disable-rule", "V-JS-5", "--disable-rule", "V-TJ-2"}, []string{"V-JS-5", "V-TJ-2"}},
		{"comma-separated", []string{"--disable-rule=V-JS-5,V-TJ-2"}, []string{"V-JS-5", "V-TJ-2"}},
		{"deprecated spelling", []string{"--disable-rules=V-JS-5,V-TJ-2"}, []string{"V-JS-5", "V-TJ-2"}},
		{"both spellings", []string{"--disable-rule=V-JS-5", "--disable-rules", "V-TJ-2", "--disable-rule=D-PCS-6"}, []string{"V-JS-5", "V-TJ-2", "D-PCS-6"}},
	} {
		for _, path := range ruleIDCommands {
			t.Run(tc.name+"/"+strings.Join(path, " "), func(t *testing.T) {
				cmd := findCommand(t, path)
				if err := cmd.ParseFlags(tc.args); err != nil {
					t.Fatalf("shepherd %v %v: %v", path, tc.args, err)
				}
				for _, name := range []string{"disable-rule", "disable-rules"} {
					f := cmd.Flags().Lookup(name)
					if f == nil {
						t.Fatalf("shepherd %v has no --%s", path, name)
					}
					if got := f.Value.(pflag.SliceValue).GetSlice(); !slices.Equal(got, tc.want) {
						t.Errorf("shepherd %v %v: --%s holds %v, want %v", path, tc.args, name, got, tc.want)
					}
				}
				old := cmd.Flags().Lookup("disable-rules")
				if !old.Hidden || !strings.Contains(old.Deprecated, "--disable-rule") {
					t.Errorf("--disable-rules hidden %v, deprecated %q: want hidden and deprecated for --disable-rule", old.Hidden, old.Deprecated)
				}
				if usage := cmd.Flags().FlagUsages(); strings.Contains(usage, "--disable-rules") || !strings.Contains(usage, "--disable-rule ") {
					t.Errorf("shepherd %v --help lists --disable-rules or lacks --disable-rule:\n%s", path, usage)
				}
			})
		}
	}
}

// TestDeprecatedSpellingWarns: the old spelling runs and says, on stderr,
// which to use; standard output stays the command's own (-o json parses).
func TestDeprecatedSpellingWarns(t *testing.T) {
	code, out, errOut := runMain("check", "-f", filepath.Join(repoRoot, "examples", "valid", "jobset.yaml"), "--disable-rules", "V-JS-5", "-o", "json")
	if code != 0 || !strings.Contains(errOut, "--disable-rules has been deprecated, use --disable-rule") {
		t.Errorf("check --disable-rules V-JS-5: exit %d, stderr %q; want 0 and a deprecation notice naming --disable-rule", code, errOut)
	}
	var results []offline.CheckResult
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 1 {
		t.Errorf("check -o json with the old spelling printed %q (%v): want one result, and no notice, on stdout", out, err)
	}
}

// TestUnknownRuleIDListsTheValidOnes (issue 33 item 6): an unknown rule ID,
// in either spelling, is an error in every command — serve refuses to
// start — that names the ID and lists every built-in rule ID, and exits 2.
func TestUnknownRuleIDListsTheValidOnes(t *testing.T) {
	ids, err := webhook.BuiltinRuleIDs()
	if err != nil || len(ids) < 20 {
		t.Fatalf("built-in rule IDs %v: %v", ids, err)
	}
	valid := filepath.Join(repoRoot, "examples", "valid")
	policy := filepath.Join(repoRoot, "examples", "policies", "require-team-label", "policy.yaml")
	noCluster := filepath.Join(t.TempDir(), "no-kubeconfig")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"check", []string{"check", "-f", valid}},
		{"test", []string{"test", shippedSuites}},
		{"export rules", []string{"export", "rules"}},
		{"export vap", []string{"export", "vap"}},
		{"audit", []string{"audit", "--policy", policy, "-f", valid}},
		// serve refuses before it connects to anything.
		{"serve", []string{"serve", "--kubeconfig", noCluster}},
	} {
		for _, flag := range []string{"--disable-rule", "--disable-rules"} {
			t.Run(tc.name+flag, func(t *testing.T) {
				args := append(slices.Clone(tc.args), flag, "V-JS-5,V-TJ-99")
				code, _, errOut := runMain(args...)
				if code != 2 || !strings.Contains(errOut, "unknown rule ID V-TJ-99") {
					t.Fatalf("shepherd %v: exit %d, stderr %q; want 2 naming V-TJ-99", args, code, errOut)
				}
				if strings.Contains(errOut, "unknown rule ID V-JS-5") {
					t.Errorf("the valid V-JS-5 is called unknown: %s", errOut)
				}
				for _, id := range ids {
					if !strings.Contains(errOut, id) {
						t.Errorf("the error does not list the valid ID %s: %s", id, errOut)
					}
				}
			})
		}
	}
}

// TestRuleIDCompletion (issue 33 item 6): the shell completes rule IDs for
// --disable-rule (and its old spelling) on every command that takes it:
// every built-in ID with that prefix, the last of a comma-separated list,
// and no file names.
func TestRuleIDCompletion(t *testing.T) {
	ids, err := webhook.BuiltinRuleIDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range ruleIDCommands {
		for _, tc := range []struct {
			flag, typed, prefix string
		}{
			{"--disable-rule", "V-TJ-", ""},
			{"--disable-rule", "V-JS-5,D-PCS-", "V-JS-5,"},
			{"--disable-rules", "D-", ""},
		} {
			args := append(append([]string{"__complete"}, path...), tc.flag, tc.typed)
			code, out, errOut := runMain(args...)
			if code != 0 {
				t.Fatalf("shepherd %v: exit %d, %s", args, code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			// cobra's last line is the directive, ":4" for no file completion.
			if directive := lines[len(lines)-1]; directive != ":4" {
				t.Errorf("shepherd %v: directive %s, want :4 (no file names)", args, directive)
			}
			var want []string
			last := strings.TrimPrefix(tc.typed, tc.prefix)
			for _, id := range ids {
				if strings.HasPrefix(id, last) {
					want = append(want, tc.prefix+id)
				}
			}
			if got := lines[:len(lines)-1]; len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("shepherd %v completes %v, want %v", args, got, want)
			}
		}
	}
}

// TestVersionOutput (issue 33): `shepherd version -o json` (and yaml) prints
// the version and the tested upstreams; text stays the default; another
// format is a usage error.
func TestVersionOutput(t *testing.T) {
	code, out, errOut := runMain("version", "-o", "json")
	if code != 0 {
		t.Fatalf("version -o json: exit %d, %s", code, errOut)
	}
	var v printers.VersionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version -o json printed %q: %v", out, err)
	}
	if want := printers.NewVersionInfo(Version()); v != want {
		t.Errorf("version -o json = %+v, want %+v", v, want)
	}
	if v.Version != Version() || v.TestedWith.Kubernetes != printers.KubernetesTested || v.TestedWith.Trainer.Module == "" {
		t.Errorf("version -o json = %+v", v)
	}
	code, out, _ = runMain("version", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "version: "+Version()) || !strings.Contains(out, "kubernetes: "+printers.KubernetesTested) {
		t.Errorf("version -o yaml: exit %d, %q", code, out)
	}
	code, out, _ = runMain("version")
	if code != 0 || !strings.HasPrefix(out, "shepherd "+Version()+" (") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	if code, _, errOut := runMain("version", "-o", "xml"); code != 2 || !strings.Contains(errOut, `--output "xml": want text, json or yaml`) {
		t.Errorf("version -o xml: exit %d, %q; want 2 naming the formats", code, errOut)
	}
}

// TestCRDFlagHelp (issue 33): the --crd help line names its value PATH, not
// the first backquoted words of its text (it rendered as "--crd shepherd
// version"), and no flag of any command takes its value name from prose.
func TestCRDFlagHelp(t *testing.T) {
	for _, path := range [][]string{{"serve"}, {"check"}, {"test"}, {"export", "rules"}, {"export", "vap"}, {"export", "map"}, {"audit"}, {"version"}} {
		cmd := findCommand(t, path)
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.Contains(name, " ") {
				t.Errorf("shepherd %v --%s renders its value as %q", path, f.Name, name)
			}
			if f.Name == "crd" && name != "PATH" {
				t.Errorf("shepherd %v --crd renders its value as %q, want PATH", path, name)
			}
		})
	}
}

// TestImpactSingular: one judged object is "1 stored object".
func TestImpactSingular(t *testing.T) {
	for n, want := range map[int]string{1: "Judged 1 stored object from x as creates.", 2: "Judged 2 stored objects from x as creates."} {
		var b bytes.Buffer
		if err := printers.Impact(&b, &offline.ImpactReport{Source: "x", Evaluated: n}); err != nil {
			t.Fatal(err)
		}
		if got := strings.SplitN(b.String(), "\n", 2)[0]; got != want {
			t.Errorf("%d objects: %q, want %q", n, got, want)
		}
	}
}
