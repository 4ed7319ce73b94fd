// Command apicheck writes down the exported API of Go packages, one feature a
// line, as Go's own api/go1.N.txt files do, and checks a record against the
// code, so that a change to the API is a decision rather than an accident.
//
//	apicheck [-w] [-C DIR] RECORD PACKAGE...
//
// Without -w it exits 1, printing the lines added and removed, when the API
// of the packages (paths or patterns that go list takes) differs from
// RECORD; with -w it writes RECORD anew. -C names the directory in which to
// list the packages (another module's). It type-checks each package from
// source against the export data of its dependencies (go list -export), so
// it needs nothing but the go command.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	write := flag.Bool("w", false, "write RECORD anew rather than check it")
	flag.StringVar(&listDir, "C", "", "list the packages in `DIR` (another module's)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: apicheck [-w] [-C DIR] RECORD PACKAGE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	record, patterns := flag.Arg(0), flag.Args()[1:]
	lines, err := apiOf(patterns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
	got := strings.Join(lines, "\n") + "\n"
	if *write {
		if err := os.WriteFile(record, []byte(got), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "apicheck:", err)
			os.Exit(1)
		}
		return
	}
	want, err := os.ReadFile(record)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
	if added, removed := diff(strings.Split(strings.TrimSuffix(string(want), "\n"), "\n"), lines); len(added)+len(removed) > 0 {
		report(os.Stderr, record, added, removed)
		os.Exit(1)
	}
}

// report says how the API differs from its record, and how to accept it.
func report(w io.Writer, record string, added, removed []string) {
	fmt.Fprintf(w, "apicheck: the exported API differs from %s:\n", record)
	for _, l := range removed {
		fmt.Fprintln(w, "-", l)
	}
	for _, l := range added {
		fmt.Fprintln(w, "+", l)
	}
	fmt.Fprintln(w, "If the change is meant, record it (make api) and say it in CHANGELOG.md.")
}

// diff returns the lines of got not in want, and of want not in got.
func diff(want, got []string) (added, removed []string) {
	for _, l := range got {
		if !slices.Contains(want, l) {
			added = append(added, l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// listDir is where go list runs: "" for the current directory.
var listDir string

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
	Error      *struct{ Err string }
}

// apiOf returns the sorted API lines of the packages the patterns name.
func apiOf(patterns []string) ([]string, error) {
	args := append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,DepOnly,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Stderr = listDir, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	exports := map[string]string{}
	var targets []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		if p.Error != nil {
			return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			targets = append(targets, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	var lines []string
	for _, p := range targets {
		pkg, err := check(fset, imp, p)
		if err != nil {
			return nil, err
		}
		lines = append(lines, features(pkg)...)
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// check type-checks p's files (tests left out) from source.
func check(fset *token.FileSet, imp types.Importer, p listed) (*types.Package, error) {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: imp}
	return conf.Check(p.ImportPath, fset, files, nil)
}

// features lists pkg's exported API, a line each: every exported constant,
// variable, function, type, method, struct field and interface method.
func features(pkg *types.Package) []string {
	prefix := "pkg " + pkg.Path() + ", "
	qual := func(other *types.Package) string {
		if other == pkg {
			return ""
		}
		return other.Name()
	}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, prefix+fmt.Sprintf(format, args...)) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, types.TypeString(o.Type(), qual), o.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, types.TypeString(o.Type(), qual))
		case *types.Func:
			add("func %s%s", name, signature(o.Type().(*types.Signature), qual))
		case *types.TypeName:
			lines = append(lines, typeFeatures(prefix, o, qual)...)
		}
	}
	return lines
}

// typeFeatures lists a type's declaration, its exported fields or interface
// methods, and the exported methods of T and *T.
func typeFeatures(prefix string, o *types.TypeName, qual types.Qualifier) []string {
	name := o.Name()
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, prefix+fmt.Sprintf(format, args...)) }
	switch u := o.Type().Underlying().(type) {
	case *types.Struct:
		add("type %s struct", name)
		structFields(name, u, qual, add)
	case *types.Interface:
		add("type %s interface", name)
		interfaceMethods(name, u, qual, add)
		return lines // its methods are listed already
	default:
		if o.IsAlias() {
			add("type %s = %s", name, types.TypeString(o.Type(), qual))
		} else {
			add("type %s %s", name, types.TypeString(u, qual))
		}
	}
	methods(o, qual, add)
	return lines
}

// structFields lists the exported fields of struct type name.
func structFields(name string, u *types.Struct, qual types.Qualifier, add func(string, ...any)) {
	for i := range u.NumFields() {
		f := u.Field(i)
		switch {
		case !f.Exported():
		case f.Embedded():
			add("type %s struct, embedded %s", name, types.TypeString(f.Type(), qual))
		default:
			add("type %s struct, %s %s", name, f.Name(), types.TypeString(f.Type(), qual))
		}
	}
}

// interfaceMethods lists the methods of interface type name, an unexported
// one as such: it keeps others from implementing the interface.
func interfaceMethods(name string, u *types.Interface, qual types.Qualifier, add func(string, ...any)) {
	for i := range u.NumMethods() {
		m := u.Method(i)
		if m.Exported() {
			add("type %s interface, %s%s", name, m.Name(), signature(m.Type().(*types.Signature), qual))
		} else {
			add("type %s interface, unexported methods", name)
		}
	}
}

// methods lists each exported method of o once: T's (promoted ones too),
// then those only *T has.
func methods(o *types.TypeName, qual types.Qualifier, add func(string, ...any)) {
	value, pointer := types.NewMethodSet(o.Type()), types.NewMethodSet(types.NewPointer(o.Type()))
	for _, set := range []*types.MethodSet{value, pointer} {
		recv := o.Name()
		if set == pointer {
			recv = "*" + recv
		}
		for i := range set.Len() {
			m := set.At(i).Obj()
			if !m.Exported() || set == pointer && value.Lookup(m.Pkg(), m.Name()) != nil {
				continue
			}
			add("method (%s) %s%s", recv, m.Name(), signature(m.Type().(*types.Signature), qual))
		}
	}
}

// signature writes sig without its parameters' and results' names, which
// callers do not see: renaming one is not a change of the API.
func signature(sig *types.Signature, qual types.Qualifier) string {
	var b strings.Builder
	b.WriteString("(")
	for i := range sig.Params().Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			b.WriteString("..." + types.TypeString(t.(*types.Slice).Elem(), qual))
			continue
		}
		b.WriteString(types.TypeString(t, qual))
	}
	b.WriteString(")")
	results := sig.Results()
	switch results.Len() {
	case 0:
	case 1:
		b.WriteString(" " + types.TypeString(results.At(0).Type(), qual))
	default:
		b.WriteString(" (")
		for i := range results.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(types.TypeString(results.At(i).Type(), qual))
		}
		b.WriteString(")")
	}
	return b.String()
}
