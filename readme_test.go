package mongolock_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// skipInModuleDownload skips a test that reads the source tree where an
// application's `go test all` runs it: in the module cache, in a directory
// named module@version, whose download leaves out the examples that are
// modules of their own.
func skipInModuleDownload(t *testing.T) {
	if wd, err := os.Getwd(); err == nil && strings.Contains(filepath.Base(wd), "@") {
		t.Skip("checks the docs against the source tree, and a module download lacks examples/wiring")
	}
}

// docFiles are the shipped Markdown files whose snippets and links are
// checked: the README and the pages under docs/.
func docFiles(t *testing.T) []string {
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return append([]string{"README.md"}, pages...)
}

// Every Go snippet in the README and in docs/ is code that compiles and
// runs: an Example function (of this package, of mongolocktest, of
// otelmongolock or of gocronmongolock) or part
// of a program under examples/. Lines
// are compared without their indentation, and without the examples' lines
// that only prepare the checked output (marked "for the checked output").
func TestReadmeSnippetsAreCompiledCode(t *testing.T) {
	skipInModuleDownload(t)
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
	add("mongolocktest/example_test.go")
	add("otelmongolock/example_test.go")
	add("gocronmongolock/example_test.go")
	require.NoError(t, filepath.WalkDir("examples", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			add(path)
		}
		return err
	}))
	for _, doc := range docFiles(t) {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		snippets := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(text), -1)
		if doc == "README.md" {
			require.NotEmpty(t, snippets)
		}
		for _, m := range snippets {
			snippet := flatten(m[1])
			found := false
			for _, src := range sources {
				found = found || strings.Contains(src, snippet)
			}
			require.True(t, found, "%s: snippet not found in example_test.go or examples/:\n%s", doc, m[1])
		}
	}
}

// The README must show the command CI runs (.ci/run), so that what it
// tells contributors to run is what is checked.
func TestReadmeStatesTheTestCommandCIRuns(t *testing.T) {
	ci, err := os.ReadFile(".ci/run")
	require.NoError(t, err)
	require.Contains(t, string(ci), "\nmake test\n")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	require.Regexp(t, "(?m)^make test( |$)", string(readme))
}

var (
	fence     = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpan  = regexp.MustCompile("`[^`\n]*`")
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// Every relative link in the README and in docs/ leads to a file of the
// repository, and its #fragment, if any, to a heading of that file.
func TestDocumentationLinksResolve(t *testing.T) {
	skipInModuleDownload(t)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		a := map[string]bool{}
		for _, m := range mdHeading.FindAllStringSubmatch(fence.ReplaceAllString(string(text), ""), -1) {
			slug := githubSlug(m[1])
			for n := 1; a[slug]; n++ { // repeated headings get -1, -2, ...
				slug = githubSlug(m[1]) + "-" + string(rune('0'+n))
			}
			a[slug] = true
		}
		anchors[file] = a
		return a
	}
	for _, doc := range docFiles(t) {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		prose := codeSpan.ReplaceAllString(fence.ReplaceAllString(string(text), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			if file == "" {
				file = doc
			} else {
				file = path.Join(path.Dir(doc), file)
			}
			info, err := os.Stat(file)
			require.NoError(t, err, "%s: link %q: no such file", doc, target)
			if fragment != "" {
				require.False(t, info.IsDir(), "%s: link %q: a directory has no headings", doc, target)
				require.True(t, anchorsOf(file)[fragment], "%s: link %q: %s has no heading #%s", doc, target, file, fragment)
			}
		}
	}
}

// githubSlug is the anchor GitHub gives a Markdown heading: lower case,
// code marks and punctuation dropped, spaces as dashes.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
