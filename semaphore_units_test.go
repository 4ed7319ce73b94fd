package mongolock_test

// Acquisitions of several units of a semaphore (Semaphore.Units), over the
// model in simulated time.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A request of fewer than one unit or more than the semaphore's n is
// refused at once, with nothing sent, and does not spoil the Semaphore it
// was made of.
func TestSemaphoreUnitsOutOfRangeAreRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process()
		s := p.Semaphore("units", 3)
		for _, k := range []int{4, 1 << 20, 0, -1} {
			u := s.Units(k)
			_, err := u.TryAcquire(ctx)
			require.ErrorContains(t, err, fmt.Sprintf("%d units of a semaphore of 3 slots", k))
			requireInvalid(t, err, "try acquire")
			_, err = u.Acquire(ctx)
			requireInvalid(t, err, "acquire")
			requireInvalid(t, u.Do(ctx, func(context.Context) error { return nil }), "do")
		}
		require.Nil(t, d.doc(memSemColl, "units"), "a refused request wrote")
		_, err := p.Semaphore("units", 0).Units(1).TryAcquire(ctx)
		require.ErrorContains(t, err, "need 1 <= n <= 4096", "a bad n is reported first")
		h, err := s.Units(3).TryAcquire(ctx)
		require.NoError(t, err, "all n units")
		require.NoError(t, h.Release(ctx))
	})
}

// A holder of k units is one holder, shown with its units; it keeps the
// others out while fewer than k are free, and its release frees all k.
func TestSemaphoreUnitsAreHeldAndReleasedWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _, other := d.holderAndRival(mongolock.WithExpiry(memExpiry))
		s, rival := p.Semaphore("units", 4), other.Semaphore("units", 4)
		one := releaseAtCleanup(t, must(s.TryAcquire(ctx)))
		three := must(s.Units(3).TryAcquire(ctx))
		require.Greater(t, three.FencingToken(), one.FencingToken())
		_, err := rival.TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a fifth unit")
		_, err = rival.Units(2).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)

		time.Sleep(3 * memExpiry) // held across leases, units and all
		synctest.Wait()
		require.False(t, closedNow(three.Lost()))
		info, err := s.Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, info.Holders, 2)
		require.Equal(t, []int{1, 3}, []int{info.Holders[0].Units, info.Holders[1].Units})
		require.Equal(t, mongolock.LockID(three), info.Holders[1].ID)
		require.Equal(t, three.FencingToken(), info.Holders[1].FencingToken)
		li, err := p.Inspect(ctx, "units")
		require.NoError(t, err)
		require.Equal(t, info.Holders, li.Holders)

		require.NoError(t, three.Release(ctx))
		_, live := d.holders("units")
		require.Equal(t, 1, live, "entries left after the release of three units")
		last := one.FencingToken()
		for range 3 {
			h := releaseAtCleanup(t, must(rival.TryAcquire(ctx)))
			require.Greater(t, h.FencingToken(), last)
			last = h.FencingToken()
		}
	})
}

// Callers of three processes take 1, 2 or 3 of 5 units in turn: the units
// held, by the callers' count and by the document's, never exceed 5, and
// every acquisition's token is new and greater than its caller's before.
func TestSemaphoreUnitsNeverExceedN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, rounds = 5, 20
		ctx := t.Context()
		d := newMemDB(t)
		var held, most atomic.Int64
		var mu sync.Mutex
		tokens := map[int64]bool{}
		var wg sync.WaitGroup
		for proc := range 3 {
			p, _ := d.process(mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond))
			for k := 1; k <= 3; k++ {
				s := p.Semaphore("mixed", n).Units(k)
				wg.Go(func() {
					var last int64
					for i := range rounds {
						h, err := s.Acquire(ctx)
						if !assert(t, err == nil, "acquire: %v", err) {
							return
						}
						assert(t, h.FencingToken() > last, "token %d after %d", h.FencingToken(), last)
						last = h.FencingToken()
						mu.Lock()
						assert(t, !tokens[last], "token %d issued twice", last)
						tokens[last] = true
						mu.Unlock()
						now := held.Add(int64(k))
						for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
						}
						_, live := d.holders("mixed")
						assert(t, live <= n, "%d units live in the document", live)
						time.Sleep(time.Duration(1+(proc+k+i)%4) * 5 * time.Millisecond)
						held.Add(-int64(k))
						assert(t, h.Release(ctx) == nil, "release")
					}
				})
			}
		}
		wg.Wait()
		require.LessOrEqual(t, most.Load(), int64(n))
		require.Equal(t, int64(n), most.Load(), "the units were never all in use: the test shows nothing")
	})
}

// A request of 3 of 4 units gets in while other processes keep taking
// single units, within a bounded number of their acquisitions: its claim
// keeps 3 units free for it, not one.
func TestSemaphoreUnitsAreNotStarvedBySmallRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, k = 4, 3
		ctx := t.Context()
		d := newMemDB(t)
		opt := mongolock.WithBusyWaitSleep(time.Millisecond, 10*time.Millisecond)
		busy, stop := context.WithCancel(ctx)
		var small atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			p, _ := d.process(opt)
			for c := range 3 {
				wg.Go(func() {
					for busy.Err() == nil {
						h, err := p.Semaphore("big", n).Acquire(busy)
						if err != nil {
							return
						}
						small.Add(1)
						time.Sleep(time.Duration(5+3*c) * time.Millisecond)
						assert(t, h.Release(ctx) == nil, "release")
					}
				})
			}
		}
		time.Sleep(time.Second) // the stream is under way
		p, _ := d.process(opt)
		before := small.Load()
		within, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		h, err := p.Semaphore("big", n).Units(k).Acquire(within)
		got := small.Load() - before
		stop()
		wg.Wait()
		require.NoError(t, err, "the request of %d units after %d small acquisitions", k, got)
		require.NoError(t, h.Release(ctx))
		require.LessOrEqual(t, got, int64(3*n), "small acquisitions before the large one got in")
		t.Logf("%d small acquisitions while the request of %d units waited", got, k)
	})
}

// A holder of k units cut off from the database loses them all a safety
// margin before anyone else can take one, at every phase of its extension
// cycle, as a holder of one slot does.
func TestSemaphoreUnitsHolderCutOffIsLostBeforeTheUnitsAreTaken(t *testing.T) {
	for _, cut := range []struct {
		label string
		fault func(*memdb.Faults)
	}{{"partitioned", (*memdb.Faults).Partition}, {"blackholed", (*memdb.Faults).Blackhole}} {
		t.Run(cut.label, func(t *testing.T) {
			lossAtEveryPhase(t, nil, cut.fault,
				func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
					return p.Semaphore("cut", 3).Units(3).TryAcquire
				},
				func(p *mongolock.Provider) func(ctx context.Context) (*mongolock.Handle, error) {
					return p.Semaphore("cut", 3).TryAcquire
				}, lostAMarginBeforeTheRival)
		})
	}
}

// A ticket's taker holds the units the ticket's holder held.
func TestSemaphoreUnitsAreTakenOverWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _, other := d.holderAndRival()
		h := must(p.Semaphore("handed", 3).Units(2).TryAcquire(ctx))
		ticket, err := h.Ticket()
		require.NoError(t, err)
		taken := releaseAtCleanup(t, must(other.TakeOver(ctx, ticket)))
		require.Greater(t, taken.FencingToken(), h.FencingToken())
		info, err := other.Semaphore("handed", 3).Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, info.Holders, 1)
		require.Equal(t, 2, info.Holders[0].Units)
		_, err = other.Semaphore("handed", 3).Units(2).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	})
}

// One holder of all MaxSemaphoreSlots units, with the longest owner, is
// one statement on the server, and its document stays as far under the
// server's 16 MB as n holders of a slot do; its release frees them all.
func TestSemaphoreUnitsAtMaxSlotsOnTheServer(t *testing.T) {
	n := mongolock.MaxSemaphoreSlots
	db := testdb.Database(t)
	ctx := boundedCtx(t, time.Minute)
	p := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner(strings.Repeat("o", mongolock.MaxOwnerLen)))
	name := strings.Repeat("n", 64)
	h, err := p.Semaphore(name, n).Units(n).TryAcquire(ctx)
	require.NoError(t, err)
	size := len(semDoc(t, semColl(db), name))
	require.Less(t, size, 2<<20, "the document of one holder of %d units", n)
	require.Equal(t, n, liveHolders(t, semColl(db), name), "entries")
	_, err = p.Semaphore(name, n).TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, h.Release(ctx))
	require.Zero(t, liveHolders(t, semColl(db), name))
	t.Logf("one holder of %d units: %d bytes", n, size)
}

// unitsOf is the guarantee suite's mode of k units of a semaphore of n
// slots: two holders of 2 of 5 units hold it at once, as two of a
// semaphore of 2 slots do.
func unitsOf(n, k int) func(p *mongolock.Provider, name string) modeLock {
	return func(p *mongolock.Provider, name string) modeLock {
		s := p.Semaphore(name, n).Units(k)
		return modeLock{s.Acquire, s.TryAcquire}
	}
}
