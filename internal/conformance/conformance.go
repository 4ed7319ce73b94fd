// Package conformance is one suite of what code using mongolock can
// observe, run against the server (the root package's tests) and against
// mongolocktest's providers, the same engine over a database in process
// memory (its tests), so that the two stay equal. It uses only the public API: a lock is made lost with
// ForceRelease, which both support.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// Open returns, for one test, a constructor of providers over a database
// of the test's own: the providers it returns share their locks.
type Open func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error)

// Run runs the suite over a server, each case over a database from open.
// The cases run in parallel (as many at once as go test -parallel says):
// most of their time is spent waiting for leases and holds to run out on
// the real clock, and each has a database of its own.
func Run(t *testing.T, open Open) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(newEnv(t, open, func() {}))
		})
	}
}

// RunSimulated runs the suite over a database in process memory, each case
// in a testing/synctest bubble made before open is called: the leases and
// holds run out on the bubble's clock, without waiting, and a case that
// checks that a call waits first lets every goroutine of the bubble run
// until it blocks.
func RunSimulated(t *testing.T, open Open) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { c.run(newEnv(t, open, synctest.Wait)) })
		})
	}
}

func newEnv(t *testing.T, open Open, settle func()) *env {
	return &env{t: t, open: open(t), ctx: bounded(t, 20*time.Second), settle: settle}
}

var cases = []struct {
	name string
	run  func(e *env)
}{
	{"OptionsAreValidatedAsNewProvider", optionsValidated},
	{"AcquireReturnsAHeldHandle", acquireReturnsAHeldHandle},
	{"ReleaseIsIdempotentAndEndsTheContext", releaseIsIdempotent},
	{"ReleaseWithADoneContextFreesTheLock", releaseWithDoneContext},
	{"TryAcquireOfAHeldLockIsErrNotAcquired", tryAcquireHeld},
	{"DoneContextAcquiresNothing", doneContextAcquiresNothing},
	{"AcquireWaitsForTheRelease", acquireWaitsForRelease},
	{"AcquireHeldUntilCtxEndsIsErrNotAcquiredAndCtxErr", acquireHeldUntilCtxEnds},
	{"FencingTokensIncreasePerName", fencingTokensIncrease},
	{"ForceReleaseMakesTheHolderLost", forceReleaseMakesLost},
	{"DoRunsFnAndReleases", doRunsAndReleases},
	{"DoReportsALossDuringFn", doReportsLoss},
	{"SemaphoreAdmitsN", semaphoreAdmitsN},
	{"SemaphoreOfAnotherSizeOrKindIsErrMismatch", semaphoreMismatch},
	{"RWLockReadersShareAndAWaitingWriterHoldsOffReaders", rwLockReadersAndWriter},
	{"UpgradeableReaderSharesWithReadersAndExcludesUpgradeablesAndWriters", upgradeableSharesWithReadersOnly},
	{"UpgradeWaitsForReadersRefusesNewOnesAndNoWriterGetsInBetween", upgradeWaitsForReaders},
	{"UpgradeWhoseCtxEndsLetsReadersInAgainAndStaysUpgradeable", upgradeCtxEnds},
	{"UpgradeSeesTheLossOfItsHandle", upgradeSeesTheLoss},
	{"DowngradeLetsAWaitingReaderInAndKeepsWritersOut", downgradeLetsReadersIn},
	{"UpgradeAndDowngradeOfTheWrongHandleAreErrMismatch", wrongHandles},
	{"ElectionLeaderProclaimResign", electionLeaderProclaimResign},
	{"ElectionCampaignWaitsForTheResignation", electionCampaignWaits},
	{"ElectionObserveDeliversChanges", electionObserve},
	{"ElectionRunLeadsUntilCtxEnds", electionRun},
	{"InspectAndLocks", inspectAndLocks},
	{"InspectSemaphoreAndRWLock", inspectSlots},
	{"LocksAndInspectShowEveryKindWithItsHolders", locksListEveryKind},
	{"ForceReleaseFreesEveryHolderOfASemaphoreOrRWLock", forceReleaseFreesEverySlot},
	{"ForceReleaseHolderEndsExactlyOneHolder", forceReleaseHolderEndsOne},
	{"HoldAtLeastKeepsAReleasedLockUntilItsEnd", holdAtLeastKeepsAReleasedLock},
	{"HoldAtMostLosesTheHandleAtItsBound", holdAtMostLosesTheHandle},
	{"HoldAtMostKeepsTheLockUntilItsBoundUnlessReleased", holdAtMostKeepsTheLockUntilItsBound},
	{"ForceReleaseAfterTheLeaseEndedEndsNothing", forceReleaseAfterTheLeaseEnded},
	{"HoldsApplyToLocksOnly", holdsApplyToLocksOnly},
	{"CompositeIsAllOrNoneInOneOrderAndLostWithAnyPart", compositeAllOrNone},
	{"AFailedCompositeCallLeavesNoHoldBehind", compositeFailureHoldsNothing},
	{"CloseReleasesAndRefuses", closeReleasesAndRefuses},
	{"ReadsWithAnEndedContextFail", readsWithEndedContext},
}

func optionsValidated(e *env) {
	for _, c := range []struct {
		opt  mongolock.Option
		says string
	}{
		{mongolock.WithExpiry(50 * time.Millisecond), "WithExpiry(50ms)"},
		{mongolock.WithOwner(""), "WithOwner"},
		{mongolock.WithCollection(""), "WithCollection"},
		{mongolock.WithBusyWaitSleep(time.Second, time.Millisecond), "WithBusyWaitSleep"},
		{nil, "nil Option"},
	} {
		_, err := e.open(c.opt)
		require.ErrorContains(e.t, err, c.says)
		require.ErrorIs(e.t, err, mongolock.ErrInvalidArgument)
		var me *mongolock.Error
		require.ErrorAs(e.t, err, &me)
		require.Equal(e.t, "new provider", me.Op)
	}
}

func acquireReturnsAHeldHandle(e *env) {
	p := e.provider(mongolock.WithOwner("worker-1"))
	before := time.Now()
	h := e.acquire(p.Lock("a"))
	require.Equal(e.t, "a", h.Name())
	require.Equal(e.t, "worker-1", h.Owner())
	require.Positive(e.t, h.FencingToken())
	require.False(e.t, h.AcquiredAt().IsZero())
	require.True(e.t, h.LeaseEnd().After(before), "LeaseEnd %v, before %v", h.LeaseEnd(), before)
	require.NoError(e.t, h.Context().Err())
	e.notLost(h, "Lost closed on a held handle")
	e.release(h)
}

func releaseIsIdempotent(e *env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	e.release(h)
	require.ErrorIs(e.t, context.Cause(h.Context()), context.Canceled)
	e.notLost(h, "Release closed Lost")
	require.NoError(e.t, h.Release(e.ctx))
	e.requireFree(p.Lock("a"), "the lock is free after Release")
}

func releaseWithDoneContext(e *env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	err := h.Release(e.ended())
	require.ErrorIs(e.t, err, context.Canceled)
	requireOp(e.t, err, "release")
	require.Error(e.t, h.Context().Err(), "the handle is released all the same")
	require.NoError(e.t, h.Release(e.ctx), "later calls return nil")
	var next *mongolock.Handle
	e.pollUntil("the lock frees", func() bool {
		next, err = p.Lock("a").TryAcquire(e.ctx)
		return err == nil
	})
	e.release(next)
}

func tryAcquireHeld(e *env) {
	p, other := e.provider(), e.provider()
	h := e.acquire(p.Lock("a"))
	for _, q := range []*mongolock.Provider{p, other} {
		_, err := q.Lock("a").TryAcquire(e.ctx)
		require.ErrorIs(e.t, err, mongolock.ErrNotAcquired)
		requireOp(e.t, err, "try acquire")
	}
	e.release(h)
}

func doneContextAcquiresNothing(e *env) {
	p := e.provider()
	_, err := p.Lock("a").TryAcquire(e.ended())
	require.ErrorIs(e.t, err, context.Canceled)
	_, err = p.Lock("a").Acquire(e.ended())
	require.ErrorIs(e.t, err, context.Canceled)
	require.NotErrorIs(e.t, err, mongolock.ErrNotAcquired, "the lock was free")
	requireOp(e.t, err, "acquire")
	e.requireFree(p.Lock("a"), "nothing was left held")
}

func acquireWaitsForRelease(e *env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	waiting := start(func() (*mongolock.Handle, error) { return p.Lock("a").Acquire(e.ctx) })
	e.notYet(waiting, "Acquire of a held lock")
	e.release(h)
	next := e.receive(waiting)
	require.Greater(e.t, next.FencingToken(), h.FencingToken())
	e.release(next)
}

func acquireHeldUntilCtxEnds(e *env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err := p.Lock("a").Acquire(ctx)
	require.ErrorIs(e.t, err, context.DeadlineExceeded)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired)
	requireOp(e.t, err, "acquire")
	e.release(h)
}

func fencingTokensIncrease(e *env) {
	p := e.provider()
	var last int64
	next := func(h *mongolock.Handle) {
		require.Greater(e.t, h.FencingToken(), last)
		last = h.FencingToken()
	}
	for range 3 {
		h := e.acquire(p.Lock("a"))
		next(h)
		e.release(h)
	}
	h := e.acquire(p.Lock("a"))
	next(h)
	e.loseByForce(p, h)
	h = e.acquire(p.Lock("a"))
	next(h)
	e.release(h)
	rw, last := p.RWLock("rw"), int64(0) // another name: its own tokens
	for _, l := range []*mongolock.Lock{rw.Reader(), rw.Writer(), rw.Reader()} {
		h := e.acquire(l)
		next(h)
		e.release(h)
	}
}

// loseByForce ends h's acquisition with ForceRelease and waits for h to
// be told.
func (e *env) loseByForce(p *mongolock.Provider, h *mongolock.Handle) {
	e.t.Helper()
	ended, err := p.ForceRelease(e.ctx, h.Name())
	require.NoError(e.t, err)
	require.True(e.t, ended)
	e.await(h.Lost(), "Lost closes after ForceRelease")
}

func forceReleaseMakesLost(e *env) {
	p := e.provider()
	ended, err := p.ForceRelease(e.ctx, "a")
	require.NoError(e.t, err)
	require.False(e.t, ended, "nothing held a lock never used")
	h := e.acquire(p.Lock("a"))
	e.loseByForce(p, h)
	require.ErrorIs(e.t, context.Cause(h.Context()), mongolock.ErrLockLost)
	err = h.Release(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrLockLost)
	requireOp(e.t, err, "release")
	require.NoError(e.t, h.Release(e.ctx), "later calls return nil")
	next, err := p.Lock("a").TryAcquire(e.ctx)
	require.NoError(e.t, err, "a lost lock is free for others")
	require.Greater(e.t, next.FencingToken(), h.FencingToken())
	e.release(next)
	ended, err = p.ForceRelease(e.ctx, "a")
	require.NoError(e.t, err)
	require.False(e.t, ended, "the lock was released already")
}

func doRunsAndReleases(e *env) {
	p := e.provider()
	failed := errors.New("fn failed")
	ran := false
	err := p.Lock("a").Do(e.ctx, func(ctx context.Context) error {
		ran = true
		_, err := p.Lock("a").TryAcquire(ctx)
		require.ErrorIs(e.t, err, mongolock.ErrNotAcquired, "held while fn runs")
		return failed
	})
	require.True(e.t, ran)
	require.ErrorIs(e.t, err, failed)
	e.requireFree(p.Lock("a"), "released after fn")
	require.Error(e.t, p.Lock("a").Do(e.ctx, nil))
}

func doReportsLoss(e *env) {
	p := e.provider()
	err := p.Lock("a").Do(e.ctx, func(ctx context.Context) error {
		if _, err := p.ForceRelease(e.ctx, "a"); err != nil {
			return err
		}
		e.await(ctx.Done(), "fn's ctx ends on loss")
		require.ErrorIs(e.t, context.Cause(ctx), mongolock.ErrLockLost)
		return ctx.Err()
	})
	require.ErrorIs(e.t, err, mongolock.ErrLockLost)
}

func semaphoreAdmitsN(e *env) {
	p, other := e.provider(), e.provider()
	s := p.Semaphore("s", 2)
	a, err := s.TryAcquire(e.ctx)
	require.NoError(e.t, err)
	b := e.acquire(p.Lock("unrelated")) // a Lock of another name: no slot
	e.release(b)
	b, err = other.Semaphore("s", 2).TryAcquire(e.ctx)
	require.NoError(e.t, err)
	_, err = s.TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired)
	waiting := start(func() (*mongolock.Handle, error) { return s.Acquire(e.ctx) })
	e.notYet(waiting, "Acquire of a full semaphore")
	e.release(a)
	c := e.receive(waiting)
	require.Greater(e.t, c.FencingToken(), b.FencingToken())
	e.release(b)
	e.release(c)
	e.requireFree(p.Lock("s"), "a Lock and a Semaphore of one name are unrelated")
}

func semaphoreMismatch(e *env) {
	p := e.provider()
	h, err := p.Semaphore("s", 2).TryAcquire(e.ctx)
	require.NoError(e.t, err)
	for _, l := range []func() (*mongolock.Handle, error){
		func() (*mongolock.Handle, error) { return p.Semaphore("s", 3).TryAcquire(e.ctx) },
		func() (*mongolock.Handle, error) { return p.Semaphore("s", 3).Acquire(e.ctx) },
		func() (*mongolock.Handle, error) { return p.RWLock("s").Reader().TryAcquire(e.ctx) },
	} {
		_, err := l()
		require.ErrorIs(e.t, err, mongolock.ErrMismatch)
		require.NotErrorIs(e.t, err, mongolock.ErrNotAcquired)
	}
	e.release(h)
	h, err = p.Semaphore("s", 3).TryAcquire(e.ctx)
	require.NoError(e.t, err, "with no slot held, the next acquisition sets n")
	e.release(h)
	_, err = p.RWLock("s").Writer().TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrMismatch, "a semaphore's name stays a semaphore's")
	_, err = p.Semaphore("zero", 0).TryAcquire(e.ctx)
	require.Error(e.t, err)
	require.NotErrorIs(e.t, err, mongolock.ErrNotAcquired)
}

func rwLockReadersAndWriter(e *env) {
	p := e.provider()
	rw := p.RWLock("rw")
	r1 := e.acquire(rw.Reader())
	r2, err := rw.Reader().TryAcquire(e.ctx)
	require.NoError(e.t, err, "readers share")
	_, err = rw.Writer().TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired, "no writer while readers hold")
	writer := start(func() (*mongolock.Handle, error) { return rw.Writer().Acquire(e.ctx) })
	e.pollUntil("the writer waits", func() bool {
		info, err := rw.Inspect(e.ctx)
		return err == nil && info.WriterWaiting
	})
	_, err = rw.Reader().TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired, "a waiting writer holds off new readers")
	e.release(r1)
	e.notYet(writer, "the writer, while a reader holds")
	e.release(r2)
	w := e.receive(writer)
	require.Greater(e.t, w.FencingToken(), r2.FencingToken())
	_, err = rw.Reader().TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired, "no reader while the writer holds")
	e.release(w)
	r3, err := rw.Reader().TryAcquire(e.ctx)
	require.NoError(e.t, err)
	e.release(r3)
}

func electionLeaderProclaimResign(e *env) {
	p := e.provider(mongolock.WithOwner("node-1"))
	el := p.Election("leader")
	_, err := el.Leader(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNoLeader)
	l, err := el.Campaign(e.ctx, "a")
	require.NoError(e.t, err)
	got, err := el.Leader(e.ctx)
	require.NoError(e.t, err)
	require.Equal(e.t, mongolock.Leader{Value: "a", Owner: "node-1", FencingToken: l.FencingToken(), Since: got.Since}, got)
	require.False(e.t, got.Since.IsZero())
	require.NoError(e.t, l.Proclaim(e.ctx, "b"))
	got, err = el.Leader(e.ctx)
	require.NoError(e.t, err)
	require.Equal(e.t, "b", got.Value)
	_, err = p.Lock("leader").TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired, "an election is the lock of its name")
	require.NoError(e.t, l.Resign(e.ctx))
	_, err = el.Leader(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNoLeader)
	err = l.Proclaim(e.ctx, "c")
	require.Error(e.t, err, "no Proclaim after Resign")
	requireOp(e.t, err, "proclaim")
	require.NoError(e.t, l.Resign(e.ctx))

	l, err = el.Campaign(e.ctx, "d")
	require.NoError(e.t, err)
	e.loseByForce(p, l.Handle)
	err = l.Proclaim(e.ctx, "e")
	require.ErrorIs(e.t, err, mongolock.ErrLockLost)
	_, err = el.Campaign(e.ctx, string(make([]byte, mongolock.MaxValueLen+1)))
	requireOp(e.t, err, "campaign")
}

func electionCampaignWaits(e *env) {
	p, other := e.provider(mongolock.WithOwner("node-1")), e.provider(mongolock.WithOwner("node-2"))
	first, err := p.Election("leader").Campaign(e.ctx, "one")
	require.NoError(e.t, err)
	second := start(func() (*mongolock.Handle, error) {
		l, err := other.Election("leader").Campaign(e.ctx, "two")
		if err != nil {
			return nil, err
		}
		return l.Handle, nil
	})
	e.notYet(second, "a campaign while another leads")
	require.NoError(e.t, first.Resign(e.ctx))
	h := e.receive(second)
	got, err := p.Election("leader").Leader(e.ctx)
	require.NoError(e.t, err)
	require.Equal(e.t, "two", got.Value)
	require.Equal(e.t, "node-2", got.Owner)
	require.Equal(e.t, h.FencingToken(), got.FencingToken)
	require.Greater(e.t, h.FencingToken(), first.FencingToken())
	e.release(h)
	ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
	defer cancel()
	third, err := p.Election("leader").Campaign(e.ctx, "three")
	require.NoError(e.t, err)
	_, err = other.Election("leader").Campaign(ctx, "four")
	require.ErrorIs(e.t, err, context.DeadlineExceeded)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired)
	requireOp(e.t, err, "campaign")
	require.NoError(e.t, third.Resign(e.ctx))
}

func electionObserve(e *env) {
	p := e.provider()
	el := p.Election("leader")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	states := el.Observe(ctx)
	next := func(what string, want func(mongolock.Leader) bool) {
		e.t.Helper()
		for {
			select {
			case l, ok := <-states:
				require.True(e.t, ok, "Observe's channel closed early")
				if want(l) {
					return
				}
			case <-e.ctx.Done():
				e.t.Fatalf("Observe did not deliver: %s", what)
			}
		}
	}
	next("nobody leads", func(l mongolock.Leader) bool { return l == mongolock.Leader{} })
	l, err := el.Campaign(e.ctx, "a")
	require.NoError(e.t, err)
	next("the leader", func(got mongolock.Leader) bool { return got.Value == "a" && got.FencingToken == l.FencingToken() })
	require.NoError(e.t, l.Proclaim(e.ctx, "b"))
	next("the new value", func(got mongolock.Leader) bool { return got.Value == "b" })
	require.NoError(e.t, l.Resign(e.ctx))
	next("nobody leads again", func(got mongolock.Leader) bool { return got == mongolock.Leader{} })
	cancel()
	for range states { // closes once ctx ended
	}
}

func electionRun(e *env) {
	p := e.provider()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	led := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- p.Election("leader").Run(ctx, "runner", func(ctx context.Context, l *mongolock.Leadership) {
			select {
			case led <- l.FencingToken():
			default:
			}
			<-ctx.Done()
		})
	}()
	var token int64
	select {
	case token = <-led:
	case <-e.ctx.Done():
		e.t.Fatal("Run did not lead")
	}
	got, err := p.Election("leader").Leader(e.ctx)
	require.NoError(e.t, err)
	require.Equal(e.t, mongolock.Leader{Value: "runner", Owner: got.Owner, FencingToken: token, Since: got.Since}, got)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(e.t, err, context.Canceled)
	case <-e.ctx.Done():
		e.t.Fatal("Run did not return after ctx ended")
	}
	_, err = p.Election("leader").Leader(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNoLeader, "Run resigned")
}

func inspectAndLocks(e *env) {
	p := e.provider(mongolock.WithOwner("node-1"))
	_, err := p.Inspect(e.ctx, "a/1")
	require.ErrorIs(e.t, err, mongolock.ErrNoLock)
	requireOp(e.t, err, "inspect")
	var hs []*mongolock.Handle
	for _, name := range []string{"b", "a/2", "a/1"} {
		hs = append(hs, e.acquire(p.Lock(name)))
	}
	info, err := p.Inspect(e.ctx, "a/1")
	require.NoError(e.t, err)
	require.True(e.t, info.Held)
	require.Equal(e.t, "a/1", info.Name)
	require.Equal(e.t, "node-1", info.Owner)
	require.Equal(e.t, "", info.Value)
	require.Equal(e.t, hs[2].FencingToken(), info.FencingToken)
	require.True(e.t, info.ExpiresAt.After(info.AcquiredAt))
	require.False(e.t, info.ServerTime.IsZero())
	e.release(hs[2])
	info, err = p.Inspect(e.ctx, "a/1")
	require.NoError(e.t, err)
	require.False(e.t, info.Held)
	require.Equal(e.t, "", info.Owner)
	require.Equal(e.t, hs[2].FencingToken(), info.FencingToken, "the token stays")

	var names []string
	for info, err := range p.Locks(e.ctx, "a/") {
		require.NoError(e.t, err)
		names = append(names, fmt.Sprintf("%s held=%v", info.Name, info.Held))
	}
	require.Equal(e.t, []string{"a/1 held=false", "a/2 held=true"}, names)
	for _, h := range hs[:2] {
		e.release(h)
	}
	var all []string
	for info, err := range p.Locks(e.ctx, "") {
		require.NoError(e.t, err)
		all = append(all, info.Name)
	}
	require.True(e.t, slices.IsSorted(all))
	require.Len(e.t, all, 3)
}

func inspectSlots(e *env) {
	p := e.provider(mongolock.WithOwner("node-1"))
	_, err := p.Semaphore("s", 2).Inspect(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNoLock)
	_, err = p.RWLock("rw").Inspect(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNoLock)
	a, err := p.Semaphore("s", 2).Acquire(e.ctx)
	require.NoError(e.t, err)
	s, err := p.Semaphore("s", 5).Inspect(e.ctx)
	require.NoError(e.t, err)
	require.Equal(e.t, 2, s.N, "Inspect ignores the Semaphore's n")
	require.Len(e.t, s.Holders, 1)
	require.Equal(e.t, "node-1", s.Holders[0].Owner)
	require.False(e.t, s.Holders[0].Write)
	require.Equal(e.t, a.FencingToken(), s.Holders[0].FencingToken)
	require.Equal(e.t, a.FencingToken(), s.FencingToken)
	e.release(a)
	s, err = p.Semaphore("s", 2).Inspect(e.ctx)
	require.NoError(e.t, err)
	require.Empty(e.t, s.Holders)

	w := e.acquire(p.RWLock("rw").Writer())
	rw, err := p.RWLock("rw").Inspect(e.ctx)
	require.NoError(e.t, err)
	require.Len(e.t, rw.Holders, 1)
	require.True(e.t, rw.Holders[0].Write)
	require.False(e.t, rw.WriterWaiting)
	e.release(w)
	r := e.acquire(p.RWLock("rw").Reader())
	rw, err = p.RWLock("rw").Inspect(e.ctx)
	require.NoError(e.t, err)
	require.Len(e.t, rw.Holders, 1)
	require.False(e.t, rw.Holders[0].Write)
	require.Equal(e.t, r.FencingToken(), rw.FencingToken)
	e.release(r)
}

func closeReleasesAndRefuses(e *env) {
	p, other := e.provider(), e.provider()
	h := e.acquire(p.Lock("a"))
	waiting := start(func() (*mongolock.Handle, error) { return p.Lock("a").Acquire(e.ctx) })
	e.notYet(waiting, "Acquire of a held lock")
	observing := p.Election("leader").Observe(e.ctx)
	<-observing // the first state: Observe runs
	require.NoError(e.t, p.Close(e.ctx))
	for range observing { // closes with the provider
	}
	select {
	case r := <-waiting:
		require.ErrorIs(e.t, r.err, mongolock.ErrClosed)
	case <-e.ctx.Done():
		e.t.Fatal("a waiting Acquire did not return after Close")
	}
	e.await(h.Context().Done(), "Close releases the handles")
	require.ErrorIs(e.t, context.Cause(h.Context()), context.Canceled)
	e.notLost(h, "Close made the handle lost")
	require.NoError(e.t, h.Release(e.ctx), "a handle Close released")
	_, err := p.Lock("a").TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrClosed)
	_, err = p.Semaphore("s", 1).Acquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrClosed)
	require.NoError(e.t, p.Close(e.ctx), "a second Close")
	e.requireFree(other.Lock("a"), "free for others at once")
}

func readsWithEndedContext(e *env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	s, err := p.Semaphore("s", 1).Acquire(e.ctx)
	require.NoError(e.t, err)
	_, err = p.Inspect(e.ended(), "a")
	require.ErrorIs(e.t, err, context.Canceled)
	requireOp(e.t, err, "inspect")
	_, err = p.Semaphore("s", 1).Inspect(e.ended())
	require.ErrorIs(e.t, err, context.Canceled)
	_, err = p.ForceRelease(e.ended(), "a")
	require.ErrorIs(e.t, err, context.Canceled)
	requireOp(e.t, err, "force release")
	yielded := 0
	for _, err := range p.Locks(e.ended(), "") {
		yielded++
		require.ErrorIs(e.t, err, context.Canceled)
		requireOp(e.t, err, "list")
	}
	require.Equal(e.t, 1, yielded, "the error, once")
	require.NoError(e.t, h.Context().Err(), "nothing was released")
	e.release(h)
	e.release(s)
}

func compositeAllOrNone(e *env) {
	p, q := e.provider(), e.provider()
	ab, err := mongolock.NewComposite(p.Lock("a"), p.Semaphore("s", 2), p.RWLock("rw").Reader(), p.Lock("b"))
	require.NoError(e.t, err)
	ba, err := mongolock.NewComposite(q.Lock("b"), q.Lock("a"))
	require.NoError(e.t, err)

	// All or none: with b held elsewhere, nothing is left taken.
	b := e.acquire(q.Lock("b"))
	_, err = ab.TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired)
	e.requireFree(p.Lock("a"), "a failed composite left a part held")
	e.requireFree(p.RWLock("rw").Writer(), "a failed composite left a reader")
	e.release(b)

	// Given in opposite orders, two composites take turns without deadlock.
	done := make(chan error, 2)
	for _, c := range []*mongolock.Composite{ab, ba} {
		go func() {
			for range 5 {
				h, err := c.Acquire(e.ctx)
				if err != nil {
					done <- err
					return
				}
				if err := h.Release(e.ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		require.NoError(e.t, <-done)
	}

	// One handle: every part's token, and the loss of any part.
	h, err := ab.Acquire(e.ctx)
	require.NoError(e.t, err)
	require.Len(e.t, h.Handles(), 4)
	for _, part := range h.Handles() {
		require.Positive(e.t, part.FencingToken(), part.Name())
	}
	ended, err := q.ForceRelease(e.ctx, "b")
	require.NoError(e.t, err)
	require.True(e.t, ended)
	e.await(h.Lost(), "the composite's Lost closes when a part is lost")
	require.ErrorIs(e.t, context.Cause(h.Context()), mongolock.ErrLockLost)
	require.ErrorIs(e.t, h.Release(e.ctx), mongolock.ErrLockLost)
	e.requireFree(p.Lock("a"), "Release of a composite that lost a part released the others")
}

// A composite call that fails took parts for a job that never ran: it
// frees them at once, whatever WithHoldAtLeast says, so that no replica
// skips a period for it. Each failure: a part refused (TryAcquire), ctx
// ending while waiting for a part (Acquire), a semaphore part refusing the
// hold option.
func compositeFailureHoldsNothing(e *env) {
	p, q := e.provider(mongolock.WithHoldAtLeast(time.Hour)), e.provider()
	b := e.acquire(q.Lock("b"))
	ab, err := mongolock.NewComposite(p.Lock("a"), p.Lock("b"))
	require.NoError(e.t, err)

	_, err = ab.TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired)
	e.requireFree(q.Lock("a"), "a refused TryAcquire left its first part held")

	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = ab.Acquire(ctx)
	require.ErrorIs(e.t, err, context.DeadlineExceeded)
	e.requireFree(q.Lock("a"), "an Acquire whose ctx ended left its first part held")
	e.release(b)

	cs, err := mongolock.NewComposite(p.Lock("c"), p.Semaphore("s", 2))
	require.NoError(e.t, err)
	_, err = cs.TryAcquire(e.ctx)
	require.ErrorContains(e.t, err, "apply to locks only")
	e.requireFree(q.Lock("c"), "a semaphore part that refused the hold left the lock part held")

	// A job that ran keeps its hold.
	h, err := ab.Acquire(e.ctx)
	require.NoError(e.t, err)
	require.NoError(e.t, h.Release(e.ctx))
	_, err = q.Lock("a").TryAcquire(e.ctx)
	require.ErrorIs(e.t, err, mongolock.ErrNotAcquired, "a composite that was held kept no hold")
}
