package mongolock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Many held locks share one scheduler: one goroutine, and about one
// updateMany per 500 handles per cadence, not one goroutine and one round
// trip per handle.
func TestManyHeldLocksAreExtendedInBatches(t *testing.T) {
	const n, cadence = 600, time.Second
	ctx := boundedCtx(t, 2*time.Minute)
	db := testdb.Database(t)
	var updates atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" {
			updates.Add(1)
		}
	}}
	c := testdb.NewClient(t, options.Client().SetMonitor(mon))
	p, err := mongolock.NewProvider(c.Database(db.Name()),
		mongolock.WithExpiry(6*time.Second), mongolock.WithExtensionCadence(cadence))
	require.NoError(t, err)
	t.Cleanup(func() { mongolock.WaitBackground(p) })

	// Create the documents first (in bulk), so that acquiring is fast.
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("many-%d", i)}}
	}
	_, err = c.Database(db.Name()).Collection(mongolock.DefaultCollection).InsertMany(ctx, docs)
	require.NoError(t, err)

	before := runtime.NumGoroutine()
	handles := make([]*mongolock.Handle, n)
	for i := range handles {
		handles[i], err = p.Lock(fmt.Sprintf("many-%d", i)).TryAcquire(ctx)
		require.NoError(t, err)
	}
	during := runtime.NumGoroutine()
	require.Less(t, during-before, 20, "goroutines grew with the number of held locks: %d before, %d with %d held", before, during, n)

	// Count extensions over three cadences, all handles kept alive, once
	// one cadence has let the handles, acquired over some time, fall due
	// together.
	time.Sleep(cadence) // settling, not synchronisation
	start := updates.Load()
	window := 3 * cadence
	time.Sleep(window) // the window being measured, not synchronisation
	extensions := updates.Load() - start
	perCadence := float64(extensions) / 3
	limit := float64((n + 499) / 500)
	t.Logf("%d held locks: %d extension round trips in %v (%.1f per cadence, limit %v); goroutines %d -> %d",
		n, extensions, window, perCadence, limit, before, during)
	require.Positive(t, extensions, "the leases were not extended")
	// One cadence may straddle the window's edges: allow one extra batch
	// round per window.
	require.LessOrEqual(t, extensions, int64(3*limit+limit))
	for _, h := range handles {
		select {
		case <-h.Lost():
			t.Fatalf("%s was lost while kept", h.Name())
		default:
		}
	}
	for _, h := range handles {
		require.NoError(t, h.Release(ctx))
	}
}

func TestADeletedLockAmongManyLosesOnlyItsOwnHandle(t *testing.T) {
	const n = 50
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	p, err := mongolock.NewProvider(testdb.NewClient(t).Database(db.Name()),
		mongolock.WithExpiry(2*time.Second), mongolock.WithExtensionCadence(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { mongolock.WaitBackground(p) })
	handles := make([]*mongolock.Handle, n)
	for i := range handles {
		handles[i], err = p.Lock(fmt.Sprintf("one-of-many-%d", i)).TryAcquire(ctx)
		require.NoError(t, err)
	}
	_, err = db.Collection(mongolock.DefaultCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: "one-of-many-7"}})
	require.NoError(t, err)
	select {
	case <-handles[7].Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the handle whose document was deleted was not lost")
	}
	// Two more cadences: the others stay held.
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		for i, h := range handles {
			if i == 7 {
				continue
			}
			select {
			case <-h.Lost():
				t.Fatalf("%s was lost with another lock's document", h.Name())
			default:
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, h := range handles {
		if i == 7 {
			require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
		} else {
			require.NoError(t, h.Release(ctx))
		}
	}
}
