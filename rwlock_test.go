package mongolock_test

// Reader-writer locks against the real server, with holders on clients of
// their own.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// liveModes counts, by the server's clock, name's live readers (upgradeable
// ones included) and writers.
func liveModes(t *testing.T, coll *mongo.Collection, name string) (readers, writers int) {
	t.Helper()
	live := func(r bool) bson.D {
		var reading any = bson.D{{Key: "$in", Value: bson.A{"$$this.mode", bson.A{"r", "u"}}}}
		if !r {
			reading = bson.D{{Key: "$not", Value: bson.A{reading}}}
		}
		return bson.D{{Key: "$size", Value: bson.D{{Key: "$filter", Value: bson.D{
			{Key: "input", Value: bson.D{{Key: "$ifNull", Value: bson.A{"$holders", bson.A{}}}}},
			{Key: "cond", Value: bson.D{{Key: "$and", Value: bson.A{
				bson.D{{Key: "$gt", Value: bson.A{"$$this.expiresAt", "$$NOW"}}},
				reading,
			}}}},
		}}}}}
	}
	cur, err := coll.Aggregate(context.Background(), mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id", Value: name}}}},
		{{Key: "$project", Value: bson.D{{Key: "r", Value: live(true)}, {Key: "w", Value: live(false)}}}},
	})
	require.NoError(t, err)
	var docs []struct {
		R int `bson:"r"`
		W int `bson:"w"`
	}
	require.NoError(t, cur.All(context.Background(), &docs))
	if len(docs) == 0 {
		return 0, 0
	}
	return docs[0].R, docs[0].W
}

// Readers of separate clients hold the lock at once; a writer is refused
// while any does, and readers and writers are refused while a writer
// holds it. Every acquisition's token is greater than the one before.
func TestRWLockTryReadersShareWriterExcludes(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	var rws []*mongolock.RWLock
	for range 3 {
		rws = append(rws, newProvider(t, ownClient(t, db, nil)).RWLock("shared"))
	}
	require.Equal(t, "shared", rws[0].Name())
	var last int64
	next := func(h *mongolock.Handle) *mongolock.Handle {
		require.Greater(t, h.FencingToken(), last)
		last = h.FencingToken()
		return releaseAtCleanup(t, h)
	}
	var readers []*mongolock.Handle
	for _, rw := range rws {
		h, err := rw.Reader().TryAcquire(ctx)
		require.NoError(t, err)
		readers = append(readers, next(h))
	}
	r, w := liveModes(t, semColl(db), "shared")
	require.Equal(t, [2]int{3, 0}, [2]int{r, w}, "live readers, writers")
	for _, rw := range rws {
		_, err := rw.Writer().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a writer with readers")
	}
	// A refused writer's TryAcquire does not block readers.
	h, err := rws[0].Reader().TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, next(h).Release(ctx))

	for i, h := range readers {
		require.NoError(t, h.Release(ctx))
		if i < len(readers)-1 {
			_, err := rws[2].Writer().TryAcquire(ctx)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a writer with %d readers", len(readers)-1-i)
		}
	}
	wh, err := rws[1].Writer().TryAcquire(ctx)
	require.NoError(t, err, "no readers left")
	next(wh)
	r, w = liveModes(t, semColl(db), "shared")
	require.Equal(t, [2]int{0, 1}, [2]int{r, w}, "live readers, writers")
	for _, rw := range rws {
		_, err := rw.Writer().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "two writers")
		_, err = rw.Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a reader with a writer")
	}
	require.NoError(t, wh.Release(ctx))
	h, err = rws[2].Reader().TryAcquire(ctx)
	require.NoError(t, err, "the writer released")
	require.NoError(t, next(h).Release(ctx))
	require.Zero(t, holderCount(t, semColl(db), "shared"))
}

// Readers and writers of three processes contend: never a writer with
// anyone else, by an in-process count and by the server's, and readers do
// share the lock.
func TestRWLockNeverWriterWithOthers(t *testing.T) {
	const procs, rounds = 3, 10
	db := testdb.Database(t)
	ctx := boundedCtx(t, time.Minute)
	var readers, writers, mostReaders, writes atomic.Int64
	check := func() error {
		if r, w := readers.Load(), writers.Load(); w > 1 || w == 1 && r > 0 {
			return fmt.Errorf("%d readers and %d writers at once", r, w)
		}
		if r, w := liveModes(t, semColl(db), "mixed"); w > 1 || w == 1 && r > 0 {
			return fmt.Errorf("%d live readers and %d live writers on the server", r, w)
		}
		return nil
	}
	var wg sync.WaitGroup
	for range procs {
		rw := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock("mixed")
		for range 2 { // readers
			wg.Go(func() {
				for range rounds {
					h, err := rw.Reader().Acquire(ctx)
					if !assert(t, err == nil, "reader's Acquire: %v", err) {
						return
					}
					now := readers.Add(1)
					for m := mostReaders.Load(); now > m && !mostReaders.CompareAndSwap(m, now); m = mostReaders.Load() {
					}
					err = check()
					time.Sleep(5 * time.Millisecond) // the work done reading
					readers.Add(-1)
					assert(t, err == nil, "%v", err)
					assert(t, h.Release(ctx) == nil, "release")
				}
			})
		}
		wg.Go(func() { // a writer
			for range rounds / 2 {
				h, err := rw.Writer().Acquire(ctx)
				if !assert(t, err == nil, "Lock: %v", err) {
					return
				}
				writers.Add(1)
				writes.Add(1)
				err = check()
				time.Sleep(2 * time.Millisecond) // the work done writing
				writers.Add(-1)
				assert(t, err == nil, "%v", err)
				assert(t, h.Release(ctx) == nil, "release")
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(procs*(rounds/2)), writes.Load())
	require.Greater(t, mostReaders.Load(), int64(1), "readers never shared the lock")
	require.Zero(t, holderCount(t, semColl(db), "mixed"))
}

// A writer waiting in Acquire blocks new readers, and gets the lock once the
// readers holding it release, though readers keep coming, each taking the
// lock before the last one releases it: without the writer's claim, the
// lock would never be free of readers. Over the model, in simulated time.
func TestRWLockWaitingWriterIsNotStarvedByReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		readerP, readerNet := d.process(fastPolls)
		writerP, writerNet := d.process(fastPolls)
		readerNet.Delay(time.Millisecond) // round trips take time, as a server's do
		writerNet.Delay(time.Millisecond)
		rw := readerP.RWLock("busy")

		// The stream: a reader every 10 ms, each holding for 50 ms.
		var mu sync.Mutex
		type read struct {
			token      int64
			afterClaim bool // started once the writer's claim was seen
		}
		var reads []read
		var claimSeen atomic.Bool
		stop := make(chan struct{})
		var stream sync.WaitGroup
		stopOnce := sync.OnceFunc(func() { close(stop) })
		t.Cleanup(func() { stopOnce(); stream.Wait() })
		stream.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond): // the stream's pace
				}
				after := claimSeen.Load()
				stream.Go(func() {
					h, err := rw.Reader().Acquire(ctx)
					if !assert(t, err == nil, "reader's Acquire: %v", err) {
						return
					}
					mu.Lock()
					reads = append(reads, read{h.FencingToken(), after})
					mu.Unlock()
					time.Sleep(50 * time.Millisecond) // the work done reading
					assert(t, h.Release(ctx) == nil, "release")
				})
			}
		})
		d.await("readers overlap", func() bool { r, _ := d.liveReadersAndWriters("busy"); return r >= 2 })

		wrote := make(chan *mongolock.Handle, 1)
		go func() {
			h, err := writerP.RWLock("busy").Writer().Acquire(ctx)
			assert(t, err == nil, "writer's Acquire: %v", err)
			wrote <- h
		}()
		d.await("the waiting writer's claim", func() bool { return writerClaims(d.doc(memSemColl, "busy")) })
		claimSeen.Store(true)
		_, err := rw.Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a new reader while a writer waits")

		var w *mongolock.Handle
		select {
		case w = <-wrote:
		case <-time.After(time.Minute):
			t.Fatal("the writer starved behind the readers")
		}
		require.NotNil(t, w)
		r, wr := d.liveReadersAndWriters("busy")
		require.Equal(t, [2]int{0, 1}, [2]int{r, wr}, "live readers, writers")
		require.NoError(t, w.Release(ctx))
		stopOnce()
		stream.Wait()
		var before, waited int
		for _, rd := range reads {
			if rd.afterClaim {
				require.Greater(t, rd.token, w.FencingToken(), "a reader started after the claim got in before the writer")
				waited++
			} else if rd.token < w.FencingToken() {
				before++
			}
		}
		require.Greater(t, before, 1, "readers before the writer")
		require.Positive(t, waited, "readers that waited for the writer")
		all, _ := d.holders("busy")
		require.Zero(t, all)
	})
}

// A writer whose own process holds the lock for reading still claims it:
// readers of other processes are refused while it waits, and it gets the
// lock once its process's reader releases.
func TestRWLockWriterOfAReadingProcessClaimsTheLock(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	mine := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock("mixed")
	other := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock("mixed")

	reading, err := mine.Reader().TryAcquire(ctx)
	require.NoError(t, err)
	wrote := make(chan error, 1)
	go func() {
		h, err := mine.Writer().Acquire(ctx)
		if err == nil {
			err = h.Release(ctx)
		}
		wrote <- err
	}()
	pollUntil(t, 5*time.Second, "the waiting writer's claim", func() bool {
		info, err := other.Inspect(ctx)
		return err == nil && info.WriterWaiting
	})
	_, err = other.Reader().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "another process's reader while this process's writer waits")
	require.NoError(t, reading.Release(ctx))
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not get the lock its process's reader released")
	}
}

// A Lock whose ctx ends after its request reached the server leaves nothing
// held; and a writer that gave up stops blocking readers.
func TestRWLockCancelledLockLeavesNoOrphan(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	px, pdb := proxied(t, db)
	rw := newProvider(t, pdb, mongolock.WithExpiry(30*time.Second)).RWLock("orphan")
	h, err := rw.Writer().TryAcquire(ctx) // creates the document
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	requireNoOrphanAfterCut(t, db, px, "orphan", rw.Writer().Acquire)

	// A writer that gives up while readers hold: its claim lapses.
	reader := newProvider(t, ownClient(t, db, nil)).RWLock("orphan")
	r, err := reader.Reader().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, r)
	// It gives up once its claim was renewed: it has had the reply to the
	// attempt that made it (a deadline could end it before any reply on a
	// loaded machine, when nothing is known about the lock).
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wrote := acquireInBackground(wctx, rw.Writer())
	var claimed time.Time
	pollUntil(t, 20*time.Second, "the writer's claim, renewed", func() bool {
		doc := semDoc(t, semColl(db), "orphan")
		until, _ := doc.Lookup("waitingUntil").TimeOK()
		if claimed.IsZero() && writerClaims(doc) {
			claimed = until
		}
		return writerClaims(doc) && !claimed.IsZero() && !until.Equal(claimed)
	})
	wcancel()
	err = <-wrote
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	pollUntil(t, 10*time.Second, "a reader gets in after the writer gave up", func() bool {
		h, err := reader.Reader().TryAcquire(ctx)
		if err == nil {
			require.NoError(t, h.Release(ctx))
		}
		return err == nil
	})
}

// Readers' and writers' leases are extended with the provider's other
// handles; a holder taken away on the server is lost, and only that one;
// Close releases the rest.
func TestRWLockLeasesAreExtendedAndLossIsSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _, other := d.holderAndRival(mongolock.WithExpiry(memExpiry))
		var hs []*mongolock.Handle
		for range 2 {
			h, err := p.RWLock("read").Reader().TryAcquire(ctx)
			require.NoError(t, err)
			hs = append(hs, h)
		}
		w, err := p.RWLock("written").Writer().TryAcquire(ctx)
		require.NoError(t, err)
		hs = append(hs, w)

		time.Sleep(4 * memExpiry)
		synctest.Wait()
		for _, h := range hs {
			require.False(t, closedNow(h.Lost()), "%s lost", h.Name())
		}
		_, err = other.RWLock("written").Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the writer's lease was kept")

		// Someone takes the second reader away in the database: the next
		// extension, within a cadence, finds it gone.
		d.editIn(memSemColl, "read", bson.D{{Key: "$pull", Value: bson.D{{Key: "holders", Value: bson.D{{Key: "id", Value: mongolock.LockID(hs[1])}}}}}})
		time.Sleep(memExpiry / 3)
		synctest.Wait()
		require.True(t, closedNow(hs[1].Lost()), "the taken reader's Lost is open a cadence later")
		require.ErrorIs(t, context.Cause(hs[1].Context()), mongolock.ErrLockLost)
		require.False(t, closedNow(hs[0].Lost()) || closedNow(w.Lost()))
		require.ErrorIs(t, hs[1].Release(ctx), mongolock.ErrLockLost)

		require.NoError(t, p.Close(ctx))
		for _, name := range []string{"read", "written"} {
			all, _ := d.holders(name)
			require.Zero(t, all, "holders of %q after Close", name)
		}
	})
}

// Writers cannot starve readers either: a reader refused while a writer
// holds the lock claims the next turn, so the writer's process does not
// hand the lock to its next writer, and the reader gets in first. Calls of
// one process, reading and writing, wait in one line.
func TestRWLockWaitingReaderGetsInBeforeTheWritersNextWriter(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	writers, readers := e.p.RWLock("alternate"), e.other.RWLock("alternate")
	first, err := writers.Writer().Acquire(ctx)
	require.NoError(t, err)
	read := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := readers.Reader().Acquire(ctx)
		if assert(t, err == nil, "reader: %v", err) {
			read <- h
		}
	}()
	pollUntil(t, 10*time.Second, "the reader's claim", func() bool {
		m, ok := semDoc(t, semColl(e.db), "alternate").Lookup("waitingMode").StringValueOK()
		return ok && m == "r"
	})
	wrote := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := writers.Writer().Acquire(ctx)
		if assert(t, err == nil, "second writer: %v", err) {
			wrote <- h
		}
	}()
	awaitSlotQueueLen(t, e.p, "alternate", 1)
	require.NoError(t, first.Release(ctx))

	var r *mongolock.Handle
	select {
	case r = <-read:
	case w := <-wrote:
		t.Fatalf("the writer's process handed the lock to its next writer (token %d) while a reader waited", w.FencingToken())
	case <-ctx.Done():
		t.Fatal("the reader never got the lock")
	}
	require.Greater(t, r.FencingToken(), first.FencingToken())
	require.NoError(t, r.Release(ctx))
	w := <-wrote
	require.Greater(t, w.FencingToken(), r.FencingToken())
	require.NoError(t, w.Release(ctx))
}

// The reader's and the writer's Do run fn under the lock for reading and for writing, and
// release it.
func TestRWLockDoHoldsForFnAndReleases(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	rw := e.p.RWLock("do")
	require.NoError(t, rw.Reader().Do(ctx, func(ctx context.Context) error {
		r, w := liveModes(t, semColl(e.db), "do")
		require.Equal(t, [2]int{1, 0}, [2]int{r, w}, "live readers, writers in the reader's Do")
		_, err := e.other.RWLock("do").Writer().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		return nil
	}))
	errFn := errors.New("fn failed")
	require.ErrorIs(t, rw.Writer().Do(ctx, func(ctx context.Context) error {
		r, w := liveModes(t, semColl(e.db), "do")
		require.Equal(t, [2]int{0, 1}, [2]int{r, w}, "live readers, writers in Do")
		return errFn
	}), errFn)
	r, w := liveModes(t, semColl(e.db), "do")
	require.Equal(t, [2]int{0, 0}, [2]int{r, w}, "live readers, writers after Do")
}

// A Semaphore and an RWLock share a collection: an acquisition under a name
// of the other kind fails at once with an error that says so, free or held,
// and changes nothing.
func TestRWLockAndSemaphoreOfOneNameAreAnError(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	rw, sem := e.p.RWLock("shared"), e.p.Semaphore("shared", 2)
	requireOtherKind := func(err error, what string) {
		t.Helper()
		require.ErrorContains(t, err, "taken by another kind of lock", what)
		require.ErrorIs(t, err, mongolock.ErrMismatch, what)
		require.NotErrorIs(t, err, mongolock.ErrNotAcquired, what)
	}
	h, err := rw.Reader().TryAcquire(ctx)
	require.NoError(t, err)
	_, err = sem.TryAcquire(ctx)
	requireOtherKind(err, "a semaphore's TryAcquire on a read-held RWLock")
	_, err = sem.Acquire(ctx) // at once: ctx is a minute
	requireOtherKind(err, "a semaphore's Acquire on a read-held RWLock")
	require.NoError(t, h.Release(ctx))
	_, err = sem.TryAcquire(ctx)
	requireOtherKind(err, "a semaphore's TryAcquire on a free RWLock")
	r, w := liveModes(t, semColl(e.db), "shared")
	require.Equal(t, [2]int{0, 0}, [2]int{r, w})

	s, err := e.p.Semaphore("counted", 2).TryAcquire(ctx)
	require.NoError(t, err)
	_, err = e.other.RWLock("counted").Writer().Acquire(ctx)
	requireOtherKind(err, "an RWLock's writer on a held semaphore")
	_, err = e.other.RWLock("counted").Reader().TryAcquire(ctx)
	requireOtherKind(err, "an RWLock's reader's TryAcquire on a held semaphore")
	require.Equal(t, 1, liveHolders(t, semColl(e.db), "counted"))
	require.NoError(t, s.Release(ctx))
}

// Upgradeable readers.

// upgradeInBackground starts h's Upgrade and returns where its error
// arrives.
func upgradeInBackground(ctx context.Context, h *mongolock.UpgradeableHandle) <-chan error {
	done := make(chan error, 1)
	go func() { done <- h.Upgrade(ctx) }()
	return done
}

// upgradeableBesideReaders takes name's upgradeable reader through a
// provider of its own, and k readers beside it through another, all
// released when the test ends. It returns the upgradeable reader, the
// readers' RWLock and the readers.
func upgradeableBesideReaders(t *testing.T, ctx context.Context, db *mongo.Database, name string, k int) (*mongolock.UpgradeableHandle, *mongolock.RWLock, []*mongolock.Handle) {
	t.Helper()
	u, err := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock(name).Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, u.Handle)
	readers := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock(name)
	var held []*mongolock.Handle
	for range k {
		h, err := readers.Reader().TryAcquire(ctx)
		require.NoError(t, err, "a reader beside the upgradeable reader")
		held = append(held, releaseAtCleanup(t, h))
	}
	return u, readers, held
}

// awaitUpgradeWaiting waits until an upgrade of name holds new readers off,
// as Inspect tells it.
func awaitUpgradeWaiting(t *testing.T, ctx context.Context, rw *mongolock.RWLock) {
	t.Helper()
	pollUntil(t, 10*time.Second, "the upgrade holds readers off", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && info.WriterWaiting
	})
}

// An upgrade with other readers present, each process a provider of its
// own: new readers are refused at once; a writer that comes meanwhile
// waits; once the readers leave, the upgrader is the writer, with a
// greater token, and nobody holds beside it; the waiting writer gets in
// only after it releases.
func TestRWLockUpgradeWaitsForReadersAndNoWriterGetsInBetween(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	const name = "ledger"
	u, readers, held := upgradeableBesideReaders(t, ctx, db, name, 2)
	pw := newProvider(t, ownClient(t, db, nil), fastPolls)
	writers := pw.RWLock(name)
	_, err := writers.Writer().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a writer beside the upgradeable reader")
	first := u.FencingToken()

	upgraded := upgradeInBackground(ctx, u)
	awaitUpgradeWaiting(t, ctx, readers)
	_, err = readers.Reader().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a new reader while the upgrade waits")
	wrote := startAcquire(ctx, writerMode(pw, name))
	pollUntil(t, 10*time.Second, "the writer's claim", func() bool {
		m, ok := semDoc(t, semColl(db), name).Lookup("waitingMode").StringValueOK()
		return ok && m == "w"
	})

	for _, h := range held {
		require.NoError(t, h.Release(ctx))
	}
	select {
	case err := <-upgraded:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the upgrade did not complete once the readers left")
	}
	require.Greater(t, u.FencingToken(), first, "the upgraded writer's token")
	r, w := liveModes(t, semColl(db), name)
	require.Equal(t, [2]int{0, 1}, [2]int{r, w}, "live readers, writers after the upgrade")
	_, err = readers.Reader().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a reader beside the upgraded writer")
	require.False(t, closedNow(u.Lost()))
	select {
	case o := <-wrote:
		t.Fatalf("a writer got in beside the upgraded one: %v", o.err)
	default:
	}

	require.NoError(t, u.Release(ctx))
	w2 := awaitAcquired(t, wrote, 10*time.Second, "the waiting writer, after the upgraded one released")
	require.Greater(t, w2.FencingToken(), u.FencingToken())
}

// An upgrade whose ctx ends while readers stay: new readers are refused
// while it waits and let in again once it failed; the handle is still an
// upgradeable reader, which can upgrade later; and what it left keeps no
// writer out once it released. Over the model, the upgrade is cancelled
// once its refused poll is in: its error says both why it ended and that
// it was refused.
func TestRWLockFailedUpgradeLetsReadersInAgainAndLeavesNoMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		ctx := d.Ctx
		const name = "report"
		up, _ := d.process(fastPolls)
		rp, _ := d.process(fastPolls)
		u, err := up.RWLock(name).Upgradeable().TryAcquire(ctx)
		require.NoError(t, err)
		readers := rp.RWLock(name)
		r, err := readers.Reader().TryAcquire(ctx)
		require.NoError(t, err)

		uctx, cancel := context.WithCancel(ctx)
		defer cancel()
		upgraded := upgradeInBackground(uctx, u)
		awaitUpgradeWaiting(t, ctx, readers)
		_, err = readers.Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a new reader while the upgrade waits")
		synctest.Wait() // the upgrade has its refusal and sleeps
		cancel()
		err = <-upgraded
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "readers held the lock the whole time")
		synctest.Wait()
		h, err := readers.Reader().TryAcquire(ctx)
		require.NoError(t, err, "a new reader once the upgrade failed")
		require.NoError(t, h.Release(ctx))
		info, err := readers.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, info.WriterWaiting, "the failed upgrade still holds readers off")
		require.False(t, closedNow(u.Context().Done()), "the handle ended with the failed upgrade")
		require.Equal(t, []string{"u", "r"}, d.liveModes(name), "live holders after the failed upgrade")

		// Still upgradeable: once the reader leaves, a second upgrade succeeds.
		require.NoError(t, r.Release(ctx))
		require.NoError(t, u.Upgrade(ctx))
		require.NoError(t, u.Release(ctx))
		w, err := readers.Writer().TryAcquire(ctx)
		require.NoError(t, err, "a writer after the upgraded reader released")
		require.Greater(t, w.FencingToken(), u.FencingToken())
		require.NoError(t, w.Release(ctx))
	})
}

// An upgrade cut short by its ctx while its round trip is on its way, which
// the server applies (no other reader holds), leaves no mark: once the
// late reply is in, the holder is an upgradeable reader again, readers get
// in, and a writer gets in once it released.
func TestRWLockCancelledUpgradeLeavesNoMark(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	const name = "cancelled"
	px, pdb := proxied(t, db)
	other := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock(name)
	u, err := newProvider(t, pdb, fastPolls).RWLock(name).Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, u.Handle)
	token := u.FencingToken()
	px.SetLatency(0, 400*time.Millisecond) // replies come late
	uctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, u.Upgrade(uctx), context.DeadlineExceeded)
	pollUntil(t, 5*time.Second, "the server applied the cut-short upgrade", func() bool {
		return semDoc(t, semColl(db), name).Lookup("fencingToken").Int64() != token
	})
	px.SetLatency(0, 0)
	require.Equal(t, token, u.FencingToken(), "the token of an upgrade that failed")
	pollUntil(t, 5*time.Second, "a reader gets in after the cut-short upgrade", func() bool {
		h, err := other.Reader().TryAcquire(ctx)
		if err == nil {
			require.NoError(t, h.Release(ctx))
		}
		return err == nil
	})
	_, err = other.Writer().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a writer beside the upgradeable reader")
	require.NoError(t, u.Release(ctx))
	w, err := other.Writer().TryAcquire(ctx)
	require.NoError(t, err, "a writer after the upgradeable reader released")
	require.NoError(t, w.Release(ctx))
}

// A downgrade lets in at once a reader of another process that waits,
// with its claim on the next turn, while a writer that waits stays out
// until the readers leave. The downgraded handle is an upgradeable reader
// then: a second one is refused.
func TestRWLockDowngradeLetsReadersInAndKeepsWritersOut(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	const name = "downgraded"
	mine := newProvider(t, ownClient(t, db, nil), fastPolls)
	other := newProvider(t, ownClient(t, db, nil), fastPolls)
	late := newProvider(t, ownClient(t, db, nil), fastPolls)

	w := mustTryUpgradeable(t, ctx, mine.RWLock(name).Upgradeable())
	releaseAtCleanup(t, w.Handle)
	require.NoError(t, w.Upgrade(ctx), "alone, at once")
	token := w.FencingToken()
	read := startAcquire(ctx, readerMode(other, name))
	pollUntil(t, 10*time.Second, "the reader's claim", func() bool {
		m, ok := semDoc(t, semColl(db), name).Lookup("waitingMode").StringValueOK()
		return ok && m == "r"
	})
	wrote := startAcquire(ctx, writerMode(late, name))
	awaitSlotQueueLen(t, late, name, 1)

	require.NoError(t, w.Downgrade(ctx))
	require.Equal(t, token, w.FencingToken(), "a downgrade keeps the token")
	r := awaitAcquired(t, read, promptly, "the other process's reader, after the downgrade")
	rs, ws := liveModes(t, semColl(db), name)
	require.Equal(t, [2]int{2, 0}, [2]int{rs, ws}, "live readers, writers after the downgrade")
	select {
	case o := <-wrote:
		t.Fatalf("a writer got in beside the downgraded reader: %v", o.err)
	default:
	}
	_, err := late.RWLock(name).Upgradeable().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a second upgradeable reader beside the downgraded one")
	require.ErrorIs(t, w.Downgrade(ctx), mongolock.ErrMismatch, "a reader's downgrade")

	require.NoError(t, w.Release(ctx))
	require.NoError(t, r.Release(ctx))
	w2 := awaitAcquired(t, wrote, 10*time.Second, "the waiting writer, once the readers left")
	require.Greater(t, w2.FencingToken(), r.FencingToken())
}

// A reader of the downgrading writer's own process, which waits in line
// without asking the database while its process writes, is woken by the
// downgrade and gets in at once.
func TestRWLockDowngradeWakesTheReadersOfItsProcess(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, fastPolls)
	w := mustTryUpgradeable(t, ctx, e.p.RWLock("local").Upgradeable())
	releaseAtCleanup(t, w.Handle)
	require.NoError(t, w.Upgrade(ctx), "alone, at once")
	read := startAcquire(ctx, readerMode(e.p, "local"))
	awaitSlotQueueLen(t, e.p, "local", 1)
	require.NoError(t, w.Downgrade(ctx))
	awaitAcquired(t, read, promptly, "this process's reader, after the downgrade")
}

// Upgradeable readers: at most one at a time, beside any readers; a second
// waits until the first releases, and takes the next token. An upgrade
// with no other reader takes one round trip, and so does a downgrade; the
// upgraded handle downgrades to an upgradeable reader, which can upgrade
// again.
func TestRWLockOneUpgradeableReaderAtATime(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	const name = "single"
	count := &commandCounter{}
	first := newProvider(t, ownClient(t, db, count), fastPolls)
	second := newProvider(t, ownClient(t, db, nil), fastPolls)

	u, err := first.RWLock(name).Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, u.Handle)
	r, err := second.RWLock(name).Reader().TryAcquire(ctx)
	require.NoError(t, err, "a reader beside an upgradeable reader")
	info, err := second.RWLock(name).Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, info.Holders, 2)
	require.Equal(t, [2]bool{true, false}, [2]bool{info.Holders[0].Upgradeable, info.Holders[0].Write}, "the upgradeable reader, inspected")
	require.Equal(t, [2]bool{false, false}, [2]bool{info.Holders[1].Upgradeable, info.Holders[1].Write}, "the reader, inspected")
	require.NoError(t, r.Release(ctx))
	_, err = second.RWLock(name).Upgradeable().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a second upgradeable reader")
	got := startAcquire(ctx, upgradeableMode(second, name))
	pollUntil(t, 10*time.Second, "the second upgradeable reader's claim", func() bool {
		m, ok := semDoc(t, semColl(db), name).Lookup("waitingMode").StringValueOK()
		return ok && m == "u"
	})
	_, err = first.RWLock(name).Writer().TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a writer beside an upgradeable reader")

	before := count.named("findAndModify")
	require.NoError(t, u.Upgrade(ctx))
	require.EqualValues(t, 1, count.named("findAndModify")-before, "round trips of an upgrade with no other reader")
	upgraded := u.FencingToken()
	before = count.commands.Load()
	require.NoError(t, u.Downgrade(ctx))
	require.EqualValues(t, 1, count.commands.Load()-before, "round trips of a downgrade")
	require.Equal(t, upgraded, u.FencingToken())
	rs, ws := liveModes(t, semColl(db), name)
	require.Equal(t, [2]int{1, 0}, [2]int{rs, ws}, "live readers, writers after the downgrade")
	require.ErrorIs(t, u.Downgrade(ctx), mongolock.ErrMismatch, "an upgradeable reader's downgrade")
	require.NoError(t, u.Upgrade(ctx), "an upgrade after a downgrade")
	require.Greater(t, u.FencingToken(), upgraded)
	require.ErrorIs(t, u.Upgrade(ctx), mongolock.ErrMismatch, "an upgraded handle's upgrade")
	select {
	case o := <-got:
		t.Fatalf("a second upgradeable reader got in: %v", o.err)
	default:
	}
	require.NoError(t, u.Release(ctx))
	u2 := awaitAcquired(t, got, promptly, "the second upgradeable reader, once the first released")
	require.Greater(t, u2.FencingToken(), u.FencingToken())
}

// Upgrade and Downgrade are an upgradeable reader's alone: a Handle, of
// every kind, has neither, so that no handle has a method that fails for
// its kind.
func TestOnlyAnUpgradeableReadersHandleUpgradesAndDowngrades(t *testing.T) {
	for _, m := range []string{"Upgrade", "Downgrade"} {
		_, ok := reflect.TypeFor[*mongolock.Handle]().MethodByName(m)
		require.False(t, ok, "a Handle of every kind has %s", m)
		_, ok = reflect.TypeFor[*mongolock.Leadership]().MethodByName(m)
		require.False(t, ok, "a Leadership has %s", m)
		_, ok = reflect.TypeFor[*mongolock.UpgradeableHandle]().MethodByName(m)
		require.True(t, ok, "an UpgradeableHandle has no %s", m)
	}
}

// Upgrade and Downgrade of a handle in the wrong mode, or of a released
// one, fail at once with an error that says so, and change nothing.
func TestRWLockUpgradeAndDowngradeInTheWrongMode(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	r, err := e.p.RWLock("modes").Reader().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, r)
	u := mustTryUpgradeable(t, ctx, e.p.RWLock("modes").Upgradeable())
	releaseAtCleanup(t, u.Handle)
	token := u.FencingToken()
	err = u.Downgrade(ctx)
	require.ErrorIs(t, err, mongolock.ErrMismatch, "an upgradeable reader's downgrade")
	require.ErrorContains(t, err, "not a writer's")
	require.Equal(t, token, u.FencingToken())
	rs, ws := liveModes(t, semColl(e.db), "modes")
	require.Equal(t, [2]int{2, 0}, [2]int{rs, ws})
	var nilCtx context.Context
	require.Error(t, u.Upgrade(nilCtx))
	require.Error(t, u.Downgrade(nilCtx))
	rs, ws = liveModes(t, semColl(e.db), "modes")
	require.Equal(t, [2]int{2, 0}, [2]int{rs, ws}, "after the calls with a nil ctx")

	require.NoError(t, u.Release(ctx))
	for what, err := range map[string]error{"upgrade": u.Upgrade(ctx), "downgrade": u.Downgrade(ctx)} {
		require.ErrorContains(t, err, "released", what)
		require.NotErrorIs(t, err, mongolock.ErrMismatch, what)
	}
}

// A loss while an upgrade waits (the holder taken away on the server) is
// the handle's loss, and the upgrade's error.
func TestRWLockUpgradeSeesTheLoss(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, fastPolls)
	u, err := e.p.RWLock("taken").Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	r, err := e.other.RWLock("taken").Reader().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, r)
	upgraded := upgradeInBackground(ctx, u)
	awaitUpgradeWaiting(t, ctx, e.other.RWLock("taken"))
	_, err = semColl(e.db).UpdateOne(ctx, bson.D{{Key: "_id", Value: "taken"}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "holders", Value: bson.D{{Key: "id", Value: mongolock.LockID(u.Handle)}}}}}})
	require.NoError(t, err)
	select {
	case err := <-upgraded:
		require.ErrorIs(t, err, mongolock.ErrLockLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the upgrade did not see the loss")
	}
	awaitClosed(t, u.Lost(), time.Second, "the upgrader's Lost")
	require.ErrorIs(t, u.Release(ctx), mongolock.ErrLockLost)
}

// Upgraders, readers and writers of three processes contend: never a
// writer beside anyone else, by an in-process count and by the server's,
// and no write between an upgrader's read and its write (the version it
// read is the version it writes over).
func TestRWLockUpgradesUnderContention(t *testing.T) {
	const procs, rounds, name = 3, 6, "contended"
	db := testdb.Database(t)
	ctx := boundedCtx(t, time.Minute)
	var readers, writers, version, upgrades atomic.Int64
	check := func(who string) {
		if r, w := readers.Load(), writers.Load(); w > 1 || w == 1 && r > 0 {
			t.Errorf("%s: %d readers and %d writers at once", who, r, w)
		}
		if r, w := liveModes(t, semColl(db), name); w > 1 || w == 1 && r > 0 {
			t.Errorf("%s: %d live readers and %d live writers on the server", who, r, w)
		}
	}
	// write holds as a writer: counted in, checked, and the version raised.
	write := func(who string) {
		writers.Add(1)
		check(who)
		version.Add(1)
		time.Sleep(time.Millisecond) // the work done writing
		writers.Add(-1)
	}
	read := func(who string) {
		readers.Add(1)
		check(who)
		time.Sleep(2 * time.Millisecond) // the work done reading
		readers.Add(-1)
	}
	var wg sync.WaitGroup
	for range procs {
		rw := newProvider(t, ownClient(t, db, nil), fastPolls).RWLock(name)
		wg.Go(func() { // an upgrader
			for range rounds {
				h, err := rw.Upgradeable().Acquire(ctx)
				if !assert(t, err == nil, "upgradeable reader's Acquire: %v", err) {
					return
				}
				read("upgradeable reader")
				seen := version.Load()
				if !assert(t, h.Upgrade(ctx) == nil, "upgrade") {
					return
				}
				assert(t, version.Load() == seen, "a write between the upgrader's read and its write")
				write("upgraded writer")
				upgrades.Add(1)
				assert(t, h.Downgrade(ctx) == nil, "downgrade")
				read("downgraded reader")
				assert(t, h.Release(ctx) == nil, "release")
			}
		})
		// holds takes l n times, each time doing work as who.
		holds := func(l *mongolock.Lock, n int, who string, work func(who string)) {
			for range n {
				h, err := l.Acquire(ctx)
				if !assert(t, err == nil, "%s's Acquire: %v", who, err) {
					return
				}
				work(who)
				assert(t, h.Release(ctx) == nil, "release")
			}
		}
		wg.Go(func() { holds(rw.Reader(), 2*rounds, "reader", read) })
		wg.Go(func() { holds(rw.Writer(), rounds, "writer", write) })
	}
	wg.Wait()
	require.Equal(t, int64(procs*rounds), upgrades.Load())
	require.Equal(t, int64(2*procs*rounds), version.Load())
	require.Zero(t, holderCount(t, semColl(db), name))
}

// An upgrade waits in its process's line: the release of a reader of its
// own process wakes it at once, whatever its sleep. Its sleeps here are a
// minute long, longer than its ctx.
func TestRWLockUpgradeWakesWhenAReaderOfItsProcessReleases(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	const name = "ledger"
	rw := newProvider(t, db, mongolock.WithBusyWaitSleep(time.Minute, 2*time.Minute)).RWLock(name)
	u, err := rw.Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, u.Handle)
	r, err := rw.Reader().TryAcquire(ctx)
	require.NoError(t, err, "a reader of the same process beside the upgradeable reader")
	releaseAtCleanup(t, r)

	uctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	upgraded := upgradeInBackground(uctx, u)
	awaitUpgradeWaiting(t, ctx, rw)
	require.NoError(t, r.Release(ctx))
	require.NoError(t, <-upgraded, "the upgrade, once the reader of its process left")
	live, writers := liveModes(t, semColl(db), name)
	require.Equal(t, [2]int{0, 1}, [2]int{live, writers}, "live readers, writers after the upgrade")
}

// Over the model: an Upgrade rides out a refused poll and a poll whose
// reply was lost (undone, and polled again), and completes once the other
// process's reader leaves; a second Upgrade or Downgrade of the handle
// meanwhile is refused. A Downgrade whose round trip is refused returns
// its error, and the handle is a reader all the same: the downgrade is
// retried in the background, and the other process's readers get in.
func TestRWLockUpgradeAndDowngradeOverTheModelRideOutFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		pu, net := d.process()
		pr, _ := d.process()
		rw := pu.RWLock("ledger")
		require.Equal(t, "ledger", rw.Name())
		u := mustTryUpgradeable(t, ctx, rw.Upgradeable())
		releaseAtCleanup(t, u.Handle)
		reader := mustTryAcquire(t, ctx, pr.RWLock("ledger").Reader())
		first := u.FencingToken()

		net.Refuse(1)
		upgraded := upgradeInBackground(ctx, u)
		time.Sleep(time.Second) // simulated: the refused poll, and one that holds readers off
		net.LoseReplies(1)
		time.Sleep(time.Second) // simulated: a poll whose reply is lost
		bounded, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		require.ErrorContains(t, u.Upgrade(bounded), "another Upgrade or Downgrade of the handle is under way")
		require.ErrorContains(t, u.Downgrade(ctx), "not a writer's")
		select {
		case err := <-upgraded:
			t.Fatalf("upgraded beside a reader: %v", err)
		default:
		}
		_, err := pr.RWLock("ledger").Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a new reader while the upgrade waits")
		require.NoError(t, reader.Release(ctx))
		require.NoError(t, <-upgraded)
		require.Greater(t, u.FencingToken(), first)
		_, err = pr.RWLock("ledger").Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a reader beside the writer")

		mongolock.WaitBackground(pu) // the undoing of the lost poll, which the refusal must not meet
		net.Refuse(1)
		require.Error(t, u.Downgrade(ctx), "the refused round trip")
		time.Sleep(time.Second) // simulated: the background retry
		again, err := pr.RWLock("ledger").Reader().TryAcquire(ctx)
		require.NoError(t, err, "a reader beside the downgraded handle")
		require.NoError(t, again.Release(ctx))
		require.False(t, closedNow(u.Lost()))
	})
}

// Over the model: an Upgrade that waits ends when its handle is released
// meanwhile, saying so; a Downgrade of an upgraded handle whose holder was force
// released is ErrLockLost, and signals the loss at once.
func TestRWLockUpgradeAndDowngradeOverTheModelSeeTheirHandleEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		pu, _ := d.process()
		pr, _ := d.process()
		u := mustTryUpgradeable(t, ctx, pu.RWLock("released").Upgradeable())
		releaseAtCleanup(t, mustTryAcquire(t, ctx, pr.RWLock("released").Reader()))
		upgraded := upgradeInBackground(ctx, u)
		synctest.Wait()
		require.NoError(t, u.Release(ctx))
		require.ErrorContains(t, <-upgraded, "the handle was released")

		w := mustTryUpgradeable(t, ctx, pu.RWLock("forced").Upgradeable())
		require.NoError(t, w.Upgrade(ctx), "alone, at once")
		forced, err := pr.ForceRelease(ctx, "forced")
		require.NoError(t, err)
		require.True(t, forced)
		require.ErrorIs(t, w.Downgrade(ctx), mongolock.ErrLockLost)
		require.True(t, closedNow(w.Lost()), "the loss is signalled")
		require.ErrorIs(t, w.Release(ctx), mongolock.ErrLockLost)
	})
}

// Over the model: an upgradeable reader's Do gives fn its handle, which
// upgrades and writes; the lock is free once Do returns, whatever mode fn
// left it in, and fn's error is Do's.
func TestRWLockUpgradeableDoRunsFnWithItsHandle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process()
		other, _ := d.process()
		failed := errors.New("fn failed")
		for _, upgrade := range []bool{false, true} {
			var token int64
			err := p.RWLock("catalog").Upgradeable().Do(ctx, func(ctx context.Context, h *mongolock.UpgradeableHandle) error {
				require.NoError(t, ctx.Err())
				token = h.FencingToken()
				if upgrade {
					require.NoError(t, h.Upgrade(ctx))
					_, err := other.RWLock("catalog").Reader().TryAcquire(ctx)
					require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a reader beside the upgraded handle")
				}
				return failed
			})
			require.ErrorIs(t, err, failed, "fn's error")
			require.NotZero(t, token, "fn did not run")
			w, err := other.RWLock("catalog").Writer().TryAcquire(ctx)
			require.NoError(t, err, "a writer once Do returned (upgraded: %v)", upgrade)
			require.NoError(t, w.Release(ctx))
		}
	})
}
