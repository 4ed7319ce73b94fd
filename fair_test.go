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
	"github.com/mongolock/mongolock/internal/testdb"
)

// Several processes (clients with providers of their own), each with several
// goroutines, contend for one lock. The local line hands the lock over
// within a process far faster than another process polls; the line of
// waiting processes and the bounded streak must still give every process
// at least 1/(2P) of the acquisitions.
func TestContendingProcessesEachGetAFairShare(t *testing.T) {
	const procs, perProc = 3, 4
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	var (
		counts  [procs]atomic.Int64
		inside  atomic.Int32
		overlap atomic.Bool
		wg      sync.WaitGroup
		errs    = make(chan error, procs*perProc)
	)
	end := time.Now().Add(3 * time.Second)
	for p := range procs {
		prov, err := mongolock.NewProvider(testdb.NewClient(t).Database(db.Name()))
		require.NoError(t, err)
		t.Cleanup(func() { mongolock.WaitBackground(prov) })
		l := prov.Lock("fair")
		for range perProc {
			wg.Go(func() {
				for time.Now().Before(end) {
					actx, cancel := context.WithDeadline(ctx, end)
					h, err := l.Acquire(actx)
					cancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							errs <- err
						}
						return
					}
					if inside.Add(1) > 1 {
						overlap.Store(true)
					}
					counts[p].Add(1)
					time.Sleep(time.Millisecond) // the critical section
					inside.Add(-1)
					if err := h.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.False(t, overlap.Load(), "two holders at once")
	var total int64
	for p := range procs {
		total += counts[p].Load()
	}
	for p := range procs {
		t.Logf("process %d: %d of %d acquisitions", p, counts[p].Load(), total)
		require.GreaterOrEqual(t, counts[p].Load()*2*procs, total, "process %d got less than 1/(2P)", p)
	}
	require.Greater(t, total, int64(3*procs), "too few acquisitions to judge")
}

// lineOf returns the processes in the lock's line of waiters.
func lineOf(t *testing.T, db string, name string) []string {
	t.Helper()
	var doc struct {
		Waiters []struct {
			P string `bson:"p"`
		} `bson:"waiters"`
	}
	err := testdb.Client(t).Database(db).Collection(mongolock.DefaultCollection).
		FindOne(context.Background(), bson.D{{Key: "_id", Value: name}}).Decode(&doc)
	require.NoError(t, err)
	var line []string
	for _, w := range doc.Waiters {
		line = append(line, w.P)
	}
	return line
}

func TestTryAcquireNeverReservesTheLock(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newQueueEnv(t)
	holder, err := e.rival.Lock("try").TryAcquire(ctx)
	require.NoError(t, err)
	_, err = e.p.Lock("try").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.Empty(t, lineOf(t, mongolock.DatabaseName(e.p), "try"), "a failed TryAcquire joined the line")
	require.NoError(t, holder.Release(ctx))
	// Free, and reserved for nobody: the holder's process takes it again.
	h, err := e.rival.Lock("try").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

func TestAWaiterThatGivesUpLeavesNoTicket(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newQueueEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	dbName := mongolock.DatabaseName(e.p)
	holder, err := e.rival.Lock("turn").TryAcquire(ctx)
	require.NoError(t, err)

	// A waiter of the other process joins the line...
	got := make(chan error, 1)
	go func() {
		h, err := e.p.Lock("turn").Acquire(ctx)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return len(lineOf(t, dbName, "turn")) == 1 }, 10*time.Second, time.Millisecond)
	// ...and gets the lock once the holder releases.
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)

	// A waiter that gives up takes its process out of the line: the lock
	// is not left reserved for nobody.
	holder, err = e.rival.Lock("turn").TryAcquire(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := e.p.Lock("turn").Acquire(wctx); done <- err }()
	require.Eventually(t, func() bool { return len(lineOf(t, dbName, "turn")) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	mongolock.WaitBackground(e.p)
	require.Empty(t, lineOf(t, dbName, "turn"), "a waiter that gave up was kept in line")
	require.NoError(t, holder.Release(ctx))
}
