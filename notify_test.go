package mongolock_test

// Release notifications (notify.go).

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/stretchr/testify/require"
)

// Release notifications: a release event wakes the waiters of a lock held
// by another process.

func TestAReleaseEventWakesAWaiterAtOnce(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Sleeps far longer than the test: only the event can let the waiter in.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	events := channelReleaseSource(e.p)
	holder, err := e.other.Lock("evented").TryAcquire(ctx)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := acquireInBackground(wctx, e.p.Lock("evented"))
	// Its first attempt was refused; now it sleeps.
	pollUntil(t, 10*time.Second, "the waiter's first attempt", e.count.idle)
	pollUntil(t, 10*time.Second, "a release source running while a waiter waits",
		func() bool { return mongolock.Notifying(e.p) })

	require.NoError(t, holder.Release(ctx))
	events <- "some-other-lock" // not its lock: must not matter
	events <- "evented"
	require.NoError(t, <-got, "the waiter did not acquire after the release event")
	pollUntil(t, 10*time.Second, "the release source stopped without waiters",
		func() bool { return !mongolock.Notifying(e.p) })
}

func TestWaitersPollWhenReleaseEventsAreUnavailable(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	mongolock.SetReleaseSource(e.p, func(context.Context, func(string)) error {
		return errors.New("no change streams here")
	})
	holder, err := e.other.Lock("polled").TryAcquire(ctx)
	require.NoError(t, err)
	got := acquireInBackground(ctx, e.p.Lock("polled"))
	pollUntil(t, 10*time.Second, "the waiter's second attempt", func() bool { return e.count.started.Load() >= 2 })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
	require.False(t, mongolock.Notifying(e.p))
}

// The real thing: a change stream wakes a waiter whose sleeps are far
// longer than the test.
func TestChangeStreamWakesAWaiterInAnotherProcess(t *testing.T) {
	testdb.Require(t, testdb.ChangeStreams)
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	holder, err := e.other.Lock("streamed").TryAcquire(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := acquireInBackground(wctx, e.p.Lock("streamed"))
	pollUntil(t, 10*time.Second, "the waiter's first attempt", e.count.idle)
	pollUntil(t, 10*time.Second, "the change stream open", func() bool { return mongolock.Notifying(e.p) })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got, "the change stream did not wake the waiter")
}

// The source runs only while some waiter has found the lock held by another
// process: a free lock, or one held in this process, needs no events.
func TestReleaseSourceStartsOnlyForWaitersOfAnotherProcess(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	var starts atomic.Int32
	mongolock.SetReleaseSource(e.p, func(ctx context.Context, _ func(string)) error {
		starts.Add(1)
		<-ctx.Done()
		return nil
	})
	l := e.p.Lock("lazy")
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	got := acquireInBackground(ctx, l) // waits behind a handle of this process
	awaitQueueLen(t, e.p, "lazy", 1)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-got)
	require.Zero(t, starts.Load(), "the source started with no foreign holder")

	holder, err := e.other.Lock("lazy").TryAcquire(ctx)
	require.NoError(t, err)
	a, b := acquireInBackground(ctx, l), acquireInBackground(ctx, l)
	pollUntil(t, 10*time.Second, "the release source running", func() bool { return mongolock.Notifying(e.p) })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-a)
	require.NoError(t, <-b)
	require.Equal(t, int32(1), starts.Load(), "one source per collection, however many waiters")
	pollUntil(t, 10*time.Second, "the release source stopped without waiters",
		func() bool { return !mongolock.Notifying(e.p) })
}
