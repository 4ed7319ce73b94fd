package mongolock_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docDirs are the packages whose doc comments are checked: this one,
// mongolocktest, and the nested modules otelmongolock and gocronmongolock.
var docDirs = []string{".", "mongolocktest", "otelmongolock", "gocronmongolock"}

// maxOpening is how many lines a doc comment's first paragraph, its
// contract, may take; the detail follows a blank comment line.
const maxOpening = 3

// Every exported identifier (function, method of an exported type, type,
// struct field, interface method, constant, variable) has a doc comment
// whose first paragraph states its contract in at most three lines, and a
// declaration's doc begins with the name it documents, as go doc and
// pkg.go.dev expect. A field's or a grouped constant's trailing line
// comment counts as its doc.
func TestDocCommentsOpenWithTheirContract(t *testing.T) {
	skipInModuleDownload(t)
	for _, dir := range docDirs {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for _, f := range docFindings(t, dir) {
			t.Errorf("%s:%d: %s: %s", f.file, f.line, f.name, f.problem)
		}
	}
}

// A docFinding is an exported identifier whose doc comment falls short.
type docFinding struct {
	file          string // relative to the module's root, with slashes
	line          int
	name, problem string
}

// docFindings parses the non-test Go files of dir, whatever their build
// constraints, and returns what falls short in their doc comments.
func docFindings(t *testing.T, dir string) []docFinding {
	t.Helper()
	fset := gotoken.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files, dir)
	var found []docFinding
	report := func(pos gotoken.Pos, name, problem string) {
		p := fset.Position(pos)
		found = append(found, docFinding{file: filepath.ToSlash(p.Filename), line: p.Line, name: name, problem: problem})
	}
	// check reports a missing doc, or a first paragraph that is too long;
	// named, a doc that does not begin with name.
	check := func(pos gotoken.Pos, name string, doc *ast.CommentGroup, named bool) {
		if doc == nil || strings.TrimSpace(doc.Text()) == "" {
			report(pos, name, "no doc comment")
			return
		}
		text := strings.TrimSpace(doc.Text())
		opening, _, _ := strings.Cut(text, "\n\n")
		if n := strings.Count(opening, "\n") + 1; n > maxOpening {
			report(pos, name, fmt.Sprintf("first paragraph of %d lines, more than %d", n, maxOpening))
		}
		short := name[strings.LastIndex(name, ".")+1:]
		if named && !beginsWith(text, short) {
			report(pos, name, fmt.Sprintf("doc does not begin with %q", short))
		}
	}
	for _, file := range files {
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				name := d.Name.Name
				if d.Recv != nil {
					recv := receiverType(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					name = recv + "." + name
				}
				if ast.IsExported(d.Name.Name) {
					check(d.Name.Pos(), name, d.Doc, true)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					// A declaration alone (parenthesised or not) takes the
					// declaration's doc; one of a group needs its own.
					doc := declDoc(specDoc(spec), d, len(d.Specs) == 1)
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !ast.IsExported(s.Name.Name) {
							continue
						}
						check(s.Name.Pos(), s.Name.Name, doc, true)
						checkMembers(s, check)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if !ast.IsExported(n.Name) {
								continue
							}
							trailing := s.Comment
							if doc == nil && trailing != nil {
								check(n.Pos(), n.Name, trailing, false)
								continue
							}
							check(n.Pos(), n.Name, doc, len(d.Specs) == 1 || s.Doc != nil)
						}
					}
				}
			}
		}
	}
	return found
}

// checkMembers checks the exported fields of a struct type and the methods
// of an interface type; a trailing line comment counts as a field's doc. An
// embedded field's doc is its type's.
func checkMembers(s *ast.TypeSpec, check func(gotoken.Pos, string, *ast.CommentGroup, bool)) {
	var fields *ast.FieldList
	switch ty := s.Type.(type) {
	case *ast.StructType:
		fields = ty.Fields
	case *ast.InterfaceType:
		fields = ty.Methods
	default:
		return
	}
	for _, f := range fields.List {
		doc := f.Doc
		if doc == nil {
			doc = f.Comment
		}
		for _, n := range f.Names {
			if ast.IsExported(n.Name) {
				check(n.Pos(), s.Name.Name+"."+n.Name, doc, false)
			}
		}
	}
}

// specDoc is a spec's own doc comment.
func specDoc(spec ast.Spec) *ast.CommentGroup {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		return s.Doc
	case *ast.ValueSpec:
		return s.Doc
	}
	return nil
}

// declDoc is doc, or d's doc where the spec is the declaration's only one.
func declDoc(doc *ast.CommentGroup, d *ast.GenDecl, alone bool) *ast.CommentGroup {
	if doc == nil && alone {
		return d.Doc
	}
	return doc
}

// receiverType is the name of a method's receiver's type, generic or not.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// beginsWith reports whether a doc begins with name, after an article
// ("A Lock is ...") or "Deprecated:".
func beginsWith(text, name string) bool {
	for _, article := range []string{"", "A ", "An ", "The "} {
		rest, ok := strings.CutPrefix(text, article+name)
		if ok && (rest == "" || !isIdentRune(rest[0])) {
			return true
		}
	}
	return strings.HasPrefix(text, "Deprecated:")
}

func isIdentRune(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// The check finds each kind of shortfall, and only those, in a fixture
// whose exported identifiers named Bad... each fall short once.
func TestDocFindingsNameEachShortfall(t *testing.T) {
	var got []string
	for _, f := range docFindings(t, "testdata/doccheck") {
		got = append(got, f.name+": "+f.problem)
	}
	require.ElementsMatch(t, []string{
		"BadUndocumented: no doc comment",
		"BadLongOpening: first paragraph of 4 lines, more than 3",
		`BadUnnamed: doc does not begin with "BadUnnamed"`,
		"GoodType.BadField: no doc comment",
		"GoodType.BadMethod: no doc comment",
		"GoodInterface.BadInterfaceMethod: no doc comment",
		"BadInGroup: no doc comment",
	}, got)
}
