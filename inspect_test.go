package mongolock_test

// Inspection and administration: Inspect, Locks and ForceRelease against
// the server, on documents of every kind the collection can hold.

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Inspect judges every kind of document by the server's clock, and names an
// owner only while a mongolock acquisition holds the lock: not for a lease
// that ran out unreleased (over the model, in
// TestInspectNamesNoOwnerOnceALeaseRanOutUnreleased), not for a
// DistributedLock.MongoDB holder (even where an earlier mongolock
// acquisition left its owner), not for a document that is not a lock at
// all.
func TestInspectJudgesEveryKindOfDocument(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	inspect := func(name string) mongolock.LockInfo {
		t.Helper()
		info, err := e.p.Inspect(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, name, info.Name)
		return info
	}

	// DistributedLock.MongoDB holders: one on a fresh name, one after a
	// mongolock acquisition that left its owner in the document.
	svc := newProvider(t, e.db, mongolock.WithOwner("billing-7f9c"))
	h := mustTryAcquire(t, ctx, svc.Lock("dotnet-after-go"))
	require.NoError(t, h.Release(ctx))
	for _, name := range []string{"dotnet", "dotnet-after-go"} {
		dh, err := newDotnetLock(e.db, name).tryAcquire(ctx)
		require.NoError(t, err)
		require.NotNil(t, dh, name)
		info := inspect(name)
		require.True(t, info.Held, name)
		require.Empty(t, info.Owner, "%s: the holder is not a mongolock acquisition", name)
		require.Equal(t, dh.token, info.FencingToken, name)
	}

	// A DistributedLock.MongoDB lease that ran out unreleased.
	dl := newDotnetLock(e.db, "dotnet-expired")
	dl.expiry = 100 * time.Millisecond
	dh, err := dl.tryAcquire(ctx)
	require.NoError(t, err)
	require.NotNil(t, dh)
	// A lease that only a stall could make run out sooner: the bound fails
	// only a lease that never ends.
	pollUntil(t, 15*time.Second, "the .NET lease ends on the server", func() bool { return !inspect("dotnet-expired").Held })

	// Documents that mongolock did not write: no fields of a lock, or a
	// lockId without an expiresAt.
	_, err = e.coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "stray"}, {Key: "note", Value: "not a lock"}},
		bson.D{{Key: "_id", Value: "no-expiry"}, {Key: "lockId", Value: "x"}, {Key: "lastLockId", Value: "x"}, {Key: "owner", Value: "o"}},
	})
	require.NoError(t, err)
	for _, name := range []string{"stray", "no-expiry"} {
		info := inspect(name)
		require.Equal(t, mongolock.LockInfo{Name: name, Kind: mongolock.KindLock, ServerTime: info.ServerTime}, info, "%s: free, nothing else known", name)
		require.False(t, info.ServerTime.IsZero())
	}
}

// A mongolock holder whose process went away (its client disconnected:
// nothing extends or releases the lock) is held, by its owner, until its
// lease runs out by the database's clock; then inspection names no owner,
// and the document keeps its lockId and token. Over the model, in
// simulated time: on a server, a lease short enough to wait for is one
// that a loaded machine's stall can end before the acquisition's reply.
func TestInspectNamesNoOwnerOnceALeaseRanOutUnreleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		ctx := d.Ctx
		inspector, _ := d.process()
		inspect := func() mongolock.LockInfo {
			t.Helper()
			info, err := inspector.Inspect(ctx, "expired")
			require.NoError(t, err)
			return info
		}
		gone, net := d.process(mongolock.WithExpiry(shortExpiry), mongolock.WithOwner("crashed-1"))
		h := mustTryAcquire(t, ctx, gone.Lock("expired"))
		net.Disconnect()
		info := inspect()
		require.True(t, info.Held)
		require.Equal(t, "crashed-1", info.Owner)
		d.await("the lease ends by the database's clock", func() bool { return !inspect().Held })
		info = inspect()
		require.Empty(t, info.Owner, "a lease that ran out has no holder")
		require.Equal(t, h.FencingToken(), info.FencingToken)
		require.False(t, info.ExpiresAt.After(info.ServerTime))
		_, hasLockID := d.doc(mongolock.DefaultCollection, "expired").Lookup("lockId").StringValueOK()
		require.True(t, hasLockID, "the lease ended without a release")
	})
}

// cursorLog records, from a client's events, the size of each batch of
// documents an aggregate or getMore reply carried from the locks'
// collection, the cursor each aggregate left open (of any collection), and
// the cursors its killCursors commands killed.
type cursorLog struct {
	mu      sync.Mutex
	batches []int
	opened  []int64
	killed  []int64
}

func (c *cursorLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch e.CommandName {
		case "aggregate", "getMore":
			cur := e.Reply.Lookup("cursor").Document()
			batch := cur.Lookup("firstBatch")
			if e.CommandName == "getMore" {
				batch = cur.Lookup("nextBatch")
			} else if id := cur.Lookup("id").Int64(); id != 0 {
				c.opened = append(c.opened, id)
			}
			if ns, _ := cur.Lookup("ns").StringValueOK(); !strings.HasSuffix(ns, "."+mongolock.DefaultCollection) {
				return
			}
			docs, _ := batch.Array().Values()
			c.batches = append(c.batches, len(docs))
		case "killCursors":
			ids, _ := e.Reply.Lookup("cursorsKilled").Array().Values()
			for _, id := range ids {
				c.killed = append(c.killed, id.Int64())
			}
		}
	}}
}

// expiredWithinGrace is a lease that ended a minute ago: not held, and
// inside the TTL index's grace, so that the server's TTL monitor does not
// delete the documents of a listing test while it reads them.
var expiredWithinGrace = time.Now().Add(-time.Minute)

// take returns what was recorded so far and forgets it.
func (c *cursorLog) take() (batches []int, opened, killed []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	batches, opened, killed = c.batches, c.opened, c.killed
	c.batches, c.opened, c.killed = nil, nil, nil
	return batches, opened, killed
}

// Locks streams 2,500 locks in name order, a batch of at most the batch
// size per round trip; a loop that breaks early reads no further batch and
// leaves no cursor open on the server; an error (ctx cancelled between
// batches) is yielded once and ends the loop, closing the cursor too.
func TestLocksStreamsEveryLockInNameOrderAndClosesItsCursor(t *testing.T) {
	const n, batch = 2500, 100
	ctx := boundedCtx(t, 60*time.Second)
	db := testdb.Database(t)
	var log cursorLog
	client := testdb.NewClient(t, options.Client().SetMonitor(log.monitor()))
	p := newProvider(t, client.Database(db.Name()), mongolock.WithOwner("svc-a"))
	mongolock.SetListBatchSize(p, batch)

	names := make([]string, n)
	docs := make([]any, n)
	for i, j := range rand.Perm(n) {
		names[j] = fmt.Sprintf("job-%04d", j)
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("job-%04d", j)}, {Key: "expiresAt", Value: expiredWithinGrace}}
	}
	coll := db.Collection(mongolock.DefaultCollection)
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	held := mustTryAcquire(t, ctx, p.Lock("job-1234"))
	releaseAtCleanup(t, held)
	_, _, _ = log.take()

	var got []string
	for info, err := range p.Locks(ctx, "") {
		require.NoError(t, err)
		got = append(got, info.Name)
		require.Equal(t, info.Name == "job-1234", info.Held, info.Name)
		if info.Held {
			require.Equal(t, "svc-a", info.Owner)
			require.Equal(t, held.FencingToken(), info.FencingToken)
		}
	}
	require.Equal(t, names, got, "every lock, in name order")
	batches, _, _ := log.take()
	require.GreaterOrEqual(t, len(batches), n/batch, "read in batches")
	require.LessOrEqual(t, slices.Max(batches), batch, "a batch larger than the batch size")

	// Break after a batch and a half.
	seen := 0
	for _, err := range p.Locks(ctx, "") {
		require.NoError(t, err)
		if seen++; seen == batch*3/2 {
			break
		}
	}
	batches, opened, killed := log.take()
	require.Equal(t, []int{batch, batch}, batches, "read past what the loop took")
	require.Len(t, opened, 1)
	require.Equal(t, opened, killed, "breaking out of the loop did not close the cursor")
	var res struct {
		NotFound []int64 `bson:"cursorsNotFound"`
	}
	require.NoError(t, client.Database(db.Name()).RunCommand(ctx, bson.D{
		{Key: "killCursors", Value: mongolock.DefaultCollection}, {Key: "cursors", Value: bson.A{opened[0]}},
	}).Decode(&res))
	require.Equal(t, opened, res.NotFound, "the server still has the cursor")

	// ctx ends between two batches.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errs []error
	seen = 0
	for _, err := range p.Locks(cctx, "job-") {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen++; seen == batch {
			cancel()
		}
	}
	require.Equal(t, batch, seen)
	require.Len(t, errs, 1, "one error, then the end")
	require.ErrorIs(t, errs[0], context.Canceled)
	var le *mongolock.Error
	require.ErrorAs(t, errs[0], &le)
	require.Equal(t, "list", le.Op)
	require.Equal(t, "job-", le.Name)
	_, opened, killed = log.take()
	require.Equal(t, opened, killed, "the cursor of a failed listing was left open")
}

// A prefix lists exactly the names that begin with it, in byte order: its
// characters are never a pattern (regular expression metacharacters, query
// operators), and names past it in byte order (invalid UTF-8, 0xff bytes,
// in documents written by others) are neither lost nor taken in. A prefix
// that is not valid UTF-8 is refused, unsent.
func TestLocksWithAPrefixListsExactlyTheNamesThatBeginWithIt(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	names := []string{
		"", "a", "b", "svc", "svc.a+(b)", "svc.a+(b)/1", "svc.a+(b)/2", "svc.a+(b", "svc.a+(c)/1",
		"svc.aa(b)/1", "svcXa+(b)/1", "svc.a+(b)\xff", "svc.a+(b)\xff\xff/1", "svc.a+(b*", "svc.a+(b0",
		"^[$.*", "^[$.*]", "$gt", "a\xff", "a\xff\xff", "b\x00", "\xff", "\xff\xff", "\xff\xff\x00", "\x00",
		"锁-🔒", "锁-🔓", "锁", "锂", "锂-🔒",
	}
	docs := make([]any, len(names))
	for i, name := range names {
		docs[i] = bson.D{{Key: "_id", Value: name}, {Key: "expiresAt", Value: expiredWithinGrace}}
	}
	_, err := e.coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	// Not locks: no string name.
	_, err = e.coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 7}}, bson.D{{Key: "_id", Value: bson.D{{Key: "a", Value: ""}}}}})
	require.NoError(t, err)

	for _, prefix := range []string{"", "svc.a+(b)", "svc.a+(b", "^[$.*", "$", "a", "a\xff", "\xff", "\xff\xff", "b", "锁-", "锁", "none"} {
		if !utf8.ValidString(prefix) {
			for _, err := range e.p.Locks(ctx, prefix) {
				require.ErrorIs(t, err, mongolock.ErrInvalidArgument, "prefix %q", prefix)
			}
			continue
		}
		var want []string
		for _, name := range names {
			if strings.HasPrefix(name, prefix) {
				want = append(want, name)
			}
		}
		slices.Sort(want)
		var got []string
		for info, err := range e.p.Locks(ctx, prefix) {
			require.NoError(t, err, "prefix %q", prefix)
			got = append(got, info.Name)
		}
		require.Equal(t, want, got, "prefix %q", prefix)
	}
}

// ForceRelease frees a lock under its running holder at once, keeping the
// fencing token: the next holder outranks the old one, which learns of
// the loss at its next extension (Lost, Context's cause, Release). On a
// free lock, or one never used, it reports that there was nothing to end.
func TestForceReleaseFreesAHeldLockAndItsHolderSeesTheLoss(t *testing.T) {
	conformance.Over(t, forceReleaseSeenByTheHolder)
}

func forceReleaseSeenByTheHolder(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, other, within := lossWatch(e)
	h := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("stuck")))

	start := time.Now()
	released, err := other.ForceRelease(ctx, "stuck")
	require.NoError(t, err)
	require.True(t, released)
	info, err := other.Inspect(ctx, "stuck")
	require.NoError(t, err)
	require.False(t, info.Held)
	require.Equal(t, h.FencingToken(), info.FencingToken, "the token is kept")

	next := releaseAtCleanup(t, mustTryAcquire(t, ctx, other.Lock("stuck")))
	require.Greater(t, next.FencingToken(), h.FencingToken())
	awaitClosed(t, h.Lost(), within-time.Since(start), "the old holder's Lost")
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	info, err = other.Inspect(ctx, "stuck")
	require.NoError(t, err)
	require.True(t, info.Held, "the old holder's release freed the next holder's lock")
	require.Equal(t, next.FencingToken(), info.FencingToken)

	require.NoError(t, next.Release(ctx))
	for _, name := range []string{"stuck", "never-used"} {
		released, err = other.ForceRelease(ctx, name)
		require.NoError(t, err, name)
		require.False(t, released, "%s: nothing to release", name)
	}
}

// A DistributedLock.MongoDB holder is force-released the same way: its
// delete-release then deletes nothing, and the token goes on increasing.
func TestForceReleaseFreesADotnetHoldersLock(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db, l, dotnet := interopSides(t, "dotnet-stuck")
	dh, err := dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.NotNil(t, dh)

	released, err := newProvider(t, db).ForceRelease(ctx, "dotnet-stuck")
	require.NoError(t, err)
	require.True(t, released)
	deleted, err := dotnet.release(ctx, dh)
	require.NoError(t, err)
	require.False(t, deleted, "the .NET holder's release deleted the force-released document")
	h := mustTryAcquire(t, ctx, l)
	require.Greater(t, h.FencingToken(), dh.token)
	require.NoError(t, h.Release(ctx))
}

// A nil ctx is an error, never a panic, and Locks yields it once.
func TestInspectionWithANilContextIsAnError(t *testing.T) {
	e := newLockEnv(t)
	var nilCtx context.Context // a variable: staticcheck (SA1012) rejects a literal nil
	_, err := e.p.Inspect(nilCtx, "x")
	require.Error(t, err)
	_, err = e.p.ForceRelease(nilCtx, "x")
	require.Error(t, err)
	_, err = e.p.ForceReleaseHolder(nilCtx, "x", "0123456789abcdef0123456789abcdef")
	require.Error(t, err)
	_, err = e.p.Semaphore("x", 1).Inspect(nilCtx)
	require.Error(t, err)
	_, err = e.p.RWLock("x").Inspect(nilCtx)
	require.Error(t, err)
	var errs []error
	for _, err := range e.p.Locks(nilCtx, "") {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	require.Error(t, errs[0])
}

// abandonedProvider returns a provider of 100 ms leases on a client of its
// own, and a function that disconnects that client: what the provider
// holds then is abandoned, as by a process that died.
func abandonedProvider(t *testing.T, db *mongo.Database, owner string) (*mongolock.Provider, func()) {
	t.Helper()
	c := testdb.NewClient(t)
	p := newProvider(t, c.Database(db.Name()), mongolock.WithExpiry(100*time.Millisecond), mongolock.WithOwner(owner))
	return p, func() { require.NoError(t, c.Disconnect(context.Background())) }
}

// requireNoDocument checks that err says that name has no document.
func requireNoDocument(t *testing.T, err error, name string) {
	t.Helper()
	require.ErrorIs(t, err, mongolock.ErrNoLock)
	var le *mongolock.Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, "inspect", le.Op)
	require.Equal(t, name, le.Name)
}

// requireHolder checks that info describes h's live acquisition by owner,
// at serverTime.
func requireHolder(t *testing.T, info mongolock.HolderInfo, h *mongolock.Handle, owner string, write bool, serverTime time.Time) {
	t.Helper()
	require.Equal(t, owner, info.Owner)
	require.Equal(t, write, info.Write, "writes")
	require.Equal(t, h.FencingToken(), info.FencingToken)
	require.False(t, info.AcquiredAt.After(serverTime), "acquired at %v, after the server's %v", info.AcquiredAt, serverTime)
	require.True(t, info.ExpiresAt.After(serverTime), "expires at %v, not after the server's %v", info.ExpiresAt, serverTime)
}

// A semaphore's Inspect lists its live holders, by the server's clock: a
// holder whose lease ran out unreleased stays in the document but is not
// listed; a released one is gone. n and the last token are the
// document's. A semaphore never used has no document: ErrNoLock.
func TestSemaphoreInspectListsItsLiveHolders(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db := testdb.Database(t)
	a := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("svc-a")).Semaphore("exports", 3)
	b := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("svc-b")).Semaphore("exports", 3)

	_, err := a.Inspect(ctx)
	requireNoDocument(t, err, "exports")

	gone, crash := abandonedProvider(t, db, "crashed-1")
	abandoned, err := gone.Semaphore("exports", 3).TryAcquire(ctx)
	require.NoError(t, err)
	crash()
	ha, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, ha)
	hb, err := b.TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, hb)

	var info mongolock.SemaphoreInfo
	pollUntil(t, 5*time.Second, "the abandoned slot's lease ends on the server", func() bool {
		info, err = b.Inspect(ctx)
		require.NoError(t, err)
		return len(info.Holders) == 2
	})
	require.Equal(t, "exports", info.Name)
	require.Equal(t, 3, info.N)
	requireHolder(t, info.Holders[0], ha, "svc-a", false, info.ServerTime)
	requireHolder(t, info.Holders[1], hb, "svc-b", false, info.ServerTime)
	require.Equal(t, hb.FencingToken(), info.FencingToken)
	require.Greater(t, ha.FencingToken(), abandoned.FencingToken())
	require.Equal(t, 3, holderCount(t, semColl(db), "exports"), "the abandoned holder is still in the document")

	require.NoError(t, ha.Release(ctx))
	info, err = a.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	requireHolder(t, info.Holders[0], hb, "svc-b", false, info.ServerTime)
	require.NoError(t, hb.Release(ctx))
	info, err = a.Inspect(ctx)
	require.NoError(t, err)
	require.Empty(t, info.Holders)
	require.Equal(t, hb.FencingToken(), info.FencingToken, "the token stays")
	require.Equal(t, 3, info.N)
}

// An RWLock's Inspect lists its live readers, then its writer, by the
// server's clock, and shows a writer waiting in Acquire while its claim is
// live. An RWLock never used has no document: ErrNoLock.
func TestRWLockInspectListsItsHoldersAndAWaitingWriter(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db := testdb.Database(t)
	a := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("svc-a")).RWLock("catalog")
	b := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("svc-b")).RWLock("catalog")
	w := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("svc-w"), fastPolls).RWLock("catalog")

	_, err := a.Inspect(ctx)
	requireNoDocument(t, err, "catalog")

	gone, crash := abandonedProvider(t, db, "crashed-1")
	abandoned, err := gone.RWLock("catalog").Writer().TryAcquire(ctx)
	require.NoError(t, err)
	crash()
	var info mongolock.RWLockInfo
	pollUntil(t, 5*time.Second, "the abandoned writer's lease ends on the server", func() bool {
		info, err = a.Inspect(ctx)
		require.NoError(t, err)
		return len(info.Holders) == 0
	})
	require.Equal(t, mongolock.RWLockInfo{Name: "catalog", FencingToken: abandoned.FencingToken(), ServerTime: info.ServerTime}, info)
	require.Equal(t, 1, holderCount(t, semColl(db), "catalog"), "the abandoned writer is still in the document")

	ra := releaseAtCleanup(t, mustRLock(t, ctx, a))
	rb := releaseAtCleanup(t, mustRLock(t, ctx, b))
	info, err = w.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, info.Holders, 2)
	requireHolder(t, info.Holders[0], ra, "svc-a", false, info.ServerTime)
	requireHolder(t, info.Holders[1], rb, "svc-b", false, info.ServerTime)
	require.Equal(t, rb.FencingToken(), info.FencingToken)
	require.False(t, info.WriterWaiting)

	// A writer waits while the readers hold the lock.
	writer := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := w.Writer().Acquire(ctx)
		assert(t, err == nil, "Lock: %v", err)
		writer <- h
	}()
	pollUntil(t, 5*time.Second, "the writer claims the lock", func() bool {
		info, err = a.Inspect(ctx)
		require.NoError(t, err)
		return info.WriterWaiting
	})
	require.Len(t, info.Holders, 2, "the readers keep the lock")
	require.NoError(t, ra.Release(ctx))
	require.NoError(t, rb.Release(ctx))
	wh := releaseAtCleanup(t, <-writer)
	require.NotNil(t, wh)
	info, err = a.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	requireHolder(t, info.Holders[0], wh, "svc-w", true, info.ServerTime)
	require.Equal(t, wh.FencingToken(), info.FencingToken)
	require.False(t, info.WriterWaiting, "the writer's claim is met")
}

func mustRLock(t *testing.T, ctx context.Context, rw *mongolock.RWLock) *mongolock.Handle {
	t.Helper()
	h, err := rw.Reader().TryAcquire(ctx)
	require.NoError(t, err, "Reader().TryAcquire(%q)", rw.Name())
	return h
}

// Locks lists every kind in name order, a lock before a semaphore of the
// same name, each with its live holders; Inspect shows each kind, a lock
// rather than a semaphore of its name. A loop that breaks early leaves no
// cursor open, of either collection.
func TestLocksAndInspectShowEveryKind(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db := testdb.Database(t)
	var log cursorLog
	p := newProvider(t, testdb.NewClient(t, options.Client().SetMonitor(log.monitor())).Database(db.Name()), mongolock.WithOwner("svc-a"))
	b := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("svc-b"))
	hold := func(h *mongolock.Handle, err error) *mongolock.Handle {
		t.Helper()
		require.NoError(t, err)
		return releaseAtCleanup(t, h)
	}
	lock := hold(p.Lock("k/lock").TryAcquire(ctx))
	leader, err := p.Election("k/leader").Campaign(ctx, "http://10.0.0.7:8080")
	require.NoError(t, err)
	releaseAtCleanup(t, leader.Handle)
	sem := []*mongolock.Handle{hold(p.Semaphore("k/sem", 3).TryAcquire(ctx)), hold(b.Semaphore("k/sem", 3).TryAcquire(ctx))}
	readers := []*mongolock.Handle{hold(p.RWLock("k/rw").Reader().TryAcquire(ctx)), hold(b.RWLock("k/rw").Reader().TryAcquire(ctx))}
	writer := hold(b.RWLock("k/rw-w").Writer().TryAcquire(ctx))
	bothLock := hold(p.Lock("k/both").TryAcquire(ctx))
	bothSem := hold(b.Semaphore("k/both", 2).TryAcquire(ctx))
	hold(p.Lock("other").TryAcquire(ctx))

	type want struct {
		kind    mongolock.Kind
		n       int
		owner   string
		value   string
		holders []*mongolock.Handle
		owners  []string
		write   bool
	}
	wants := []struct {
		name string
		want
	}{
		{"k/both", want{kind: mongolock.KindLock, owner: "svc-a", holders: []*mongolock.Handle{bothLock}, owners: []string{"svc-a"}}},
		{"k/both", want{kind: mongolock.KindSemaphore, n: 2, holders: []*mongolock.Handle{bothSem}, owners: []string{"svc-b"}}},
		{"k/leader", want{kind: mongolock.KindElection, owner: "svc-a", value: "http://10.0.0.7:8080", holders: []*mongolock.Handle{leader.Handle}, owners: []string{"svc-a"}}},
		{"k/lock", want{kind: mongolock.KindLock, owner: "svc-a", holders: []*mongolock.Handle{lock}, owners: []string{"svc-a"}}},
		{"k/rw", want{kind: mongolock.KindRWLock, holders: readers, owners: []string{"svc-a", "svc-b"}}},
		{"k/rw-w", want{kind: mongolock.KindRWLock, holders: []*mongolock.Handle{writer}, owners: []string{"svc-b"}, write: true}},
		{"k/sem", want{kind: mongolock.KindSemaphore, n: 3, holders: sem, owners: []string{"svc-a", "svc-b"}}},
	}
	check := func(info mongolock.LockInfo, w want) {
		t.Helper()
		what := fmt.Sprintf("%s (%s)", info.Name, w.kind)
		require.Equal(t, w.kind, info.Kind, what)
		require.True(t, info.Held, what)
		require.Equal(t, w.n, info.N, what)
		require.Equal(t, w.owner, info.Owner, what)
		require.Equal(t, w.value, info.Value, what)
		require.Len(t, info.Holders, len(w.holders), what)
		for i, h := range w.holders {
			requireHolder(t, info.Holders[i], h, w.owners[i], w.write, info.ServerTime)
			require.Len(t, info.Holders[i].ID, 32, what)
		}
		last := w.holders[len(w.holders)-1]
		require.Equal(t, last.FencingToken(), info.FencingToken, what)
		require.Equal(t, info.Holders[len(w.holders)-1].AcquiredAt, info.AcquiredAt, "%s: the newest holder's acquisition", what)
		require.True(t, info.ExpiresAt.After(info.ServerTime), what)
		require.False(t, info.Waiting || info.WriterWaiting, what)
	}

	var got []string
	for info, err := range p.Locks(ctx, "k/") {
		require.NoError(t, err)
		require.Less(t, len(got), len(wants), "listed %s too", info.Name)
		require.Equal(t, wants[len(got)].name, info.Name)
		check(info, wants[len(got)].want)
		got = append(got, info.Name)
	}
	require.Len(t, got, len(wants))
	for i, w := range wants {
		if i == 1 {
			continue // k/both: Inspect shows the lock's
		}
		info, err := p.Inspect(ctx, w.name)
		require.NoError(t, err)
		check(info, w.want)
	}
	_, err = p.Inspect(ctx, "k/none")
	requireNoDocument(t, err, "k/none")

	mongolock.SetListBatchSize(p, 2)
	_, _, _ = log.take()
	seen := 0
	for _, err := range p.Locks(ctx, "") {
		require.NoError(t, err)
		if seen++; seen == 3 {
			break
		}
	}
	_, opened, killed := log.take()
	require.Len(t, opened, 2, "a cursor per collection")
	require.ElementsMatch(t, opened, killed, "breaking out of the loop left a cursor open")
}

// forEachKindHeld runs test for every kind (forEachKind), with two
// providers on clients of their own, and on the first the holders of the
// row's other mode of name: as many as may hold at once, or two readers.
// The holders' leases last 10 s but are extended every 100 ms: a loss
// shows soon, an expiry would not. The second polls fast, as a waiter.
func forEachKindHeld(t *testing.T, test func(t *testing.T, ctx context.Context, r kindRow, name string, p, other *mongolock.Provider, old []*mongolock.Handle)) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		ctx := boundedCtx(t, 30*time.Second)
		db := testdb.Database(t)
		p := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("stuck-1"),
			mongolock.WithExpiry(10*time.Second), mongolock.WithExtensionCadence(100*time.Millisecond))
		k := r.n
		if r.rw {
			k = cmp.Or(r.otherN, 2)
		}
		name := "stuck-" + r.kind
		old := holdOut(t, ctx, r, p, name, k)
		test(t, ctx, r, name, p, newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("waiter-1"), fastPolls), old)
	})
}

// ForceRelease frees every kind for a waiter at once, long before the
// holders' leases would end: every holder finds out at its next extension,
// and the waiter's fencing token outranks every old holder's.
func TestForceReleaseFreesEveryKindForAWaiter(t *testing.T) {
	forEachKindHeld(t, func(t *testing.T, ctx context.Context, r kindRow, name string, p, other *mongolock.Provider, old []*mongolock.Handle) {
		waiter := make(chan *mongolock.Handle, 1)
		go func() {
			h, err := r.this(other, name).acquire(ctx)
			assert(t, err == nil, "the waiter: %v", err)
			waiter <- h
		}()
		pollUntil(t, 5*time.Second, "the waiter claims the next turn", func() bool {
			info, err := p.Inspect(ctx, name)
			require.NoError(t, err)
			return info.Waiting
		})

		start := time.Now()
		released, err := other.ForceRelease(ctx, name)
		require.NoError(t, err)
		require.True(t, released)
		var h *mongolock.Handle
		select {
		case h = <-waiter:
		case <-time.After(2 * time.Second):
			require.FailNow(t, "the waiter did not get the freed "+r.kind+" at once")
		}
		require.NotNil(t, h)
		releaseAtCleanup(t, h)
		for _, o := range old {
			require.Greater(t, h.FencingToken(), o.FencingToken())
			awaitClosed(t, o.Lost(), time.Second-time.Since(start), "an old holder's Lost")
			require.ErrorIs(t, o.Release(ctx), mongolock.ErrLockLost)
		}
		info, err := p.Inspect(ctx, name)
		require.NoError(t, err)
		require.Len(t, info.Holders, 1, "the old holders' releases freed the waiter's")
		require.Equal(t, h.FencingToken(), info.Holders[0].FencingToken)
	})
}

// ForceReleaseHolder ends the one acquisition it names, of every kind: the
// others keep theirs, and the next acquisition outranks it. An id that
// holds nothing ends nothing; an empty one is an error.
func TestForceReleaseHolderEndsOneHolderOfEveryKind(t *testing.T) {
	forEachKindHeld(t, func(t *testing.T, ctx context.Context, r kindRow, name string, _, other *mongolock.Provider, old []*mongolock.Handle) {
		info, err := other.Inspect(ctx, name)
		require.NoError(t, err)
		require.Len(t, info.Holders, len(old))

		released, err := other.ForceReleaseHolder(ctx, name, "0123456789abcdef0123456789abcdef")
		require.NoError(t, err)
		require.False(t, released, "an id that holds nothing")
		_, err = other.ForceReleaseHolder(ctx, name, "")
		require.Error(t, err)

		start := time.Now()
		released, err = other.ForceReleaseHolder(ctx, name, info.Holders[0].ID)
		require.NoError(t, err)
		require.True(t, released)
		awaitClosed(t, old[0].Lost(), time.Second, "the released holder's Lost")
		require.ErrorIs(t, old[0].Release(ctx), mongolock.ErrLockLost)
		for _, o := range old[1:] {
			staysOpen(t, o.Lost(), time.Second-time.Since(start), "another holder's Lost")
		}
		h, err := r.other(other, name).try(ctx)
		require.NoError(t, err, "the freed slot")
		releaseAtCleanup(t, h)
		for _, o := range old {
			require.Greater(t, h.FencingToken(), o.FencingToken())
		}
		info, err = other.Inspect(ctx, name)
		require.NoError(t, err)
		require.Len(t, info.Holders, len(old))
		require.Equal(t, h.FencingToken(), info.Holders[len(old)-1].FencingToken)
	})
}

// Over the model: Locks lists the locks' and the semaphores' collections
// merged in name order, and a caller that breaks out of the loop, on
// either collection's entry, gets nothing more.
func TestLocksOverTheModelMergesInNameOrderAndStopsWhereTheCallerBreaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		p, _ := newMemDB(t).process()
		for _, name := range []string{"a", "c"} {
			releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock(name)))
		}
		for _, name := range []string{"b", "d"} {
			slot, err := p.Semaphore(name, 2).TryAcquire(ctx)
			require.NoError(t, err)
			releaseAtCleanup(t, slot)
		}
		listUntil := func(last string) []string {
			var names []string
			for info, err := range p.Locks(ctx, "") {
				require.NoError(t, err)
				names = append(names, info.Name+" "+string(info.Kind))
				if info.Name == last {
					break
				}
			}
			return names
		}
		require.Equal(t, []string{"a lock", "b semaphore", "c lock", "d semaphore"}, listUntil(""))
		require.Equal(t, []string{"a lock"}, listUntil("a"))
		require.Equal(t, []string{"a lock", "b semaphore"}, listUntil("b"))
	})
}

// Over the model: Inspect shows what a lock's document says of the
// processes that wait for it: the claim of the first, the fencing token
// it saw as it began to wait, and until when the claim counts; the place
// of the second, next; and a semaphore's claim alike. Both are gone once
// their waits give up (the claims withdrawn).
func TestInspectOverTheModelShowsTheClaimsOfWaitingProcesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		holder, _ := d.process()
		first, _ := d.process()
		second, _ := d.process()
		lock := mustTryAcquire(t, ctx, holder.Lock("q"))
		slot, err := holder.Semaphore("q", 1).TryAcquire(ctx)
		require.NoError(t, err)
		info, err := holder.Inspect(ctx, "q")
		require.NoError(t, err)
		require.Nil(t, info.Claim, "nobody waits")
		require.Nil(t, info.NextClaim)

		waits, giveUp := context.WithCancel(ctx)
		semEnded := make(chan error, 1)
		go func() {
			_, err := first.Semaphore("q", 1).Acquire(waits)
			semEnded <- err
		}()
		ended := []<-chan error{acquireInBackground(waits, first.Lock("q")), semEnded}
		synctest.Wait()
		ended = append(ended, acquireInBackground(waits, second.Lock("q")))
		synctest.Wait()

		info, err = holder.Inspect(ctx, "q")
		require.NoError(t, err)
		require.True(t, info.Waiting)
		require.NotNil(t, info.Claim)
		require.Equal(t, mongolock.Process(first), info.Claim.Process)
		require.Equal(t, lock.FencingToken(), info.Claim.Since, "the token it saw as it began to wait")
		require.True(t, info.Claim.Until.After(info.ServerTime), "a claim that counts")
		require.NotNil(t, info.NextClaim)
		require.Equal(t, mongolock.Process(second), info.NextClaim.Process)
		require.True(t, info.NextClaim.Until.After(info.ServerTime))

		var sem mongolock.LockInfo
		for i, err := range holder.Locks(ctx, "q") {
			require.NoError(t, err)
			sem = i
		}
		require.Equal(t, mongolock.KindSemaphore, sem.Kind)
		require.NotNil(t, sem.Claim)
		require.Equal(t, mongolock.SlotsProcess(first), sem.Claim.Process)
		require.Equal(t, slot.FencingToken(), sem.Claim.Since)
		require.Nil(t, sem.NextClaim, "a semaphore keeps no place next")

		giveUp()
		for _, e := range ended {
			require.ErrorIs(t, <-e, context.Canceled)
		}
		synctest.Wait()
		for info, err := range holder.Locks(ctx, "q") {
			require.NoError(t, err)
			require.False(t, info.Waiting, info.Kind)
			require.Nil(t, info.Claim, info.Kind)
			require.Nil(t, info.NextClaim, info.Kind)
		}
	})
}

// Inspect reports a lock's state by the server's clock: held with its owner
// and value, free after release (the token kept), and ErrNoLock for a name
// never used.
func TestInspectReportsALocksState(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	svc := newProvider(t, e.db, mongolock.WithOwner("billing-7f9c"))
	_, err := e.p.Inspect(ctx, "inspected")
	require.ErrorIs(t, err, mongolock.ErrNoLock)

	h := mustTryAcquire(t, ctx, mongolock.LockWithValue(svc, "inspected", "leader-a"))
	info, err := e.p.Inspect(ctx, "inspected")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, "inspected", info.Name)
	require.Equal(t, "billing-7f9c", info.Owner)
	require.Equal(t, "leader-a", info.Value)
	require.Equal(t, h.FencingToken(), info.FencingToken)
	require.True(t, info.ExpiresAt.After(info.ServerTime), "a held lease ends after the server's now")
	require.False(t, info.AcquiredAt.After(info.ServerTime))

	require.NoError(t, h.Release(ctx))
	info, err = e.p.Inspect(ctx, "inspected")
	require.NoError(t, err)
	require.False(t, info.Held)
	require.Empty(t, info.Owner, "a free lock has no owner")
	require.Equal(t, h.FencingToken(), info.FencingToken, "the token is kept for the next holder")
}
