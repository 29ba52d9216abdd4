// Command gen-rules-doc writes docs/rules.md, the rules reference: one
// section per rule ID that `shepherd export rules` lists.
//
// It reads everything through the repository's own packages, run from the
// repository's root:
//
//   - the rules: `shepherd export rules -o json`, run in process
//     (cmd/shepherd/app), so the reference lists exactly what the binary
//     lists (built-in CEL rules, Go checks and defaulters);
//   - the CEL rules' bodies: celrules.BuiltinRules (integrations/*/rules/*.yaml),
//     for the operations each rule judges and the file it lives in;
//   - an object each rule denies, warns on or defaults: the first fitting
//     case of the rules' own test suites (celrules/rules/tests), run in
//     process with `shepherd test -o json`, so every snippet and every
//     message shown is what shepherd answers today;
//   - who rejects the invalid examples on a real cluster: the "# shepherd:"
//     and "# on a real cluster:" lines of examples/invalid/*.yaml (test/bed
//     checks each against a real cluster);
//   - what the library has no field for (why the rule exists, how to fix an
//     object, more on the enforcing layer): docs/rules-notes.yaml, written by
//     hand. Every rule needs an entry with why and fix; an entry for a rule
//     the binary does not list is an error.
//
// Usage (make docs, make verify-docs):
//
//	go run ./hack/gen-rules-doc                 # writes docs/rules.md
//	go run ./hack/gen-rules-doc -check          # exit 1 when docs/rules.md is stale
//	go run ./hack/gen-rules-doc -o -            # to standard output
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	var (
		root  = flag.String("root", ".", "the repository's root directory")
		out   = flag.String("o", "docs/rules.md", "file to write, relative to -root (- for standard output)")
		check = flag.Bool("check", false, "do not write: exit 1 when the file differs from what would be generated")
	)
	flag.Parse()
	if err := os.Chdir(*root); err != nil {
		fmt.Fprintln(os.Stderr, "gen-rules-doc:", err)
		os.Exit(2)
	}
	doc, err := Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-rules-doc:", err)
		os.Exit(2)
	}
	switch {
	case *check:
		have, err := os.ReadFile(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen-rules-doc:", err)
			os.Exit(1)
		}
		if !bytes.Equal(have, doc) {
			fmt.Fprintf(os.Stderr, "gen-rules-doc: %s is stale: run make docs\n", *out)
			os.Exit(1)
		}
	case *out == "-":
		os.Stdout.Write(doc)
	default:
		if err := os.WriteFile(*out, doc, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen-rules-doc:", err)
			os.Exit(2)
		}
	}
}
