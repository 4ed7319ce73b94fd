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
