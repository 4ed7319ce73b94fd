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
// within a process far faster than another process polls; claims and the
// bounded streak must still give every process at least 1/(2P) of the
// acquisitions.
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
		prov := newProvider(t, ownClient(t, db, nil))
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

// turnFields is the document's turn state.
type turnFields struct {
	LastProcess    string    `bson:"lastProcess"`
	ProcessStreak  int       `bson:"processStreak"`
	WaitingProcess string    `bson:"waitingProcess"`
	WaitingUntil   time.Time `bson:"waitingUntil"`
}

func turnOf(t *testing.T, p *mongolock.Provider, name string) turnFields {
	t.Helper()
	var f turnFields
	err := testdb.Client(t).Database(mongolock.DatabaseName(p)).Collection(mongolock.CollectionName(p)).
		FindOne(context.Background(), bson.D{{Key: "_id", Value: name}}).Decode(&f)
	require.NoError(t, err)
	return f
}

// awaitClaim polls until the document holds p's process's claim.
func awaitClaim(t *testing.T, p *mongolock.Provider, name string) {
	t.Helper()
	pollUntil(t, 10*time.Second, "a claim of the waiting process in the document",
		func() bool { return turnOf(t, p, name).WaitingProcess == mongolock.Process(p) })
}

func TestTryAcquireNeverClaimsATurn(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	holder, err := e.other.Lock("try").TryAcquire(ctx)
	require.NoError(t, err)
	_, err = e.p.Lock("try").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.Empty(t, turnOf(t, e.p, "try").WaitingProcess, "a refused TryAcquire claimed a turn")
	require.NoError(t, holder.Release(ctx))
	// Free, and claimed by nobody: the holder's process takes it again.
	h, err := e.other.Lock("try").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

func TestAWaiterThatGivesUpWithdrawsItsClaim(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	holder, err := e.other.Lock("turn").TryAcquire(ctx)
	require.NoError(t, err)

	// A waiter of the other process claims the next turn...
	got := make(chan error, 1)
	go func() {
		h, err := e.p.Lock("turn").Acquire(ctx)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	awaitClaim(t, e.p, "turn")
	// ...and gets the lock once the holder releases, which fulfils the
	// claim.
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
	require.Empty(t, turnOf(t, e.p, "turn").WaitingProcess, "a fulfilled claim stayed")

	// A waiter that gives up withdraws its process's claim: nobody steps
	// aside for it.
	holder, err = e.other.Lock("turn").TryAcquire(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := e.p.Lock("turn").Acquire(wctx); done <- err }()
	awaitClaim(t, e.p, "turn")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	mongolock.WaitBackground(e.p)
	require.Empty(t, turnOf(t, e.p, "turn").WaitingProcess, "a waiter that gave up kept its claim")
	require.NoError(t, holder.Release(ctx))
}

// A claimant whose process died holds no free lock back: a third client's
// TryAcquire gets it at once (before, a dead process first in line made
// every other process wait up to twice its longest sleep).
func TestAClaimantThatDiedHoldsNoFreeLockBack(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	holder, err := e.other.Lock("dead").TryAcquire(ctx)
	require.NoError(t, err)
	// A slow waiter claims the next turn, and its process dies.
	c := testdb.NewClient(t)
	dying := newProvider(t, c.Database(e.db.Name()), mongolock.WithBusyWaitSleep(time.Second, time.Minute))
	done := make(chan error, 1)
	go func() { _, err := dying.Lock("dead").Acquire(ctx); done <- err }()
	awaitClaim(t, dying, "dead")
	require.NoError(t, c.Disconnect(ctx))
	require.Error(t, <-done)
	mongolock.WaitBackground(dying)
	require.Equal(t, mongolock.Process(dying), turnOf(t, e.p, "dead").WaitingProcess, "the dead claim is in place")

	require.NoError(t, holder.Release(ctx))
	h, err := e.p.Lock("dead").TryAcquire(ctx)
	require.NoError(t, err, "a free lock was held back for a dead claimant")
	require.NoError(t, h.Release(ctx))
}

// A process that took the lock turnLength times in a row steps aside while
// another process's claim is live, and only that long: a claim that is not
// renewed lapses within its lifetime.
func TestAStepAsideLastsNoLongerThanTheClaim(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	l := e.p.Lock("aside")
	var h *mongolock.Handle
	for i := range mongolock.TurnLength {
		var err error
		h, err = l.TryAcquire(ctx)
		require.NoError(t, err, "acquisition %d", i)
		if i < mongolock.TurnLength-1 {
			require.NoError(t, h.Release(ctx))
		}
	}
	require.Equal(t, mongolock.TurnLength, turnOf(t, e.p, "aside").ProcessStreak)
	// Another process claims the next turn, then stops asking.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := e.other.Lock("aside").Acquire(wctx); done <- err }()
	awaitClaim(t, e.other, "aside")
	claim := turnOf(t, e.p, "aside").WaitingUntil
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	mongolock.WaitBackground(e.other) // its claim withdrawn

	require.NoError(t, h.Release(ctx))
	// The claim is not withdrawn here (a claimant that died); the holder's
	// process steps aside until it lapses.
	_, err := e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "aside"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "waitingProcess", Value: mongolock.Process(e.other)}, {Key: "waitingUntil", Value: claim}}}})
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx)
	if time.Until(claim) > 50*time.Millisecond { // still live by any clock skew here
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the holder's process did not step aside")
	}
	lifetime := mongolock.ClaimLifetime(e.other)
	var again *mongolock.Handle
	pollUntil(t, lifetime+time.Second, "the holder's process got the lock back once the claim lapsed", func() bool {
		again, err = l.TryAcquire(ctx)
		return err == nil
	})
	require.NoError(t, again.Release(ctx))
}

// The cron pattern: a process that only ever calls TryAcquire gets a free
// lock even while other processes wait for it in Acquire.
func TestTryAcquireGetsAFreeLockWhileOtherProcessesWait(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	holder, err := e.p.Lock("cron").TryAcquire(ctx)
	require.NoError(t, err)
	var counts []*commandCounter
	for range 3 {
		// Waiters that poll rarely, so that the free lock is there to take.
		c := &commandCounter{}
		counts = append(counts, c)
		w := newProvider(t, ownClient(t, e.db, c), mongolock.WithBusyWaitSleep(5*time.Second, 5*time.Second))
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _, _ = w.Lock("cron").Acquire(wctx) }()
	}
	// Each has made its first attempt, and sleeps.
	pollUntil(t, 10*time.Second, "the waiters' first attempts", func() bool {
		for _, c := range counts {
			if !c.idle() {
				return false
			}
		}
		return true
	})
	f := turnOf(t, e.p, "cron")
	require.NotEmpty(t, f.WaitingProcess, "no waiter claimed the next turn")
	require.NoError(t, holder.Release(ctx))
	cron, err := e.other.Lock("cron").TryAcquire(ctx)
	require.NoError(t, err, "a free lock refused to TryAcquire because others wait")
	require.NoError(t, cron.Release(ctx))
}

// While a lock is held for long by one process, only the claimant polls
// faster than the configured sleep; the other waiting processes back off.
func TestWhileALockIsHeldOnlyTheClaimantPollsOften(t *testing.T) {
	const waiters, hold = 4, 2 * time.Second
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	holderP := newProvider(t, ownClient(t, db, nil))
	h, err := holderP.Lock("standby").TryAcquire(ctx)
	require.NoError(t, err)

	counts := make([]*commandCounter, waiters)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range waiters {
		counts[i] = &commandCounter{}
		p := newProvider(t, ownClient(t, db, counts[i]), mongolock.WithBusyWaitSleep(10*time.Millisecond, 100*time.Millisecond))
		wg.Go(func() {
			h, err := p.Lock("standby").Acquire(wctx)
			if err == nil {
				_ = h.Release(ctx)
			}
		})
	}
	time.Sleep(hold) // the lock is held for this long: what it costs is counted
	cancel()
	wg.Wait()
	require.NoError(t, h.Release(ctx))
	var often int
	for i, c := range counts {
		n := c.started.Load()
		t.Logf("waiting process %d: %d attempts in %v", i, n, hold)
		// The configured sleep is 10-100 ms: 20 attempts in 2 s is above
		// what backing off to 800 ms allows, and far below the claimant's.
		if n > 20 {
			often++
		}
	}
	require.Equal(t, 1, often, "processes that polled often while the lock was held")
}
