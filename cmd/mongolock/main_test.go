package main

// The tests build mongolock once and run it as a subprocess against the
// tests' server, which they name with --uri (never through MONGODB_URI,
// which may name real data). The commands that mongolock runs are this test
// binary again, in a helper mode (helper_test.go), so that they can record
// what they saw and when.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
)

// binary is the mongolock built for the tests.
var binary string

// TestMain runs a helper when mongolock started this binary as one;
// otherwise it builds mongolock (with -race if the tests have it), runs
// the tests, and checks that no goroutine outlived them.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" && len(os.Args) > 1 {
		os.Exit(helper(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "mongolock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "mongolock")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testdb.Close()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server returns the connection flags for a fresh database of the tests'
// server, dropped when the test ends.
func server(t *testing.T) []string {
	t.Helper()
	return []string{"--uri", testdb.Info(t).URI, "--db", testdb.Database(t).Name()}
}

// env is mongolock's environment: the test's, without MONGODB_URI, and
// with the helper mode on for the commands it runs; then extra. Binaries
// built with -race do not sleep a second on exit, as they would by default.
func env(extra ...string) []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MONGODB_URI=") && !strings.HasPrefix(kv, "GORACE=") {
			e = append(e, kv)
		}
	}
	e = append(e, helperEnv+"=1", strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return append(e, extra...)
}

// A proc is a mongolock process running in the background.
type proc struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr syncbuf.Buffer
	done           chan struct{}
	code           int
	took           time.Duration
}

// start starts mongolock with args and environment env; its stdin is a
// pipe the test holds (closing it ends a helper that holds). It is
// killed, if still running, when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p, err := launch(env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.stdin.Close()
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// launch starts mongolock; the caller waits for it.
func launch(env []string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// A command left running holds the output pipes: stop reading them.
	p.cmd.WaitDelay = 5 * time.Second
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		p.took = time.Since(began)
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			p.code = ee.ExitCode() // -1 if a signal ended it
		case err != nil:
			p.code = -2
		}
	}()
	return p, nil
}

// wait waits up to within for p to exit, and returns its status.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		t.Fatalf("mongolock %s: still running after %v\nstdout: %s\nstderr: %s", strings.Join(p.cmd.Args[1:], " "), within, p.stdout.String(), p.stderr.String())
		return 0
	}
}

// result is what a mongolock run that ended left.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// invoke runs mongolock with args to its end (within a minute), with
// stdin as its input.
func invoke(t *testing.T, stdin string, args ...string) result {
	return invokeEnv(t, env(), stdin, args...)
}

func invokeEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	p := start(t, env, args...)
	// A command that exits before it reads its input (a bad invocation)
	// has its stdin closed by its Wait: no input is lost that it wanted.
	if _, err := io.WriteString(p.stdin, stdin); err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, syscall.EPIPE) {
		t.Fatal(err)
	}
	_ = p.stdin.Close()
	code := p.wait(t, time.Minute)
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String(), took: p.took}
}

// requireCode fails the test unless r has status code.
func requireCode(t *testing.T, r result, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
}

// waitForFile polls until path exists and is not empty, and returns its
// content. Its bound only fails a run: a machine loaded with other test
// runs may take seconds to start a process.
func waitForFile(t *testing.T, path string) string {
	t.Helper()
	const within = 15 * time.Second
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not written within %v", path, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// boundedCtx returns a context that ends after d or with the test.
func boundedCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	top := invoke(t, "", "help")
	requireCode(t, top, 0, "help")
	for _, want := range []string{"mongolock run [flags] NAME [--] CMD [ARGS...]", "mongolock acquire [flags] NAME", "mongolock extend", "mongolock list", "mongolock inspect", "mongolock release --force",
		"--uri URI", "Exit status:", "75", "76", "69", "Examples:", "mongolock run --try nightly -- ./report.sh"} {
		if !strings.Contains(top.stdout, want) {
			t.Errorf("mongolock help: no %q in\n%s", want, top.stdout)
		}
	}
	if r := invoke(t, "", "--help"); r.code != 0 || r.stdout != top.stdout {
		t.Errorf("mongolock --help: status %d, and not mongolock help's text:\n%s", r.code, r.stdout)
	}
	for cmd, wants := range map[string][]string{
		"run":     {"--try", "--wait DURATION", "--grace DURATION", "--expiry DURATION", "--semaphore N", "--read", "--write", "MONGOLOCK_FENCING_TOKEN", "before anyone else can take the lock", "Examples:"},
		"list":    {"--json", "one object per line", "election", "semaphore", "rwlock", "Examples:"},
		"inspect": {"--json", "semaphore", "Examples:"},
		"release": {"--force", "--holder ID", "--yes", "fencing token", "semaphore", "--ticket TICKET", "MONGOLOCK_TICKET", "Examples:"},
		"acquire": {"--try", "--wait DURATION", "--expiry DURATION", "--semaphore N", "--read", "--write", "--json", "MONGOLOCK_TICKET=", "MONGOLOCK_FENCING_TOKEN=", "bearer credential", "Examples:"},
		"extend":  {"--ticket TICKET", "--expiry DURATION", "--owner NAME", "--json", "stale", "76", "Examples:"},
	} {
		r := invoke(t, "", cmd, "--help")
		requireCode(t, r, 0, cmd+" --help")
		for _, want := range append(wants, "Usage: mongolock "+cmd, "--uri URI", "Exit status:") {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("mongolock %s --help: no %q in\n%s", cmd, want, r.stdout)
			}
		}
		if h := invoke(t, "", "help", cmd); h.stdout != r.stdout {
			t.Errorf("mongolock help %s differs from mongolock %s --help", cmd, cmd)
		}
	}
	v := invoke(t, "", "--version")
	requireCode(t, v, 0, "--version")
	if f := strings.Fields(v.stdout); len(f) < 3 || f[0] != "mongolock" || !strings.HasPrefix(f[len(f)-1], "go1.") {
		t.Errorf("mongolock --version: %q; want \"mongolock VERSION GOVERSION\"", v.stdout)
	}
	t.Logf("--version: %s", strings.TrimSpace(v.stdout))
}

// Every mistake in an invocation, and a server that cannot be reached, is
// one line on stderr and a status that says which it was, never a stack
// trace; an unreachable server within --timeout.
func TestBadInvocationsGiveOneLineAndTheirStatus(t *testing.T) {
	t.Parallel()
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := "mongodb://127.0.0.1:1/db" // never reached by these
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{nil, exitUsage, "no command"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"--nope", "list"}, exitUsage, "flag provided but not defined: -nope"},
		{[]string{"run", "--nope", "x", "--", "true"}, exitUsage, "flag provided but not defined: -nope (mongolock run --help lists the flags)"},
		{[]string{"run", "--wait", "soon", "x", "true"}, exitUsage, `invalid value "soon" for flag -wait`},
		{[]string{"run"}, exitUsage, "run: no lock name"},
		{[]string{"run", "x"}, exitUsage, "run: no command to run"},
		{[]string{"run", "x", "--"}, exitUsage, "run: no command to run"},
		{[]string{"run", "--try", "--wait", "1s", "x", "true"}, exitUsage, "--try and --wait exclude each other"},
		{[]string{"run", "--grace", "-1s", "x", "true"}, exitUsage, "must not be negative"},
		{[]string{"run", "--semaphore", "0", "x", "true"}, exitUsage, "a semaphore has at least 1 slot"},
		{[]string{"run", "--semaphore", "4097", "x", "true"}, exitUsage, "a semaphore has at most 4096 slots"},
		{[]string{"run", "--read", "--write", "x", "true"}, exitUsage, "exclude each other"},
		{[]string{"--uri", good, "run", "--expiry", "10ms", "x", "true"}, exitUsage, "run: --expiry 10ms: the lease must be at least 100ms"},
		{[]string{"run", "x", "--", "/no/such/command"}, exitNotFound, "/no/such/command"},
		{[]string{"run", "x", "no-such-command-anywhere"}, exitNotFound, "executable file not found"},
		{[]string{"run", "x", notExecutable}, exitNoExec, "permission denied"},
		{[]string{"list", "a", "b"}, exitUsage, `one prefix at most, not "b" too`},
		{[]string{"inspect"}, exitUsage, "inspect: no name"},
		{[]string{"release", "x"}, exitUsage, "release: give --force"},
		{[]string{"list"}, exitUsage, "no server: give --uri or set MONGOLOCK_URI or MONGODB_URI"},
		{[]string{"--uri", "notmongodb://x/db", "list"}, exitUsage, `invalid URI: error parsing uri: scheme must be "mongodb" or "mongodb+srv"`},
		{[]string{"--uri", "mongodb://127.0.0.1:1", "list"}, exitUsage, "no database: give --db"},
		{[]string{"--uri", good, "--timeout", "0s", "list"}, exitUsage, "--timeout 0s: must be positive"},
		{[]string{"--uri", good, "--timeout", "1s", "list"}, exitUnavailable, "could not reach the server (127.0.0.1:1) within 1s: dial tcp 127.0.0.1:1: connect: connection refused"},
		{[]string{"run", "--uri", good, "--timeout", "1s", "--try", "x", "true"}, exitUnavailable, "could not reach the server (127.0.0.1:1) within 1s"},
		{[]string{"inspect", "x", "--uri", good, "--timeout", "1s"}, exitUnavailable, "could not reach the server"},
		{[]string{"release", "--force", "x", "--uri", good, "--timeout", "1s"}, exitUnavailable, "could not reach the server"},
	} {
		r := invoke(t, "", c.args...)
		what := "mongolock " + strings.Join(c.args, " ")
		requireCode(t, r, c.code, what)
		if !strings.HasPrefix(r.stderr, "mongolock: ") || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s: stderr %q; want one line with %q", what, r.stderr, c.says)
		}
		if r.stdout != "" {
			t.Errorf("%s: stdout %q; want none", what, r.stdout)
		}
		if c.code == exitUnavailable && r.took > 5*time.Second {
			t.Errorf("%s: took %v with --timeout 1s", what, r.took)
		}
	}
}

// MONGODB_URI names the server when --uri does not, and the URI's path
// names the database when --db does not.
func TestServerFromMONGODB_URIAndDatabaseFromItsPath(t *testing.T) {
	t.Parallel()
	conn := server(t)
	uri, db := conn[1], conn[3]
	u, err := url.Parse(uri)
	if err != nil || strings.Trim(u.Path, "/") != "" {
		t.Skipf("needs a URI without a database that net/url can edit; the tests' is %s", uri)
	}
	u.Path = "/" + db
	with := u.String()
	r := invoke(t, "", append(conn, "run", "--try", "from-flags", "true")...)
	requireCode(t, r, 0, "run with --uri and --db")
	r = invokeEnv(t, env("MONGODB_URI="+with), "", "list", "--json")
	requireCode(t, r, 0, "list with MONGODB_URI naming the database")
	if !strings.Contains(r.stdout, `"name":"from-flags"`) {
		t.Errorf("list with MONGODB_URI=%s: %q; want the lock that run took in %s", with, r.stdout, db)
	}
	// --uri wins over MONGODB_URI.
	r = invokeEnv(t, env("MONGODB_URI=mongodb://127.0.0.1:1/nowhere"), "", "list", "--uri", with, "--json")
	requireCode(t, r, 0, "list with --uri and another MONGODB_URI")
	if !strings.Contains(r.stdout, `"name":"from-flags"`) {
		t.Errorf("list --uri %s: %q", with, r.stdout)
	}
}

// Every flag can come from the environment as MONGOLOCK_<FLAG>, and the
// command line wins; --force and --holder cannot.
func TestFlagsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	conn := server(t)
	uri, db := conn[1], conn[3]
	fromEnv := env("MONGOLOCK_URI="+uri, "MONGOLOCK_DB="+db, "MONGOLOCK_COLLECTION=env_locks")
	r := invokeEnv(t, fromEnv, "", "run", "--try", "from-env", "true")
	requireCode(t, r, 0, "run with the server, database and collection from the environment")
	r = invokeEnv(t, fromEnv, "", "list", "--json")
	requireCode(t, r, 0, "list with the environment's")
	if !strings.Contains(r.stdout, `"name":"from-env"`) {
		t.Errorf("list with MONGOLOCK_COLLECTION=env_locks: %q; want the lock run took there", r.stdout)
	}
	r = invokeEnv(t, fromEnv, "", "list", "--collection", "distributed_locks", "--json")
	requireCode(t, r, 0, "list with --collection beside MONGOLOCK_COLLECTION")
	if strings.Contains(r.stdout, `"name":"from-env"`) {
		t.Errorf("list --collection distributed_locks: %q; the command line must win over MONGOLOCK_COLLECTION", r.stdout)
	}
	r = invokeEnv(t, env("MONGOLOCK_TIMEOUT=soon"), "", "list", "--uri", uri, "--db", db)
	requireCode(t, r, 2, "list with MONGOLOCK_TIMEOUT=soon")
	if !strings.Contains(r.stderr, "MONGOLOCK_TIMEOUT") {
		t.Errorf("a bad MONGOLOCK_TIMEOUT: %q; want the variable named", r.stderr)
	}
	r = invokeEnv(t, append(fromEnv, "MONGOLOCK_FORCE=true"), "", "release", "from-env")
	requireCode(t, r, 2, "release with MONGOLOCK_FORCE=true but no --force")
	r = invokeEnv(t, append(fromEnv, "MONGOLOCK_HOLDER=0123456789abcdef0123456789abcdef"), "", "release", "--force", "--yes", "from-env")
	requireCode(t, r, exitFailed, "release --force of a free lock, with MONGOLOCK_HOLDER")
	if !strings.Contains(r.stderr, `"from-env" is not held`) {
		t.Errorf("release --force with MONGOLOCK_HOLDER said %q: the variable must not name a holder", r.stderr)
	}
}
