package policytest

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText writes results for people: a line per suite, and for each
// failed case (each case with verbose) its position, object and every
// mismatch, then a summary line.
func WriteText(w io.Writer, results []SuiteResult, verbose bool) error {
	var sb strings.Builder
	for _, r := range results {
		status := "ok  "
		if r.Failed > 0 {
			status = "FAIL"
		}
		fmt.Fprintf(&sb, "%s %s: %s\n", status, r.File, counts(r.Passed, r.Failed))
		for _, c := range r.Cases {
			if c.Passed && !verbose {
				continue
			}
			status := "PASS"
			if !c.Passed {
				status = "FAIL"
			}
			fmt.Fprintf(&sb, "    --- %s: %s (%s:%d) %s %s\n", status, c.Name, r.File, c.Line, c.Subject, c.Operation)
			if c.Error != "" {
				fmt.Fprintf(&sb, "        error: %s\n", c.Error)
			}
			for _, m := range c.Mismatches {
				fmt.Fprintf(&sb, "        %s\n", m.Message)
				if m.Diff != "" {
					fmt.Fprintf(&sb, "        diff (-want +got):\n%s\n", indentLines(m.Diff, "            "))
				}
			}
		}
	}
	passed, failed := Summary(results)
	verdict := "PASS"
	if failed > 0 {
		verdict = "FAIL"
	}
	suites := fmt.Sprintf("%d suites", len(results))
	if len(results) == 1 {
		suites = "1 suite"
	}
	fmt.Fprintf(&sb, "%s: %s, %s\n", verdict, suites, counts(passed, failed))
	_, err := io.WriteString(w, sb.String())
	return err
}

func counts(passed, failed int) string {
	s := fmt.Sprintf("%d cases", passed+failed)
	if passed+failed == 1 {
		s = "1 case"
	}
	if failed > 0 {
		return fmt.Sprintf("%s, %d failed", s, failed)
	}
	return s + ", all passed"
}

func indentLines(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// Report is the JSON form of a run.
type Report struct {
	Passed int           `json:"passed"`
	Failed int           `json:"failed"`
	Suites []SuiteResult `json:"suites"`
}

// WriteJSON writes results as one JSON Report.
func WriteJSON(w io.Writer, results []SuiteResult) error {
	passed, failed := Summary(results)
	if results == nil {
		results = []SuiteResult{}
	}
	b, err := json.MarshalIndent(Report{Passed: passed, Failed: failed, Suites: results}, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// The JUnit XML elements, as CI systems (Jenkins, GitLab, GitHub
// reporters) read them.
type junitTestSuites struct {
	XMLName  xml.Name         `xml:"testsuites"`
	Name     string           `xml:"name,attr"`
	Tests    int              `xml:"tests,attr"`
	Failures int              `xml:"failures,attr"`
	Errors   int              `xml:"errors,attr"`
	Time     string           `xml:"time,attr"`
	Suites   []junitTestSuite `xml:"testsuite"`
}

type junitTestSuite struct {
	Name     string          `xml:"name,attr"`
	Tests    int             `xml:"tests,attr"`
	Failures int             `xml:"failures,attr"`
	Errors   int             `xml:"errors,attr"`
	Time     string          `xml:"time,attr"`
	Cases    []junitTestCase `xml:"testcase"`
}

type junitTestCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes results as JUnit XML: a testsuite per suite file, a
// testcase per case, a failure per failed case listing its mismatches
// (an error for an admission that gave no verdict).
func WriteJUnit(w io.Writer, results []SuiteResult) error {
	out := junitTestSuites{Name: "shepherd test"}
	var total time.Duration
	for _, r := range results {
		s := junitTestSuite{Name: r.File, Tests: len(r.Cases), Time: seconds(r.Duration)}
		for _, c := range r.Cases {
			tc := junitTestCase{Name: c.Name, Classname: r.File, Time: seconds(c.Duration)}
			switch {
			case c.Error != "":
				s.Errors++
				tc.Error = &junitMessage{Message: c.Error, Type: "error", Text: fmt.Sprintf("%s:%d: %s", r.File, c.Line, c.Error)}
			case !c.Passed:
				s.Failures++
				var text []string
				for _, m := range c.Mismatches {
					text = append(text, m.Message)
					if m.Diff != "" {
						text = append(text, "diff (-want +got):\n"+indentLines(m.Diff, "  "))
					}
				}
				msg := c.Mismatches[0].Message
				if len(c.Mismatches) > 1 {
					msg = fmt.Sprintf("%s (and %d more)", msg, len(c.Mismatches)-1)
				}
				tc.Failure = &junitMessage{Message: msg, Type: "mismatch", Text: fmt.Sprintf("%s:%d: %s %s\n%s", r.File, c.Line, c.Subject, c.Operation, strings.Join(text, "\n"))}
			}
			s.Cases = append(s.Cases, tc)
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Errors += s.Errors
		total += r.Duration
		out.Suites = append(out.Suites, s)
	}
	out.Time = seconds(total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
