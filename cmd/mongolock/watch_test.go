package main

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// waitForOutput polls until p's stdout satisfies ok, and returns it.
func waitForOutput(t *testing.T, p *proc, what string, ok func(string) bool) string {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		out := p.stdout.String()
		if ok(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 15s; stdout:\n%s\nstderr: %s", what, out, p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // a poll until the deadline
	}
}

// list --watch prints the table, then a lock that a Go program acquires
// as it appears and as it is released, in the table and in JSON, and
// ends on SIGTERM with 143 and on SIGINT with 130.
func TestListWatchShowsLocksComeAndGo(t *testing.T) {
	t.Parallel()
	conn := server(t)
	ctx := boundedCtx(t, time.Minute)
	p, err := mongolock.NewProvider(testdb.Client(t).Database(conn[3]), mongolock.WithOwner("watched-1"))
	if err != nil {
		t.Fatal(err)
	}
	// Held all along, and extended every 250ms: no change to show.
	extended, err := mongolock.NewProvider(testdb.Client(t).Database(conn[3]), mongolock.WithOwner("watched-1"),
		mongolock.WithExpiry(3*time.Second), mongolock.WithExtensionCadence(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	before, err := extended.Lock("before").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Inspect(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = before.Release(context.Background()) }()
	watchArgs := append(slices.Clone(conn), "list", "--watch", "--interval", "100ms")
	table := start(t, env(), watchArgs...)
	lines := start(t, env(), append(watchArgs, "--json")...)
	// A new lock's document may be seen before its acquisition (created,
	// then acquired): then it is added free, and modified as it is held.
	hasLine := func(events string, words ...string) func(string) bool {
		return func(out string) bool {
			for line := range strings.Lines(out) {
				fields := strings.Fields(line)
				if len(fields) > 0 && slices.Contains(strings.Split(events, "|"), fields[0]) && !slices.ContainsFunc(words, func(w string) bool { return !slices.Contains(fields, w) }) {
					return true
				}
			}
			return false
		}
	}
	hasEvent := func(events, name string, held bool) func(string) bool {
		return func(out string) bool {
			for line := range strings.Lines(out) {
				if slices.ContainsFunc(strings.Split(events, "|"), func(e string) bool { return strings.Contains(line, `"event":"`+e+`"`) }) && strings.Contains(line, `"name":"`+name+`"`) &&
					strings.Contains(line, `"held":`+map[bool]string{true: "true", false: "false"}[held]) {
					return true
				}
			}
			return false
		}
	}
	waitForOutput(t, table, "the header", hasLine("EVENT", "NAME", "KIND", "HELD", "OWNER"))
	waitForOutput(t, table, "the lock held before", hasLine("ADDED", "before", "yes", "watched-1"))
	waitForOutput(t, lines, "the lock held before, in JSON", hasEvent("added", "before", true))

	for deadline := time.Now().Add(15 * time.Second); ; {
		info, err := p.Inspect(ctx, "before")
		if err != nil || !info.ExpiresAt.After(first.ExpiresAt) {
			if time.Now().After(deadline) {
				t.Fatalf("before: not extended within 15s: %+v, %v", info, err)
			}
			time.Sleep(10 * time.Millisecond) // a poll until the deadline
			continue
		}
		break
	}
	h, err := p.Lock("comes and goes").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, table, "the lock acquired", hasLine("ADDED|MODIFIED", `"comes`, `goes"`, "yes", "watched-1"))
	waitForOutput(t, lines, "the lock acquired, in JSON", hasEvent("added|modified", "comes and goes", true))
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, table, "the lock released", hasLine("MODIFIED", `"comes`, `goes"`, "no"))
	out := waitForOutput(t, lines, "the lock released, in JSON", hasEvent("modified", "comes and goes", false))
	if strings.Count(out, `"name":"before"`) != 1 {
		t.Errorf("list --watch --json: the lock held all along, extended, shown again:\n%s", out)
	}

	_ = table.cmd.Process.Signal(syscall.SIGTERM)
	_ = lines.cmd.Process.Signal(syscall.SIGINT)
	if code := table.wait(t, 15*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("list --watch on SIGTERM: status %d, want %d; stderr %q", code, 128+int(syscall.SIGTERM), table.stderr.String())
	}
	if code := lines.wait(t, 15*time.Second); code != 128+int(syscall.SIGINT) {
		t.Errorf("list --watch --json on SIGINT: status %d, want %d; stderr %q", code, 128+int(syscall.SIGINT), lines.stderr.String())
	}
}
