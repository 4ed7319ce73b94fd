package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// migrateHelper is a migration tool as golang-migrate's `migrate up` is
// one: it reads the schema's version (DIR/version, 0 if missing), applies
// each migration after it up to TARGET, appending "apply N TOKEN" to
// DIR/applied, and records each new version as it goes. Two of them at
// once read the same version and apply the same migrations twice.
func migrateHelper(dir, target, token string) error {
	to, err := strconv.Atoi(target)
	if err != nil {
		return err
	}
	version := 0
	if b, err := os.ReadFile(filepath.Join(dir, "version")); err == nil {
		if version, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return err
		}
	}
	for v := version + 1; v <= to; v++ {
		if err := appendLine(filepath.Join(dir, "applied"), fmt.Sprintf("apply %d %s", v, token)); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // the migration's work
		if err := writeWhole(filepath.Join(dir, "version"), strconv.Itoa(v)); err != nil {
			return err
		}
	}
	return nil
}

// The recipe of docs/migrations.md: every replica runs its migrations at
// start under `mongolock run migrations`. Three started at once take turns:
// the first applies each migration, and the others find the schema
// current and apply none.
func TestMigrationsUnderRunAreAppliedOnceWhenReplicasStartTogether(t *testing.T) {
	t.Parallel()
	conn := server(t)
	dir := t.TempDir()
	migrate := helperCmd(t, "migrate", dir, "3")
	const replicas = 3
	var wg sync.WaitGroup
	results := make([]result, replicas)
	for i := range replicas {
		wg.Go(func() {
			p, err := launch(env(), run(conn, append([]string{"--expiry", "2s", "migrations", "--"}, migrate...)...)...)
			if err != nil {
				results[i] = result{code: -3, stderr: err.Error()}
				return
			}
			_ = p.stdin.Close()
			select {
			case <-p.done:
				results[i] = result{code: p.code, stderr: p.stderr.String()}
			case <-time.After(time.Minute):
				_ = p.cmd.Process.Kill()
				<-p.done
				results[i] = result{code: -4, stderr: "still running after a minute"}
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		requireCode(t, r, 0, fmt.Sprint("replica ", i))
	}
	b, err := os.ReadFile(filepath.Join(dir, "applied"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d migrations applied, want each of 3 once:\n%s", len(lines), b)
	}
	for i, l := range lines {
		if f := strings.Fields(l); len(f) != 3 || f[0] != "apply" || f[1] != strconv.Itoa(i+1) || f[2] != strings.Fields(lines[0])[2] {
			t.Fatalf("line %d is %q: want migration %d, applied by the first run:\n%s", i+1, l, i+1, b)
		}
	}
}

// A migration whose mongolock is killed (SIGKILL: nothing of it runs to
// release) leaves the lock held only until its lease ends: its command is
// killed with it, and a run waiting for the lock gets it then. (golang-
// migrate's own lock document, left by a killed run, stays until someone
// deletes it.)
func TestKilledMigrationRunLeavesNoLockPastItsLease(t *testing.T) {
	t.Parallel()
	conn := server(t)
	const expiry = 2 * time.Second
	dir := t.TempDir()
	killed := start(t, env(), run(conn, append([]string{"--expiry", expiry.String(), "migrations", "--"}, helperCmd(t, "hold", dir)...)...)...)
	waitForFile(t, filepath.Join(dir, "started"))

	marker := filepath.Join(t.TempDir(), "started")
	next := start(t, env(), run(conn, append([]string{"--wait", "1m", "--expiry", expiry.String(), "migrations", "--"}, helperCmd(t, "started", marker)...)...)...)
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	<-killed.done
	_ = next.stdin.Close()
	if code := next.wait(t, time.Minute); code != 0 {
		t.Fatalf("the next run: status %d: %s", code, next.stderr.String())
	}
	began := unixNano(t, waitForFile(t, marker))
	// The lease ends at most expiry after the last extension, which came
	// before the kill; the waiter looks again within a second of its end.
	if late := began.Sub(at); late > expiry+2*time.Second {
		t.Errorf("the next migration began %v after the kill; the lease is %v", late.Round(time.Millisecond), expiry)
	}
	if last := lastBeat(t, dir); last.After(began) {
		t.Errorf("the killed run's command was still running when the next began (its last beat %v after)", last.Sub(began))
	}
	t.Logf("the next migration began %v after the kill, with an expiry of %v", began.Sub(at).Round(time.Millisecond), expiry)
}
