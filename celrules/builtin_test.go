package celrules

import "testing"

func TestBuiltinLibraryCompiles(t *testing.T) {
	rules, err := CompileBuiltins()
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatal("no built-in rules")
	}
}
