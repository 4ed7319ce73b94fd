package mongolock_test

// The fixtures of the root package's tests, each written once: contexts,
// providers and their clients, a command counter, waiting (one polling
// idiom, pollUntil, beside waits on channels), handles, and names that are
// easy to get wrong.

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// boundedCtx returns a context that ends after d or with the test.
func boundedCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Providers and clients.

// newProvider returns a provider with opts for db, on db's client. Before
// the test disconnects its clients and drops its database, it waits for
// the provider's background work (TTL index creation, cleanup of orphaned
// acquisitions) to end. For a provider of another process, pass
// ownClient's database.
func newProvider(t testing.TB, db *mongo.Database, opts ...mongolock.Option) *mongolock.Provider {
	t.Helper()
	p, err := mongolock.NewProvider(db, opts...)
	require.NoError(t, err)
	// Cleanups run last in, first out: this one runs before the client is
	// disconnected and the database dropped.
	t.Cleanup(func() { mongolock.WaitBackground(p) })
	return p
}

// ownClient returns db on a client of its own, disconnected when the test
// ends: another process, as far as the server can tell. count, if not nil,
// counts the client's commands.
func ownClient(t testing.TB, db *mongo.Database, count *commandCounter) *mongo.Database {
	t.Helper()
	var opts []*options.ClientOptions
	if count != nil {
		opts = append(opts, options.Client().SetMonitor(count.monitor()))
	}
	return testdb.NewClient(t, opts...).Database(db.Name())
}

// lockEnv is one test's lock setup over the server, on
// conformance.OverServer: its database, the raw lock collection (to play
// someone who edits the documents), and two providers with the same
// options on clients of their own, as two processes would have: p, whose
// commands count counts, and other.
type lockEnv struct {
	*conformance.Env
	db       *mongo.Database
	coll     *mongo.Collection
	p, other *mongolock.Provider
	count    *commandCounter
}

func newLockEnv(t *testing.T, opts ...mongolock.Option) *lockEnv {
	t.Helper()
	e := conformance.OverServer(t, testdb.Database(t))
	count := &commandCounter{}
	other, _ := e.Process(opts...)
	return &lockEnv{
		Env:   e,
		db:    e.DB,
		coll:  e.DB.Collection(mongolock.DefaultCollection),
		p:     newProvider(t, ownClient(t, e.DB, count), opts...),
		other: other,
		count: count,
	}
}

// offlineDatabase is a database of a client that never reaches a server:
// anything that needs I/O fails.
func offlineDatabase(t *testing.T, opts ...*options.ClientOptions) *mongo.Database {
	t.Helper()
	all := append([]*options.ClientOptions{options.Client().ApplyURI("mongodb://127.0.0.1:1/?connect=direct")}, opts...)
	c, err := mongo.Connect(all...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database(testdb.Prefix + "offline")
}

// commandCounter counts the commands a client sends: all of them, each
// name's, and of findAndModify (acquisition attempts) those started, those
// in flight, the most in flight at once, and the successful replies (a
// waiter that got one and no lock is in its sleep).
type commandCounter struct {
	commands                       atomic.Int64
	started, inFlight, maxInFlight atomic.Int64 // findAndModify
	replies                        atomic.Int64 // findAndModify

	mu      sync.Mutex
	byNames map[string]int64
}

func (c *commandCounter) monitor() *event.CommandMonitor {
	done := func(name string) {
		if name == "findAndModify" {
			c.inFlight.Add(-1)
		}
	}
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			c.commands.Add(1)
			c.mu.Lock()
			if c.byNames == nil {
				c.byNames = map[string]int64{}
			}
			c.byNames[e.CommandName]++
			c.mu.Unlock()
			if e.CommandName == "findAndModify" {
				c.started.Add(1)
				n := c.inFlight.Add(1)
				for {
					m := c.maxInFlight.Load()
					if n <= m || c.maxInFlight.CompareAndSwap(m, n) {
						break
					}
				}
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			if e.CommandName == "findAndModify" {
				c.replies.Add(1)
			}
			done(e.CommandName)
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) { done(e.CommandName) },
	}
}

// idle reports whether the client has made an acquisition attempt and has
// none in flight: a waiter that was refused is in its sleep.
func (c *commandCounter) idle() bool { return c.started.Load() >= 1 && c.inFlight.Load() == 0 }

// named is how many commands called name the client has sent.
func (c *commandCounter) named(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byNames[name]
}

// commandLog keeps the commands a client sends to one collection.
type commandLog struct {
	coll string
	mu   sync.Mutex
	sent []bson.Raw
}

func (c *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll == c.coll {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.sent = append(c.sent, slices.Clone(e.Command))
		}
	}}
}

// commands returns the commands sent so far, by name.
func (c *commandLog) commands() map[string][]bson.Raw {
	c.mu.Lock()
	defer c.mu.Unlock()
	byName := map[string][]bson.Raw{}
	for _, cmd := range c.sent {
		name := cmd.Index(0).Key()
		byName[name] = append(byName[name], cmd)
	}
	return byName
}

// Waiting.

// pollUntil polls cond until it holds, and fails the test if it does not
// within the given time. It is the tests' one way to wait for a state that
// no channel announces.
func pollUntil(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitQueueLen waits until n Acquire calls of p's process wait in line for
// name.
func awaitQueueLen(t *testing.T, p *mongolock.Provider, name string, n int) {
	t.Helper()
	pollUntil(t, 10*time.Second, fmt.Sprintf("%d in line for %q", n, name),
		func() bool { return mongolock.QueueLen(p, name) == n })
}

// channelReleaseSource makes p's release events those sent on the
// returned channel, by name: an in-memory change stream.
func channelReleaseSource(p *mongolock.Provider) chan<- string {
	events := make(chan string)
	mongolock.SetReleaseSource(p, func(ctx context.Context, released func(string)) error {
		for {
			select {
			case name := <-events:
				released(name)
			case <-ctx.Done():
				return nil
			}
		}
	})
	return events
}

// awaitSlotQueueLen is awaitQueueLen for a Semaphore's or an RWLock's name.
func awaitSlotQueueLen(t *testing.T, p *mongolock.Provider, name string, n int) {
	t.Helper()
	pollUntil(t, 10*time.Second, fmt.Sprintf("%d in line for %q", n, name),
		func() bool { return mongolock.SlotQueueLen(p, name) == n })
}

// awaitClosed waits up to d for ch to be closed and returns when it was
// seen closed; it fails the test if ch stays open.
func awaitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) time.Time {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return time.Now()
	case <-timer.C:
		require.FailNowf(t, "not closed in time", "%s: still open after %v", what, d)
		return time.Time{}
	}
}

// closedNow reports whether ch is closed, without waiting.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// staysOpen asserts that ch is still open after d.
func staysOpen(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		require.FailNowf(t, "closed", "%s was closed", what)
	case <-timer.C:
	}
}

// assert reports a failure from a goroutine other than the test's (where
// require's FailNow must not be called) and returns ok.
func assert(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}

// Handles and documents.

// shortExpiry is the lease of the tests that wait for extensions or loss;
// the cadence is the default, a third of it.
const shortExpiry = 500 * time.Millisecond

// lossDetectionBound is how long a handle may take to notice that its
// document was deleted or taken over: the next extension is due within one
// cadence; the rest is slack for a round trip under -race on a busy machine.
const lossDetectionBound = shortExpiry/3 + 250*time.Millisecond

// stallProof is conformance.StallProof: a lease that a loaded machine's
// stall of a second or two does not lose, for a holder on the real clock
// that must keep its lock.
var stallProof = conformance.StallProof

// lossWatch returns two processes of e with opts, a holder whose loss the
// test awaits and a rival, and how long the loss may take to be seen. Over
// the model, in simulated time: a lease of shortExpiry, and
// lossDetectionBound, the promise. Over a server, on the real clock, where
// a loaded machine can stall the process past any bound: stallProof, and a
// bound that fails only a loss never seen.
func lossWatch(e *conformance.Env, opts ...mongolock.Option) (holder, rival *mongolock.Provider, within time.Duration) {
	e.T.Helper()
	lease, within := stallProof, 10*time.Second
	if e.Model != nil {
		lease, within = []mongolock.Option{mongolock.WithExpiry(shortExpiry)}, lossDetectionBound
	}
	opts = append(slices.Clip(lease), opts...)
	holder, _ = e.Process(opts...)
	rival, _ = e.Process(opts...)
	return holder, rival, within
}

func mustTryAcquire(t *testing.T, ctx context.Context, l *mongolock.Lock) *mongolock.Handle {
	t.Helper()
	h, err := l.TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire(%q)", l.Name())
	require.NotNil(t, h)
	return h
}

// mustTryUpgradeable takes u's upgradeable reader at once, or fails the
// test.
func mustTryUpgradeable(t *testing.T, ctx context.Context, u *mongolock.UpgradeableLock) *mongolock.UpgradeableHandle {
	t.Helper()
	h, err := u.TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire(%q)", u.Name())
	require.NotNil(t, h)
	return h
}

// handleOf is h's Handle, nil if h is: for helpers of every kind.
func handleOf(h *mongolock.UpgradeableHandle) *mongolock.Handle {
	if h == nil {
		return nil
	}
	return h.Handle
}

func mustAcquire(t *testing.T, ctx context.Context, l *mongolock.Lock) *mongolock.Handle {
	t.Helper()
	h, err := l.Acquire(ctx)
	require.NoError(t, err, "Acquire(%q)", l.Name())
	require.NotNil(t, h)
	return h
}

// releaseAtCleanup releases h when the test ends, also when it fails half
// way; Release is idempotent, so a handle the test released already is fine.
func releaseAtCleanup(t *testing.T, h *mongolock.Handle) *mongolock.Handle {
	t.Helper()
	if h != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = h.Release(ctx)
		})
	}
	return h
}

// acquireInBackground starts an Acquire of l and returns where its outcome
// (after releasing the handle) arrives.
func acquireInBackground(ctx context.Context, l *mongolock.Lock) <-chan error {
	got := make(chan error, 1)
	go func() {
		h, err := l.Acquire(ctx)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	return got
}

// acquireAllInBackground starts n goroutines that each acquire l and
// release it, and returns a function that waits for them all. A failed
// Acquire fails the test.
func acquireAllInBackground(t *testing.T, ctx context.Context, l *mongolock.Lock, n int) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if h, err := l.Acquire(ctx); assert(t, err == nil, "%v", err) {
				_ = h.Release(ctx)
			}
		})
	}
	return wg.Wait
}

// rawLockDoc reads a lock document with the raw driver.
func rawLockDoc(t *testing.T, coll *mongo.Collection, name string) bson.Raw {
	t.Helper()
	raw, err := coll.FindOne(boundedCtx(t, 5*time.Second), bson.D{{Key: "_id", Value: name}}).Raw()
	require.NoError(t, err, "reading the document of %q", name)
	return raw
}

// Names.

// unusualNames are names that are easy to get wrong: empty, blank, a NUL
// byte, long, escape characters, and multi-byte unicode.
var unusualNames = []struct{ label, name string }{
	{"empty", ""},
	{"collection", " "},
	{"NUL", "\x00"},
	{"1000 a", strings.Repeat("a", 1000)},
	{"1000 backslashes", strings.Repeat("\\", 1000)},
	{"unicode", "锁-🔒-ñ"},
}

// hostileNames look like query operators, field paths or JSON, are not
// UTF-8, hide a NUL, or are 100 KB long. Each must either be a lock of its
// own (matching no other lock: the name is only ever a value, never part
// of a query's structure) or fail with a clear error; it must never be
// taken for another lock.
//
// The pairs differ only where a careless store would lose the difference:
// after a NUL (C strings), in the last byte of 100 KB (a truncated index
// key), in invalid bytes (replaced by U+FFFD when "fixed" to UTF-8).
var hostileNames = []struct{ label, name string }{
	{"plain a", "a"}, // first: a name that matched everything would take it
	{"$", "$"},
	{"$gt", "$gt"},
	{"$$NOW", "$$NOW"},
	{"field path", "$lockId"},
	{"dot", "."},
	{"dotted", "a.b"},
	{`{"$gt": ""}`, `{"$gt": ""}`},
	{`{"$ne": null}`, `{"$ne": null}`},
	{`{"_id": {"$exists": true}}`, `{"_id": {"$exists": true}}`},
	{"regex-like", "/.*/"},
	{"NUL inside", "a\x00b"},
	{"NUL first", "\x00a"},
	{"invalid UTF-8", "\xff\xfe\xfd"},
	{"invalid UTF-8 reversed", "\xfd\xfe\xff"},
	{"truncated UTF-8", "\xc3"},
	{"U+FFFD", "\uFFFD"}, // what "\xc3" would become if replaced
	{"valid UTF-8 é", "\xc3\xa9"},
	{"100 KB", strings.Repeat("a", 100<<10)},
	{"100 KB, last byte differs", strings.Repeat("a", 100<<10-1) + "b"},
	{"100 KB of invalid UTF-8", strings.Repeat("\xff", 100<<10)},
}

// Processes over a database in process memory.

// memDB is the model (internal/memdb) as conformance.OverModel gives it,
// for a test that runs in a testing/synctest bubble: its $$NOW and every
// timer of the library read the bubble's clock, so leases run out in
// simulated time. Its providers reach it through clients of their own, as
// processes reach a server, each through a network whose faults the test
// sets.
type memDB struct {
	*conformance.Env
	t     *testing.T
	store *memdb.Store
}

// memDBName is the name of a memDB's database.
const memDBName = conformance.ModelDB

func newMemDB(t *testing.T) *memDB {
	e := conformance.OverModel(t)
	return &memDB{Env: e, t: t, store: e.Model}
}

// process returns a provider with opts over a client of its own to d, and
// that client's network, whose faults the test sets. The provider is closed
// when the test ends.
func (d *memDB) process(opts ...mongolock.Option) (*mongolock.Provider, *memdb.Faults) {
	d.t.Helper()
	return d.Process(opts...)
}

// holderAndRival returns two processes of d with opts: a holder, with the
// network whose faults the test sets, and a rival.
func (d *memDB) holderAndRival(opts ...mongolock.Option) (holder *mongolock.Provider, net *memdb.Faults, rival *mongolock.Provider) {
	d.t.Helper()
	holder, net = d.process(opts...)
	rival, _ = d.process(opts...)
	return holder, net, rival
}

// tryAcquireMany takes n locks named prefix-0 to prefix-(n-1) through p,
// each released when the test ends if it has not been.
func (d *memDB) tryAcquireMany(p *mongolock.Provider, prefix string, n int) []*mongolock.Handle {
	d.t.Helper()
	handles := make([]*mongolock.Handle, n)
	for i := range handles {
		handles[i] = releaseAtCleanup(d.t, mustTryAcquire(d.t, d.t.Context(), p.Lock(fmt.Sprintf("%s-%d", prefix, i))))
	}
	return handles
}

// doc returns the document of name in the collection coll as it is now,
// read past every client's faults; nil if there is none.
func (d *memDB) doc(coll, name string) bson.Raw {
	d.t.Helper()
	return d.Doc(coll, name)
}

// expiresAt returns the end of the lease of name's lock that the database
// holds: its document's expiresAt.
func (d *memDB) expiresAt(name string) time.Time {
	d.t.Helper()
	doc := d.doc(mongolock.DefaultCollection, name)
	require.NotNil(d.t, doc, "the document of %q", name)
	return doc.Lookup("expiresAt").Time()
}

// memSemColl is the collection of a memDB's semaphores and RW locks.
const memSemColl = mongolock.DefaultCollection + "_semaphores"

// editIn applies update to name's document in the collection coll, as
// someone editing it by hand would.
func (d *memDB) editIn(coll, name string, update bson.D) {
	d.t.Helper()
	d.Edit(coll, name, update)
}

// remove deletes name's document in the collection coll, as someone
// deleting it by hand would.
func (d *memDB) remove(coll, name string) {
	d.t.Helper()
	d.Remove(coll, name)
}

// slotHolder is a holder in a semaphore's or an RW lock's document.
type slotHolder struct {
	Mode      string    `bson:"mode"`
	ExpiresAt time.Time `bson:"expiresAt"`
}

// slotHolders returns the holders in the document of the semaphore or RW
// lock name, in its order, and those of them whose lease has not ended;
// none while it has no document.
func (d *memDB) slotHolders(name string) (all, live []slotHolder) {
	d.t.Helper()
	var doc struct {
		Holders []slotHolder `bson:"holders"`
	}
	raw := d.doc(memSemColl, name)
	if raw == nil {
		return nil, nil
	}
	require.NoError(d.t, bson.Unmarshal(raw, &doc))
	for _, h := range doc.Holders {
		if h.ExpiresAt.After(time.Now()) {
			live = append(live, h)
		}
	}
	return doc.Holders, live
}

// holders returns how many holders the semaphore or RW lock name has in
// its document, and how many of them hold a lease that has not ended.
func (d *memDB) holders(name string) (all, live int) {
	d.t.Helper()
	a, l := d.slotHolders(name)
	return len(a), len(l)
}

// liveModes returns the modes of the holders of the RW lock name whose
// lease has not ended, in the order of its document.
func (d *memDB) liveModes(name string) []string {
	d.t.Helper()
	_, live := d.slotHolders(name)
	var modes []string
	for _, h := range live {
		modes = append(modes, h.Mode)
	}
	return modes
}

// requireInvalid asserts that err is an *Error of op that a caller can tell
// from every other failure with ErrInvalidArgument.
func requireInvalid(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
	var me *mongolock.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, op, me.Op)
	for _, other := range []error{mongolock.ErrNotAcquired, mongolock.ErrLockLost, mongolock.ErrMismatch, mongolock.ErrClosed} {
		require.NotErrorIs(t, err, other)
	}
}

// indexInfo is one entry of listIndexes.
type indexInfo struct {
	Name               string        `bson:"name"`
	Key                bson.Raw      `bson:"key"`
	ExpireAfterSeconds bson.RawValue `bson:"expireAfterSeconds"`
}

func listIndexes(ctx context.Context, t *testing.T, coll *mongo.Collection) []indexInfo {
	t.Helper()
	cur, err := coll.Indexes().List(ctx)
	require.NoError(t, err)
	var all []indexInfo
	require.NoError(t, cur.All(ctx, &all))
	return all
}

// tokenLog records the tokens of successive acquisitions of one name and
// checks that each one outranks all before it.
type tokenLog struct {
	t      *testing.T
	tokens []int64
}

func (l *tokenLog) add(token int64, how string) {
	l.t.Helper()
	if n := len(l.tokens); n > 0 {
		require.Greater(l.t, token, l.tokens[n-1], "the token after %s does not outrank the one before (all so far: %v)", how, l.tokens)
	}
	l.tokens = append(l.tokens, token)
}

// The floor toLong($$NOW) * 1024 is what makes a re-created document outrank
// the deleted one. $$NOW has millisecond resolution, so the floor can only
// outrank acquisitions made in an earlier millisecond: a document deleted
// and re-created within the millisecond of its last acquisition can give
// the same token again (seen here: about 1 in 20 tight acquire, delete,
// acquire sequences without -race). Every deletion that happens outside a
// test is at least that late (the TTL monitor deletes only documents whose
// lease of at least 100ms has ended), so the tests below let a millisecond
// pass, on the client's clock, between an acquisition and the deletion of
// its document.
func afterTheMillisecondOf(acquired time.Time) {
	time.Sleep(time.Until(acquired.Add(2 * time.Millisecond)))
}

// defaultSlogTo makes slog.Default write to w until the test ends.
// slog.SetDefault also sends the standard log package's output to the new
// handler, and setting the old default back does not undo that: so the
// log's output and flags are put back too, or an example's log.Fatal
// would later write into this test's buffer and exit without a word.
func defaultSlogTo(t testing.TB, w io.Writer, opts *slog.HandlerOptions) {
	prev, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(w, opts)))
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
}
