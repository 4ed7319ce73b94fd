package mongolock_test

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// exportedErrorVars returns the exported package-level variables of the Go
// package in dir (its test files left out) that hold an error made by
// errors.New or fmt.Errorf, or whose name begins with Err.
func exportedErrorVars(t *testing.T, dir string) []string {
	fset := gotoken.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != gotoken.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() {
						continue
					}
					isErr := strings.HasPrefix(name.Name, "Err")
					if i < len(vs.Values) {
						if call, ok := vs.Values[i].(*ast.CallExpr); ok {
							if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
								if pkg, ok := sel.X.(*ast.Ident); ok {
									fn := pkg.Name + "." + sel.Sel.Name
									isErr = isErr || fn == "errors.New" || fn == "fmt.Errorf"
								}
							}
						}
					}
					if isErr {
						names = append(names, name.Name)
					}
				}
			}
		}
	}
	return names
}

// exitStatuses returns the integer constants of cmd/mongolock/exit.go:
// the statuses the command exits with.
func exitStatuses(t *testing.T) []int {
	f, err := parser.ParseFile(gotoken.NewFileSet(), "cmd/mongolock/exit.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	var codes []int
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == gotoken.INT {
				code, err := strconv.Atoi(lit.Value)
				require.NoError(t, err)
				codes = append(codes, code)
			}
		}
		return false
	})
	require.NotEmpty(t, codes)
	return codes
}

// docs/troubleshooting.md explains every exported error of the root package
// (and the gocron adapter's), the *Error type and every exit status of the
// command, each under a heading or in the table of statuses: an error or a
// status added to the code and not to the page fails here.
func TestTroubleshootingCoversEveryErrorAndExitStatus(t *testing.T) {
	skipInModuleDownload(t)
	b, err := os.ReadFile("docs/troubleshooting.md")
	require.NoError(t, err)
	page := string(b)
	headings := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(page, -1) {
		headings[m[1]] = true
	}

	vars := exportedErrorVars(t, ".")
	require.Contains(t, vars, "ErrNotAcquired", "the parse finds the sentinels")
	for _, name := range vars {
		require.True(t, headings[name], "docs/troubleshooting.md has no heading %q for the exported error %s", name, name)
	}
	for _, name := range exportedErrorVars(t, "gocronmongolock") {
		require.True(t, headings["gocronmongolock."+name], "docs/troubleshooting.md has no heading for gocronmongolock.%s", name)
	}
	require.True(t, headings[`The \*Error type`], "docs/troubleshooting.md explains the *Error type")

	for _, code := range exitStatuses(t) {
		row := regexp.MustCompile(`(?m)^\| ` + strconv.Itoa(code) + ` \|`)
		require.Regexp(t, row, page, "docs/troubleshooting.md's table has no row for exit status %d", code)
	}
	require.Regexp(t, `serverSelectionTimeoutMS`, page, "it says how long a call with no deadline can wait")
}

// exampleDirs hold the files whose Example functions pkg.go.dev shows:
// the root package's, mongolocktest's and the two adapters'.
var exampleDirs = []string{".", "mongolocktest", "otelmongolock", "gocronmongolock"}

// An Example's body is what pkg.go.dev shows a user to copy: it may use
// only what a user can import. So no package under internal/, and no
// unexported identifier of the package's _test files (a helper that
// connects to the test server, a test's body).
func TestExamplesUseOnlyWhatAUserCanImport(t *testing.T) {
	skipInModuleDownload(t)
	examples := 0
	for _, dir := range exampleDirs {
		fset := gotoken.NewFileSet()
		paths, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		require.NoError(t, err)
		files := map[string]*ast.File{}
		testOnly := map[string]bool{} // unexported top-level names of the _test files
		for _, path := range paths {
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			files[path] = f
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && !d.Name.IsExported() {
						testOnly[d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								testOnly[n.Name] = testOnly[n.Name] || !n.IsExported() && n.Name != "_"
							}
						case *ast.TypeSpec:
							testOnly[s.Name.Name] = testOnly[s.Name.Name] || !s.Name.IsExported()
						}
					}
				}
			}
		}
		for _, f := range files {
			shown := wholeFileExample(f)
			internal := map[string]string{} // an import's name in f, for packages under internal/
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				if strings.Contains(p, "/internal/") {
					name := filepath.Base(p)
					if imp.Name != nil {
						name = imp.Name.Name
					}
					internal[name] = p
				}
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
					continue
				}
				examples++
				// Names declared in the body (variables, parameters of
				// closures) shadow the file's: a local "db" is not a helper.
				local := map[string]bool{}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.AssignStmt:
						if n.Tok == gotoken.DEFINE {
							for _, l := range n.Lhs {
								if id, ok := l.(*ast.Ident); ok {
									local[id.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, id := range n.Names {
							local[id.Name] = true
						}
					case *ast.Field:
						for _, id := range n.Names {
							local[id.Name] = true
						}
					case *ast.RangeStmt:
						for _, e := range []ast.Expr{n.Key, n.Value} {
							if id, ok := e.(*ast.Ident); ok && n.Tok == gotoken.DEFINE {
								local[id.Name] = true
							}
						}
					}
					return true
				})
				var visit func(n ast.Node) bool
				visit = func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.SelectorExpr:
						if id, ok := n.X.(*ast.Ident); ok && internal[id.Name] != "" && !local[id.Name] {
							t.Errorf("%s: %s uses %s.%s, of %s, which a user cannot import", fset.Position(n.Pos()), fn.Name.Name, id.Name, n.Sel.Name, internal[id.Name])
						}
						ast.Inspect(n.X, visit) // n.Sel is a field or method, not a top-level name
						return false
					case *ast.KeyValueExpr:
						ast.Inspect(n.Value, visit) // a composite literal's key may be a field
						return false
					case *ast.Ident:
						if testOnly[n.Name] && !local[n.Name] && !shown[n.Name] {
							t.Errorf("%s: %s uses %s, which only the package's tests define", fset.Position(n.Pos()), fn.Name.Name, n.Name)
						}
					}
					return true
				}
				ast.Inspect(fn.Body, visit)
			}
		}
	}
	require.Positive(t, examples, "the parse finds the examples")
}

// wholeFileExample returns the top-level names of f if pkg.go.dev shows
// f whole with its example (go/doc's rule: one Example function, other
// declarations, and no test, benchmark or fuzz target): a user sees those
// declarations beside the example's body.
func wholeFileExample(f *ast.File) map[string]bool {
	examples, names := 0, map[string]bool{}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			switch n := d.Name.Name; {
			case strings.HasPrefix(n, "Example"):
				examples++
			case strings.HasPrefix(n, "Test"), strings.HasPrefix(n, "Benchmark"), strings.HasPrefix(n, "Fuzz"):
				return nil
			default:
				names[n] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				}
			}
		}
	}
	if examples != 1 || len(names) == 0 {
		return nil
	}
	return names
}

// CONTRIBUTING.md's "How the package is laid out" names every file of the
// root package's library code, and only files that exist: a file added,
// renamed or removed updates the layout in the same change.
func TestContributingLaysOutEveryLibraryFile(t *testing.T) {
	skipInModuleDownload(t)
	text, err := os.ReadFile("CONTRIBUTING.md")
	require.NoError(t, err)
	_, layout, ok := strings.Cut(string(text), "## How the package is laid out")
	require.True(t, ok, "CONTRIBUTING.md has no layout section")
	layout, _, _ = strings.Cut(layout, "\n## ")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_*]+\\.go)`").FindAllStringSubmatch(layout, -1) {
		matches, err := filepath.Glob(m[1])
		require.NoError(t, err)
		require.NotEmpty(t, matches, "CONTRIBUTING.md's layout names %s, which is not in the root package", m[1])
		for _, f := range matches {
			named[f] = true
		}
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") && !named[f] {
			t.Errorf("%s is not in CONTRIBUTING.md's layout: say what it holds, in the group of what it builds on", f)
		}
	}
}
