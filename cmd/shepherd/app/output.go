package app

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// The -o/--output formats every command that prints a report takes (issue
// 33): the human one, then the machine ones, spelled as kubectl spells
// them, so a script moving from one command to another keeps its -o.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml"
)

// outputFormats is the set of values one command's -o takes. Its flag's
// help, its shell completion and its usage error are all written from it,
// so they cannot disagree with what the command accepts.
type outputFormats struct {
	// names are the formats, the default (the human one) first.
	names []string
	// deprecated maps an old spelling to the format it stands for: it is
	// still accepted, so scripts keep working, but appears in no help,
	// error or completion.
	deprecated map[string]string
}

// reportFormats are the common formats (text, json, yaml) and then the
// command's own extra ones.
func reportFormats(extra ...string) outputFormats {
	return outputFormats{names: append([]string{outputText, outputJSON, outputYAML}, extra...)}
}

var (
	// reportOutputs are check's, export rules' and version's.
	reportOutputs = reportFormats()
	testOutputs   = reportFormats("junit")
	// audit printed its human format as "table" before every command
	// called it text.
	auditOutputs = outputFormats{names: reportFormats().names, deprecated: map[string]string{"table": outputText}}
)

// String lists the formats for prose: "text, json or yaml".
func (f outputFormats) String() string {
	n := len(f.names)
	if n < 2 {
		return strings.Join(f.names, "")
	}
	return strings.Join(f.names[:n-1], ", ") + " or " + f.names[n-1]
}

// choices lists the formats for a command's Use line: "text|json|yaml".
func (f outputFormats) choices() string { return strings.Join(f.names, "|") }

// addOutputFlag registers -o/--output on cmd, bound to p and defaulting to
// the human format, with its help and shell completion written from f.
func (f outputFormats) addOutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", f.names[0], "output format: "+f.String())
	_ = cmd.RegisterFlagCompletionFunc("output", func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, name := range f.names {
			if strings.HasPrefix(name, toComplete) {
				out = append(out, name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
}

// resolve validates *p, the value of -o, and rewrites a deprecated spelling
// to the format it stands for, with a notice on warn (standard error: on
// standard output it would precede, and spoil, the report). Any other
// value is a usage error (exit 2) listing the formats.
func (f outputFormats) resolve(p *string, warn io.Writer) error {
	if slices.Contains(f.names, *p) {
		return nil
	}
	if name, ok := f.deprecated[*p]; ok {
		fmt.Fprintf(warn, "Output format %q has been deprecated, use %q\n", *p, name)
		*p = name
		return nil
	}
	return usageError("--output %q: want %s", *p, f)
}
