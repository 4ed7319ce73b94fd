package mongolock

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// The differential test of internal/memdb: every statement the library
// sends (each golden file of testdata/protocol, its parameters varied) is
// run over many document states on the test server and on the model, and
// the documents and replies must be the same, byte for byte (field order
// and number types included).
//
// "The same $$NOW": the server's $$NOW cannot be set, so every "$$NOW" of
// a statement is replaced with {$literal: <date>}, the same date (to the
// millisecond) for both sides; the model gets that date as its clock too.
// An update document's $currentDate writes the server's own clock: the
// model is given, as its clock, the date the server wrote.

var memdbSeed = flag.Uint64("memdb.seed", 0, "seed of TestMemdbMatchesServer's random states (0: a fresh one)")

// The golden files' parameters, replaced in each case with ones drawn from
// small pools, so that states and statements meet.
const (
	goldenProc    = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	goldenLockID  = "0123456789abcdef0123456789abcdef"
	goldenHolding = "fedcba9876543210fedcba9876543210"
	goldenToken   = int64(1795000000000000000)
)

// noData are the golden statements that touch no document: indexes and
// change streams (which the test server lacks), not modelled.
var noData = []string{"createIndex", "listIndexes", "collMod", "watch"}

type goldenStatement struct {
	file string
	cmd  bson.D
}

func goldenStatements(t testing.TB) []goldenStatement {
	return statementsIn(t, filepath.Join("testdata", "protocol"))
}

// statementsIn are the statements of dir's golden files.
func statementsIn(t testing.TB, dir string) []goldenStatement {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []goldenStatement
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var cmd bson.D
		require.NoError(t, bson.UnmarshalExtJSON(data, true, &cmd))
		if !slices.Contains(noData, cmd[0].Key) {
			out = append(out, goldenStatement{strings.TrimSuffix(filepath.Base(f), ".json"), cmd})
		}
	}
	return out
}

// chooser is where the random states and parameters come from: a seeded
// generator, or a fuzzer's bytes.
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

type byteChooser struct{ b []byte }

func (c *byteChooser) intn(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	return v % n
}

func pick[T any](c chooser, xs ...T) T { return xs[c.intn(len(xs))] }

// diffCase is one statement and the documents it meets, named apart from
// every other case's by prefix.
type diffCase struct {
	file   string
	prefix string
	now    bson.DateTime
	params caseParams
	cmd    bson.D
	docs   []bson.D
}

// caseParams are a case's values in place of the golden statement's.
type caseParams struct {
	proc, lockID, holding string
	token                 int64
}

// goldenParams are the golden statements' own values.
var goldenParams = caseParams{goldenProc, goldenLockID, goldenHolding, goldenToken}

var (
	procPool = []string{goldenProc, "p-other", "p-third"}
	idPool   = []string{goldenLockID, goldenHolding, "id-x", goldenHolding + heldSuffix}
	offsets  = []int64{-3_600_000, -30_000, -783, -391, -1, 0, 1, 390, 391, 783, 30_000, 600_000}
)

func newCase(c chooser, i int, g goldenStatement, now bson.DateTime) diffCase {
	dc := diffCase{file: g.file, prefix: fmt.Sprintf("c%05d-", i), now: now}
	proc, lockID, holding := pick(c, procPool...), pick(c, idPool...), pick(c, idPool...)
	token := pick(c, goldenToken, 1, int64(now)*tokenFloorScale-5, int64(now)*tokenFloorScale+5)
	dc.params = caseParams{proc, lockID, holding, token}
	dc.cmd = dc.statement(g.cmd)
	slots := strings.Contains(g.file, "semaphore") || strings.Contains(g.file, "rwlock")
	names := []string{"reports", "invoices", "reports/a", "reports/b", "reports0", "reports."}
	for k, name := range names {
		if k > 0 && c.intn(3) == 0 || c.intn(10) == 0 { // sometimes missing
			continue
		}
		doc := lockDoc(c, now)
		if slots != (c.intn(8) == 0) {
			doc = slotDoc(c, now)
		}
		dc.docs = append(dc.docs, append(bson.D{{Key: "_id", Value: dc.prefix + name}}, doc...))
	}
	return dc
}

// statement is cmd, a golden statement, with dc's parameters, names and
// $$NOW in place of the golden's.
func (dc diffCase) statement(cmd bson.D) bson.D {
	return substitute(cmd, func(v any) any {
		switch x := v.(type) {
		case string:
			switch {
			case x == "$$NOW":
				return bson.D{{Key: "$literal", Value: dc.now}}
			case x == goldenProc:
				return dc.params.proc
			case x == goldenLockID:
				return dc.params.lockID
			case x == goldenHolding:
				return dc.params.holding
			case strings.HasPrefix(x, "reports"), strings.HasPrefix(x, "invoices"):
				return dc.prefix + x
			}
		case int64:
			if x == goldenToken {
				return dc.params.token
			}
		}
		return v
	}).(bson.D)
}

func substitute(v any, f func(any) any) any {
	switch x := v.(type) {
	case bson.D:
		out := make(bson.D, len(x))
		for i, e := range x {
			out[i] = bson.E{Key: e.Key, Value: substitute(e.Value, f)}
		}
		return out
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = substitute(e, f)
		}
		return out
	}
	return f(v)
}

func date(c chooser, now bson.DateTime) bson.DateTime {
	return now + bson.DateTime(pick(c, offsets...))
}

// maybe appends field k with value v(), or leaves it out, or (rarely)
// writes null.
func maybe(c chooser, d bson.D, k string, v func() any) bson.D {
	switch c.intn(8) {
	case 0, 1:
		return d
	case 2:
		if c.intn(3) == 0 {
			return append(d, bson.E{Key: k, Value: nil})
		}
	}
	return append(d, bson.E{Key: k, Value: v()})
}

func tokenOf(c chooser, now bson.DateTime) any {
	return pick[any](c, int64(7), int64(now)*tokenFloorScale+int64(c.intn(3)), int64(now-1)*tokenFloorScale, int32(3), int64(math.MaxInt64))
}

// lockDoc is a lock's document, without _id: free, held, expired, held
// with :held, claimed or with a next, in any combination.
func lockDoc(c chooser, now bson.DateTime) bson.D {
	var d bson.D
	lockID := pick(c, idPool...)
	d = maybe(c, d, "lockId", func() any { return lockID })
	d = maybe(c, d, "acquiredAt", func() any { return date(c, now) })
	d = maybe(c, d, "expiresAt", func() any { return date(c, now) })
	d = maybe(c, d, "fencingToken", func() any { return tokenOf(c, now) })
	d = maybe(c, d, "owner", func() any { return pick(c, "host/1", "$weird") })
	if c.intn(3) == 0 {
		d = append(d, bson.E{Key: "value", Value: pick(c, "v", "$$ROOT", "")})
	}
	d = maybe(c, d, "lastProcess", func() any { return pick(c, procPool...) })
	d = maybe(c, d, "lastLockId", func() any { return pick(c, lockID, lockID, pick(c, idPool...)) })
	d = maybe(c, d, "processStreak", func() any { return pick[any](c, int32(c.intn(10)), int64(8), int32(math.MaxInt32)) })
	for _, place := range []string{"waiting", "next"} {
		if c.intn(2) == 0 {
			continue
		}
		d = maybe(c, d, place+"Process", func() any { return pick(c, procPool...) })
		d = maybe(c, d, place+"Since", func() any { return tokenOf(c, now) })
		d = maybe(c, d, place+"Until", func() any { return date(c, now) })
	}
	return d
}

// slotDoc is a semaphore's or an RWLock's document, without _id, with
// live and expired holders of every mode, claims and upgrades.
func slotDoc(c chooser, now bson.DateTime) bson.D {
	kind := pick(c, "semaphore", "rwlock")
	d := bson.D{{Key: "kind", Value: kind}}
	if kind == "semaphore" || c.intn(4) == 0 {
		d = append(d, bson.E{Key: "n", Value: pick[any](c, int32(1), int32(2), int32(3), int64(3))})
	}
	holders := bson.A{}
	for range c.intn(4) {
		h := bson.D{{Key: "id", Value: pick(c, idPool...)}, {Key: "owner", Value: "host/2"}}
		if kind == "rwlock" && c.intn(5) > 0 {
			h = append(h, bson.E{Key: "mode", Value: pick(c, "r", "u", "w")})
		}
		h = append(h, bson.E{Key: "acquiredAt", Value: date(c, now)}, bson.E{Key: "expiresAt", Value: date(c, now)},
			bson.E{Key: "token", Value: tokenOf(c, now)})
		if c.intn(3) == 0 {
			h = append(h, bson.E{Key: "upgrade", Value: pick(c, idPool...)}, bson.E{Key: "upgradingUntil", Value: date(c, now)})
		}
		holders = append(holders, h)
	}
	if c.intn(10) > 0 {
		d = append(d, bson.E{Key: "holders", Value: holders})
	}
	d = maybe(c, d, "fencingToken", func() any { return tokenOf(c, now) })
	d = maybe(c, d, "expiresAt", func() any { return date(c, now) })
	if c.intn(2) == 0 {
		d = maybe(c, d, "waitingProcess", func() any { return pick(c, procPool...) })
		d = maybe(c, d, "waitingSince", func() any { return tokenOf(c, now) })
		d = maybe(c, d, "waitingUntil", func() any { return date(c, now) })
		if kind == "rwlock" {
			d = maybe(c, d, "waitingMode", func() any { return pick(c, "r", "u", "w") })
		} else {
			d = maybe(c, d, "waitingUnits", func() any { return pick[any](c, int32(1), int32(2), int64(3)) })
		}
	}
	d = maybe(c, d, "releasedAt", func() any { return date(c, now) })
	return d
}

// outcome is a statement's reply, as comparable text.
type outcome struct {
	docs              []bson.Raw
	matched, modified int
	err               string // "", "duplicate key" or "error: …"
}

func (o outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "matched %d, modified %d, err %q", o.matched, o.modified, o.err)
	for _, d := range o.docs {
		b.WriteString("\n\t" + d.String())
	}
	return b.String()
}

func errClass(err error) string {
	switch {
	case err == nil || errors.Is(err, mongo.ErrNoDocuments):
		return ""
	case mongo.IsDuplicateKeyError(err):
		return "duplicate key"
	}
	return "error"
}

// byID sorts documents by _id: a find without a sort returns them in an
// order no server promises.
func byID(docs []bson.Raw) []bson.Raw {
	slices.SortFunc(docs, func(a, b bson.Raw) int {
		return cmp.Compare(a.Lookup("_id").StringValue(), b.Lookup("_id").StringValue())
	})
	return docs
}

// cmdField is the value of cmd's field k (a golden statement's
// "update", "fields", …), or nil.
func cmdField(cmd bson.D, k string) any {
	for _, e := range cmd {
		if e.Key == k {
			return e.Value
		}
	}
	return nil
}

func onServer(ctx context.Context, coll *mongo.Collection, cmd bson.D) outcome {
	arg := cmd[0].Value
	field := func(k string) any { return cmdField(cmd, k) }
	var o outcome
	var err error
	switch cmd[0].Key {
	case "insertOne":
		_, err = coll.InsertOne(ctx, arg)
	case "findOneAndUpdate":
		opts := options.FindOneAndUpdate().SetReturnDocument(options.Before)
		if field("returnDocument") == "after" {
			opts.SetReturnDocument(options.After)
		}
		if p := field("fields"); p != nil {
			opts.SetProjection(p)
		}
		var raw bson.Raw
		if raw, err = coll.FindOneAndUpdate(ctx, arg, field("update"), opts).Raw(); err == nil {
			o.docs = []bson.Raw{raw}
		}
	case "updateOne", "updateMany":
		var res *mongo.UpdateResult
		if cmd[0].Key == "updateOne" {
			res, err = coll.UpdateOne(ctx, arg, field("update"))
		} else {
			res, err = coll.UpdateMany(ctx, arg, field("update"))
		}
		if err == nil {
			o.matched, o.modified = int(res.MatchedCount), int(res.ModifiedCount)
		}
	case "find", "aggregate":
		var cur *mongo.Cursor
		if cmd[0].Key == "find" {
			cur, err = coll.Find(ctx, arg, options.Find().SetProjection(field("projection")))
		} else {
			cur, err = coll.Aggregate(ctx, arg)
		}
		if err == nil {
			var docs []bson.Raw
			err = cur.All(ctx, &docs)
			o.docs = docs
		}
		if cmd[0].Key == "find" {
			o.docs = byID(o.docs)
		}
	default:
		o.err = "statement not run: " + cmd[0].Key
		return o
	}
	o.err = errClass(err)
	if o.err == "error" {
		o.err += ": " + err.Error()
	}
	return o
}

func onModel(c *memdb.Table, now bson.DateTime, cmd bson.D) (outcome, error) {
	at := now.Time()
	arg := cmd[0].Value
	field := func(k string) any { return cmdField(cmd, k) }
	var o outcome
	var err error
	switch cmd[0].Key {
	case "insertOne":
		err = c.InsertOne(at, arg)
	case "findOneAndUpdate":
		var raw bson.Raw
		raw, err = c.FindOneAndUpdate(at, arg, field("update"), memdb.FindOneAndUpdateOptions{After: field("returnDocument") == "after", Projection: field("fields")})
		if err == nil {
			o.docs = []bson.Raw{raw}
		}
	case "updateOne":
		o.matched, o.modified, err = c.UpdateOne(at, arg, field("update"))
	case "updateMany":
		o.matched, o.modified, err = c.UpdateMany(at, arg, field("update"))
	case "find":
		o.docs, err = c.Find(at, arg, field("projection"))
		o.docs = byID(o.docs)
	case "aggregate":
		o.docs, err = c.Aggregate(at, arg)
	}
	if errors.Is(err, memdb.ErrNotModelled) {
		return o, err
	}
	o.err = errClass(err)
	if o.err == "error" {
		o.err += ": " + err.Error()
	}
	return o, nil
}

// oneID removes a repeated _id of the same value from each document: the
// test server (FerretDB 2) stores and returns the document of a
// $replaceWith update with its _id twice, where MongoDB has it once; a
// later update of the document has it once again. Nothing else differs.
func oneID(docs []bson.Raw) []bson.Raw {
	out := make([]bson.Raw, len(docs))
	for i, raw := range docs {
		out[i] = raw
		elems, err := raw.Elements()
		if err != nil || len(elems) < 2 || elems[0].Key() != "_id" || elems[1].Key() != "_id" || !elems[0].Value().Equal(elems[1].Value()) {
			continue
		}
		b := bson.Raw(slices.Concat(raw[:4], raw[4+len(elems[0]):]))
		binaryPutLen(b)
		out[i] = b
	}
	return out
}

func binaryPutLen(b []byte) {
	n := uint32(len(b))
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
}

// fieldsSorted is o with each reply document's top-level fields sorted by
// name.
func fieldsSorted(o outcome) outcome {
	docs := make([]bson.Raw, len(o.docs))
	for i, raw := range o.docs {
		var d bson.D
		if err := bson.Unmarshal(raw, &d); err != nil {
			panic(err)
		}
		slices.SortFunc(d, func(a, b bson.E) int { return strings.Compare(a.Key, b.Key) })
		docs[i], _ = bson.Marshal(d)
	}
	o.docs = docs
	return o
}

// currentDateFields are the fields an update document stamps with the
// server's clock.
func currentDateFields(cmd bson.D) []string {
	var out []string
	for _, e := range cmd {
		if u, ok := e.Value.(bson.D); ok && e.Key == "update" {
			for _, op := range u {
				if fields, ok := op.Value.(bson.D); ok && op.Key == "$currentDate" {
					for _, f := range fields {
						out = append(out, f.Key)
					}
				}
			}
		}
	}
	return out
}

// runOnServer empties coll, inserts the cases' documents and runs their
// statements on it, four at a time (a case's statements name only its
// documents): it returns their replies and the documents they leave, each
// with one _id.
func runOnServer(t testing.TB, ctx context.Context, coll *mongo.Collection, cases []diffCase) ([]outcome, []bson.Raw) {
	require.NoError(t, coll.Drop(ctx))
	var all []any
	for _, dc := range cases {
		for _, d := range dc.docs {
			all = append(all, d)
		}
	}
	if len(all) > 0 {
		_, err := coll.InsertMany(ctx, all)
		require.NoError(t, err)
	}
	server := make([]outcome, len(cases))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				server[i] = onServer(ctx, coll, cases[i].cmd)
				server[i].docs = oneID(server[i].docs)
			}
		})
	}
	for i := range cases {
		next <- i
	}
	close(next)
	wg.Wait()
	cur, err := coll.Find(ctx, bson.D{})
	require.NoError(t, err)
	var final []bson.Raw
	require.NoError(t, cur.All(ctx, &final))
	return server, byID(oneID(final))
}

// runOnModel runs dc's statement on a table of its own, holding dc's
// documents, at now: it returns the reply and the documents left.
func runOnModel(t testing.TB, dc diffCase, now bson.DateTime) (outcome, []bson.Raw, error) {
	table := &memdb.Table{}
	for _, d := range dc.docs {
		require.NoError(t, table.InsertOne(dc.now.Time(), d))
	}
	o, err := onModel(table, now, dc.cmd)
	return o, table.Docs(), err
}

// compareCases runs the cases on the server (in coll, which it empties
// first) and on the model, and reports each difference.
func compareCases(t testing.TB, ctx context.Context, coll *mongo.Collection, cases []diffCase) {
	server, final := runOnServer(t, ctx, coll, cases)
	finalByID := map[string]bson.Raw{}
	for _, d := range final {
		finalByID[d.Lookup("_id").StringValue()] = d
	}
	var mine []bson.Raw
	for i, dc := range cases {
		now := dc.now
		if fields := currentDateFields(dc.cmd); len(fields) > 0 {
			if id, ok := dc.cmd[0].Value.(bson.D)[0].Value.(string); ok {
				if v, ok := finalByID[id].Lookup(fields[0]).DateTimeOK(); ok {
					now = bson.DateTime(v)
				}
			}
		}
		// Each case has a table of its own on the model: a statement
		// scans every document of its table.
		got, docs, err := runOnModel(t, dc, now)
		mine = append(mine, docs...)
		if err != nil {
			t.Errorf("%s (case %s): %v", dc.file, dc.prefix, err)
			continue
		}
		if dc.cmd[0].Key == "aggregate" {
			// FerretDB places a computed field of $project that has the
			// name of a field of the document at that field's place;
			// MongoDB (and the model) append it after the included
			// fields. The library reads these replies by field name.
			got, server[i] = fieldsSorted(got), fieldsSorted(server[i])
		}
		if got.String() != server[i].String() {
			t.Errorf("%s (case %s): the reply differs\nstatement: %v\nstate: %v\nserver: %v\nmodel:  %v", dc.file, dc.prefix, dc.cmd, dc.docs, server[i], got)
		}
	}
	mine = byID(mine)
	for i := range max(len(final), len(mine)) {
		if i >= len(final) || i >= len(mine) || !bytes.Equal(final[i], mine[i]) {
			var s, m bson.Raw
			if i < len(final) {
				s = final[i]
			}
			if i < len(mine) {
				m = mine[i]
			}
			t.Errorf("document %d differs after the statements\nserver: %v\nmodel:  %v", i, s, m)
			return
		}
	}
}

// TestMemdbMatchesServer: every statement of the protocol, over random
// states, leaves the same documents and gives the same reply on the test
// server and on internal/memdb. -memdb.seed replays a run.
func TestMemdbMatchesServer(t *testing.T) {
	seed := *memdbSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with: go test -run TestMemdbMatchesServer -memdb.seed=%d .", seed)
		}
	})
	ctx := context.Background()
	coll := testdb.Database(t).Collection("memdb")
	c := randChooser{rand.New(rand.NewPCG(seed, seed))}
	now := bson.DateTime(1_790_000_000_000 + c.intn(1_000_000_000))
	var cases []diffCase
	for _, g := range goldenStatements(t) {
		for range 24 {
			cases = append(cases, newCase(c, len(cases), g, now))
		}
	}
	compareCases(t, ctx, coll, cases)
}

// FuzzStatementsMatchServer: the fuzzer's bytes choose the statements,
// their parameters and the documents they meet; the server and the model
// must agree as in TestMemdbMatchesServer. Its seed corpus runs with every
// go test; to fuzz against the test server:
//
//	go test -run '^$' -fuzz FuzzStatementsMatchServer -fuzztime 2m .
func FuzzStatementsMatchServer(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte("\x07semaphore and rwlock states, claims, holders, upgrades"))
	f.Add([]byte("\xff\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xb0\xc0\xd0\xe0\xf0"))
	golden := goldenStatements(f)
	coll := testdb.Database(f).Collection("memdb")
	now := bson.DateTime(1_790_000_000_000)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &byteChooser{data}
		var cases []diffCase
		for range 1 + c.intn(8) {
			cases = append(cases, newCase(c, len(cases), golden[c.intn(len(golden))], now))
		}
		compareCases(t, context.Background(), coll, cases)
	})
}
