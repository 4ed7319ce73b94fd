package mongolock_test

// Inspection and administration: Inspect, Locks and ForceRelease against
// the server, on documents of every kind the collection can hold.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Inspect judges every kind of document by the server's clock, and names an
// owner only while a mongolock acquisition holds the lock: not for a lease
// that ran out unreleased, not for a DistributedLock.MongoDB holder (even
// where an earlier mongolock acquisition left its owner), not for a
// document that is not a lock at all.
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

	// A mongolock holder whose process went away: its client is
	// disconnected, so nothing extends or releases the lock.
	c := testdb.NewClient(t)
	gone := newProvider(t, c.Database(e.db.Name()), mongolock.WithExpiry(100*time.Millisecond), mongolock.WithOwner("crashed-1"))
	h := mustTryAcquire(t, ctx, gone.Lock("expired"))
	require.NoError(t, c.Disconnect(ctx))
	owner, _ := rawLockDoc(t, e.coll, "expired").Lookup("owner").StringValueOK()
	require.Equal(t, "crashed-1", owner)
	pollUntil(t, 5*time.Second, "the lease ends on the server", func() bool { return !inspect("expired").Held })
	info := inspect("expired")
	require.Empty(t, info.Owner, "a lease that ran out has no holder")
	require.Equal(t, h.FencingToken(), info.FencingToken)
	require.False(t, info.ExpiresAt.After(info.ServerTime))
	_, hasLockID := rawLockDoc(t, e.coll, "expired").Lookup("lockId").StringValueOK()
	require.True(t, hasLockID, "the lease ended without a release")

	// DistributedLock.MongoDB holders: one on a fresh name, one after a
	// mongolock acquisition that left its owner in the document.
	svc := newProvider(t, e.db, mongolock.WithOwner("billing-7f9c"))
	h = mustTryAcquire(t, ctx, svc.Lock("dotnet-after-go"))
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
	pollUntil(t, 5*time.Second, "the .NET lease ends on the server", func() bool { return !inspect("dotnet-expired").Held })

	// Documents that mongolock did not write: no fields of a lock, or a
	// lockId without an expiresAt.
	_, err = e.coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "stray"}, {Key: "note", Value: "not a lock"}},
		bson.D{{Key: "_id", Value: "no-expiry"}, {Key: "lockId", Value: "x"}, {Key: "lastLockId", Value: "x"}, {Key: "owner", Value: "o"}},
	})
	require.NoError(t, err)
	for _, name := range []string{"stray", "no-expiry"} {
		info := inspect(name)
		require.Equal(t, mongolock.LockInfo{Name: name, ServerTime: info.ServerTime}, info, "%s: free, nothing else known", name)
		require.False(t, info.ServerTime.IsZero())
	}
}

// cursorLog records, from a client's events, the size of each batch of
// documents an aggregate or getMore reply carried, the cursor each
// aggregate opened, and the cursors its killCursors commands killed.
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
			} else {
				c.opened = append(c.opened, cur.Lookup("id").Int64())
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
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("job-%04d", j)}, {Key: "expiresAt", Value: time.Unix(0, 0)}}
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
// operators), and names past it in byte order (invalid UTF-8, 0xff bytes)
// are neither lost nor taken in.
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
		docs[i] = bson.D{{Key: "_id", Value: name}, {Key: "expiresAt", Value: time.Unix(0, 0)}}
	}
	_, err := e.coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	// Not locks: no string name.
	_, err = e.coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 7}}, bson.D{{Key: "_id", Value: bson.D{{Key: "a", Value: ""}}}}})
	require.NoError(t, err)

	for _, prefix := range []string{"", "svc.a+(b)", "svc.a+(b", "^[$.*", "$", "a\xff", "\xff", "\xff\xff", "b", "锁-", "锁", "none"} {
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
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	h := releaseAtCleanup(t, mustTryAcquire(t, ctx, e.p.Lock("stuck")))

	start := time.Now()
	released, err := e.other.ForceRelease(ctx, "stuck")
	require.NoError(t, err)
	require.True(t, released)
	info, err := e.other.Inspect(ctx, "stuck")
	require.NoError(t, err)
	require.False(t, info.Held)
	require.Equal(t, h.FencingToken(), info.FencingToken, "the token is kept")

	next := releaseAtCleanup(t, mustTryAcquire(t, ctx, e.other.Lock("stuck")))
	require.Greater(t, next.FencingToken(), h.FencingToken())
	awaitClosed(t, h.Lost(), lossDetectionBound-time.Since(start), "the old holder's Lost")
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	info, err = e.other.Inspect(ctx, "stuck")
	require.NoError(t, err)
	require.True(t, info.Held, "the old holder's release freed the next holder's lock")
	require.Equal(t, next.FencingToken(), info.FencingToken)

	require.NoError(t, next.Release(ctx))
	for _, name := range []string{"stuck", "never-used"} {
		released, err = e.other.ForceRelease(ctx, name)
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
