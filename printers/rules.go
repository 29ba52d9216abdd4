package printers

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// RulesTable writes export rules' table: a rule per line.
func RulesTable(out io.Writer, rules []celrules.RuleInfo) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKINDS\tACTION\tEXPORTABLE\tENABLED\tJUDGES AN UPDATE OF\tDESCRIPTION")
	for _, r := range rules {
		exportable := "yes"
		if r.Exportable && r.Action == "Default" {
			exportable = "yes (MAP)"
		}
		if !r.Exportable {
			exportable = "no: " + shortReason(r.Reason)
		}
		enabled := "yes"
		if !r.Enabled {
			enabled = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, strings.Join(r.Kinds, ","), r.Action, exportable, enabled, r.OnUpdate, r.Description)
	}
	return tw.Flush()
}

// shortReason keeps the first clause of a reason for the table.
func shortReason(r string) string {
	if i := strings.IndexAny(r, ";("); i > 0 {
		return strings.TrimSpace(r[:i])
	}
	return r
}
