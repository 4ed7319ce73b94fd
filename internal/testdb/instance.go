package testdb

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// An Instance is a test server of one test's own: a named instance of
// scripts/testdb (FerretDB and PostgreSQL with their own ports, data and
// state, on the installed root), which the test may stop and start without
// disturbing the tests that share the main server.
type Instance struct {
	Name   string
	URI    string
	script string
	env    []string
}

// StartInstance starts a fresh instance on free ports and destroys it (stops
// it and deletes its data) when the test ends. Where scripts/testdb cannot
// run, the test is skipped, or fails under CI=true.
func StartInstance(tb testing.TB) *Instance {
	tb.Helper()
	script, err := scriptPath()
	if err != nil {
		fail(tb, err)
	}
	port, err := freePort()
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	pgport, err := freePort()
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	in := &Instance{
		Name:   fmt.Sprintf("t%d-%d", os.Getpid(), port),
		URI:    fmt.Sprintf("mongodb://127.0.0.1:%d/", port),
		script: script,
	}
	in.env = append(os.Environ(),
		"MONGOLOCK_TESTDB_INSTANCE="+in.Name,
		fmt.Sprintf("MONGOLOCK_TESTDB_PORT=%d", port),
		fmt.Sprintf("MONGOLOCK_TESTDB_PGPORT=%d", pgport),
	)
	tb.Cleanup(func() {
		if err := in.Run("destroy"); err != nil {
			tb.Errorf("testdb: %v", err)
		}
	})
	if err := in.Run("start"); err != nil {
		fail(tb, err)
	}
	return in
}

// Run runs scripts/testdb cmd for the instance: "start" (starts whatever
// is not running and waits until the server answers), "stop-ferretdb",
// "stop-postgres", "stop", "destroy".
func (in *Instance) Run(cmd string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, in.script, cmd)
	c.Env = in.env
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("MONGOLOCK_TESTDB_INSTANCE=%s %s %s: %v: %s", in.Name, in.script, cmd, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
