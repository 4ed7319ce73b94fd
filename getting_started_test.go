package mongolock_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock/internal/testdb"
)

// gettingStartedStep is a file of examples/getting-started as
// docs/getting-started.md shows it: its code, and what it prints (for a
// program).
type gettingStartedStep struct {
	file, code, output string
}

// A program's link, its code, and what it prints, if the page says.
var gettingStartedBlock = regexp.MustCompile("(?s)\\]\\(\\.\\./(examples/getting-started/[^)]+\\.go)\\)[^\n]*\n\n```go\n(.*?)```(?:\n\nRun it [^\n]*It prints:\n\n```text\n(.*?)```)?")

func gettingStartedSteps(t *testing.T) map[string]gettingStartedStep {
	page, err := os.ReadFile("docs/getting-started.md")
	require.NoError(t, err)
	steps := map[string]gettingStartedStep{}
	for _, m := range gettingStartedBlock.FindAllStringSubmatch(string(page), -1) {
		steps[m[1]] = gettingStartedStep{file: m[1], code: m[2], output: m[3]}
	}
	return steps
}

// docs/getting-started.md shows every file of examples/getting-started
// whole, as it is, and what each program prints: the page cannot drift
// from the programs that TestGettingStartedProgramsPrintWhatThePageSays
// runs.
func TestGettingStartedShowsEveryProgramWhole(t *testing.T) {
	skipInModuleDownload(t)
	steps := gettingStartedSteps(t)
	files, err := filepath.Glob("examples/getting-started/*/*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		step, ok := steps[file]
		require.True(t, ok, "docs/getting-started.md does not show %s (a link to ../%s, then its code)", file, file)
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Equal(t, string(b), step.code, "docs/getting-started.md shows %s otherwise than it is", file)
		if filepath.Base(file) == "main.go" {
			require.NotEmpty(t, step.output, "docs/getting-started.md says what %s prints", file)
		}
	}
	require.Len(t, steps, len(files), "docs/getting-started.md shows only files of examples/getting-started")
}

// Each program of docs/getting-started.md, built and run as a reader
// would (MONGODB_URI names the server, -db a database), prints what the
// page says it prints.
func TestGettingStartedProgramsPrintWhatThePageSays(t *testing.T) {
	skipInModuleDownload(t)
	uri := testdb.Info(t).URI // skips without a server
	db := testdb.Database(t)
	bin := t.TempDir()
	for file, step := range gettingStartedSteps(t) {
		if filepath.Base(file) != "main.go" {
			continue
		}
		name := filepath.Base(filepath.Dir(file))
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			exe := filepath.Join(bin, name)
			out, err := exec.CommandContext(ctx, "go", "build", "-o", exe, "./"+filepath.Dir(file)).CombinedOutput()
			require.NoError(t, err, "go build %s: %s", file, out)

			run := exec.CommandContext(ctx, exe, "-db", db.Name())
			run.Env = append(os.Environ(), "MONGODB_URI="+uri)
			var stdout, stderr bytes.Buffer
			run.Stdout, run.Stderr = &stdout, &stderr
			require.NoError(t, run.Run(), "%s: %s", file, stderr.String())
			require.Equal(t, strings.TrimSpace(step.output), strings.TrimSpace(stdout.String()), "%s prints otherwise than docs/getting-started.md says", file)
		})
	}
}
