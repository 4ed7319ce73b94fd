package mongolocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A test that lets a lease run out in simulated time: the Store and its
// Providers made inside a testing/synctest bubble run on its clock, so
// the 31 seconds below pass at once. This package's tests run it as
// TestLeaseRunsOutInSimulatedTime.
func Example_simulatedTime() {
	_ = leaseRunsOut // run by a test function: synctest.Test(t, leaseRunsOut)
}

// leaseRunsOut is a test's body that a test function runs in a
// testing/synctest bubble, on the bubble's clock:
//
//	func TestLeaseRunsOut(t *testing.T) { synctest.Test(t, leaseRunsOut) }
//
// A lease cut off from its store runs out after its expiry, in microseconds
// of real time, and everything the provider started ends with Close (the
// bubble would report a goroutine left blocked).
func leaseRunsOut(t *testing.T) {
	ctx := t.Context() // can end: every round trip runs in a sender
	store := mongolocktest.NewStore()
	locks, err := store.NewProvider(mongolock.WithExpiry(30 * time.Second))
	require.NoError(t, err)
	h, err := locks.Lock("ledger").Acquire(ctx)
	require.NoError(t, err)

	store.Partition()
	time.Sleep(20 * time.Second)
	select {
	case <-h.Lost():
		t.Fatal("lost before its lease could have run out")
	default:
	}
	time.Sleep(11 * time.Second) // 31 s after the acquisition
	select {
	case <-h.Lost():
	default:
		t.Fatal("still held 31 s after the last extension, with a 30 s expiry")
	}
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)

	store.Heal()
	other, err := store.NewProvider()
	require.NoError(t, err)
	next, err := other.Lock("ledger").Acquire(ctx)
	require.NoError(t, err, "the lease ran out in the store too")
	require.Greater(t, next.FencingToken(), h.FencingToken())
	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	require.NoError(t, locks.Close(ctx))
	require.NoError(t, other.Close(ctx))
}
