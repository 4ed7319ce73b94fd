package mongolock_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

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
	var count commandCounter
	pdb := ownClient(t, db, &count)
	p := newProvider(t, pdb, mongolock.WithExpiry(6*time.Second), mongolock.WithExtensionCadence(cadence))

	// Create the documents first (in bulk), so that acquiring is fast.
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("many-%d", i)}}
	}
	_, err := pdb.Collection(mongolock.DefaultCollection).InsertMany(ctx, docs)
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
	start := count.named("update")
	window := 3 * cadence
	time.Sleep(window) // the window being measured, not synchronisation
	extensions := count.named("update") - start
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
	p := newProvider(t, ownClient(t, db, nil),
		mongolock.WithExpiry(2*time.Second), mongolock.WithExtensionCadence(200*time.Millisecond))
	handles := make([]*mongolock.Handle, n)
	var err error
	for i := range handles {
		handles[i], err = p.Lock(fmt.Sprintf("one-of-many-%d", i)).TryAcquire(ctx)
		require.NoError(t, err)
	}
	_, err = db.Collection(mongolock.DefaultCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: "one-of-many-7"}})
	require.NoError(t, err)
	awaitClosed(t, handles[7].Lost(), 5*time.Second, "Lost of the handle whose document was deleted")
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
