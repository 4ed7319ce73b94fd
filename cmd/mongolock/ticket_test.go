package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// ticketOut is what acquire and extend print: the ticket and the fencing token.
type ticketOut struct {
	ticket string
	token  int64
}

// heldOf parses acquire's or extend's output, MONGOLOCK_TICKET=T and
// MONGOLOCK_FENCING_TOKEN=N lines, as a shell would source it.
func heldOf(t *testing.T, r result, what string) ticketOut {
	t.Helper()
	requireCode(t, r, 0, what)
	var h ticketOut
	for line := range strings.Lines(r.stdout) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		switch k {
		case "MONGOLOCK_TICKET":
			h.ticket = v
		case "MONGOLOCK_FENCING_TOKEN":
			h.token, _ = strconv.ParseInt(v, 10, 64)
		default:
			t.Fatalf("%s: unexpected line %q in %q", what, line, r.stdout)
		}
	}
	if !strings.HasPrefix(h.ticket, "mlt1_") || h.token <= 0 {
		t.Fatalf("%s: stdout %q; want a ticket and a fencing token", what, r.stdout)
	}
	return h
}

// inspectOne returns inspect --json's one object for name.
func inspectOne(t *testing.T, conn []string, name string) infoJSON {
	t.Helper()
	r := invoke(t, "", append(slices.Clone(conn), "inspect", "--json", name)...)
	requireCode(t, r, 0, "inspect "+name)
	objs := jsonLines[infoJSON](t, r.stdout)
	if len(objs) != 1 {
		t.Fatalf("inspect --json %s: %s", name, r.stdout)
	}
	return objs[0]
}

// A deploy lock across the steps of a pipeline: acquire leaves the lock
// held for its lease after it exited; nobody else takes it; extend takes
// it over by its ticket with a greater token, which makes the old ticket
// stale; release by the new ticket frees it.
func TestAcquireExtendReleaseAcrossSteps(t *testing.T) {
	t.Parallel()
	conn := server(t)
	step := func(args ...string) result { return invoke(t, "", append(slices.Clone(conn), args...)...) }
	first := heldOf(t, step("acquire", "--expiry", "1m", "--owner", "pipeline-1", "deploy"), "acquire")
	info := inspectOne(t, conn, "deploy")
	if !info.Held || info.Owner != "pipeline-1" || info.FencingToken != first.token || info.ExpiresAt.Sub(info.AcquiredAt) != time.Minute {
		t.Fatalf("after acquire exited: %+v; want deploy held by pipeline-1 with token %d for a lease of 1m", info, first.token)
	}
	requireCode(t, invoke(t, "", run(conn, "--try", "deploy", "true")...), exitNotAcquired, "run --try while acquire's lease lasts")
	r := step("acquire", "--try", "deploy")
	requireCode(t, r, exitNotAcquired, "acquire --try of a held lock")
	if r.stdout != "" || r.stderr != "" {
		t.Errorf("acquire --try of a held lock: stdout %q, stderr %q; want nothing", r.stdout, r.stderr)
	}

	// The ticket from the environment, as a step that sourced acquire's output has it.
	second := heldOf(t, invokeEnv(t, env("MONGOLOCK_TICKET="+first.ticket), "", append(slices.Clone(conn), "extend", "--expiry", "2m")...), "extend")
	if second.token <= first.token || second.ticket == first.ticket {
		t.Fatalf("extend: token %d after %d, ticket changed %v; want a greater token and a new ticket", second.token, first.token, second.ticket != first.ticket)
	}
	if info := inspectOne(t, conn, "deploy"); !info.Held || info.FencingToken != second.token || info.ExpiresAt.Sub(info.AcquiredAt) != 2*time.Minute {
		t.Fatalf("after extend: %+v; want deploy held with token %d for a lease of 2m", info, second.token)
	}
	for _, cmd := range []string{"extend", "release"} {
		r := step(cmd, "--ticket", first.ticket)
		requireCode(t, r, exitLost, cmd+" with the ticket that extend replaced")
		if r.stdout != "" || !strings.Contains(r.stderr, "stale ticket") {
			t.Errorf("%s with a stale ticket: stdout %q, stderr %q; want a stale ticket said", cmd, r.stdout, r.stderr)
		}
	}
	requireCode(t, invoke(t, "", run(conn, "--try", "deploy", "true")...), exitNotAcquired, "run --try after the stale tickets")

	r = step("release", "--ticket", second.ticket)
	requireCode(t, r, 0, "release with extend's ticket")
	var token int64
	if _, err := fmt.Sscanf(r.stdout, "released what the ticket held of \"deploy\" (fencing token %d)\n", &token); err != nil || token <= second.token {
		t.Errorf("release: stdout %q; want what it released and a token greater than %d", r.stdout, second.token)
	}
	requireCode(t, invoke(t, "", run(conn, "--try", "deploy", "true")...), 0, "run --try once released")
	requireCode(t, step("release", "--ticket", second.ticket), exitLost, "release with a released ticket")
}

// acquire --json and extend --json print one object, as list and inspect do.
func TestAcquireJSON(t *testing.T) {
	t.Parallel()
	conn := server(t)
	r := invoke(t, "", append(slices.Clone(conn), "acquire", "--json", "--expiry", "1m", "nightly")...)
	requireCode(t, r, 0, "acquire --json")
	type acquired struct {
		Name         string `json:"name"`
		Ticket       string `json:"ticket"`
		FencingToken int64  `json:"fencingToken"`
	}
	objs := jsonLines[acquired](t, r.stdout)
	if len(objs) != 1 || objs[0].Name != "nightly" || !strings.HasPrefix(objs[0].Ticket, "mlt1_") ||
		objs[0].FencingToken != inspectOne(t, conn, "nightly").FencingToken {
		t.Fatalf("acquire --json: %s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "extend", "--json", "--ticket", objs[0].Ticket)...)
	requireCode(t, r, 0, "extend --json")
	if again := jsonLines[acquired](t, r.stdout); len(again) != 1 || again[0].Name != "nightly" || again[0].FencingToken <= objs[0].FencingToken {
		t.Errorf("extend --json after acquire --json %s: %s", objs[0].Ticket, r.stdout)
	}
}

// A semaphore's slot and an RWLock's reader go across steps too.
func TestAcquireSemaphoreSlotsAndReaders(t *testing.T) {
	t.Parallel()
	conn := server(t)
	step := func(args ...string) result { return invoke(t, "", append(slices.Clone(conn), args...)...) }
	a := heldOf(t, step("acquire", "--semaphore", "2", "--expiry", "1m", "jobs"), "first slot")
	heldOf(t, step("acquire", "--semaphore", "2", "--expiry", "1m", "jobs"), "second slot")
	requireCode(t, step("acquire", "--semaphore", "2", "--try", "jobs"), exitNotAcquired, "a third slot of 2")
	b := heldOf(t, step("extend", "--ticket", a.ticket), "extend a slot")
	if info := inspectOne(t, conn, "jobs"); info.Kind != "semaphore" || info.N != 2 || len(info.Holders) != 2 || info.Holders[1].FencingToken != b.token || b.token <= a.token {
		t.Fatalf("after extend of a slot (token %d, then %d): %+v", a.token, b.token, info)
	}
	r := step("release", "--ticket", b.ticket)
	requireCode(t, r, 0, "release a slot")
	if !strings.HasPrefix(r.stdout, `released what the ticket held of "jobs"`) {
		t.Errorf("release of a slot: %q", r.stdout)
	}
	heldOf(t, step("acquire", "--semaphore", "2", "--try", "jobs"), "a slot once one was released")

	reader := heldOf(t, step("acquire", "--read", "--expiry", "1m", "catalog"), "a reader")
	heldOf(t, step("acquire", "--read", "--try", "catalog"), "a second reader")
	requireCode(t, step("acquire", "--write", "--try", "catalog"), exitNotAcquired, "a writer while readers hold")
	taken := heldOf(t, step("extend", "--ticket", reader.ticket), "extend a reader")
	if info := inspectOne(t, conn, "catalog"); info.Kind != "rwlock" || len(info.Holders) != 2 || info.Holders[1].Mode != "read" || info.Holders[1].FencingToken != taken.token {
		t.Fatalf("after extend of a reader: %+v", info)
	}
}

// Bad tickets and invocations: one line and a usage status, nothing sent.
func TestTicketInvocations(t *testing.T) {
	t.Parallel()
	conn := server(t)
	first := heldOf(t, invoke(t, "", append(slices.Clone(conn), "acquire", "--expiry", "1m", "other-db")...), "acquire")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"extend"}, exitUsage, "extend: no ticket"},
		{[]string{"extend", "--ticket", "mlt1_nope"}, exitUsage, "extend: malformed ticket"},
		{[]string{"release", "--ticket", "x", "--force", "name"}, exitUsage, "--ticket and --force exclude each other"},
		{[]string{"release", "--ticket", "x", "name"}, exitUsage, "release: --ticket takes no name"},
		{[]string{"release"}, exitUsage, "release: no name, and no --ticket"},
		{[]string{"acquire"}, exitUsage, "acquire: no lock name"},
		{[]string{"acquire", "--try", "--wait", "1s", "x"}, exitUsage, "--try and --wait exclude each other"},
		{[]string{"acquire", "--read", "--semaphore", "2", "x"}, exitUsage, "exclude each other"},
		{[]string{"extend", "--collection", "elsewhere", "--ticket", first.ticket}, exitUsage, "the ticket is of the collection"},
	} {
		r := invoke(t, "", append(slices.Clone(conn), c.args...)...)
		what := "mongolock " + strings.Join(c.args, " ")
		requireCode(t, r, c.code, what)
		if strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, c.says) || r.stdout != "" {
			t.Errorf("%s: stdout %q, stderr %q; want one line with %q", what, r.stdout, r.stderr, c.says)
		}
	}
	if info := inspectOne(t, conn, "other-db"); info.FencingToken != first.token || !info.Held {
		t.Errorf("after bad invocations: %+v; want the lock as acquire left it", info)
	}
	// --force on the command line wins over MONGOLOCK_TICKET, as a flag
	// on the command line over one it excludes from the environment.
	r := invokeEnv(t, env("MONGOLOCK_TICKET=mlt1_nope"), "", append(slices.Clone(conn), "release", "--force", "--yes", "other-db")...)
	requireCode(t, r, 0, "release --force with MONGOLOCK_TICKET set")
	if info := inspectOne(t, conn, "other-db"); info.Held {
		t.Errorf("after release --force: %+v; want it free", info)
	}
}

// Nothing extends what acquire left: it is free once its lease has ended.
func TestAcquireLeavesTheLockToItsLease(t *testing.T) {
	t.Parallel()
	conn := server(t)
	heldOf(t, invoke(t, "", append(slices.Clone(conn), "acquire", "--expiry", "300ms", "brief")...), "acquire")
	for deadline := time.Now().Add(15 * time.Second); ; {
		r := invoke(t, "", run(conn, "--try", "brief", "true")...)
		if r.code == 0 {
			break
		}
		requireCode(t, r, exitNotAcquired, "run --try while acquire's lease lasts")
		if time.Now().After(deadline) {
			t.Fatal("the lock acquire left is still held 15s after its lease of 300ms")
		}
		time.Sleep(50 * time.Millisecond) // a poll until the deadline
	}
}

// An election's leadership that a Go program made a ticket of goes on
// with extend, with its value, and ends with release.
func TestExtendAndReleaseAGoProgramsLeadership(t *testing.T) {
	t.Parallel()
	conn := server(t)
	ctx := boundedCtx(t, time.Minute)
	p, err := mongolock.NewProvider(testdb.Client(t).Database(conn[3]), mongolock.WithOwner("scheduler-1"),
		mongolock.WithExpiry(2*time.Second)) // its next extension, which finds the take-over, comes soon
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	l, err := p.Election("scheduler").Campaign(ctx, "http://10.0.0.7:8080")
	if err != nil {
		t.Fatal(err)
	}
	ticket, err := l.Ticket()
	if err != nil {
		t.Fatal(err)
	}
	next := heldOf(t, invoke(t, "", append(slices.Clone(conn), "extend", "--owner", "ops", "--ticket", ticket)...), "extend a leadership")
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the Go program's leadership was not lost after extend took it over")
	}
	if info := inspectOne(t, conn, "scheduler"); info.Kind != "election" || info.Owner != "ops" || info.Value != "http://10.0.0.7:8080" || info.FencingToken != next.token || next.token <= l.FencingToken() {
		t.Fatalf("after extend: %+v; want the election led by ops with the same value and token %d", info, next.token)
	}
	requireCode(t, invoke(t, "", append(slices.Clone(conn), "release", "--ticket", next.ticket)...), 0, "release a leadership")
	if info := inspectOne(t, conn, "scheduler"); info.Held {
		t.Errorf("after release: %+v; want nobody leading", info)
	}
}

// extend keeps the owner of the acquisition it takes over, of every kind,
// unless --owner (or MONGOLOCK_OWNER) names a new one.
func TestExtendKeepsTheOwnerUnlessGivenOne(t *testing.T) {
	t.Parallel()
	conn := server(t)
	step := func(env []string, args ...string) ticketOut {
		return heldOf(t, invokeEnv(t, env, "", append(slices.Clone(conn), args...)...), strings.Join(args, " "))
	}
	ownerOf := func(name string, token int64) string {
		for _, h := range inspectOne(t, conn, name).Holders {
			if h.FencingToken == token {
				return h.Owner
			}
		}
		t.Fatalf("%s: no holder of token %d", name, token)
		return ""
	}
	for _, kind := range [][]string{nil, {"--semaphore", "3"}, {"--read"}} {
		name := "owned" + strings.Join(kind, "")
		held := step(env(), append(append([]string{"acquire", "--owner", "deploy/7"}, kind...), name)...)
		kept := step(env(), "extend", "--ticket", held.ticket)
		if got := ownerOf(name, kept.token); got != "deploy/7" {
			t.Errorf("%s: extend without --owner: owner %q, want deploy/7 kept", name, got)
		}
		mine := step(env(), "extend", "--owner", "deploy/8", "--ticket", kept.ticket)
		if got := ownerOf(name, mine.token); got != "deploy/8" {
			t.Errorf("%s: extend --owner deploy/8: owner %q", name, got)
		}
		fromEnv := step(env("MONGOLOCK_OWNER=deploy/9"), "extend", "--ticket", mine.ticket)
		if got := ownerOf(name, fromEnv.token); got != "deploy/9" {
			t.Errorf("%s: MONGOLOCK_OWNER=deploy/9 extend: owner %q", name, got)
		}
	}
}
