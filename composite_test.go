package mongolock_test

// Composite locks: all or none, no deadlock between composites given in
// opposite orders, loss of one part, mixed kinds; against the test server,
// and over the model in simulated time where the order of events decides.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

func mustComposite(t *testing.T, parts ...mongolock.Part) *mongolock.Composite {
	t.Helper()
	c, err := mongolock.NewComposite(parts...)
	require.NoError(t, err)
	return c
}

// releaseCompositeAtCleanup releases h when the test ends, also when it
// fails half way.
func releaseCompositeAtCleanup(t *testing.T, h *mongolock.CompositeHandle) *mongolock.CompositeHandle {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Release(ctx)
	})
	return h
}

// requireFree asserts that each part is free now: one TryAcquire of each
// (through parts of another process) succeeds, and is released.
func requireFree(t *testing.T, ctx context.Context, parts ...mongolock.Part) {
	t.Helper()
	for _, p := range parts {
		c, err := mongolock.NewComposite(p) // a Part is taken through a Composite
		require.NoError(t, err)
		h, err := c.TryAcquire(ctx)
		require.NoError(t, err, "%q should be free", p.Name())
		require.NoError(t, h.Release(ctx))
	}
}

func TestNewCompositeRefusesBadParts(t *testing.T) {
	db := offlineDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	// Another client of a database of the same name may reach the same server.
	sameDB, err := mongolock.NewProvider(offlineDatabase(t))
	require.NoError(t, err)
	otherColl, err := mongolock.NewProvider(db, mongolock.WithCollection("other"))
	require.NoError(t, err)
	var nilLock *mongolock.Lock
	var nilSem *mongolock.Semaphore
	rw := p.RWLock("rw")
	for _, tc := range []struct {
		label string
		parts []mongolock.Part
		want  string // in the error; "" if valid
	}{
		{"none", nil, "mongolock: new composite: no parts"},
		{"nil", []mongolock.Part{p.Lock("a"), nil}, "part 1 is nil"},
		{"nil *Lock", []mongolock.Part{nilLock}, "part 0: nil *Lock"},
		{"nil *Semaphore", []mongolock.Part{p.Lock("a"), nilSem}, "part 1: nil *Semaphore"},
		{"semaphore of 0", []mongolock.Part{p.Semaphore("s", 0)}, "part 0: semaphore of 0 slots"},
		{"a lock twice", []mongolock.Part{p.Lock("a"), p.Lock("b"), p.Lock("a")}, `new composite: "a": the lock is a part twice`},
		{"a lock twice, from another client", []mongolock.Part{p.Lock("a"), sameDB.Lock("a")}, "the lock is a part twice"},
		{"a semaphore twice", []mongolock.Part{p.Semaphore("s", 2), p.Semaphore("s", 3)}, "the semaphore is a part twice"},
		{"a reader twice", []mongolock.Part{rw.Reader(), rw.Reader()}, "the RWLock reader is a part twice"},
		{"a reader and a writer", []mongolock.Part{rw.Writer(), rw.Reader()}, "a reader and a writer of one RWLock: hold the writer alone"},
		{"an upgradeable reader and a reader", []mongolock.Part{rw.Upgradeable(), rw.Reader()}, "a reader and an upgradeable reader of one RWLock: hold the upgradeable reader alone"},
		{"an upgradeable reader and a writer", []mongolock.Part{rw.Writer(), rw.Upgradeable()}, "an upgradeable reader and a writer of one RWLock: hold the writer alone"},
		{"a semaphore and an RWLock", []mongolock.Part{p.Semaphore("rw", 2), rw.Reader()}, "another kind of lock (RWLock reader and semaphore of one name)"},
		{"a lock and a semaphore of one name", []mongolock.Part{p.Lock("x"), p.Semaphore("x", 2)}, ""},
		{"one name in two collections", []mongolock.Part{p.Lock("x"), otherColl.Lock("x")}, ""},
		{"every kind", []mongolock.Part{p.Lock("x"), p.Semaphore("y", 2), rw.Reader(), p.RWLock("w").Writer(), p.RWLock("u").Upgradeable()}, ""},
	} {
		t.Run(tc.label, func(t *testing.T) {
			c, err := mongolock.NewComposite(tc.parts...)
			if tc.want == "" {
				require.NoError(t, err)
				require.NotNil(t, c)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, c)
			if !strings.Contains(tc.want, "another kind") {
				requireInvalid(t, err, "new composite")
			}
		})
	}
	_, err = mongolock.NewComposite(p.Semaphore("rw", 2), rw.Writer())
	require.ErrorIs(t, err, mongolock.ErrMismatch, "a semaphore and an RWLock of one name")

	c := mustComposite(t, p.Lock("a"))
	var nilCtx context.Context
	_, err = c.Acquire(nilCtx)
	require.ErrorContains(t, err, "nil context")
	require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
	_, err = c.TryAcquire(nilCtx)
	require.ErrorContains(t, err, "nil context")
	require.ErrorContains(t, c.Do(nilCtx, func(context.Context) error { return nil }), "nil context")
	require.ErrorContains(t, c.Do(context.Background(), nil), "nil function")
}

// A CompositeHandle dropped while held is released, as its Handles are once
// the garbage collector finds them unreachable: nothing keeps its parts
// extended for nobody.
func TestAnAbandonedCompositeHandleIsReleased(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, time.Minute)
	func() {
		h, err := mustComposite(t, e.p.Lock("dropped"), e.p.Semaphore("dropped", 1)).TryAcquire(ctx)
		require.NoError(t, err)
		require.NotNil(t, h)
	}()
	pollUntil(t, 30*time.Second, "the dropped composite's parts free", func() bool {
		runtime.GC()
		c, err := mongolock.NewComposite(e.other.Lock("dropped"), e.other.Semaphore("dropped", 1))
		require.NoError(t, err)
		h, err := c.TryAcquire(ctx)
		if err == nil {
			require.NoError(t, h.Release(ctx))
		}
		return err == nil
	})
}

// Composites over overlapping names, each given in another order (a cycle
// of them, as dining philosophers take forks), in two processes: every
// Acquire gets in, and no name is held by two composites at once.
func TestCompositesInOppositeOrdersNeitherDeadlockNorOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, other := newMemDB(t).holderAndRival()
		// A deadlock would keep an Acquire waiting until this ends.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		orders := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"c", "b", "a"}}
		var holders sync.Map // name -> *atomic.Int32
		for _, n := range []string{"a", "b", "c"} {
			holders.Store(n, new(atomic.Int32))
		}
		const rounds = 6
		var wg sync.WaitGroup
		var acquired atomic.Int64
		for _, p := range []*mongolock.Provider{p, other} {
			for _, names := range orders {
				parts := make([]mongolock.Part, len(names))
				for i, n := range names {
					parts[i] = p.Lock(n)
				}
				c := mustComposite(t, parts...)
				wg.Go(func() {
					for range rounds {
						h, err := c.Acquire(ctx)
						if !assert(t, err == nil, "Acquire %v: %v", names, err) {
							return
						}
						acquired.Add(1)
						for _, n := range names {
							v, _ := holders.Load(n)
							assert(t, v.(*atomic.Int32).Add(1) == 1, "%q held by two composites at once", n)
						}
						time.Sleep(time.Millisecond) // held a while, in the bubble's time
						for _, n := range names {
							v, _ := holders.Load(n)
							v.(*atomic.Int32).Add(-1)
						}
						assert(t, h.Release(ctx) == nil, "Release %v", names)
					}
				})
			}
		}
		wg.Wait()
		require.EqualValues(t, 2*len(orders)*rounds, acquired.Load())
	})
}

// A refused TryAcquire leaves every part free, whichever part was held: the
// first, the middle or the last in the composite's order.
func TestCompositeTryAcquireIsAllOrNone(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, time.Minute)
	names := []string{"a", "b", "c"}
	for _, held := range names {
		t.Run("held "+held, func(t *testing.T) {
			h := releaseAtCleanup(t, mustTryAcquire(t, ctx, e.other.Lock(held)))
			c := mustComposite(t, e.p.Lock("c"), e.p.Lock("a"), e.p.Lock("b"))
			_, err := c.TryAcquire(ctx)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired)
			var lerr *mongolock.Error
			require.ErrorAs(t, err, &lerr)
			require.Equal(t, held, lerr.Name, "the error names the held part")
			require.Equal(t, "try acquire", lerr.Op)
			for _, n := range names {
				if n != held {
					requireFree(t, ctx, e.other.Lock(n))
				}
			}
			require.NoError(t, h.Release(ctx))
			ch, err := c.TryAcquire(ctx)
			require.NoError(t, err, "all free")
			require.NoError(t, ch.Release(ctx))
		})
	}
}

// An Acquire whose ctx ends while the last part in its order is held has
// released the others before it returns, and says that the lock was held
// by someone else the whole time.
func TestCompositeAcquireWhoseCtxEndsLeavesNothingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, net, other := d.holderAndRival()
		net.Delay(time.Millisecond) // a round trip takes time, as a server's does
		// The semaphores' collection comes after the locks', "slots" after "rw".
		held, err := other.Semaphore("slots", 1).TryAcquire(ctx)
		require.NoError(t, err)
		releaseAtCleanup(t, held)
		c := mustComposite(t, p.Semaphore("slots", 1), p.Lock("z"), p.RWLock("rw").Writer(), p.Lock("a"))

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = c.Acquire(short)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		var lerr *mongolock.Error
		require.ErrorAs(t, err, &lerr)
		require.Equal(t, "slots", lerr.Name, "the error names the part it waited for")
		requireFree(t, ctx, other.Lock("a"), other.Lock("z"), other.RWLock("rw").Writer())
	})
}

// A part that fails otherwise than by contention fails the composite with
// that part's error, and the parts taken before it are released: a part of
// a closed provider (ErrClosed), a semaphore held with another n
// (ErrMismatch).
func TestCompositeAcquireReleasesWhatItTookWhenAPartFails(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, time.Minute)
	closed := newProvider(t, e.db)
	require.NoError(t, closed.Close(ctx))
	wide, err := e.other.Semaphore("wide", 3).TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, wide)
	for _, tc := range []struct {
		label string
		part  mongolock.Part
		want  error
	}{
		{"closed provider", closed.Lock("z"), mongolock.ErrClosed},
		{"another n", e.p.Semaphore("wide", 2), mongolock.ErrMismatch},
	} {
		t.Run(tc.label, func(t *testing.T) {
			c := mustComposite(t, tc.part, e.p.Lock("a"), e.p.Lock("b"))
			for _, acquire := range []func(context.Context) (*mongolock.CompositeHandle, error){c.Acquire, c.TryAcquire} {
				_, err := acquire(ctx)
				require.ErrorIs(t, err, tc.want)
				requireFree(t, ctx, e.other.Lock("a"), e.other.Lock("b"))
			}
		})
	}
}

// A composite of a lock, a semaphore's slot and an RWLock's read lock holds
// each as its own Acquire would: the lock is refused to others, one slot
// of two is left, other readers share and writers are refused, and other
// upgradeable readers too. Each part's Handle carries its own fencing token.
func TestCompositeOfMixedKindsHoldsEachPartAsItsKindDoes(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, time.Minute)
	parts := []mongolock.Part{e.p.Semaphore("exports", 2), e.p.Lock("report"), e.p.RWLock("catalog").Reader(), e.p.RWLock("prices").Upgradeable()}
	c := mustComposite(t, parts...)
	for _, acquire := range []func(context.Context) (*mongolock.CompositeHandle, error){c.Acquire, c.TryAcquire} {
		h, err := acquire(ctx)
		require.NoError(t, err)
		releaseCompositeAtCleanup(t, h)

		handles := h.Handles()
		require.Len(t, handles, len(parts))
		for i, ph := range handles {
			require.Equal(t, parts[i].Name(), ph.Name(), "in the order the parts were given")
		}
		report, err := e.other.Inspect(ctx, "report")
		require.NoError(t, err)
		require.True(t, report.Held)
		require.Equal(t, report.FencingToken, handles[1].FencingToken())
		exports, err := e.other.Semaphore("exports", 2).Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, exports.Holders, 1)
		require.Equal(t, exports.Holders[0].FencingToken, handles[0].FencingToken())
		catalog, err := e.other.RWLock("catalog").Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, catalog.Holders, 1)
		require.Equal(t, catalog.Holders[0].FencingToken, handles[2].FencingToken())
		prices, err := e.other.RWLock("prices").Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, prices.Holders, 1)
		require.True(t, prices.Holders[0].Upgradeable)
		require.Equal(t, prices.Holders[0].FencingToken, handles[3].FencingToken())

		_, err = e.other.Lock("report").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the lock is held")
		_, err = e.other.RWLock("catalog").Writer().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a writer is refused while the composite reads")
		_, err = e.other.RWLock("prices").Upgradeable().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "one upgradeable reader at a time")
		requireFree(t, ctx, e.other.Semaphore("exports", 2), e.other.RWLock("catalog").Reader(), e.other.RWLock("prices").Reader())

		// The upgradeable reader's part upgrades as an UpgradeableHandle.
		u := &mongolock.UpgradeableHandle{Handle: handles[3]}
		require.NoError(t, u.Upgrade(ctx))
		_, err = e.other.RWLock("prices").Reader().TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a reader beside the upgraded part")
		require.NoError(t, u.Downgrade(ctx))
		requireFree(t, ctx, e.other.RWLock("prices").Reader())

		require.NoError(t, h.Release(ctx))
		require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
		require.False(t, closedNow(h.Lost()), "Release does not close Lost")
		require.NoError(t, h.Release(ctx), "a second Release")
		requireFree(t, ctx, e.other.Lock("report"), e.other.RWLock("catalog").Writer(), e.other.RWLock("prices").Writer())
	}
}

// The loss of one part, of any kind, closes the composite's Lost and ends
// its Context with ErrLockLost; Release reports it, and frees the others.
func TestCompositeLossOfOnePartIsTheCompositesLoss(t *testing.T) {
	for _, tc := range []struct {
		label string
		lost  func(t *testing.T, d *memDB, other *mongolock.Provider) // takes the part away behind its holder's back
	}{
		{"lock force-released", func(t *testing.T, _ *memDB, other *mongolock.Provider) {
			_, err := other.ForceRelease(t.Context(), "job")
			require.NoError(t, err)
		}},
		{"semaphore's document deleted", func(_ *testing.T, d *memDB, _ *mongolock.Provider) { d.remove(memSemColl, "slots") }},
		{"RWLock's document deleted", func(_ *testing.T, d *memDB, _ *mongolock.Provider) { d.remove(memSemColl, "table") }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				d := newMemDB(t)
				p, _, other := d.holderAndRival(mongolock.WithExpiry(memExpiry))
				c := mustComposite(t, p.Lock("job"), p.Semaphore("slots", 2), p.RWLock("table").Writer())
				h, err := c.Acquire(ctx)
				require.NoError(t, err)
				releaseCompositeAtCleanup(t, h)
				time.Sleep(memExpiry)
				synctest.Wait()
				require.False(t, closedNow(h.Lost()), "Lost while every lease is extended")

				tc.lost(t, d, other)
				time.Sleep(memExpiry / 3) // the next extension
				synctest.Wait()
				require.True(t, closedNow(h.Lost()), "the composite's Lost is open a cadence after the loss of a part")
				require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
				err = h.Release(ctx)
				require.ErrorIs(t, err, mongolock.ErrLockLost)
				require.NoError(t, h.Release(ctx), "a second Release")
				requireFree(t, ctx, other.Lock("job"), other.Semaphore("slots", 2), other.RWLock("table").Writer())
			})
		})
	}
}

// Releasing one part on its own ends the composite's Context (its parts are
// no longer all held), but is no loss.
func TestCompositeContextEndsWhenAPartIsReleasedOnItsOwn(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, time.Minute)
	h, err := mustComposite(t, e.p.Lock("a"), e.p.Lock("b")).TryAcquire(ctx)
	require.NoError(t, err)
	releaseCompositeAtCleanup(t, h)
	require.NoError(t, h.Handles()[1].Release(ctx))
	awaitClosed(t, h.Context().Done(), time.Second, "the composite's Context")
	require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
	require.False(t, closedNow(h.Lost()))
	var nilCtx context.Context
	require.ErrorContains(t, h.Release(nilCtx), `release "a, b": nil context`)
	require.NoError(t, h.Release(ctx))
	requireFree(t, ctx, e.other.Lock("a"), e.other.Lock("b"))
}

// An Acquire that loses a part it took while it waits for a later one lets
// go and starts again: the composite it returns holds every part.
func TestCompositeAcquireStartsAgainWhenAPartIsLostWhileItWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, net, other := d.holderAndRival(mongolock.WithExpiry(shortExpiry))
		net.Delay(time.Millisecond) // a round trip takes time, as a server's does
		b := mustTryAcquire(t, ctx, other.Lock("b"))
		releaseAtCleanup(t, b)
		type result struct {
			h   *mongolock.CompositeHandle
			err error
		}
		c := mustComposite(t, p.Lock("b"), p.Lock("a"))
		got := make(chan result, 1)
		go func() {
			h, err := c.Acquire(ctx)
			got <- result{h, err}
		}()
		awaitQueueLen(t, p, "b", 1) // it holds a, and waits for b
		first, err := other.Inspect(ctx, "a")
		require.NoError(t, err)
		require.True(t, first.Held)

		_, err = other.ForceRelease(ctx, "a")
		require.NoError(t, err)
		d.await("a taken again", func() bool {
			info, err := other.Inspect(ctx, "a")
			return err == nil && info.Held && info.FencingToken > first.FencingToken
		})
		require.NoError(t, b.Release(ctx))
		r := <-got
		require.NoError(t, r.err)
		releaseCompositeAtCleanup(t, r.h)
		// Past several extensions: every part is held, and stays so.
		time.Sleep(2 * shortExpiry)
		require.False(t, closedNow(r.h.Lost()), "the composite's Lost: every part is held")
		again, err := other.Inspect(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, again.FencingToken, r.h.Handles()[1].FencingToken(), "a's new acquisition")
		require.NoError(t, r.h.Release(ctx))
	})
}

// Do runs fn holding every part, returns fn's error, and releases them;
// a part lost while fn runs ends fn's ctx and is in Do's error.
func TestCompositeDoHoldsEveryPartWhileFnRuns(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, time.Minute)
	c := mustComposite(t, e.p.Lock("a"), e.p.Semaphore("s", 1))
	errFn := errors.New("fn's error")
	err := c.Do(ctx, func(ctx context.Context) error {
		_, err := e.other.Lock("a").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		_, err = e.other.Semaphore("s", 1).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		return errFn
	})
	require.ErrorIs(t, err, errFn)
	require.NotErrorIs(t, err, mongolock.ErrLockLost)
	requireFree(t, ctx, e.other.Lock("a"), e.other.Semaphore("s", 1))

	err = c.Do(ctx, func(fctx context.Context) error {
		if _, err := e.other.ForceRelease(ctx, "a"); err != nil {
			return err
		}
		select {
		case <-fctx.Done():
			return fmt.Errorf("stopped: %w", context.Cause(fctx))
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	require.ErrorContains(t, err, "stopped")
	requireFree(t, ctx, e.other.Lock("a"), e.other.Semaphore("s", 1))
}
