package printers

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// AuditTable writes verdicts of the /audit ring as a table, oldest first.
func AuditTable(out io.Writer, items []audit.Record) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(out, "No verdicts recorded.")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tRULE\tOPERATION\tKIND\tOBJECT\tUSER\tDRY-RUN\tFIELD\tMESSAGE")
	for _, r := range items {
		obj := r.Name
		if r.Namespace != "" {
			obj = r.Namespace + "/" + r.Name
		}
		msg := oneLine(r.Message)
		if r.Exception != "" {
			// Who exempted it and until when, where the verdict is read.
			msg += " [exempt by PolicyException " + r.Exception + ", " + exceptions.Exemption{Expires: r.ExceptionExpires}.Until() + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\n",
			r.Time.UTC().Format(time.RFC3339), r.Action, r.Rule, r.Operation, r.Kind, obj, r.User, r.DryRun, dash(r.Field), msg)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
