package main

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
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

// inspectColumns are inspect's: list's, and each holder's ID.
var inspectColumns = append(slices.Clone(columns), "ID")

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
	want := map[string]infoJSON{
		"app/dotnet": {Kind: "lock", Held: true, HeldBy: "DistributedLock.MongoDB"},
		"app/free":   {Kind: "lock"},
		"app/held":   {Kind: "lock", Held: true, HeldBy: "mongolock", Owner: "ops-1"},
		"app/leader": {Kind: "election", Held: true, HeldBy: "mongolock", Owner: "ops-1", Value: "http://10.0.0.7:8080"},
	}
	var names []string
	for _, got := range jsonLines[infoJSON](t, r.stdout) {
		names = append(names, got.Name)
		w := want[got.Name]
		w.Name, w.FencingToken, w.AcquiredAt, w.ExpiresAt, w.ServerTime = got.Name, tokens[got.Name], got.AcquiredAt, got.ExpiresAt, got.ServerTime
		w.Holders = []holderJSON{}
		if w.Held {
			w.Holders = []holderJSON{{ID: got.Holders[0].ID, Owner: w.Owner, FencingToken: w.FencingToken, AcquiredAt: got.AcquiredAt, ExpiresAt: got.ExpiresAt}}
		}
		if !reflect.DeepEqual(got, w) {
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
		kind := "lock"
		if name == "app/leader" {
			kind = "election"
		}
		if row[1] != kind || [3]string{held, owner, value} != want || tok != strconv.FormatInt(tokens[name], 10) ||
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
	if got := jsonLines[infoJSON](t, r.stdout); len(got) != 1 || got[0].HeldBy != "DistributedLock.MongoDB" || got[0].FencingToken != token {
		t.Errorf("inspect --json app/dotnet: %s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "app/leader")...)
	requireCode(t, r, 0, "inspect app/leader")
	if header, rows := table(t, r.stdout); !slices.Equal(header, inspectColumns) || len(rows) != 1 || rows[0][1] != "election" || rows[0][3] != "ops-1" ||
		rows[0][8] != "http://10.0.0.7:8080" || len(rows[0][9]) != 32 {
		t.Errorf("inspect app/leader:\n%s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "app/none")...)
	requireCode(t, r, exitFailed, "inspect of a name nobody used")
	if want := `mongolock: inspect: no lock, election, semaphore or reader-writer lock called "app/none" in ` + conn[3] + ".distributed_locks\n"; r.stderr != want {
		t.Errorf("inspect app/none said %q; want %q", r.stderr, want)
	}
	if err := leader.Release(ctx); err != nil {
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
	if !slices.Equal(header, inspectColumns) || len(rows) != 2 {
		t.Fatalf("inspect exports:\n%s", r.stdout)
	}
	for i, row := range rows {
		if row[1] != "semaphore" || row[2] != "2/3" || row[3] != owners[i] || row[4] != strconv.FormatInt(handles[2*i].FencingToken(), 10) ||
			!strings.HasPrefix(row[6], "in ") || len(row[9]) != 32 {
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
	waitForFile(t, filepath.Join(dir, "started"))
	before := inspectLock(t, conn, "stuck")
	release := append(slices.Clone(conn), "release", "--force", "stuck")

	for _, answer := range []string{"n\n", "whatever\n", "no"} {
		r := invoke(t, answer, release...)
		requireCode(t, r, exitFailed, "release --force answered "+strconv.Quote(answer))
		if !strings.HasPrefix(r.stderr, `Release "stuck", held by stuck-1 since `) || !strings.HasSuffix(r.stderr, "? [y/N] \nmongolock: release: \"stuck\" not released\n") {
			t.Errorf("release --force answered %q said %q", answer, r.stderr)
		}
	}
	// No answer at all (no terminal, an input that ends) is a refusal
	// that says how to release without one.
	r := invoke(t, "", release...)
	requireCode(t, r, exitUsage, "release --force with no answer")
	if !strings.HasSuffix(r.stderr, "? [y/N] \nmongolock: release: no answer (its input ended): \"stuck\" not released; pass --yes to release without asking\n") {
		t.Errorf("release --force with no answer said %q", r.stderr)
	}
	if info := inspectLock(t, conn, "stuck"); !info.Held || info.Owner != "stuck-1" {
		t.Fatalf("after no confirmation: %+v", info)
	}

	r = invoke(t, "yes\n", release...)
	requireCode(t, r, 0, "release --force answered yes")
	if !strings.HasPrefix(r.stdout, `released "stuck" (was held by stuck-1 since `) || !strings.Contains(r.stdout, strconv.FormatInt(before.FencingToken, 10)) {
		t.Errorf("release --force said %q", r.stdout)
	}
	if code := holder.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("the holder's run: status %d, want %d: %s", code, exitLost, holder.stderr.String())
	}
	waitForFile(t, filepath.Join(dir, "term"))
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
	if !strings.Contains(r.stderr, `no lock, election, semaphore or reader-writer lock called "nobody"`) {
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

// list shows every kind, one row each, a lock before the semaphore of its
// name: a semaphore's holders/slots, a reader-writer lock's readers or
// writer, the holders' owners, an election's value; --json the same, with
// each holder. inspect shows both of a name, and no name it begins.
func TestListShowsEveryKind(t *testing.T) {
	t.Parallel()
	ctx := boundedCtx(t, time.Minute)
	conn := server(t)
	db := testdb.Client(t).Database(conn[3])
	hold := func(h *mongolock.Handle, err error) *mongolock.Handle {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Release(context.Background()) })
		return h
	}
	var ps []*mongolock.Provider
	for _, owner := range []string{"exporter-1", "exporter-2"} {
		p, err := mongolock.NewProvider(db, mongolock.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(context.Background()) })
		ps = append(ps, p)
	}
	tokens := map[string]int64{}
	for i, p := range ps {
		reader := p.RWLock("jobs/catalog").Reader().TryAcquire
		if i == 1 {
			reader = func(ctx context.Context) (*mongolock.Handle, error) {
				u, err := p.RWLock("jobs/catalog").Upgradeable().TryAcquire(ctx)
				if err != nil {
					return nil, err
				}
				return u.Handle, nil
			}
		}
		tokens["jobs/catalog rwlock"] = hold(reader(ctx)).FencingToken()
		tokens["jobs/exports semaphore"] = hold(p.Semaphore("jobs/exports", 3).TryAcquire(ctx)).FencingToken()
	}
	tokens["jobs/exports lock"] = hold(ps[0].Lock("jobs/exports").TryAcquire(ctx)).FencingToken()
	tokens["jobs/schema rwlock"] = hold(ps[0].RWLock("jobs/schema").Writer().TryAcquire(ctx)).FencingToken()
	tokens["jobs/exports/old lock"] = hold(ps[1].Lock("jobs/exports/old").TryAcquire(ctx)).FencingToken()
	leader, err := ps[1].Election("jobs/leader").Campaign(ctx, "v7")
	tokens["jobs/leader election"] = hold(leader.Handle, err).FencingToken()

	r := invoke(t, "", append(slices.Clone(conn), "list", "jobs/")...)
	requireCode(t, r, 0, "list jobs/")
	header, rows := table(t, r.stdout)
	want := [][]string{ // NAME, KIND, HELD, OWNER, WAITING, VALUE
		{"jobs/catalog", "rwlock", "2 readers", "exporter-1,exporter-2", "no", "-"},
		{"jobs/exports", "lock", "yes", "exporter-1", "no", "-"},
		{"jobs/exports", "semaphore", "2/3", "exporter-1,exporter-2", "no", "-"},
		{"jobs/exports/old", "lock", "yes", "exporter-2", "no", "-"},
		{"jobs/leader", "election", "yes", "exporter-2", "no", "v7"},
		{"jobs/schema", "rwlock", "writer", "exporter-1", "no", "-"},
	}
	if !slices.Equal(header, columns) || len(rows) != len(want) {
		t.Fatalf("list jobs/:\n%s", r.stdout)
	}
	for i, row := range rows {
		if !slices.Equal([]string{row[0], row[1], row[2], row[3], row[7], row[8]}, want[i]) ||
			row[4] != strconv.FormatInt(tokens[row[0]+" "+row[1]], 10) || !strings.HasSuffix(row[5], " ago") || !strings.HasPrefix(row[6], "in ") {
			t.Errorf("list jobs/: row %q; want %q, token %d", row, want[i], tokens[row[0]+" "+row[1]])
		}
	}
	t.Logf("list jobs/:\n%s", r.stdout)

	r = invoke(t, "", append(slices.Clone(conn), "list", "--json", "jobs/")...)
	requireCode(t, r, 0, "list --json jobs/")
	objs := jsonLines[infoJSON](t, r.stdout)
	if len(objs) != len(want) {
		t.Fatalf("list --json jobs/:\n%s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "--json", "jobs/exports")...)
	requireCode(t, r, 0, "inspect --json jobs/exports")
	if got := jsonLines[infoJSON](t, r.stdout); len(got) != 2 || got[0].Kind != "lock" || got[1].Kind != "semaphore" ||
		!slices.EqualFunc([]infoJSON{objs[1], objs[2]}, got, func(a, b infoJSON) bool {
			return a.Name == b.Name && a.Kind == b.Kind && a.Holders[0].ID == b.Holders[0].ID
		}) {
		t.Errorf("inspect --json jobs/exports:\n%s", r.stdout)
	}
	for i, o := range objs {
		if o.Name != want[i][0] || string(o.Kind) != want[i][1] || !o.Held || o.FencingToken != tokens[want[i][0]+" "+want[i][1]] ||
			(o.N == 3) != (o.Kind == "semaphore") || (o.WriterWaiting != nil) != (o.Kind == "rwlock") || len(o.Holders) != strings.Count(want[i][3], ",")+1 ||
			o.Claim != nil || o.Next != nil {
			t.Errorf("list --json jobs/: %+v; want %q", o, want[i])
		}
		for _, h := range o.Holders {
			mode := map[string]string{"jobs/catalog exporter-1": "read", "jobs/catalog exporter-2": "upgradeable", "jobs/schema exporter-1": "write"}[o.Name+" "+h.Owner]
			if len(h.ID) != 32 || h.Mode != mode || !strings.HasPrefix(h.Owner, "exporter-") {
				t.Errorf("list --json jobs/: %s: holder %+v", o.Name, h)
			}
		}
	}
}

// holdAndWait starts a mongolock run for each of holders' arguments, each
// holding name until the test ends, and then one with waiter's arguments,
// which writes "TIME TOKEN" to the file it returns once it holds; it
// returns when the waiter claims the next turn, and the holders' tokens.
func holdAndWait(t *testing.T, conn []string, name string, holders [][]string, waiter []string) (running []*proc, file string, tokens []int64) {
	t.Helper()
	for i, args := range holders {
		dir := t.TempDir()
		args = append(slices.Clone(args), "--expiry", "6s", "--owner", fmt.Sprintf("stuck-%d", i+1), name, "--")
		running = append(running, start(t, env(), run(conn, append(args, helperCmd(t, "hold", dir)...)...)...))
		token, err := strconv.ParseInt(strings.Fields(waitForFile(t, filepath.Join(dir, "started")))[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	file = filepath.Join(t.TempDir(), "started")
	start(t, env(), run(conn, append(append(slices.Clone(waiter), name, "--"), helperCmd(t, "started", file)...)...)...)
	deadline := time.Now().Add(15 * time.Second)
	for !slices.ContainsFunc(jsonLines[infoJSON](t, invoke(t, "", append(slices.Clone(conn), "inspect", "--json", name)...).stdout),
		func(o infoJSON) bool {
			return o.Waiting && o.Claim != nil && o.Claim.Process != "" && o.Claim.Since > 0
		}) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the waiter did not claim the next turn", name)
		}
	}
	return running, file, tokens
}

// release --force frees a semaphore, a reader-writer lock (readers, or a
// writer) and an election: a waiting run gets it at once, long before the
// old leases would end, with a greater token, and each holder's run
// finds the loss and exits with 76.
func TestForceReleaseFreesEveryKind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind             string
		holders          [][]string
		waiter           []string
		said             string
		semaphore, write bool
	}{
		{"semaphore", [][]string{{"--semaphore", "2"}, {"--semaphore", "2"}}, []string{"--semaphore", "2"}, "a semaphore of 2 slots held by stuck-1 since ", true, false},
		{"readers", [][]string{{"--read"}, {"--read"}}, []string{"--write"}, "a reader-writer lock held for reading by stuck-1 since ", false, false},
		{"writer", [][]string{{"--write"}}, []string{"--read"}, "a reader-writer lock held for writing by stuck-1 since ", false, true},
		{"election", nil, nil, "an election led by ops-1 since ", false, false},
	} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			conn := server(t)
			name := "stuck-" + c.kind
			var holders []*proc
			var file string
			var tokens []int64
			if c.kind == "election" {
				ctx := boundedCtx(t, time.Minute)
				p, err := mongolock.NewProvider(testdb.Client(t).Database(conn[3]), mongolock.WithOwner("ops-1"),
					mongolock.WithExpiry(6*time.Second), mongolock.WithExtensionCadence(100*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Close(context.Background()) })
				l, err := p.Election(name).Campaign(ctx, "leader-1")
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					select {
					case <-l.Lost():
					case <-time.After(5 * time.Second):
						t.Error("the leader did not find the loss")
					}
				}()
				tokens = []int64{l.FencingToken()}
				_, file, _ = holdAndWait(t, conn, name, nil, nil)
			} else {
				holders, file, tokens = holdAndWait(t, conn, name, c.holders, c.waiter)
			}
			r := invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", name)...)
			released := time.Now()
			requireCode(t, r, 0, "release --force --yes "+name)
			if want := fmt.Sprintf("released %q (was %s", name, c.said); !strings.HasPrefix(r.stdout, want) ||
				!strings.HasSuffix(r.stdout, "; the next holder's token will be greater)\n") || strings.Count(r.stdout, "fencing token") != len(tokens) {
				t.Errorf("release --force said %q; want %q...", r.stdout, want)
			}
			got := strings.Fields(waitForFile(t, file))
			began := unixNano(t, got[0])
			if began.Sub(released) > 2*time.Second {
				t.Errorf("the waiter began %v after the release: not at once", began.Sub(released))
			}
			token, err := strconv.ParseInt(got[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			for _, old := range tokens {
				if token <= old {
					t.Errorf("the waiter's token %d is not greater than an old holder's, %d", token, old)
				}
			}
			for _, h := range holders {
				if code := h.wait(t, 15*time.Second); code != exitLost {
					t.Errorf("a holder's run: status %d, want %d: %s", code, exitLost, h.stderr.String())
				}
			}
			t.Logf("%s", r.stdout)
		})
	}
}

// release --force --holder ends one holder of a semaphore, named by its ID
// as inspect shows it: a waiting run gets its slot, with a greater token,
// and the other holder keeps its own. An ID that holds nothing is refused.
func TestForceReleaseOfOneHolder(t *testing.T) {
	t.Parallel()
	conn := server(t)
	holders, file, tokens := holdAndWait(t, conn, "exports", [][]string{{"--semaphore", "2"}, {"--semaphore", "2"}}, []string{"--semaphore", "2"})
	objs := jsonLines[infoJSON](t, invoke(t, "", append(slices.Clone(conn), "inspect", "--json", "exports")...).stdout)
	if len(objs) != 1 || len(objs[0].Holders) != 2 {
		t.Fatalf("inspect exports: %+v", objs)
	}
	id := objs[0].Holders[0].ID
	release := append(slices.Clone(conn), "release", "--force", "--holder", id, "exports")
	r := invoke(t, "n\n", release...)
	requireCode(t, r, exitFailed, "release --force --holder answered n")
	if want := fmt.Sprintf(`Release holder %s of "exports", a semaphore of 2 slots held by stuck-1 since `, id); !strings.HasPrefix(r.stderr, want) {
		t.Errorf("release --force --holder asked %q; want %q...", r.stderr, want)
	}
	r = invoke(t, "y\n", release...)
	requireCode(t, r, 0, "release --force --holder answered y")
	if code := holders[0].wait(t, 15*time.Second); code != exitLost {
		t.Errorf("the released holder's run: status %d, want %d", code, exitLost)
	}
	if token, err := strconv.ParseInt(strings.Fields(waitForFile(t, file))[1], 10, 64); err != nil || token <= tokens[1] {
		t.Errorf("the waiter's token: %d, %v; want one greater than the holders' %d", token, err, tokens)
	}
	objs = jsonLines[infoJSON](t, invoke(t, "", append(slices.Clone(conn), "inspect", "--json", "exports")...).stdout)
	if len(objs) != 1 || len(objs[0].Holders) != 1 || objs[0].Holders[0].Owner != "stuck-2" || objs[0].Holders[0].FencingToken != tokens[1] {
		t.Errorf("after the release of one holder, and the waiter's run: %+v; want stuck-2 alone", objs)
	}
	select {
	case <-holders[1].done:
		t.Errorf("the other holder's run ended: status %d", holders[1].code)
	default:
	}
	r = invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", "--holder", id, "exports")...)
	requireCode(t, r, exitFailed, "release --force --holder of a holder gone")
	if !strings.Contains(r.stderr, fmt.Sprintf(`"exports" has no holder %s`, id)) {
		t.Errorf("release of a holder gone said %q", r.stderr)
	}
}
