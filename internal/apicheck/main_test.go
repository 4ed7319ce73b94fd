package main

import (
	"strings"
	"testing"
)

func TestAPIOfListsEachExportedFeatureWithoutNames(t *testing.T) {
	lines, err := apiOf([]string{"./testdata/sample"})
	if err != nil {
		t.Fatal(err)
	}
	const p = "pkg github.com/mongolock/mongolock/internal/apicheck/testdata/sample, "
	want := []string{
		p + "const Limit untyped int = 3",
		p + "func New() *T",
		p + "method (*T) Set(...int)",
		p + "method (T) Get(context.Context, string) (string, error)",
		p + "type I interface",
		p + "type I interface, Do() error",
		p + "type I interface, unexported methods",
		p + "type T struct",
		p + "type T struct, Name string",
		p + "var ErrX error",
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("apiOf:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func TestDiffNamesTheLinesAddedAndRemoved(t *testing.T) {
	added, removed := diff([]string{"a", "b"}, []string{"b", "c"})
	if strings.Join(added, ",") != "c" || strings.Join(removed, ",") != "a" {
		t.Errorf("diff: added %q, removed %q; want [c], [a]", added, removed)
	}
}
