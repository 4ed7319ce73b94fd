package mongolock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A holder whose extension never reaches the server is lost at its local
// deadline, a safety margin before the lease the server confirmed ends.
// Its connection works again by then, so the release that covers a late
// extension could reach the server at once; it must not come before that
// lease's end: nobody else gets in before the server's expiresAt, while
// the lost holder's work may still run.
func TestALossByFailingExtensionsKeepsTheLockUntilTheConfirmedLeaseEnds(t *testing.T) {
	const name = "failing-extensions"
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	rival := newProvider(t, db, mongolock.WithExpiry(faultExpiry))
	count := &commandCounter{}
	// No heartbeat in the test's time: the only bytes the holder's client
	// sends while cut off are its extension's.
	px, pdb := proxied(t, db, options.Client().SetHeartbeatInterval(time.Hour).SetMonitor(count.monitor()))
	holder := newProvider(t, pdb, mongolock.WithExpiry(faultExpiry))

	h := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock(name)))
	px.Blackhole()
	expiresAt := rawLockDoc(t, lockColl(db), name).Lookup("expiresAt").Time()
	pollUntil(t, 10*time.Second, "the extension is dropped", func() bool {
		return count.named("update") > 0 && px.Stats().Blackholed > 0
	})
	require.NoError(t, px.Restore()) // the extension's request is lost; later ones go through
	require.False(t, closedNow(h.Lost()), "lost before the connection was restored")

	var next *mongolock.Handle
	refusals, since := 0, time.Now()
	for next == nil {
		h2, err := rival.Lock(name).TryAcquire(ctx)
		switch {
		case err == nil:
			next = releaseAtCleanup(t, h2)
		case errors.Is(err, mongolock.ErrNotAcquired):
			refusals++
			time.Sleep(5 * time.Millisecond) // polling pace
		default:
			// What held the lock, should the rival never get in: the
			// holder's state and the lock's document as the server has it.
			require.NoError(t, err, "the rival, after %d refusals in %v; the holder lost: %v, its lease end %v; the lock's document: %v",
				refusals, time.Since(since), closedNow(h.Lost()), h.LeaseEnd(), rawLockDoc(t, lockColl(db), name))
		}
	}
	require.True(t, closedNow(h.Lost()), "the rival got in before the holder was lost")
	require.False(t, next.AcquiredAt().Before(expiresAt), "the rival got in at %v, %v before the lease the server confirmed ended (%v)",
		next.AcquiredAt(), expiresAt.Sub(next.AcquiredAt()), expiresAt)
	require.Greater(t, next.FencingToken(), h.FencingToken())
	t.Logf("the rival got in %v after the confirmed lease's end", next.AcquiredAt().Sub(expiresAt))
}
