package mongolock_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every Go snippet in the README is code that compiles and runs: an Example
// function or part of a program under examples/. Lines are compared without
// their indentation, and without the examples' lines that only prepare the
// checked output (marked "for the checked output").
func TestReadmeSnippetsAreCompiledCode(t *testing.T) {
	// An application's `go test all` runs this in the module cache, in a
	// directory named module@version: the download leaves out the
	// examples that are modules of their own.
	if wd, err := os.Getwd(); err == nil && strings.Contains(filepath.Base(wd), "@") {
		t.Skip("checks the README against the source tree, and a module download lacks examples/wiring")
	}
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	flatten := func(s string) string {
		var lines []string
		for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
			if !strings.Contains(l, "(for the checked output)") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		return strings.Join(lines, "\n")
	}
	var sources []string
	add := func(path string) {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		sources = append(sources, flatten(string(b)))
	}
	add("example_test.go")
	require.NoError(t, filepath.WalkDir("examples", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			add(path)
		}
		return err
	}))
	snippets := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, snippets)
	for _, m := range snippets {
		snippet := flatten(m[1])
		found := false
		for _, src := range sources {
			found = found || strings.Contains(src, snippet)
		}
		require.True(t, found, "README snippet not found in example_test.go or examples/:\n%s", m[1])
	}
}
