package mongolock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
)

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
	const maxStreak = 8 // fair.go
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	l := e.p.Lock("turns")
	first, err := l.Acquire(ctx)
	require.NoError(t, err)
	// The other process waits, and is in the document's line.
	rivalGot := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := e.other.Lock("turns").Acquire(ctx)
		if assert(t, err == nil, "rival: %v", err) {
			rivalGot <- h
		}
	}()
	pollUntil(t, 10*time.Second, "the rival in the document's line", func() bool {
		n, err := e.coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: "turns"}, {Key: "waitingProcess", Value: bson.D{{Key: "$exists", Value: true}}}})
		return err == nil && n == 1
	})

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
				if err := h.Release(ctx); !assert(t, err == nil, "release: %v", err) {
					return
				}
			}
		})
	}
	awaitQueueLen(t, e.p, "turns", 3)
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
	t.Logf("%d acquisitions in a row by the local process before the waiting one's turn", n)
}
