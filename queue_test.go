package mongolock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

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
	require.Zero(t, mongolock.QueueNames(e.p), "no queue is kept once nobody waits or holds")
}

func TestLocalWaitersSendNothingWhileAHandleOfTheirProcessHolds(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Short sleeps: a waiter that polled would poll often.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 2*time.Millisecond))
	l := e.p.Lock("quiet")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, err := l.Acquire(ctx); assert(t, err == nil, "%v", err) {
				_ = h.Release(ctx)
			}
		}()
	}
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
	wg.Wait()
}

func TestOnlyTheHeadOfTheLinePollsWhileAnotherProcessHolds(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 3*time.Millisecond))
	holder, err := e.other.Lock("remote").TryAcquire(ctx)
	require.NoError(t, err)

	l := e.p.Lock("remote")
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, err := l.Acquire(ctx); assert(t, err == nil, "%v", err) {
				_ = h.Release(ctx)
			}
		}()
	}
	awaitQueueLen(t, e.p, "remote", 10)
	// Let the head poll a good number of times.
	start := e.count.started.Load()
	pollUntil(t, 20*time.Second, "50 attempts of the head of the line",
		func() bool { return e.count.started.Load() >= start+50 })
	require.NoError(t, holder.Release(ctx))
	wg.Wait()
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
