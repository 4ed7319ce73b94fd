package mongolock_test

// Semaphores against the real server, with holders on clients of their
// own, and over the model in simulated time where a fault must come at a
// chosen instant.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/faultproxy"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// semColl is the raw collection of the semaphores of db.
func semColl(db *mongo.Database) *mongo.Collection {
	return db.Collection(mongolock.DefaultCollection + "_semaphores")
}

// liveHolders counts, by the server's clock, the holders of name whose
// lease has not ended.
func liveHolders(t *testing.T, coll *mongo.Collection, name string) int {
	t.Helper()
	cur, err := coll.Aggregate(context.Background(), mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id", Value: name}}}},
		{{Key: "$project", Value: bson.D{{Key: "live", Value: bson.D{{Key: "$size", Value: bson.D{{Key: "$filter", Value: bson.D{
			{Key: "input", Value: "$holders"},
			{Key: "cond", Value: bson.D{{Key: "$gt", Value: bson.A{"$$this.expiresAt", "$$NOW"}}}},
		}}}}}}}}},
	})
	require.NoError(t, err)
	var docs []struct {
		Live int `bson:"live"`
	}
	require.NoError(t, cur.All(context.Background(), &docs))
	if len(docs) == 0 {
		return 0
	}
	return docs[0].Live
}

// semDoc reads name's semaphore document.
func semDoc(t *testing.T, coll *mongo.Collection, name string) bson.Raw {
	t.Helper()
	raw, err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: name}}).Raw()
	require.NoError(t, err)
	return raw
}

func holderCount(t *testing.T, coll *mongo.Collection, name string) int {
	t.Helper()
	vals, err := semDoc(t, coll, name).Lookup("holders").Array().Values()
	require.NoError(t, err)
	return len(vals)
}

// Holders of three processes, three calls each, contend for three slots:
// never more than three hold at once, by an in-process count and by the
// server's, and every acquisition's token is new and greater than the
// ones its caller got before.
func TestSemaphoreNeverMoreThanNHolders(t *testing.T) {
	const n, procs, callers, rounds = 3, 3, 3, 12
	db := testdb.Database(t)
	ctx := boundedCtx(t, time.Minute)
	var holding, most atomic.Int64
	tokens := map[int64]bool{}
	var wg sync.WaitGroup
	var providers []*mongolock.Provider
	for range procs {
		p := newProvider(t, ownClient(t, db, nil), fastPolls)
		providers = append(providers, p)
		s := p.Semaphore("pool", n)
		for range callers {
			wg.Go(func() {
				for range rounds {
					err := s.Do(ctx, func(context.Context) error {
						now := holding.Add(1)
						defer holding.Add(-1)
						for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
						}
						if live := liveHolders(t, semColl(db), "pool"); live > n {
							return fmt.Errorf("%d live holders on the server", live)
						}
						time.Sleep(2 * time.Millisecond) // the work done holding a slot
						return nil
					})
					if !assert(t, err == nil, "Do: %v", err) {
						return
					}
				}
			})
		}
	}
	// Tokens: a caller of its own, acquiring alongside.
	probeProvider := newProvider(t, ownClient(t, db, nil), fastPolls)
	providers = append(providers, probeProvider)
	probe := probeProvider.Semaphore("pool", n)
	var last int64
	for range rounds {
		h, err := probe.Acquire(ctx)
		require.NoError(t, err)
		tok := h.FencingToken()
		require.False(t, tokens[tok], "token %d issued twice", tok)
		tokens[tok] = true
		require.Greater(t, tok, last)
		last = tok
		require.NoError(t, h.Release(ctx))
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int64(n), "holders at once")
	require.Equal(t, int64(n), most.Load(), "the slots were never all held: no contention")
	// The document keeps the last token issued: never below one a handle got.
	require.GreaterOrEqual(t, semDoc(t, semColl(db), "pool").Lookup("fencingToken").Int64(), last)
	// An attempt that failed ambiguously (FerretDB's refusals of
	// simultaneous upserts) is undone in the background: nothing is left
	// once that ends.
	for _, p := range providers {
		mongolock.WaitBackground(p)
	}
	require.Zero(t, holderCount(t, semColl(db), "pool"))
}

// A full semaphore refuses TryAcquire; a release frees a slot at once, and
// the next holder's token is greater. A Lock of the same name is another
// thing altogether.
func TestSemaphoreTryAcquireWhenFullAndAfterRelease(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	s, other := e.p.Semaphore("full", 2), e.other.Semaphore("full", 2)
	a, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, a)
	b, err := other.TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, b.FencingToken(), a.FencingToken())
	require.Equal(t, "full", b.Name())

	_, err = other.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)

	// Not a lock: the mutex of that name is free.
	h := mustTryAcquire(t, ctx, e.p.Lock("full"))
	require.NoError(t, h.Release(ctx))

	require.NoError(t, b.Release(ctx))
	require.Equal(t, 1, holderCount(t, semColl(e.db), "full"))
	c, err := other.TryAcquire(ctx)
	require.NoError(t, err, "a released slot is free at once")
	require.Greater(t, c.FencingToken(), b.FencingToken())
	require.NoError(t, c.Release(ctx))
	require.NoError(t, a.Release(ctx))
	require.Zero(t, holderCount(t, semColl(e.db), "full"))
}

// Slots of one provider are extended in its batches, several of one
// semaphore included; a slot taken from its holder on the server is lost,
// and only that one.
func TestSemaphoreLeasesAreExtendedAndLossIsSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _, other := d.holderAndRival(mongolock.WithExpiry(memExpiry))
		s := p.Semaphore("kept", 3)
		var hs []*mongolock.Handle
		for range 2 {
			h, err := s.TryAcquire(ctx)
			require.NoError(t, err)
			hs = append(hs, releaseAtCleanup(t, h))
		}
		single, err := p.Semaphore("kept-too", 1).TryAcquire(ctx)
		require.NoError(t, err)
		releaseAtCleanup(t, single)
		lock := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("kept")))

		// Held across several leases.
		time.Sleep(4 * memExpiry)
		synctest.Wait()
		for _, h := range append(hs, single, lock) {
			require.False(t, closedNow(h.Lost()), "%s lost", h.Name())
		}
		_, live := d.holders("kept")
		require.Equal(t, 2, live)
		_, err = other.Semaphore("kept-too", 1).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)

		// Someone takes the second slot away in the database: the next
		// extension, within a cadence, finds it gone.
		d.editIn(memSemColl, "kept", bson.D{{Key: "$pull", Value: bson.D{{Key: "holders", Value: bson.D{{Key: "id", Value: mongolock.LockID(hs[1])}}}}}})
		time.Sleep(memExpiry / 3)
		synctest.Wait()
		require.True(t, closedNow(hs[1].Lost()), "the taken slot's Lost is open a cadence later")
		require.ErrorIs(t, context.Cause(hs[1].Context()), mongolock.ErrLockLost)
		time.Sleep(2 * memExpiry)
		synctest.Wait()
		require.False(t, closedNow(hs[0].Lost()) || closedNow(single.Lost()) || closedNow(lock.Lost()), "a handle beside the taken slot was lost")
		require.ErrorIs(t, hs[1].Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, hs[0].Release(ctx))
	})
}

// A holder cut off from the database loses its slot: Lost closes a
// safety margin before anyone else can take it. So does an RWLock's reader
// or writer. Over the model, in simulated time, the cut at several points
// of the holder's extension cycle; TestGuaranteeLostBeforeExpired meets
// the same on the wire.
func TestSemaphoreExpiredHolderFreesItsSlotAfterLost(t *testing.T) {
	type try func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error)
	for _, c := range []struct {
		kind         string
		holds, rival try
	}{
		{"semaphore",
			func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
				return p.Semaphore("cut", 1).TryAcquire
			},
			func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
				return p.Semaphore("cut", 1).TryAcquire
			}},
		{"rwlock-writer",
			func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock("cut").Writer().TryAcquire
			},
			func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock("cut").Reader().TryAcquire
			}},
		{"rwlock-reader",
			func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock("cut").Reader().TryAcquire
			},
			func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock("cut").Writer().TryAcquire
			}},
	} {
		for _, cut := range []struct {
			label string
			fault func(*memdb.Faults)
		}{{"partitioned", (*memdb.Faults).Partition}, {"blackholed", (*memdb.Faults).Blackhole}} {
			t.Run(c.kind+"/"+cut.label, func(t *testing.T) {
				lossAtEveryPhase(t, nil, cut.fault, c.holds, c.rival, lostAMarginBeforeTheRival)
			})
		}
	}
}

// An Acquire whose ctx ends after its request reached the server leaves no
// slot held: the slot its request took is released in the background.
func TestSemaphoreCancelledAcquireLeavesNoOrphanSlot(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	px, pdb := proxied(t, db)
	p := newProvider(t, pdb, mongolock.WithExpiry(30*time.Second))
	s := p.Semaphore("orphan", 1)
	h, err := s.TryAcquire(ctx) // creates the document
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	requireNoOrphanAfterCut(t, db, px, "orphan", s.Acquire)
}

// requireNoOrphanAfterCut makes replies through px late, cuts acquire
// short after its request reached the server, and sees that what it took of
// the semaphores' document name is released in the background.
func requireNoOrphanAfterCut(t *testing.T, db *mongo.Database, px *faultproxy.Proxy, name string, acquire func(context.Context) (*mongolock.Handle, error)) {
	t.Helper()
	ctx := boundedCtx(t, 30*time.Second)
	before := semDoc(t, semColl(db), name).Lookup("fencingToken").Int64()
	px.SetLatency(0, 400*time.Millisecond) // replies come late
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := acquire(actx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	pollUntil(t, 5*time.Second, "the server granted the cut-short acquisition", func() bool {
		return semDoc(t, semColl(db), name).Lookup("fencingToken").Int64() != before
	})
	pollUntil(t, 5*time.Second, "the orphaned acquisition is released (30 s lease)", func() bool {
		return holderCount(t, semColl(db), name) == 0
	})
	px.SetLatency(0, 0)
}

// Processes that disagree on n: while a slot is held, the one with another
// n gets an error at once, not a wait; once no slot is held, its n
// replaces the document's.
func TestSemaphoreDisagreementOnN(t *testing.T) {
	e := newLockEnv(t, fastPolls)
	ctx := boundedCtx(t, 30*time.Second)
	h, err := e.p.Semaphore("sized", 2).TryAcquire(ctx)
	require.NoError(t, err)
	three := e.other.Semaphore("sized", 3)
	start := time.Now()
	_, err = three.Acquire(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
	require.ErrorIs(t, err, mongolock.ErrMismatch)
	require.ErrorContains(t, err, "it has 2 slots, not 3")
	require.Less(t, time.Since(start), 5*time.Second, "not retried")
	_, err = three.TryAcquire(ctx)
	require.ErrorContains(t, err, "it has 2 slots, not 3")
	var me *mongolock.Error
	require.True(t, errors.As(err, &me))
	require.Equal(t, "try acquire", me.Op)

	require.NoError(t, h.Release(ctx))
	h3, err := three.TryAcquire(ctx)
	require.NoError(t, err, "no slot held: n = 3 takes over")
	require.EqualValues(t, 3, semDoc(t, semColl(e.db), "sized").Lookup("n").AsInt64())
	_, err = e.p.Semaphore("sized", 2).TryAcquire(ctx)
	require.ErrorContains(t, err, "it has 3 slots, not 2")
	require.NoError(t, h3.Release(ctx))
}

// n below 1 or above MaxSemaphoreSlots (4096) is an error of every
// acquisition, before anything is sent.
func TestSemaphoreBadN(t *testing.T) {
	count := &commandCounter{}
	db := testdb.Database(t)
	p := newProvider(t, ownClient(t, db, count))
	ctx := boundedCtx(t, 10*time.Second)
	for _, n := range []int{4097, 1 << 20, 0, -1} {
		s := p.Semaphore("bad", n)
		_, err := s.TryAcquire(ctx)
		require.ErrorContains(t, err, fmt.Sprintf("semaphore of %d slots: need 1 <= n <= 4096", n))
		requireInvalid(t, err, "try acquire")
		_, err = s.Acquire(ctx)
		require.ErrorContains(t, err, "need 1 <= n <= 4096")
		requireInvalid(t, err, "acquire")
		err = s.Do(ctx, func(context.Context) error { return nil })
		require.ErrorContains(t, err, "need 1 <= n <= 4096")
	}
	require.Zero(t, count.commands.Load(), "commands sent")
}

// The semaphores' collection gets the TTL index, and Close releases the
// provider's slots.
func TestSemaphoreIndexAndClose(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	p := newProvider(t, ownClient(t, db, nil))
	s := p.Semaphore("closing", 2)
	var held []*mongolock.Handle // kept: a dropped Handle is released by the garbage collector
	for range 2 {
		h, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		held = append(held, h)
	}
	require.Equal(t, 2, liveHolders(t, semColl(db), "closing"))
	require.NoError(t, p.Close(ctx))
	for _, h := range held {
		require.NoError(t, h.Release(ctx), "a handle Close released")
	}
	require.Zero(t, holderCount(t, semColl(db), "closing"))
	_, err := s.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrClosed)

	cur, err := semColl(db).Indexes().List(ctx)
	require.NoError(t, err)
	var indexes []struct {
		Name               string `bson:"name"`
		ExpireAfterSeconds int64  `bson:"expireAfterSeconds"`
	}
	require.NoError(t, cur.All(ctx, &indexes))
	found := false
	for _, ix := range indexes {
		found = found || ix.Name == mongolock.TTLIndexName && ix.ExpireAfterSeconds == 3600
	}
	require.True(t, found, "no TTL index on the semaphores' collection: %+v", indexes)
}

// A holder's owner is stored as given, also one that looks like a field
// path.
func TestSemaphoreOwnerIsStoredAsGiven(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 10*time.Second)
	p := newProvider(t, db, mongolock.WithOwner("$worker-1"))
	h, err := p.Semaphore("owned", 1).TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, h)
	holder := semDoc(t, semColl(db), "owned").Lookup("holders", "0")
	owner, ok := holder.Document().Lookup("owner").StringValueOK()
	require.True(t, ok, "no owner in the holder: %v", holder)
	require.Equal(t, "$worker-1", owner)
}

// The line: Acquire calls of one process wait in line for a semaphore, send
// nothing while their process holds all n slots, and each release hands its
// slot to the next in line in its own round trip, with a higher token.
func TestSemaphoreLocalWaitersGetSlotsHandedOverInArrivalOrder(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Short sleeps: a waiter that polled would poll often.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 2*time.Millisecond))
	s := e.p.Semaphore("line", 2)
	held := make([]*mongolock.Handle, 2)
	for i := range held {
		var err error
		held[i], err = s.TryAcquire(ctx)
		require.NoError(t, err)
	}
	const waiters = 4
	got := make([]chan *mongolock.Handle, waiters)
	for i := range got {
		got[i] = make(chan *mongolock.Handle, 1)
		go func() {
			h, err := s.Acquire(ctx)
			if assert(t, err == nil, "waiter %d: %v", i, err) {
				got[i] <- h
			}
		}()
		awaitSlotQueueLen(t, e.p, "line", i+1) // i+1 in line: the next arrives after
	}
	mongolock.WaitBackground(e.p) // the TTL index is in place
	before := e.count.started.Load()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.Equal(t, before, e.count.started.Load(), "a waiter polled while its process held every slot")
		time.Sleep(10 * time.Millisecond)
	}
	for i := range waiters {
		released := held[i%2]
		before := e.count.commands.Load()
		require.NoError(t, released.Release(ctx))
		var h *mongolock.Handle
		select {
		case h = <-got[i]:
		case <-ctx.Done():
			t.Fatalf("waiter %d did not get the released slot", i)
		}
		require.EqualValues(t, 1, e.count.commands.Load()-before, "commands for release + next acquisition")
		require.Greater(t, h.FencingToken(), released.FencingToken())
		held[i%2] = h
	}
	require.Equal(t, 2, liveHolders(t, semColl(e.db), "line"))
	for _, h := range held {
		require.NoError(t, h.Release(ctx))
	}
	require.Zero(t, liveHolders(t, semColl(e.db), "line"))
}

// Hand-overs within a process give way to another process's claim: while
// local goroutines keep taking slots, never more than n-1 of them hold one
// at once, and the waiting process gets the slot left free.
func TestSemaphoreHandOversGiveWayToAWaitingProcess(t *testing.T) {
	const n = 2
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	s := e.p.Semaphore("turns", n)
	held := make([]*mongolock.Handle, n)
	for i := range held {
		var err error
		held[i], err = s.TryAcquire(ctx)
		require.NoError(t, err)
	}
	rivalGot := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := e.other.Semaphore("turns", n).Acquire(ctx)
		if assert(t, err == nil, "rival: %v", err) {
			rivalGot <- h
		}
	}()
	pollUntil(t, 10*time.Second, "the rival's claim", func() bool {
		_, ok := semDoc(t, semColl(e.db), "turns").Lookup("waitingProcess").StringValueOK()
		return ok
	})

	var acquisitions, inside, most atomic.Int32
	busy, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				h, err := s.Acquire(busy)
				if err != nil {
					return
				}
				acquisitions.Add(1)
				for in := inside.Add(1); ; {
					if m := most.Load(); in <= m || most.CompareAndSwap(m, in) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond) // the work done holding
				inside.Add(-1)                   // before the release: a hand-over's next holder counts after it
				if err := h.Release(ctx); !assert(t, err == nil, "release: %v", err) {
					return
				}
			}
		})
	}
	awaitSlotQueueLen(t, e.p, "turns", 3)
	for _, h := range held {
		require.NoError(t, h.Release(ctx))
	}
	var r *mongolock.Handle
	select {
	case r = <-rivalGot:
	case <-ctx.Done():
		t.Fatal("the waiting process never got a slot")
	}
	stop()
	wg.Wait()
	require.NoError(t, r.Release(ctx))
	require.LessOrEqual(t, most.Load(), int32(n-1), "local holders at once while another process claimed a slot")
	t.Logf("%d local acquisitions, at most %d at once, before the waiting process got a slot", acquisitions.Load(), most.Load())
}

// A release event wakes a semaphore's waiter whose sleeps are far longer
// than the test.
func TestSemaphoreReleaseEventWakesAWaiter(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	events := channelReleaseSource(e.p)
	holder, err := e.other.Semaphore("evented", 1).TryAcquire(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		h, err := e.p.Semaphore("evented", 1).Acquire(wctx)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	pollUntil(t, 10*time.Second, "the waiter's first attempt", e.count.idle)
	pollUntil(t, 10*time.Second, "a release source running while a waiter waits",
		func() bool { return mongolock.Notifying(e.p) })
	require.NoError(t, holder.Release(ctx))
	events <- "evented"
	require.NoError(t, <-got, "the waiter did not acquire after the release event")
	pollUntil(t, 10*time.Second, "the release source stopped without waiters",
		func() bool { return !mongolock.Notifying(e.p) })
}

// A semaphore's holders share its document: at MaxSemaphoreSlots holders,
// each with an owner of MaxOwnerLen bytes, and another process's claim
// (the waiting fields), the document the library writes stays under 2 MB,
// far from the server's 16 MB. The holders but the last are copies of the
// library's first, each with an ID of its own, written in one update; the
// last slot and the claim are taken through the API, so the document
// measured is one the library wrote.
func TestSemaphoreDocumentAtMaxSlotsStaysUnder2MB(t *testing.T) {
	const limit = 2 << 20
	n := mongolock.MaxSemaphoreSlots
	db := testdb.Database(t)
	coll := semColl(db)
	ctx := boundedCtx(t, time.Minute)
	owner := mongolock.WithOwner(strings.Repeat("o", mongolock.MaxOwnerLen))
	p := newProvider(t, ownClient(t, db, nil), owner)
	name := strings.Repeat("n", 64)
	s := p.Semaphore(name, n)
	first, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	one := len(semDoc(t, coll, name))

	var doc struct {
		Holders []bson.D `bson:"holders"`
	}
	require.NoError(t, bson.Unmarshal(semDoc(t, coll, name), &doc))
	require.Len(t, doc.Holders, 1)
	template := doc.Holders[0]
	var id string
	for _, e := range template {
		if e.Key == "id" {
			id, _ = e.Value.(string)
		}
	}
	require.NotEmpty(t, id, "the holder's id")
	copies := make(bson.A, 0, n-2)
	for i := range n - 2 {
		h := slices.Clone(template)
		for j := range h {
			switch h[j].Key {
			case "id":
				h[j].Value = fmt.Sprintf("%0*x", len(id), i+1)
			case "token":
				h[j].Value = first.FencingToken() + int64(i) + 1
			}
		}
		copies = append(copies, h)
	}
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: name}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "holders", Value: bson.D{{Key: "$each", Value: copies}}}}}})
	require.NoError(t, err)

	last, err := s.TryAcquire(ctx)
	require.NoError(t, err, "the last slot")
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a slot beyond n")

	// Another process waits: its claim is written beside the holders.
	other := newProvider(t, ownClient(t, db, nil), owner)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := other.Semaphore(name, n).Acquire(wctx)
		waited <- err
	}()
	pollUntil(t, 20*time.Second, "the waiting process's claim", func() bool {
		_, err := semDoc(t, coll, name).LookupErr("waitingProcess")
		return err == nil
	})
	cancel()
	require.ErrorIs(t, <-waited, context.Canceled)

	raw := semDoc(t, coll, name)
	require.NoError(t, bson.Unmarshal(raw, &doc))
	require.Len(t, doc.Holders, n)
	size := len(raw)
	// The server's own measure, where it has $bsonSize (MongoDB 4.4+).
	if cur, err := coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id", Value: name}}}},
		{{Key: "$project", Value: bson.D{{Key: "size", Value: bson.D{{Key: "$bsonSize", Value: "$$ROOT"}}}}}},
	}); err == nil {
		var got []struct {
			Size int `bson:"size"`
		}
		if err := cur.All(ctx, &got); err == nil && len(got) == 1 {
			// FerretDB's differs from the document's read back by a
			// few bytes (its own encoding): the larger counts.
			t.Logf("$bsonSize: %d bytes", got[0].Size)
			size = max(size, got[0].Size)
		}
	}
	t.Logf("a semaphore of %d slots, all held by owners of %d bytes, one process waiting, a name of %d bytes: %d bytes (%.2f MB); with one holder: %d bytes; %.0f bytes a holder",
		n, mongolock.MaxOwnerLen, len(name), size, float64(size)/(1<<20), one, float64(size-one)/float64(n-1))
	require.Less(t, size, limit, "the document at MaxSemaphoreSlots")
	require.NoError(t, first.Release(ctx))
	require.NoError(t, last.Release(ctx))
}

// An RWLock's readers are not limited, but each takes at most 400 bytes of
// its document, as RWLock's doc says: measured with owners of MaxOwnerLen
// bytes and readers taken through the API.
func TestRWLockReaderTakesAtMost400BytesOfItsDocument(t *testing.T) {
	const readers, most = 8, 400
	db := testdb.Database(t)
	coll := semColl(db)
	ctx := boundedCtx(t, 30*time.Second)
	p := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner(strings.Repeat("o", mongolock.MaxOwnerLen)))
	rw := p.RWLock("readers")
	var held []*mongolock.Handle
	sizes := []int{}
	for range readers {
		h, err := rw.Reader().TryAcquire(ctx)
		require.NoError(t, err)
		held = append(held, h)
		sizes = append(sizes, len(semDoc(t, coll, "readers")))
	}
	each := float64(sizes[readers-1]-sizes[0]) / (readers - 1)
	t.Logf("%d readers: %d bytes; %.0f bytes a reader", readers, sizes[readers-1], each)
	require.LessOrEqual(t, each, float64(most), "bytes a reader")
	for _, h := range held {
		require.NoError(t, h.Release(ctx))
	}
}
