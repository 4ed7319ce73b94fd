package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Every name prints in a form that reads back as the name, and a name
// that could be misread prints quoted.
func TestNamesPrintAsTheyReadBack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, printed string }{
		{"nightly", "nightly"},
		{"billing/invoices", "billing/invoices"},
		{`back\slash`, `back\slash`},
		{"ключ🔒", "ключ🔒"},
		{"", `""`},
		{" ", `" "`},
		{"\x00", `"\x00"`},
		{"a\nb", `"a\nb"`},
		{"two words", `"two words"`},
		{" lead", `" lead"`},
		{"trail ", `"trail "`},
		{"\u00a0nbsp", `"\u00a0nbsp"`},
		{`"quoted"`, `"\"quoted\""`},
		{`"`, `"\""`},
		{"-", `"-"`},
		{"--force", `"--force"`},
		{"a\xffb", `"a\xffb"`},
		{"in\"side", "in\"side"},
		{strings.Repeat("n", 1200), strings.Repeat("n", 1200)},
	} {
		if got := printName(c.name); got != c.printed {
			t.Errorf("printName(%q) = %s, want %s", c.name, got, c.printed)
		}
		if back, err := readName("inspect", c.printed); err != nil || back != c.name {
			t.Errorf("readName(%s) = %q, %v; want %q", c.printed, back, err, c.name)
		}
	}
	if _, err := readName("inspect", `"unclosed`); err == nil || !strings.Contains(err.Error(), `given quoted: "\"unclosed"`) {
		t.Errorf(`readName("unclosed): %v; want a usage error that shows the quoted form`, err)
	}
}

// hostileNames are names that a table or a shell could misread.
var hostileNames = []string{"", " ", "\x00", "a\nb", "tab\there", " lead", "trail ", `"quoted"`, "-", "--force", `back\slash`, "ключ 🔒", strings.Repeat("long", 300)}

// Every name that list prints, inspect and release take back: for names
// a table or a shell could misread, held by Go programs, list shows each
// once, inspect given the name as printed shows that lock, with its exact
// name in JSON, and release --force given it frees that lock alone.
func TestEveryNameListPrintsIsTakenBack(t *testing.T) {
	t.Parallel()
	conn := server(t)
	ctx := boundedCtx(t, time.Minute)
	p, err := mongolock.NewProvider(testdb.Client(t).Database(conn[3]), mongolock.WithOwner("hostile"))
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, name := range hostileNames {
		h, err := p.Lock(name).TryAcquire(ctx)
		if err != nil {
			t.Logf("%q: not acquired, left out: %v", name, err) // a name the server cannot store
			continue
		}
		held[name] = true
		t.Cleanup(func() { _ = h.Release(context.Background()) })
	}
	if len(held) < len(hostileNames)-1 {
		t.Fatalf("only %d of %d names acquired", len(held), len(hostileNames))
	}

	r := invoke(t, "", append(slices.Clone(conn), "list", "--json")...)
	requireCode(t, r, 0, "list --json")
	listed := map[string]bool{}
	for _, o := range jsonLines[infoJSON](t, r.stdout) {
		listed[o.Name] = true
	}
	for name := range held {
		if !listed[name] {
			t.Errorf("list --json: no exact %q in\n%s", name, r.stdout)
		}
	}

	r = invoke(t, "", append(slices.Clone(conn), "list")...)
	requireCode(t, r, 0, "list")
	names := nameColumn(t, r.stdout)
	if len(names) != len(held) {
		t.Fatalf("list: %d rows for %d locks:\n%s", len(names), len(held), r.stdout)
	}
	for _, printed := range names {
		what := "inspect " + printed
		r := invoke(t, "", append(slices.Clone(conn), "inspect", "--json", printed)...)
		requireCode(t, r, 0, what)
		objs := jsonLines[infoJSON](t, r.stdout)
		if len(objs) != 1 || !held[objs[0].Name] || printName(objs[0].Name) != printed || !objs[0].Held {
			t.Errorf("%s: %s", what, r.stdout)
			continue
		}
		name := objs[0].Name
		r = invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", printed)...)
		requireCode(t, r, 0, "release --force --yes "+printed)
		if info, err := p.Inspect(ctx, name); err != nil || info.Held {
			t.Errorf("after release --force %s: %+v, %v; want %q free", printed, info, err, name)
		}
		delete(held, name)
		for other := range held {
			if info, err := p.Inspect(ctx, other); err != nil || !info.Held {
				t.Fatalf("after release --force %s: %q is free too (%v)", printed, other, err)
			}
		}
	}
}

// nameColumn returns the NAME cells of a table, cut at the column of KIND,
// counted in runes as the table aligns them.
func nameColumn(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	kind := strings.Index(lines[0], "KIND")
	if !strings.HasPrefix(lines[0], "NAME ") || kind < 0 {
		t.Fatalf("not a table of names:\n%s", out)
	}
	var names []string
	for _, line := range lines[1:] {
		runes := []rune(line)
		if len(runes) <= kind || runes[kind-1] != ' ' || runes[kind] == ' ' {
			t.Fatalf("column KIND not aligned in\n%s", out)
		}
		names = append(names, strings.TrimRight(string(runes[:kind]), " "))
	}
	return names
}

// A name that is not UTF-8, which another tool may have written, is exact
// in list --json: quoted, as the table prints it, with nameQuoted.
func TestListJSONKeepsANameThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	conn := server(t)
	ctx := boundedCtx(t, time.Minute)
	coll := testdb.Client(t).Database(conn[3]).Collection(mongolock.DefaultCollection)
	const name = "a\xffb"
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: name}, {Key: "lockId", Value: "0123456789abcdef0123456789abcdef"},
		{Key: "acquiredAt", Value: time.Now()}, {Key: "expiresAt", Value: time.Now().Add(time.Minute)}, {Key: "fencingToken", Value: int64(1)}}); err != nil {
		t.Skipf("the server does not store a name that is not UTF-8: %v", err)
	}
	r := invoke(t, "", append(slices.Clone(conn), "list", "--json")...)
	requireCode(t, r, 0, "list --json")
	type quoted struct {
		Name       string `json:"name"`
		NameQuoted bool   `json:"nameQuoted"`
	}
	objs := jsonLines[quoted](t, r.stdout)
	if len(objs) != 1 || !objs[0].NameQuoted || objs[0].Name != `"a\xffb"` {
		t.Fatalf("list --json: %s; want the name quoted, with nameQuoted", r.stdout)
	}
	if back, err := readName("inspect", objs[0].Name); err != nil || back != name {
		t.Errorf("the quoted name reads back as %q, %v", back, err)
	}
	r = invoke(t, "", append(slices.Clone(conn), "list")...)
	requireCode(t, r, 0, "list")
	if names := nameColumn(t, r.stdout); len(names) != 1 || names[0] != objs[0].Name {
		t.Errorf("list: names %q, want %s as list --json has it", names, objs[0].Name)
	}
}
