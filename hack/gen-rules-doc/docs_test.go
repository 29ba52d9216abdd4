package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestEveryRuleHasASection: docs/rules.md has a section ("## ID") for
// every rule `shepherd export rules` lists.
func TestEveryRuleHasASection(t *testing.T) {
	t.Chdir("../..")
	rules, err := ListRules()
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatal("shepherd export rules lists no rule")
	}
	doc, err := os.ReadFile("docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rules {
		ids = append(ids, r.ID)
	}
	if missing := missingSections(ids, string(doc)); len(missing) > 0 {
		t.Errorf("docs/rules.md has no section for %s: run make docs", strings.Join(missing, ", "))
	}
}

// TestMissingSectionsFails: the check above reports a rule without a
// section, and a heading inside a code block does not count.
func TestMissingSectionsFails(t *testing.T) {
	doc := "# Rules\n\n## V-TJ-1\n\ntext\n\n```yaml\n## V-TJ-2\n```\n\n## V-TJ-10\n"
	got := missingSections([]string{"V-TJ-1", "V-TJ-2", "V-TJ-3"}, doc)
	if want := []string{"V-TJ-2", "V-TJ-3"}; !slices.Equal(got, want) {
		t.Errorf("missingSections = %v, want %v", got, want)
	}
}

// missingSections returns the ids without a "## ID" heading in doc.
func missingSections(ids []string, doc string) []string {
	have := map[string]bool{}
	for _, h := range headings(doc) {
		if h.level == 2 {
			have[h.text] = true
		}
	}
	var out []string
	for _, id := range ids {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
}

// TestRelativeLinks: every relative link in README.md, SECURITY.md,
// CHANGELOG.md and docs/*.md points at a file or directory that exists,
// and a link's #fragment into a Markdown file names one of its headings.
func TestRelativeLinks(t *testing.T) {
	t.Chdir("../..")
	files := []string{"README.md", "SECURITY.md", "CHANGELOG.md"}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	files = append(files, docs...)
	for _, f := range files {
		for _, p := range brokenLinks(f) {
			t.Errorf("%s", p)
		}
	}
}

// TestBrokenLinksFails: the link check reports a missing file, a missing
// heading and a missing heading of the same file, and ignores links in
// code and absolute URLs.
func TestBrokenLinksFails(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.md", "# Title\n\n## Security: who can call `it`\n")
	write("a.md", strings.Join([]string{
		"# A",
		"[ok](b.md) [ok](b.md#security-who-can-call-it) [ok](#a) [ok](https://example.com/x.md)",
		"[bad](missing.md) [bad](b.md#nowhere) [bad, over",
		"two lines](#nothing)",
		"`[code](nope.md)`",
		"```",
		"[fenced](nope.md)",
		"```",
	}, "\n"))
	got := brokenLinks(filepath.Join(dir, "a.md"))
	if len(got) != 3 {
		t.Fatalf("want 3 broken links, got %d: %q", len(got), got)
	}
	for i, want := range []string{"missing.md", "b.md#nowhere", "#nothing"} {
		if !strings.Contains(got[i], want) {
			t.Errorf("broken link %d = %q, want it to name %s", i, got[i], want)
		}
	}
}

var (
	linkPattern   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	schemePattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	codeSpan      = regexp.MustCompile("`[^`]*`")
)

// brokenLinks returns a message per broken relative link of the Markdown
// file f.
func brokenLinks(f string) []string {
	b, err := os.ReadFile(f)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	text := codeSpan.ReplaceAllStringFunc(strings.Join(prose(string(b)), "\n"), func(s string) string {
		return strings.Repeat(" ", len(s)) // keep offsets, and so line numbers
	})
	for _, m := range linkPattern.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		line := strconv.Itoa(strings.Count(text[:m[0]], "\n") + 1)
		if schemePattern.MatchString(target) {
			continue
		}
		path, fragment, _ := strings.Cut(target, "#")
		file := f
		if path != "" {
			file = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
			if _, err := os.Stat(file); err != nil {
				out = append(out, f+":"+line+": "+target+": no such file or directory")
				continue
			}
		}
		if fragment == "" || !strings.HasSuffix(file, ".md") {
			continue
		}
		tb, err := os.ReadFile(file)
		if err != nil {
			out = append(out, f+":"+line+": "+target+": "+err.Error())
			continue
		}
		if !slices.Contains(anchors(string(tb)), fragment) {
			out = append(out, f+":"+line+": "+target+": no heading with that anchor in "+file)
		}
	}
	return out
}

// prose returns the lines of a Markdown document with the lines of
// fenced code blocks blanked, so line numbers stay.
func prose(doc string) []string {
	lines := strings.Split(doc, "\n")
	var fence string
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
			lines[i] = ""
		case fence != "":
			lines[i] = ""
		}
	}
	return lines
}

type heading struct {
	level int
	text  string
}

// headings returns the ATX headings of doc outside code blocks.
func headings(doc string) []heading {
	var out []heading
	for _, l := range prose(doc) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level > 6 || len(l) == level || l[level] != ' ' {
			continue
		}
		out = append(out, heading{level: level, text: strings.TrimSpace(strings.TrimRight(strings.TrimSpace(l[level:]), "#"))})
	}
	return out
}

// anchors returns the anchors GitHub gives doc's headings: lower case,
// punctuation but hyphens and underscores dropped, spaces made hyphens,
// repeats numbered -1, -2, ...
func anchors(doc string) []string {
	seen := map[string]int{}
	var out []string
	for _, h := range headings(doc) {
		text := codeSpan.ReplaceAllStringFunc(h.text, func(s string) string { return strings.Trim(s, "`") })
		text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}
