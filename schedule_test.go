package mongolock_test

// Scheduled jobs: WithHoldAtLeast keeps a released lock held until a
// while after its acquisition, WithHoldAtMost bounds how long one
// acquisition may hold it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/stretchr/testify/require"
)

// takeWhenFree tries l until it acquires, and fails the test if that takes
// longer than within; refusals are counted in refused.
func takeWhenFree(t *testing.T, ctx context.Context, l *mongolock.Lock, within time.Duration, refused *int) *mongolock.Handle {
	t.Helper()
	var h *mongolock.Handle
	pollUntil(t, within, "the lock is taken", func() bool {
		var err error
		h, err = l.TryAcquire(ctx)
		if errors.Is(err, mongolock.ErrNotAcquired) {
			*refused++
			return false
		}
		require.NoError(t, err)
		return true
	})
	return releaseAtCleanup(t, h)
}

// The release writes the hold into the document: it lasts after the
// releasing process's client is gone, keeps another process out until
// acquiredAt + hold by the server's clock, and lets it in right after.
func TestHoldAtLeastKeepsAReleasedLockUntilItsEndWithoutItsProcess(t *testing.T) {
	const name, hold = "nightly", 1500 * time.Millisecond
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	holderDB := ownClient(t, db, nil)
	holder := newProvider(t, holderDB, mongolock.WithHoldAtLeast(hold))
	other := newProvider(t, ownClient(t, db, nil))

	h := mustTryAcquire(t, ctx, holder.Lock(name))
	end := h.AcquiredAt().Add(hold)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, holderDB.Client().Disconnect(ctx), "the releasing process is gone")

	doc := rawLockDoc(t, lockColl(db), name)
	lockID, _ := doc.Lookup("lockId").StringValueOK()
	require.True(t, strings.HasSuffix(lockID, ":held"), "the released holder is not marked held: %q", lockID)
	require.True(t, end.Equal(doc.Lookup("expiresAt").Time()), "the lease ends at acquiredAt + hold: %v, not %v", doc.Lookup("expiresAt").Time(), end)
	info, err := other.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, info.Held, "inspection shows the held lock free")
	require.Equal(t, h.Owner(), info.Owner)

	refused := 0
	next := takeWhenFree(t, ctx, other.Lock(name), hold+10*time.Second, &refused)
	require.Positive(t, refused, "the held lock was free at once after its release")
	require.False(t, next.AcquiredAt().Before(end), "taken at %v, before the hold's end %v", next.AcquiredAt(), end)
	require.Less(t, next.AcquiredAt().Sub(end), 5*time.Second, "taken long after the hold's end") // fail-only: a loaded machine stalls
	require.Greater(t, next.FencingToken(), h.FencingToken())
}

// A job that outlasts the hold frees the lock when it ends: the hold adds
// nothing after acquiredAt + hold. Over both stores; on the server, with
// a lease that a loaded machine's stall does not lose.
func TestHoldAtLeastReleasesALockHeldLongerAtOnce(t *testing.T) {
	conformance.Over(t, holdEndsWithALongerJob)
}

func holdEndsWithALongerJob(e *conformance.Env) {
	const name, hold = "long-job", 300 * time.Millisecond
	t, ctx := e.T, e.Ctx
	opts := append([]mongolock.Option{mongolock.WithHoldAtLeast(hold)}, stallProof...)
	p, _ := e.Process(opts...)
	other, _ := e.Process(opts...)
	h := mustTryAcquire(t, ctx, p.Lock(name))
	pollUntil(t, 10*time.Second, "the server's clock passes the hold's end", func() bool {
		info, err := p.Inspect(ctx, name)
		require.NoError(t, err)
		return info.ServerTime.After(h.AcquiredAt().Add(hold))
	})
	require.NoError(t, h.Release(ctx))
	doc := e.Doc(mongolock.DefaultCollection, name)
	require.NotNil(t, doc)
	_, err := doc.LookupErr("lockId")
	require.Error(t, err, "the holder stays: no release event is sent")
	next := releaseAtCleanup(t, mustTryAcquire(t, ctx, other.Lock(name)))
	require.Greater(t, next.FencingToken(), h.FencingToken())
}

// A force release ends a hold: the lock is free at once.
func TestForceReleaseEndsAHold(t *testing.T) {
	const name = "nightly"
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithHoldAtLeast(time.Hour))
	h := mustTryAcquire(t, ctx, e.p.Lock(name))
	require.NoError(t, h.Release(ctx))
	_, err := e.other.Lock(name).TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the lock is free during its hold")
	released, err := e.other.ForceRelease(ctx, name)
	require.NoError(t, err)
	require.True(t, released, "the hold was not seen as a holder")
	next := releaseAtCleanup(t, mustTryAcquire(t, ctx, e.other.Lock(name)))
	require.Greater(t, next.FencingToken(), h.FencingToken())
}

// A waiting Acquire of another process is kept out by the hold after Do
// returns, and takes the lock within the busy-wait sleep's bound of its end.
func TestAWaiterTakesAHeldLockSoonAfterTheHoldEnds(t *testing.T) {
	const name, hold, sleepMax = "report", time.Second, 200 * time.Millisecond
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	holder := newProvider(t, ownClient(t, db, nil), mongolock.WithHoldAtLeast(hold))
	waiterCount := &commandCounter{}
	waiter := newProvider(t, ownClient(t, db, waiterCount), mongolock.WithBusyWaitSleep(10*time.Millisecond, sleepMax))

	var acquiredAt time.Time
	var token int64
	got := make(chan *mongolock.Handle, 1)
	require.NoError(t, holder.Lock(name).Do(ctx, func(context.Context) error {
		h, err := holder.Inspect(ctx, name)
		require.NoError(t, err)
		acquiredAt, token = h.AcquiredAt, h.FencingToken
		go func() {
			h, err := waiter.Lock(name).Acquire(ctx)
			if assert(t, err == nil, "the waiter's Acquire: %v", err) {
				got <- h
			}
			close(got)
		}()
		pollUntil(t, 10*time.Second, "the waiter was refused", waiterCount.idle)
		return nil
	}))
	end := acquiredAt.Add(hold)
	h, ok := <-got
	require.True(t, ok)
	releaseAtCleanup(t, h)
	require.False(t, h.AcquiredAt().Before(end), "taken at %v, before the hold's end %v", h.AcquiredAt(), end)
	// The bound, and slack for a machine loaded with other test runs, which
	// stalls processes for seconds: the sleeps' exact bounds are the model's
	// test (TestGuaranteeSleepsKeepTheirBounds).
	require.Less(t, h.AcquiredAt().Sub(end), sleepMax+3*time.Second, "the waiter left the free lock idle")
	require.Greater(t, h.FencingToken(), token)
}

// A release with a hold hands the lock to no Acquire of its own process:
// that one waits for the hold's end too.
func TestAReleaseWithAHoldHandsNothingOverInItsProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, hold = "report", time.Second
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process(mongolock.WithHoldAtLeast(hold))
		h := mustTryAcquire(t, ctx, p.Lock(name))
		got := make(chan *mongolock.Handle, 1)
		go func() {
			h, err := p.Lock(name).Acquire(ctx)
			if assert(t, err == nil, "the waiter's Acquire: %v", err) {
				got <- h
			}
			close(got)
		}()
		awaitQueueLen(t, p, name, 1)
		require.NoError(t, h.Release(ctx))
		next, ok := <-got
		require.True(t, ok)
		require.False(t, next.AcquiredAt().Before(h.AcquiredAt().Add(hold)), "handed over at %v, before the hold's end", next.AcquiredAt())
		require.Greater(t, next.FencingToken(), h.FencingToken())
		require.NoError(t, next.Release(ctx))
	})
}

// WithHoldAtMost: the lease is extended (past several expiries) up to
// acquiredAt + most, and no further; the handle is lost before another
// process can take the lock, and says why.
func TestHoldAtMostLosesTheHandleBeforeAnyoneElseGetsIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, expiry, most = "stuck", memExpiry, 4 * memExpiry
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process(mongolock.WithExpiry(expiry), mongolock.WithHoldAtMost(most))
		other, _ := d.process(mongolock.WithExpiry(expiry))

		sent := time.Now()
		h := mustTryAcquire(t, ctx, p.Lock(name))
		require.False(t, h.LeaseEnd().After(sent.Add(most)), "LeaseEnd %v is past the bound", h.LeaseEnd())
		lostAt := make(chan time.Time, 1)
		go func() {
			<-h.Lost()
			lostAt <- time.Now()
		}()

		refused := 0
		next := takeWhenFree(t, ctx, other.Lock(name), 2*most, &refused)
		require.True(t, closedNow(h.Lost()), "another process got in before the handle was lost")
		require.Positive(t, refused)
		// Its lease outlived the expiry.
		require.Greater(t, next.AcquiredAt().Sub(h.AcquiredAt()), most/2, "the lease was not extended")
		require.Greater(t, next.FencingToken(), h.FencingToken())

		require.GreaterOrEqual(t, (<-lostAt).Sub(sent), most-mongolock.SafetyMargin(p), "lost before the bound: an extension failed")
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
		err := h.Release(ctx)
		require.ErrorIs(t, err, mongolock.ErrLockLost)
		require.ErrorContains(t, err, "WithHoldAtMost")
	})
}

// A job that outlives WithHoldAtMost's bound is lost a safety margin
// before it, and that margin is its time to stop: the lock stays held in
// the database until acquiredAt + most by the database's clock, while the
// lost job has not released its handle.
func TestHoldAtMostKeepsTheLockUntilItsBoundWhileTheLostJobRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, expiry, most = "stuck-job", memExpiry, 2 * memExpiry
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process(mongolock.WithExpiry(expiry), mongolock.WithHoldAtMost(most))
		other, _ := d.process(mongolock.WithExpiry(expiry))

		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock(name)))
		bound := h.AcquiredAt().Add(most)
		refused := 0
		next := takeWhenFree(t, ctx, other.Lock(name), 2*most, &refused)
		require.True(t, closedNow(h.Lost()), "another process got in before the handle was lost")
		require.Positive(t, refused)
		require.False(t, next.AcquiredAt().Before(bound), "the rival got in at %v, %v before the bound %v, while the lost job may still run",
			next.AcquiredAt(), bound.Sub(next.AcquiredAt()), bound)
		require.Greater(t, next.FencingToken(), h.FencingToken())
	})
}

// Once the lost job has stopped, its Release frees the lock at once:
// nobody waits for the rest of the margin.
func TestReleaseOfAHandleLostAtItsBoundFreesTheLockAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, expiry, most = "stopped-job", memExpiry, 2 * memExpiry
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process(mongolock.WithExpiry(expiry), mongolock.WithHoldAtMost(most))
		other, _ := d.process(mongolock.WithExpiry(expiry))

		h := mustTryAcquire(t, ctx, p.Lock(name))
		awaitClosed(t, h.Lost(), 2*most, "the handle is lost at its bound")
		_, err := other.Lock(name).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the lock was freed as the handle was lost")
		require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
		synctest.Wait() // the release of the lost handle, in the background
		next := releaseAtCleanup(t, mustTryAcquire(t, ctx, other.Lock(name)))
		require.True(t, next.AcquiredAt().Before(h.AcquiredAt().Add(most)), "the release of the lost handle did not free the lock: taken at %v, the bound %v",
			next.AcquiredAt(), h.AcquiredAt().Add(most))
	})
}

// The holds fit locks only: every other kind refuses them with an error
// that says so, sending nothing.
func TestHoldsAreRefusedByEveryKindButLocks(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		ctx := boundedCtx(t, time.Minute)
		db := testdb.Database(t)
		for i, opt := range []mongolock.Option{mongolock.WithHoldAtLeast(time.Minute), mongolock.WithHoldAtMost(time.Minute)} {
			count := &commandCounter{}
			p := newProvider(t, ownClient(t, db, count), opt)
			// Names of their own: a lock's release may hold it.
			try, acquire := r.this(p, fmt.Sprint("try", i)).try, r.this(p, fmt.Sprint("acquire", i)).acquire
			for _, call := range []func(context.Context) (*mongolock.Handle, error){try, acquire} {
				h, err := call(ctx)
				if r.kind == "lock" {
					require.NoError(t, err)
					require.NoError(t, h.Release(ctx))
					continue
				}
				require.ErrorContains(t, err, "apply to locks only")
				require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
				var e *mongolock.Error
				require.ErrorAs(t, err, &e)
				require.Zero(t, count.commands.Load(), "a refused kind sent a command")
			}
		}
	})
}
