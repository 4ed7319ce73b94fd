package mongolock_test

// The line of a process (line.go, and the hand-over in release.go).

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/stretchr/testify/require"
)

// The line: Acquire calls of one process wait in line, only the first asks
// the server, and a release hands the lock to the next in one round trip.

// Acquire is not reentrant: asking again for a lock this process holds
// waits behind its own handle, until ctx ends, and then reports the lock as
// held by someone else; once the handle is released, it is free again.
func TestAcquireOfALockThisProcessHoldsWaitsBehindItsOwnHandle(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	l := e.p.Lock("again")
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.p.Lock("again").Acquire(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "it waited behind the process's own handle")
	require.NoError(t, h.Release(ctx))
	h, err = l.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

func TestLocalWaitersAcquireInArrivalOrder(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	l := e.p.Lock("fifo")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	const n = 8
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := l.Acquire(ctx)
			if !assert(t, err == nil, "waiter %d: %v", i, err) {
				return
			}
			order <- i
			_ = h.Release(ctx)
		}()
		awaitQueueLen(t, e.p, "fifo", i+1) // i+1 in line: the next arrives after
	}
	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, got)
	require.Zero(t, mongolock.QueueNames(e.p), "no line is kept once nobody waits or holds")
}

func TestLocalWaitersSendNothingWhileAHandleOfTheirProcessHolds(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Short sleeps: a waiter that polled would poll often.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 2*time.Millisecond))
	l := e.p.Lock("quiet")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	waitAll := acquireAllInBackground(t, ctx, l, 5)
	awaitQueueLen(t, e.p, "quiet", 5)
	before := e.count.started.Load()
	// However long the holder holds, its own process's waiters stay silent.
	// Give them time in which polling would have sent dozens of attempts.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.Equal(t, before, e.count.started.Load(), "a waiter polled the database while the lock was held here")
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, holder.Release(ctx))
	waitAll()
}

func TestOnlyTheHeadOfTheLinePollsWhileAnotherProcessHolds(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 3*time.Millisecond))
	holder, err := e.other.Lock("remote").TryAcquire(ctx)
	require.NoError(t, err)

	waitAll := acquireAllInBackground(t, ctx, e.p.Lock("remote"), 10)
	awaitQueueLen(t, e.p, "remote", 10)
	// Let the head poll a good number of times.
	start := e.count.started.Load()
	pollUntil(t, 20*time.Second, "50 attempts of the head of the line",
		func() bool { return e.count.started.Load() >= start+50 })
	require.NoError(t, holder.Release(ctx))
	waitAll()
	require.EqualValues(t, 1, e.count.maxInFlight.Load(), "more than one waiter of this process talked to the database at once")
}

func TestLocalReleaseWakesTheNextWaiterAtOnce(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Sleeps far longer than the test's deadline: only a wake-up can let
	// the waiter in in time.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("handoff")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		h, err := l.Acquire(actx)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	awaitQueueLen(t, e.p, "handoff", 1)
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
}

func TestLossWakesTheNextLocalWaiter(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour),
		mongolock.WithExpiry(time.Second))
	l := e.p.Lock("lossy")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)
	got := acquireInBackground(ctx, l)
	awaitQueueLen(t, e.p, "lossy", 1)
	// Someone deletes the document: the holder loses the lock at its next
	// extension, and its loss must let the waiter try (and succeed).
	_, err = e.coll.DeleteOne(ctx, map[string]string{"_id": "lossy"})
	require.NoError(t, err)
	awaitClosed(t, holder.Lost(), 10*time.Second, "Lost after the document was deleted")
	require.NoError(t, <-got)
	require.Error(t, holder.Release(ctx))
}

func TestAWaiterWhoseContextEndsLeavesTheLineWithoutDisturbingOthers(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("leave")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	results := make([]chan error, 3)
	cancels := make([]context.CancelFunc, 3)
	for i := range results {
		results[i] = make(chan error, 1)
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		go func() {
			h, err := l.Acquire(wctx)
			if err == nil {
				err = h.Release(ctx)
			}
			results[i] <- err
		}()
		awaitQueueLen(t, e.p, "leave", i+1)
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	cancels[1]() // the middle one gives up
	err = <-results[1]
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "it waited behind a holder the whole time")
	awaitQueueLen(t, e.p, "leave", 2)

	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-results[0])
	require.NoError(t, <-results[2])
	require.Zero(t, mongolock.QueueNames(e.p))
}

// Release with a goroutine of the same process waiting: one round trip
// releases the lock and acquires it for the waiter, with a higher token.
func TestReleaseHandsTheLockToTheNextLocalWaiterInOneRoundTrip(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("handover")
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	next := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := l.Acquire(ctx)
		if assert(t, err == nil, "waiter: %v", err) {
			next <- h
		}
	}()
	awaitQueueLen(t, e.p, "handover", 1)
	mongolock.WaitBackground(e.p) // the TTL index is in place
	before := e.count.commands.Load()

	require.NoError(t, h.Release(ctx))
	var n *mongolock.Handle
	select {
	case n = <-next:
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lock")
	}
	require.Equal(t, int64(1), e.count.commands.Load()-before, "commands for release + next acquisition")
	require.Greater(t, n.FencingToken(), h.FencingToken())
	require.ErrorIs(t, h.Context().Err(), context.Canceled)

	// The waiter holds it on the server, not just locally.
	_, err = e.other.Lock("handover").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, n.Release(ctx))
	r, err := e.other.Lock("handover").TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, r.FencingToken(), n.FencingToken())
	require.NoError(t, r.Release(ctx))
}

// A waiter whose ctx ends while the lock is being handed to it leaves no
// lock held behind: whatever was handed over is released.
func TestAHandOverToAWaiterThatGaveUpIsReleased(t *testing.T) {
	ctx := boundedCtx(t, 2*time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("abandoned")
	const trials = 50
	var handed, gaveUp int
	for i := range trials {
		h, err := l.Acquire(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			h, err := l.Acquire(wctx)
			if err == nil {
				err = h.Release(ctx)
			}
			got <- err
		}()
		awaitQueueLen(t, e.p, "abandoned", 1)
		// Races with the hand-over, ending at varied points of it.
		stop := time.AfterFunc(time.Duration(i%10)*200*time.Microsecond, cancel)
		require.NoError(t, h.Release(ctx))
		switch err := <-got; {
		case err == nil:
			handed++
		case errors.Is(err, context.Canceled):
			gaveUp++
		default:
			t.Fatalf("waiter: %v", err)
		}
		stop.Stop()
		cancel()
		// Free again soon, far sooner than the 30 s lease of an orphan.
		pollUntil(t, 5*time.Second, "the lock free after the waiter gave up", func() bool {
			r, err := e.other.Lock("abandoned").TryAcquire(ctx)
			return err == nil && r.Release(ctx) == nil
		})
	}
	t.Logf("%d trials: waiter took the lock %d times, gave up %d times", trials, handed, gaveUp)
}

// Hand-overs within a process stop when another process's turn has come:
// after at most maxStreak acquisitions in a row by one process, a release
// with local waiters frees the lock instead, and the waiting process gets it.
func TestHandOversGiveWayToAWaitingProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxStreak = mongolock.TurnLength
		// Hand-overs that never gave way would go on until this ends.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		d := newMemDB(t)
		p, _, other := d.holderAndRival(mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
		l := p.Lock("turns")
		first, err := l.Acquire(ctx)
		require.NoError(t, err)
		// The other process waits, and is in the document's line.
		rivalGot := make(chan *mongolock.Handle, 1)
		go func() {
			h, err := other.Lock("turns").Acquire(ctx)
			if assert(t, err == nil, "rival: %v", err) {
				rivalGot <- h
			}
		}()
		d.awaitClaim(other, "turns")

		// Local goroutines keep the lock busy, handing it over each release.
		var local atomic.Int32
		local.Add(1) // first
		busy, stop := context.WithCancel(ctx)
		defer stop()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for {
					h, err := l.Acquire(busy)
					if err != nil {
						return
					}
					local.Add(1)
					time.Sleep(time.Millisecond) // held a while, in the bubble's time
					if err := h.Release(ctx); !assert(t, err == nil, "release: %v", err) {
						return
					}
				}
			})
		}
		awaitQueueLen(t, p, "turns", 3)
		require.NoError(t, first.Release(ctx))
		var r *mongolock.Handle
		select {
		case r = <-rivalGot:
		case <-ctx.Done():
			t.Fatal("the waiting process never got its turn")
		}
		n := local.Load()
		stop()
		wg.Wait()
		require.NoError(t, r.Release(ctx))
		require.LessOrEqual(t, n, int32(maxStreak), "acquisitions by one process while another waited first in line")
		require.GreaterOrEqual(t, n, int32(2), "no hand-over happened")
	})
}
