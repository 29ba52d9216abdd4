package printers

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/shepherd-k8s/shepherd/offline"
)

// Impact writes audit --policy's report: a line per rule, then a table of
// the objects and their violations.
func Impact(out io.Writer, rep *offline.ImpactReport) error {
	noun := "objects"
	if rep.Evaluated == 1 {
		noun = "object"
	}
	fmt.Fprintf(out, "Judged %d stored %s from %s as creates.\n", rep.Evaluated, noun, rep.Source)
	for _, r := range rep.Rules {
		verb := map[string]string{"Deny": "would deny", "Warn": "would warn on", "Audit": "would audit"}[r.Action]
		if verb == "" {
			verb = "fails on"
		}
		fmt.Fprintf(out, "%s (%s): %s %d of them\n", r.Rule, r.Action, verb, r.ViolatingObjects)
	}
	if len(rep.Objects) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tOBJECT\tRULE\tACTION\tFIELD\tMESSAGE")
	for _, o := range rep.Objects {
		name := o.Name
		if o.Namespace != "" {
			name = o.Namespace + "/" + o.Name
		}
		for _, v := range o.Violations {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Kind, name, v.Rule, v.Action, dash(v.Field), oneLine(v.Message))
		}
	}
	return tw.Flush()
}
