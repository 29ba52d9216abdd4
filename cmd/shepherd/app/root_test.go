package app

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionPrintsVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "shepherd "+Version()+" ") {
		t.Errorf("version output %q does not start with %q", out.String(), "shepherd "+Version())
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), "version") {
		t.Errorf("--help does not list the version subcommand:\n%s", out.String())
	}
}

func TestUnknownSubcommandIsUsageError(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"no-such-command"}, &out, &errOut); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "no-such-command") {
		t.Errorf("stderr %q does not name the unknown command", errOut.String())
	}
}
