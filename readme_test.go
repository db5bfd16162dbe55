package retryq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEGoBlockIsExampleReadme holds README.md's go block to the body
// of Example_readme in example_test.go (between its README markers, less
// one tab of indentation), so the README shows code that compiles against
// the current API.
func TestREADMEGoBlockIsExampleReadme(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	lines := strings.Split(string(readme), "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```go" {
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		if j == len(lines) {
			t.Fatalf("README.md line %d: go block never closed", i+1)
		}
		blocks = append(blocks, strings.Join(lines[i+1:j], "\n"))
		i = j
	}
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d go blocks; want the one Example_readme holds", len(blocks))
	}

	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "\n\t// README begin\n")
	body, _, ok2 := strings.Cut(rest, "\n\t// README end\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go: Example_readme's README markers not found")
	}
	var want []string
	for _, l := range strings.Split(body, "\n") {
		want = append(want, strings.TrimPrefix(l, "\t"))
	}
	got := blocks[0]
	if w := strings.Join(want, "\n"); got != w {
		gl, wl := strings.Split(got, "\n"), want
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, e string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				e = wl[i]
			}
			if g != e {
				t.Fatalf("README.md go block differs from Example_readme at its line %d:\nREADME:  %q\nexample: %q", i+1, g, e)
			}
		}
	}
}

// TestREADMENamesExist checks what README.md's prose names outside code
// blocks: relative links and repository paths in code spans exist, the
// make targets it lists are in the Makefile, and the Go identifiers it
// names (retryq.X, retry.X, Client.M) are exported by the packages.
func TestREADMENamesExist(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for pkg, dir := range map[string]string{"retryq": ".", "retry": "retry"} {
		for n := range exportedNames(t, dir) {
			names[pkg+"."+n] = true
		}
	}
	inCode := false
	for i, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range regexp.MustCompile(`\]\(([^)#]+)\)`).FindAllStringSubmatch(line, -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			if _, err := os.Stat(filepath.FromSlash(m[1])); err != nil {
				t.Errorf("README.md line %d: link to %s: %v", i+1, m[1], err)
			}
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(line, -1) {
			span := m[1]
			switch {
			case regexp.MustCompile(`^\.{0,2}/?[\w.-]+/[\w./-]+$`).MatchString(span) && !strings.HasPrefix(span, "bin/"):
				if _, err := os.Stat(filepath.FromSlash(span)); err != nil {
					t.Errorf("README.md line %d: path %s: %v", i+1, span, err)
				}
			case regexp.MustCompile(`^(retryq|retry|Client)\.[A-Z]\w*`).MatchString(span):
				id := regexp.MustCompile(`^(retryq|retry|Client)\.[A-Z]\w*`).FindString(span)
				if strings.HasPrefix(id, "Client.") {
					id = "retryq." + id
				}
				if !names[id] {
					t.Errorf("README.md line %d: %s is not an exported name", i+1, id)
				}
			}
		}
		if rest, ok := strings.CutPrefix(line, "`make help` lists the targets: "); ok {
			for _, m := range regexp.MustCompile("`(\\w[\\w-]*)`").FindAllStringSubmatch(rest, -1) {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:.*## `).Match(makefile) {
					t.Errorf("README.md line %d: make target %s is not a documented target of the Makefile", i+1, m[1])
				}
			}
		}
	}
}

// exportedNames returns the exported functions, types, variables and
// constants of the non-test Go files in dir, and the exported methods as
// Type.Method.
func exportedNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					out[d.Name.Name] = d.Name.IsExported()
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if id, ok := recv.(*ast.Ident); ok && d.Name.IsExported() {
					out[id.Name+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						out[sp.Name.Name] = sp.Name.IsExported()
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							out[n.Name] = n.IsExported()
						}
					}
				}
			}
		}
	}
	return out
}
