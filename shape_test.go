package mongolock_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The bounds on the size of functions: a function of the command, of
// internal/ (the model, the simulation, the soak, the fault proxy) or of
// the benchmark that is past them is to be split into named steps, and a
// test past its bound into a Test per family of cases.
const (
	maxComplexity = 15  // a function of cmd/, internal/ or bench/, counted as gocyclo does
	maxLines      = 60  // a function of cmd/ or internal/, from func to its closing brace
	maxTestLines  = 150 // a function of any _test.go file, in every module
)

// Every function of a non-test file under cmd/ or internal/ is within
// maxComplexity and maxLines, one under bench/ within maxComplexity, and
// every function of a _test.go file in the repository, whichever its
// module, within maxTestLines. A function literal counts in the function
// that holds it.
func TestFunctionsStayWithinTheirBounds(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		under := func(dir string) bool { return strings.HasPrefix(path, dir+string(filepath.Separator)) }
		var kind fileKind
		switch {
		case strings.HasSuffix(name, "_test.go"):
			kind = testFile
		case under("cmd") || under("internal"):
			kind = toolFile
		case under("bench"):
			kind = benchFile
		default:
			return nil
		}
		fset := gotoken.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, fn := range boundedFuncs(f) {
			for _, past := range pastBounds(fset, fn, kind) {
				t.Errorf("%s: %s: %s", fset.Position(fn.node.Pos()), fn.name, past)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A fileKind says which bounds a file's functions keep.
type fileKind int

const (
	testFile  fileKind = iota // maxTestLines
	toolFile                  // maxComplexity and maxLines
	benchFile                 // maxComplexity
)

// pastBounds says how fn, of a file of kind, is past its bounds.
func pastBounds(fset *gotoken.FileSet, fn boundedFunc, kind fileKind) []string {
	var past []string
	lines := fset.Position(fn.node.End()).Line - fset.Position(fn.node.Pos()).Line + 1
	switch {
	case kind == testFile && lines > maxTestLines:
		past = append(past, fmt.Sprintf("%d lines, over %d: split its cases by what they test", lines, maxTestLines))
	case kind == toolFile && lines > maxLines:
		past = append(past, fmt.Sprintf("%d lines, over %d: split it into named steps", lines, maxLines))
	}
	if c := cyclomatic(fn.node); kind != testFile && c > maxComplexity {
		past = append(past, fmt.Sprintf("complexity %d, over %d: split it into named steps", c, maxComplexity))
	}
	return past
}

// A boundedFunc is a declared function or method, or a function literal
// assigned to a package-level variable, with its name as gocyclo gives it.
type boundedFunc struct {
	name string
	node ast.Node
}

func boundedFuncs(f *ast.File) []boundedFunc {
	var fns []boundedFunc
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Body != nil {
				fns = append(fns, boundedFunc{gocycloName(d), d})
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, v := range vs.Values {
					if lit, ok := v.(*ast.FuncLit); ok && i < len(vs.Names) {
						fns = append(fns, boundedFunc{vs.Names[i].Name, lit})
					}
				}
			}
		}
	}
	return fns
}

// gocycloName is "Name" for a function, "(T).Name" or "(*T).Name" for a
// method.
func gocycloName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	var recv func(e ast.Expr) string
	recv = func(e ast.Expr) string {
		switch t := e.(type) {
		case *ast.Ident:
			return t.Name
		case *ast.StarExpr:
			return "*" + recv(t.X)
		case *ast.IndexExpr:
			return recv(t.X)
		case *ast.IndexListExpr:
			return recv(t.X)
		}
		return "?"
	}
	return "(" + recv(d.Recv.List[0].Type) + ")." + d.Name.Name
}

// cyclomatic is n's cyclomatic complexity: 1, and 1 for each if, for,
// range, case and select case but the default, && and ||, function
// literals within included.
func cyclomatic(n ast.Node) int {
	c := 1
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == gotoken.LAND || n.Op == gotoken.LOR {
				c++
			}
		}
		return true
	})
	return c
}
