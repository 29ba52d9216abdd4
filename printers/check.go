package printers

import (
	"fmt"
	"io"
	"strings"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// CheckResults writes check's verdicts in format (text, json or yaml):
// the text is one line per object, then its violations, warnings and
// defaulted paths indented below it.
func CheckResults(out io.Writer, format string, results []offline.CheckResult) error {
	switch format {
	case "json":
		return JSON(out, results)
	case "yaml":
		return YAML(out, results)
	}
	var sb strings.Builder
	for _, r := range results {
		verdict := "allowed"
		if !r.Allowed {
			verdict = "DENIED"
		}
		name := r.Name
		if r.Namespace != "" {
			name = r.Namespace + "/" + r.Name
		}
		fmt.Fprintf(&sb, "%s %s (%s): %s\n", r.Kind, name, r.Operation, verdict)
		for _, v := range r.Violations {
			field := v.Field
			if field == "" {
				field = "(object)"
			}
			fmt.Fprintf(&sb, "    %-5s %s: %s\n", strings.ToLower(v.Action), field, namedMessage(v))
			if v.FirstBy != "" {
				fmt.Fprintf(&sb, "          on the cluster, answered first by %s\n", v.FirstBy)
			}
			if v.Exception != "" {
				fmt.Fprintf(&sb, "          by PolicyException %s (%s)\n", v.Exception, exceptions.Exemption{Expires: v.ExceptionExpires}.Until())
			}
		}
		for _, w := range r.Warnings {
			if !isViolationWarning(w, r.Violations) {
				fmt.Fprintf(&sb, "    warn  %s\n", w)
			}
		}
		if len(r.Patch) > 0 {
			paths := make([]string, 0, len(r.Patch))
			for _, p := range r.Patch {
				paths = append(paths, p.Operation+" "+p.Path)
			}
			fmt.Fprintf(&sb, "    defaulted: %s\n", strings.Join(paths, ", "))
		}
	}
	_, err := io.WriteString(out, sb.String())
	return err
}

// isViolationWarning reports whether warning w renders a Warn violation
// that the text output already shows.
func isViolationWarning(w string, vs []offline.CheckViolation) bool {
	for _, v := range vs {
		if v.Action == string(webhook.ActionExempt) && strings.HasPrefix(w, webhook.ExemptWarningPrefix) {
			return true // printed under the exempt violation
		}
		if v.Action == "Warn" && (w == v.Message || w == v.Field+": "+v.Message) {
			return true
		}
	}
	return false
}

// namedMessage is a violation's message as kubectl shows it, naming the
// rule; a schema violation is the apiserver's own text, named "schema".
func namedMessage(v offline.CheckViolation) string {
	if v.Rule == webhook.RuleSchema {
		return v.Message + " [schema]"
	}
	return celrules.Named(v.Rule, v.Message)
}
