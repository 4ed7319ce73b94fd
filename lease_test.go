package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
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

// memExpiry is the lease of the scenarios over the model: the default
// cadence is a third of it and the safety margin a tenth (100ms).
const memExpiry = time.Second

// No false loss: extensions slower than the cadence yet fast enough for
// the lease keep the lock, extended, and refused to a rival, for as long
// as the holder holds it. A lease is kept when an extension's round trip
// (sent every cadence, one at a time, or at once after a slow one)
// returns before the client's deadline, the last successful send plus
// expiry minus the safety margin: round trips below (expiry - margin) / 2
// (450ms here) keep it indefinitely; longer ones end in a loss, signalled
// in time. The replies are slow from the acquisition on, or only from
// later: the first extension of a lease counts from its acquisition's
// send.
func TestSlowExtensionsBelowTheLeaseKeepTheLock(t *testing.T) {
	const hold = 30 * memExpiry
	for _, rt := range []time.Duration{90 * time.Millisecond, 360 * time.Millisecond, 440 * time.Millisecond} {
		for _, from := range []string{"the acquisition", "later"} {
			t.Run(fmt.Sprintf("round trips of %v from %s", rt, from), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := t.Context()
					d := newMemDB(t)
					holder, net := d.process(mongolock.WithExpiry(memExpiry))
					rival, _ := d.process(mongolock.WithExpiry(memExpiry))
					const name = "slow"
					if from == "the acquisition" {
						net.Delay(rt)
					}
					h, err := holder.Lock(name).TryAcquire(ctx)
					require.NoError(t, err)
					releaseAtCleanup(t, h)
					net.Delay(rt)
					extensions, last := 0, d.expiresAt(name)
					for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
						require.False(t, closedNow(h.Lost()), "lost after %d extensions: %v", extensions, context.Cause(h.Context()))
						_, err := rival.Lock(name).TryAcquire(ctx)
						require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the rival's attempt while the lock is held")
						if exp := d.expiresAt(name); exp.After(last) {
							extensions, last = extensions+1, exp
						}
					}
					// Every cadence, or every round trip where that is longer.
					require.GreaterOrEqual(t, extensions, int(hold/max(memExpiry/3, rt))-2, "extended too rarely")
					net.Delay(0)
					require.NoError(t, h.Release(ctx))
					t.Logf("%d extensions in %v", extensions, hold)
				})
			})
		}
	}
}
