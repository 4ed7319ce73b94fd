package job

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

func TestRunOnceSkipsWhileAnotherReplicaHoldsTheLock(t *testing.T) {
	ctx := t.Context()
	store := mongolocktest.NewStore() // one in-memory database, two replicas
	mine, err := store.NewProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mine.Close(ctx) }()
	other, err := store.NewProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()

	h, err := other.Lock("nightly-report").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ran, err := RunOnce(ctx, mine, func(context.Context) error { return nil })
	if ran || err != nil {
		t.Fatalf("RunOnce while another replica holds the lock: ran %v, err %v; want a skip", ran, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ran, err = RunOnce(ctx, mine, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("RunOnce of a free lock: ran %v, err %v; want it run", ran, err)
	}
}

// In a synctest bubble time is simulated: the 30 s lease below runs out
// at once in real time.
func TestTheReportStopsWhenTheLockIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mongolocktest.NewStore()
		locks, err := store.NewProvider(mongolock.WithExpiry(30 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ran, err := RunOnce(t.Context(), locks, func(ctx context.Context) error {
			store.Partition() // the database becomes unreachable mid-report
			<-ctx.Done()
			return context.Cause(ctx)
		})
		if !ran || !errors.Is(err, mongolock.ErrLockLost) {
			t.Fatalf("ran %v, err %v; want the report stopped by the lock's loss", ran, err)
		}
		if lost := time.Since(start); lost > 30*time.Second {
			t.Fatalf("lost after %v, after the 30 s lease ended", lost)
		}
		store.Heal()
		if err := locks.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
