package main

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
	"github.com/mongolock/mongolock/internal/testdb"
)

// table reads an aligned table: the header's words, and each row's cells,
// cut at the header's columns. It fails the test if a cell does not begin
// exactly at its column.
func table(t *testing.T, out string) (header []string, rows [][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	cols := regexp.MustCompile(`\S+`).FindAllStringIndex(lines[0], -1)
	for _, c := range cols {
		header = append(header, lines[0][c[0]:c[1]])
	}
	for _, line := range lines[1:] {
		var row []string
		for i, c := range cols {
			end := len(line)
			if i+1 < len(cols) {
				end = min(end, cols[i+1][0])
			}
			if c[0] >= len(line) || line[c[0]] == ' ' || c[0] > 0 && line[c[0]-1] != ' ' {
				t.Fatalf("column %s not aligned in\n%s", header[i], out)
			}
			row = append(row, strings.TrimSpace(line[c[0]:end]))
		}
		rows = append(rows, row)
	}
	return header, rows
}

var columns = []string{"NAME", "KIND", "HELD", "OWNER", "TOKEN", "ACQUIRED", "EXPIRES", "WAITING", "VALUE"}

// list and inspect show each lock as the server judges it, as an aligned
// table and as JSON lines: held by a mongolock (its owner, and an
// election's value), free (released), and held by DistributedLock.MongoDB
// (no owner).
func TestListAndInspectShowHeldFreeAndDistributedLockDocuments(t *testing.T) {
	t.Parallel()
	ctx := boundedCtx(t, time.Minute)
	conn := server(t)
	db := testdb.Client(t).Database(conn[3])
	p, err := mongolock.NewProvider(db, mongolock.WithOwner("ops-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	tokens := map[string]int64{}
	var held []*mongolock.Handle // kept: a dropped Handle is released by the garbage collector
	t.Cleanup(func() {
		for _, h := range held {
			_ = h.Release(context.Background())
		}
	})
	for _, name := range []string{"app/held", "app/free", "zz/other"} {
		h, err := p.Lock(name).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
		tokens[name] = h.FencingToken()
		if name == "app/free" {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	leader, err := p.Election("app/leader").Campaign(ctx, "http://10.0.0.7:8080")
	if err != nil {
		t.Fatal(err)
	}
	tokens["app/leader"] = leader.FencingToken()
	token, ok, err := dotnet.TryAcquire(ctx, db.Collection(mongolock.DefaultCollection), "app/dotnet", dotnet.NewLockID(), dotnet.DefaultExpiry)
	if err != nil || !ok {
		t.Fatalf("DistributedLock.MongoDB's acquisition: %v, %v", ok, err)
	}
	tokens["app/dotnet"] = token

	r := invoke(t, "", append(slices.Clone(conn), "list", "--json", "app/")...)
	requireCode(t, r, 0, "list --json app/")
	want := map[string]lockJSON{
		"app/dotnet": {Held: true, HeldBy: "DistributedLock.MongoDB"},
		"app/free":   {},
		"app/held":   {Held: true, HeldBy: "mongolock", Owner: "ops-1"},
		"app/leader": {Held: true, HeldBy: "mongolock", Owner: "ops-1", Value: "http://10.0.0.7:8080"},
	}
	var names []string
	for _, got := range jsonLines[lockJSON](t, r.stdout) {
		names = append(names, got.Name)
		w := want[got.Name]
		w.Kind, w.Name, w.FencingToken, w.AcquiredAt, w.ExpiresAt, w.ServerTime = "lock", got.Name, tokens[got.Name], got.AcquiredAt, got.ExpiresAt, got.ServerTime
		if got != w {
			t.Errorf("list --json: %+v; want %+v", got, w)
		}
		if got.ServerTime.IsZero() || got.AcquiredAt.IsZero() || got.ExpiresAt.After(got.ServerTime) != got.Held {
			t.Errorf("list --json: %s: times %+v", got.Name, got)
		}
	}
	if want := []string{"app/dotnet", "app/free", "app/held", "app/leader"}; !slices.Equal(names, want) {
		t.Errorf("list --json app/: %q; want %q, in that order", names, want)
	}
	t.Logf("list --json app/:\n%s", r.stdout)

	r = invoke(t, "", append(slices.Clone(conn), "list", "app/")...)
	requireCode(t, r, 0, "list app/")
	header, rows := table(t, r.stdout)
	if !slices.Equal(header, columns) || len(rows) != 4 {
		t.Fatalf("list app/:\n%s", r.stdout)
	}
	for _, row := range rows {
		name, held, owner, tok, acquired, expires, value := row[0], row[2], row[3], row[4], row[5], row[6], row[8]
		want := map[string][3]string{ // held, owner, value
			"app/dotnet": {"yes", "(DistributedLock.MongoDB)", "-"},
			"app/free":   {"no", "-", "-"},
			"app/held":   {"yes", "ops-1", "-"},
			"app/leader": {"yes", "ops-1", "http://10.0.0.7:8080"},
		}[name]
		if row[1] != "lock" || [3]string{held, owner, value} != want || tok != strconv.FormatInt(tokens[name], 10) ||
			!strings.HasSuffix(acquired, " ago") || strings.HasPrefix(expires, "in ") != (held == "yes") || row[7] != "no" {
			t.Errorf("list app/: row %q", row)
		}
	}
	t.Logf("list app/:\n%s", r.stdout)

	r = invoke(t, "", append(slices.Clone(conn), "list")...)
	requireCode(t, r, 0, "list")
	if _, rows := table(t, r.stdout); len(rows) != 5 || rows[4][0] != "zz/other" {
		t.Errorf("list:\n%s", r.stdout)
	}

	r = invoke(t, "", append(slices.Clone(conn), "inspect", "app/dotnet", "--json")...)
	requireCode(t, r, 0, "inspect --json app/dotnet")
	if got := jsonLines[lockJSON](t, r.stdout); len(got) != 1 || got[0].HeldBy != "DistributedLock.MongoDB" || got[0].FencingToken != token {
		t.Errorf("inspect --json app/dotnet: %s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "app/leader")...)
	requireCode(t, r, 0, "inspect app/leader")
	if header, rows := table(t, r.stdout); !slices.Equal(header, columns) || len(rows) != 1 || rows[0][3] != "ops-1" || rows[0][8] != "http://10.0.0.7:8080" {
		t.Errorf("inspect app/leader:\n%s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "app/none")...)
	requireCode(t, r, exitFailed, "inspect of a name nobody used")
	if want := `mongolock: inspect: no lock, semaphore or reader-writer lock called "app/none" in ` + conn[3] + ".distributed_locks\n"; r.stderr != want {
		t.Errorf("inspect app/none said %q; want %q", r.stderr, want)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// inspect shows a semaphore's and a reader-writer lock's holders, one row
// each, beside the lock of the same name.
func TestInspectShowsSemaphoresAndReaderWriterLocks(t *testing.T) {
	t.Parallel()
	ctx := boundedCtx(t, time.Minute)
	conn := server(t)
	db := testdb.Client(t).Database(conn[3])
	var handles []*mongolock.Handle
	owners := []string{"exporter-1", "exporter-2"}
	for _, owner := range owners {
		p, err := mongolock.NewProvider(db, mongolock.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(context.Background()) })
		h, err := p.Semaphore("exports", 3).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.RWLock("catalog").Reader().TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h, r)
	}

	r := invoke(t, "", append(slices.Clone(conn), "inspect", "exports")...)
	requireCode(t, r, 0, "inspect exports")
	header, rows := table(t, r.stdout)
	if !slices.Equal(header, columns) || len(rows) != 2 {
		t.Fatalf("inspect exports:\n%s", r.stdout)
	}
	for i, row := range rows {
		if row[1] != "semaphore" || row[2] != "2/3" || row[3] != owners[i] || row[4] != strconv.FormatInt(handles[2*i].FencingToken(), 10) ||
			!strings.HasPrefix(row[6], "in ") {
			t.Errorf("inspect exports: row %q", row)
		}
	}
	t.Logf("inspect exports:\n%s", r.stdout)

	r = invoke(t, "", append(slices.Clone(conn), "inspect", "catalog")...)
	requireCode(t, r, 0, "inspect catalog")
	if _, rows := table(t, r.stdout); len(rows) != 2 || rows[0][1] != "rwlock" || rows[0][2] != "read" || rows[1][3] != "exporter-2" || rows[0][7] != "no" {
		t.Errorf("inspect catalog:\n%s", r.stdout)
	}
	for _, h := range handles {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "exports")...)
	requireCode(t, r, 0, "inspect exports, released")
	if _, rows := table(t, r.stdout); len(rows) != 1 || rows[0][2] != "0/3" || rows[0][3] != "-" ||
		rows[0][4] != strconv.FormatInt(handles[2].FencingToken(), 10) {
		t.Errorf("inspect exports, released:\n%s", r.stdout)
	}
}

// release --force asks first, ends the holder's acquisition, keeps the
// fencing token, and the holder's run stops its command; a free lock, or
// none, is refused.
func TestForceReleaseAsksKeepsTheTokenAndStopsTheHolder(t *testing.T) {
	t.Parallel()
	conn := server(t)
	dir := t.TempDir()
	holder := start(t, env(), run(conn, append([]string{"--expiry", "2s", "--owner", "stuck-1", "stuck", "--"}, helperCmd(t, "hold", dir)...)...)...)
	waitForFile(t, filepath.Join(dir, "started"), 15*time.Second)
	before := inspectLock(t, conn, "stuck")
	release := append(slices.Clone(conn), "release", "--force", "stuck")

	for _, answer := range []string{"n\n", "", "whatever\n"} {
		r := invoke(t, answer, release...)
		requireCode(t, r, exitFailed, "release --force answered "+strconv.Quote(answer))
		if !strings.HasPrefix(r.stderr, `Release "stuck", held by stuck-1 since `) || !strings.HasSuffix(r.stderr, "? [y/N] \nmongolock: release: \"stuck\" not released\n") {
			t.Errorf("release --force answered %q said %q", answer, r.stderr)
		}
	}
	if info := inspectLock(t, conn, "stuck"); !info.Held || info.Owner != "stuck-1" {
		t.Fatalf("after no confirmation: %+v", info)
	}

	r := invoke(t, "yes\n", release...)
	requireCode(t, r, 0, "release --force answered yes")
	if !strings.HasPrefix(r.stdout, `released "stuck" (was held by stuck-1 since `) || !strings.Contains(r.stdout, strconv.FormatInt(before.FencingToken, 10)) {
		t.Errorf("release --force said %q", r.stdout)
	}
	if code := holder.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("the holder's run: status %d, want %d: %s", code, exitLost, holder.stderr.String())
	}
	waitForFile(t, filepath.Join(dir, "term"), time.Second)
	after := inspectLock(t, conn, "stuck")
	if after.Held || after.FencingToken != before.FencingToken {
		t.Errorf("after force release: %+v; want free, with the token %d", after, before.FencingToken)
	}

	r = invoke(t, "", append(release, "--yes")...)
	requireCode(t, r, exitFailed, "release --force --yes of a free lock")
	if !strings.HasPrefix(r.stderr, `mongolock: release: "stuck" is not held (its last lease ended `) || !strings.HasSuffix(r.stderr, "ago): nothing to release\n") {
		t.Errorf("release of a free lock said %q", r.stderr)
	}
	r = invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", "nobody")...)
	requireCode(t, r, exitFailed, "release --force --yes of a name nobody used")
	if !strings.Contains(r.stderr, `no lock called "nobody"`) {
		t.Errorf("release of a name nobody used said %q", r.stderr)
	}

	// A DistributedLock.MongoDB holder is released the same way.
	ctx := boundedCtx(t, time.Minute)
	coll := testdb.Client(t).Database(conn[3]).Collection(mongolock.DefaultCollection)
	if _, ok, err := dotnet.TryAcquire(ctx, coll, "dotnet", dotnet.NewLockID(), dotnet.DefaultExpiry); err != nil || !ok {
		t.Fatalf("DistributedLock.MongoDB's acquisition: %v, %v", ok, err)
	}
	r = invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", "dotnet")...)
	requireCode(t, r, 0, "release --force --yes of a DistributedLock.MongoDB holder")
	if !strings.HasPrefix(r.stdout, `released "dotnet" (was held by DistributedLock.MongoDB since `) {
		t.Errorf("release of a DistributedLock.MongoDB holder said %q", r.stdout)
	}
	requireCode(t, invoke(t, "", run(conn, "--try", "dotnet", "true")...), 0, "run --try after the release")
}
