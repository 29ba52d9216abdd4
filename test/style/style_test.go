// Package style checks, without a cluster, the conventions of the tree
// that gofmt does not: every package has a doc comment, and every file's
// imports stand in three groups — the standard library, third-party
// modules, shepherd — each sorted, as goimports with
// -local github.com/shepherd-k8s/shepherd leaves them.
package style

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/shepherd-k8s/shepherd"

// root is the repository's root: go test runs a package's tests in its
// directory, test/style.
const root = "../.."

// goFiles are the repository's Go files, relative to its root: the ones
// git tracks, or in a copy without git every one outside hidden
// directories and bin/.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	cmd := exec.Command("git", "ls-files", "*.go")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		files = strings.Fields(string(out))
	} else {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") {
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files: want the whole tree", len(files))
	}
	return files
}

func parse(t *testing.T, fset *token.FileSet, file string, mode parser.Mode) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(fset, filepath.Join(root, file), nil, mode)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// group is an import path's group: 0 the standard library, 1 a third-party
// module, 2 shepherd.
func group(path string) int {
	switch {
	case path == module || strings.HasPrefix(path, module+"/"):
		return 2
	case strings.Contains(strings.SplitN(path, "/", 2)[0], "."):
		return 1
	default:
		return 0
	}
}

var groupNames = []string{"standard library", "third-party", "shepherd"}

// importProblem says what is wrong with the import block of f, "" when
// nothing: a blank line starts a group, the groups come in order, one of
// each at most, and a group holds imports of one kind.
func importProblem(fset *token.FileSet, f *ast.File) string {
	prevLine, prevGroup := 0, -1
	for i, spec := range f.Imports {
		path := strings.Trim(spec.Path.Value, `"`)
		g := group(path)
		line := fset.Position(spec.Pos()).Line
		if spec.Doc != nil {
			line = fset.Position(spec.Doc.Pos()).Line
		}
		newBlock := i == 0 || line > prevLine+1
		switch {
		case newBlock:
			if g <= prevGroup {
				return "import " + path + " (" + groupNames[g] + ") starts a group after the " + groupNames[prevGroup] + " group"
			}
		case g != prevGroup:
			return "import " + path + " (" + groupNames[g] + ") is in the " + groupNames[prevGroup] + " group: separate the groups by a blank line"
		}
		prevLine, prevGroup = fset.Position(spec.End()).Line, g
	}
	return ""
}

// Every file's imports stand in three groups, in order: std, third-party,
// shepherd.
func TestImportGroups(t *testing.T) {
	fset := token.NewFileSet()
	for _, file := range goFiles(t) {
		if p := importProblem(fset, parse(t, fset, file, parser.ImportsOnly|parser.ParseComments)); p != "" {
			t.Errorf("%s: %s", file, p)
		}
	}
}

// Every package, test-only ones included, says what it is for in a
// package doc comment ("Command <name>" for a command).
func TestEveryPackageHasADocComment(t *testing.T) {
	fset := token.NewFileSet()
	documented := map[string]bool{}
	for _, file := range goFiles(t) {
		dir := filepath.Dir(file)
		if _, ok := documented[dir]; !ok {
			documented[dir] = false
		}
		f := parse(t, fset, file, parser.PackageClauseOnly|parser.ParseComments)
		// A command's says "Command <name>", as go doc expects.
		if f.Doc != nil && (strings.HasPrefix(f.Doc.Text(), "Package ") || f.Name.Name == "main" && strings.HasPrefix(f.Doc.Text(), "Command ")) {
			documented[dir] = true
		}
	}
	var missing []string
	for dir, ok := range documented {
		if !ok {
			missing = append(missing, dir)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("packages without a doc comment (\"// Package <name> ...\" above a package clause, \"// Command <name> ...\" for a command):\n%s", strings.Join(missing, "\n"))
	}
}

// The checks find what they are for.
func TestImportProblem(t *testing.T) {
	for name, tc := range map[string]struct {
		src  string
		want string
	}{
		"three groups":           {src: "import (\n\t\"fmt\"\n\n\t\"k8s.io/api/core/v1\"\n\n\t\"" + module + "/api\"\n)\n"},
		"shepherd first":         {src: "import (\n\t\"" + module + "/api\"\n\n\t\"k8s.io/api/core/v1\"\n)\n", want: "starts a group after the shepherd group"},
		"shepherd in third":      {src: "import (\n\t\"k8s.io/api/core/v1\"\n\t\"" + module + "/api\"\n)\n", want: "is in the third-party group"},
		"one import":             {src: "import \"fmt\"\n"},
		"commented import":       {src: "import (\n\t\"fmt\"\n\n\t// why\n\t_ \"embed\"\n)\n", want: "starts a group after the standard library group"},
		"two std groups":         {src: "import (\n\t\"fmt\"\n\n\t\"os\"\n)\n", want: "starts a group after the standard library group"},
		"std and third together": {src: "import (\n\t\"fmt\"\n\t\"k8s.io/api/core/v1\"\n)\n", want: "is in the standard library group"},
	} {
		t.Run(name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", "package x\n\n"+tc.src, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			got := importProblem(fset, f)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("importProblem = %q, want one containing %q", got, tc.want)
			}
		})
	}
}
