package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// configMapYAML is a small manifest every command reads and check allows.
const configMapYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n"

// padded is doc behind a comment that brings it to n bytes or more: valid
// YAML of any size.
func padded(doc string, n int) string {
	if pad := n - len(doc) - 3; pad > 0 {
		return "# " + strings.Repeat("x", pad) + "\n" + doc
	}
	return doc
}

// repeatReader yields s over and over, without end.
type repeatReader struct {
	s   string
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

// withStdinPipe runs f with os.Stdin the read end of a pipe fed n bytes of
// content repeated, as `cat file | shepherd check -f -` feeds it: a stream
// of no known length (withStdin's is a regular file, sized up front).
func withStdinPipe(t *testing.T, content string, n int64, f func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Once the reader stops at the limit and the read end is closed,
		// the write fails (EPIPE) and the feeder ends.
		_, _ = io.Copy(w, io.LimitReader(&repeatReader{s: content}, n))
		w.Close()
	}()
	saved := os.Stdin
	os.Stdin = r
	defer func() {
		os.Stdin = saved
		r.Close()
		<-done
	}()
	f()
}

// tooLarge is the message of an input over the limit, as Main prints it.
func tooLarge(name, limit, what string) string {
	return fmt.Sprintf("shepherd: %s: larger than the %s --max-input-bytes allows; raise --max-input-bytes or split %s\n", name, limit, what)
}

// TestMaxInputBytesRefusesLargerInputs: every command that reads manifests
// refuses a file or stream over --max-input-bytes with exit 2 and a message
// naming it and the flag, before parsing it; one of exactly the limit is
// read.
func TestMaxInputBytesRefusesLargerInputs(t *testing.T) {
	dir := t.TempDir()
	small := testkit.WriteFile(t, dir, "small.yaml", configMapYAML)
	big := testkit.WriteFile(t, dir, "big.yaml", padded(configMapYAML, 2048))
	exact := testkit.WriteFile(t, dir, "exact.yaml", padded(configMapYAML, 1024))
	bigDir := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(filepath.Join(bigDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, bigDir, "a.yaml", configMapYAML)
	bigInDir := testkit.WriteFile(t, filepath.Join(bigDir, "sub"), "b.yaml", padded(configMapYAML, 4096))
	policy := impactFile("policy-team.yaml")
	bigPolicy := testkit.WriteFile(t, dir, "policy.yaml", padded(mustRead(t, policy), 2048))
	bigCRD := testkit.WriteFile(t, dir, "crd.yaml", padded("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n", 2048))

	for _, tc := range []struct {
		name       string
		args       []string
		stdin      string // content of a regular file redirected to stdin
		pipe       int64  // bytes of configMapYAML repeated, piped to stdin
		wantCode   int
		wantStderr string
	}{{
		name:       "file",
		args:       []string{"check", "-f", big, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(big, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "file of exactly the limit",
		args:       []string{"check", "-f", exact, "--max-input-bytes", "1024"},
		wantCode:   0,
		wantStderr: "",
	}, {
		name:       "file in a directory",
		args:       []string{"check", "-f", bigDir, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(bigInDir, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "non-regular file",
		args:       []string{"check", "-f", "/dev/zero", "--max-input-bytes", "1Mi"},
		wantCode:   2,
		wantStderr: tooLarge("/dev/zero", "1Mi (1048576 bytes)", "the file"),
	}, {
		name:       "the default limit",
		args:       []string{"check", "-f", "/dev/zero"},
		wantCode:   2,
		wantStderr: tooLarge("/dev/zero", "64Mi (67108864 bytes)", "the file"),
	}, {
		name:       "stdin redirected from a file",
		args:       []string{"check", "-f", "-", "--max-input-bytes", "1Ki"},
		stdin:      padded(configMapYAML, 2048),
		wantCode:   2,
		wantStderr: tooLarge("standard input", "1Ki (1024 bytes)", "the input"),
	}, {
		name:       "stdin from a pipe",
		args:       []string{"check", "-f", "-", "--max-input-bytes", "1Mi"},
		pipe:       8 << 20,
		wantCode:   2,
		wantStderr: tooLarge("standard input", "1Mi (1048576 bytes)", "the input"),
	}, {
		name:       "stdin from a pipe, exactly the limit",
		args:       []string{"check", "-f", "-", "--max-input-bytes", fmt.Sprint(10 * len("---\n"+configMapYAML))},
		pipe:       int64(10 * len("---\n"+configMapYAML)),
		wantCode:   0,
		wantStderr: "",
	}, {
		name:       "check --context",
		args:       []string{"check", "-f", small, "--context", big, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(big, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "check --old",
		args:       []string{"check", "-f", small, "--old", big, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(big, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "check --policy",
		args:       []string{"check", "-f", small, "--policy", bigPolicy, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(bigPolicy, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "check --crd",
		args:       []string{"check", "-f", small, "--crd", bigCRD, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: "shepherd: --crd: " + strings.TrimPrefix(tooLarge(bigCRD, "1Ki (1024 bytes)", "the file"), "shepherd: "),
	}, {
		name:       "audit -f",
		args:       []string{"audit", "--policy", policy, "-f", big, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(big, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "audit --policy",
		args:       []string{"audit", "--policy", bigPolicy, "-f", small, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(bigPolicy, "1Ki (1024 bytes)", "the file"),
	}, {
		name:       "export --policy",
		args:       []string{"export", "vap", "--policy", bigPolicy, "--max-input-bytes", "1Ki"},
		wantCode:   2,
		wantStderr: tooLarge(bigPolicy, "1Ki (1024 bytes)", "the file"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var code int
			var errOut string
			run := func() { code, _, errOut = runMain(tc.args...) }
			start := time.Now()
			switch {
			case tc.stdin != "":
				withStdin(t, tc.stdin, run)
			case tc.pipe > 0:
				withStdinPipe(t, "---\n"+configMapYAML, tc.pipe, run)
			default:
				run()
			}
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d", code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantStderr, errOut); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			// Generous: refusing takes milliseconds; reading /dev/zero
			// unbounded never ends.
			if d := time.Since(start); d > time.Minute {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestMaxInputBytesBoundsTestSuites: shepherd test bounds the suite file,
// its object files and its policies and context; a suite that is not a
// regular file is refused rather than read without end.
func TestMaxInputBytesBoundsTestSuites(t *testing.T) {
	suite := func(extra string) string {
		return "apiVersion: shepherd.dev/v1alpha1\nkind: PolicyTest\n" + extra + "cases:\n- name: cm\n  objectFile: obj.yaml\n  expect: {allowed: true}\n"
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		suite string // the suite's path, relative to its directory
		want  string // stderr; DIR is the suite's directory
	}{{
		name:  "within the limit",
		files: map[string]string{"s-test.yaml": suite("context: [ctx.yaml]\n"), "obj.yaml": configMapYAML, "ctx.yaml": configMapYAML},
		suite: "s-test.yaml",
		want:  "",
	}, {
		name:  "suite",
		files: map[string]string{"s-test.yaml": padded(suite(""), 2048), "obj.yaml": configMapYAML},
		suite: "s-test.yaml",
		want:  tooLarge("DIR/s-test.yaml", "1Ki (1024 bytes)", "the file"),
	}, {
		name:  "object file",
		files: map[string]string{"s-test.yaml": suite(""), "obj.yaml": padded(configMapYAML, 2048)},
		suite: "s-test.yaml",
		want:  `shepherd: DIR/s-test.yaml:5: case "cm": objectFile: ` + strings.TrimPrefix(tooLarge("DIR/obj.yaml", "1Ki (1024 bytes)", "the file"), "shepherd: "),
	}, {
		name:  "context",
		files: map[string]string{"s-test.yaml": suite("context: [ctx.yaml]\n"), "obj.yaml": configMapYAML, "ctx.yaml": padded(configMapYAML, 2048)},
		suite: "s-test.yaml",
		want:  "shepherd: DIR/s-test.yaml: context: " + strings.TrimPrefix(tooLarge("DIR/ctx.yaml", "1Ki (1024 bytes)", "the file"), "shepherd: "),
	}, {
		name:  "not a regular file",
		suite: "/dev/zero",
		want:  "shepherd: /dev/zero: not a regular file: suites are read from files (their paths are relative to the suite's directory)\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				testkit.WriteFile(t, dir, name, content)
			}
			path := tc.suite
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			code, out, errOut := runMain("test", path, "--max-input-bytes", "1Ki")
			wantCode := 2
			if tc.want == "" {
				wantCode = 0
			}
			if code != wantCode {
				t.Errorf("exit %d, want %d; stdout %s", code, wantCode, out)
			}
			if diff := cmp.Diff(strings.ReplaceAll(tc.want, "DIR", dir), errOut); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDirectoryWithoutManifestsIsAnError: a directory that holds no
// manifest is an error naming it (exit 2), not a check of nothing that
// passes.
func TestDirectoryWithoutManifestsIsAnError(t *testing.T) {
	empty := t.TempDir()
	other := t.TempDir()
	testkit.WriteFile(t, other, "README.md", "# not a manifest\n")
	small := testkit.WriteFile(t, t.TempDir(), "small.yaml", configMapYAML)
	for _, tc := range []struct {
		name string
		args []string
		dir  string
	}{
		{"check -f, empty", []string{"check", "-f", empty}, empty},
		{"check -f, no manifest file", []string{"check", "-f", other}, other},
		{"check --context", []string{"check", "-f", small, "--context", empty}, empty},
		{"audit -f", []string{"audit", "--policy", impactFile("policy-team.yaml"), "-f", empty}, empty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMain(tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stdout %s", code, out)
			}
			want := "shepherd: no manifests (*.yaml, *.yml, *.json) found in " + tc.dir + "\n"
			if diff := cmp.Diff(want, errOut); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMaxInputBytesFlag: the flag takes a byte count or a quantity, and
// every command that reads manifests has it, spelled and defaulted alike.
func TestMaxInputBytesFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "67108864", want: 64 << 20},
		{in: "64Mi", want: 64 << 20},
		{in: "1k", want: 1000},
		{in: "2Gi", want: 2 << 30},
		{in: "0", wantErr: true},
		{in: "-1Ki", wantErr: true},
		{in: "1.5", wantErr: true},
		{in: "lots", wantErr: true},
	} {
		var l inputLimit
		err := l.Set(tc.in)
		if (err != nil) != tc.wantErr || (err == nil && int64(l) != tc.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, error %v", tc.in, l, err, tc.want, tc.wantErr)
		}
	}
	if code, _, errOut := runMain("check", "-f", "x.yaml", "--max-input-bytes", "0"); code != 2 || !strings.Contains(errOut, `"--max-input-bytes"`) {
		t.Errorf("--max-input-bytes 0: exit %d, stderr %q; want 2 naming the flag", code, errOut)
	}
	for _, cmd := range [][]string{{"check"}, {"test"}, {"audit"}, {"export", "vap"}} {
		_, out, _ := runMain(append(cmd, "--help")...)
		if !strings.Contains(out, "--max-input-bytes quantity") || !strings.Contains(out, "(default 64Mi)") {
			t.Errorf("%s --help does not document --max-input-bytes and its default:\n%s", strings.Join(cmd, " "), out)
		}
	}
}
