// Package conformance is one suite of what code using mongolock can
// observe, run against the server (the root package's tests) and against
// mongolocktest's providers, the same engine over a database in process
// memory (its tests), so that the two stay equal. Its cases use only the
// public API: a lock is made lost with ForceRelease, which both support.
//
// Env, on which the suite runs, is also the root package's tests' harness:
// Over runs a body over the model in a testing/synctest bubble and over
// the server, with processes, a bounded context, settle, and the lock
// documents as they are on either store.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Open returns, for one test, a constructor of providers over a database
// of the test's own: the providers it returns share their locks, each a
// process of its own.
type Open func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error)

// Run runs the suite over the server, each case over a database of its
// own. The cases run in parallel (as many at once as go test -parallel
// says): most of their time is spent waiting for leases and holds to run
// out on the real clock.
func Run(t *testing.T) {
	testdb.Info(t) // the whole suite skips, or fails, for want of a server
	suite(t, false, func(t *testing.T) *Env { return OverServer(t, testdb.Database(t)) })
}

// RunOverModel runs the suite over the model, each case in a
// testing/synctest bubble (see RunSimulated).
func RunOverModel(t *testing.T) { suite(t, true, OverModel) }

// RunSimulated runs the suite over a database in process memory, each case
// in a testing/synctest bubble made before open is called: the leases and
// holds run out on the bubble's clock, without waiting, and a case that
// checks that a call waits first lets every goroutine of the bubble run
// until it blocks.
func RunSimulated(t *testing.T, open Open) {
	suite(t, true, func(t *testing.T) *Env { return overOpen(t, open) })
}

// suite runs each case over the Env that env makes for it: in a bubble, or
// in parallel on the real clock.
func suite(t *testing.T, inBubble bool, env func(*testing.T) *Env) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if inBubble {
				synctest.Test(t, func(t *testing.T) { c.run(env(t)) })
				return
			}
			t.Parallel()
			c.run(env(t))
		})
	}
}

var cases = []struct {
	name string
	run  func(e *Env)
}{
	{"OptionsAreValidatedAsNewProvider", optionsValidated},
	{"AcquireReturnsAHeldHandle", acquireReturnsAHeldHandle},
	{"ReleaseIsIdempotentAndEndsTheContext", releaseIsIdempotent},
	{"ReleaseWithADoneContextFreesTheLock", releaseWithDoneContext},
	{"TryAcquireOfAHeldLockIsErrNotAcquired", tryAcquireHeld},
	{"DoneContextAcquiresNothing", doneContextAcquiresNothing},
	{"AcquireWaitsForTheRelease", acquireWaitsForRelease},
	{"TwoProvidersAreTwoProcesses", twoProvidersAreTwoProcesses},
	{"AcquireHeldUntilCtxEndsIsErrNotAcquiredAndCtxErr", acquireHeldUntilCtxEnds},
	{"FencingTokensIncreasePerName", fencingTokensIncrease},
	{"ForceReleaseMakesTheHolderLost", forceReleaseMakesLost},
	{"DoRunsFnAndReleases", doRunsAndReleases},
	{"DoReportsALossDuringFn", doReportsLoss},
	{"SemaphoreAdmitsN", semaphoreAdmitsN},
	{"SemaphoreOfAnotherSizeOrKindIsErrMismatch", semaphoreMismatch},
	{"SemaphoreUnitsAreHeldWholeAndNeverExceedN", semaphoreUnits},
	{"RWLockReadersShareAndAWaitingWriterHoldsOffReaders", rwLockReadersAndWriter},
	{"UpgradeableReaderSharesWithReadersAndExcludesUpgradeablesAndWriters", upgradeableSharesWithReadersOnly},
	{"UpgradeWaitsForReadersRefusesNewOnesAndNoWriterGetsInBetween", upgradeWaitsForReaders},
	{"UpgradeWhoseCtxEndsLetsReadersInAgainAndStaysUpgradeable", upgradeCtxEnds},
	{"UpgradeSeesTheLossOfItsHandle", upgradeSeesTheLoss},
	{"DowngradeLetsAWaitingReaderInAndKeepsWritersOut", downgradeLetsReadersIn},
	{"UpgradeAndDowngradeInTheWrongModeAreErrMismatch", wrongHandles},
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
	{"TakeOverHandsEveryKindOverWithAHigherToken", takeOverEveryKind},
	{"ATicketWorksOnceAndAStaleOneChangesNothing", ticketWorksOnce},
	{"ElectionTakeOverHandsLeadershipToTheSuccessor", electionTakeOver},
	{"FleetSpreadsItsShardsAndHandsThemOnWithoutTwins", fleetSpreadsAndHandsOn},
}

func optionsValidated(e *Env) {
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
		_, _, err := e.open([]mongolock.Option{c.opt})
		require.ErrorContains(e.T, err, c.says)
		require.ErrorIs(e.T, err, mongolock.ErrInvalidArgument)
		var me *mongolock.Error
		require.ErrorAs(e.T, err, &me)
		require.Equal(e.T, "new provider", me.Op)
	}
}

func acquireReturnsAHeldHandle(e *Env) {
	p := e.provider(mongolock.WithOwner("worker-1"))
	before := time.Now()
	h := e.acquire(p.Lock("a"))
	require.Equal(e.T, "a", h.Name())
	require.Equal(e.T, "worker-1", h.Owner())
	require.Positive(e.T, h.FencingToken())
	require.False(e.T, h.AcquiredAt().IsZero())
	require.True(e.T, h.LeaseEnd().After(before), "LeaseEnd %v, before %v", h.LeaseEnd(), before)
	require.NoError(e.T, h.Context().Err())
	e.notLost(h, "Lost closed on a held handle")
	e.release(h)
}

func releaseIsIdempotent(e *Env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	e.release(h)
	require.ErrorIs(e.T, context.Cause(h.Context()), context.Canceled)
	e.notLost(h, "Release closed Lost")
	require.NoError(e.T, h.Release(e.Ctx))
	e.requireFree(p.Lock("a"), "the lock is free after Release")
}

func releaseWithDoneContext(e *Env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	err := h.Release(e.ended())
	require.ErrorIs(e.T, err, context.Canceled)
	requireOp(e.T, err, "release")
	require.Error(e.T, h.Context().Err(), "the handle is released all the same")
	require.NoError(e.T, h.Release(e.Ctx), "later calls return nil")
	var next *mongolock.Handle
	e.pollUntil("the lock frees", func() bool {
		next, err = p.Lock("a").TryAcquire(e.Ctx)
		return err == nil
	})
	e.release(next)
}

func tryAcquireHeld(e *Env) {
	p, other := e.provider(), e.provider()
	h := e.acquire(p.Lock("a"))
	for _, q := range []*mongolock.Provider{p, other} {
		_, err := q.Lock("a").TryAcquire(e.Ctx)
		require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
		requireOp(e.T, err, "try acquire")
	}
	e.release(h)
}

func doneContextAcquiresNothing(e *Env) {
	p := e.provider()
	_, err := p.Lock("a").TryAcquire(e.ended())
	require.ErrorIs(e.T, err, context.Canceled)
	_, err = p.Lock("a").Acquire(e.ended())
	require.ErrorIs(e.T, err, context.Canceled)
	require.NotErrorIs(e.T, err, mongolock.ErrNotAcquired, "the lock was free")
	requireOp(e.T, err, "acquire")
	e.requireFree(p.Lock("a"), "nothing was left held")
}

func acquireWaitsForRelease(e *Env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	waiting := start(func() (*mongolock.Handle, error) { return p.Lock("a").Acquire(e.Ctx) })
	e.notYet(waiting, "Acquire of a held lock")
	e.release(h)
	next := e.receive(waiting)
	require.Greater(e.T, next.FencingToken(), h.FencingToken())
	e.release(next)
}

// twoProvidersAreTwoProcesses: the providers of two replicas of a service
// wait as two processes do. A refused Acquire claims the next turn in the
// document; the holder's Release offers it nothing, and it takes the lock
// by an attempt of its own.
func twoProvidersAreTwoProcesses(e *Env) {
	var offered atomic.Bool
	done := make(chan mongolock.AcquireDoneInfo, 1)
	a := e.provider(mongolock.WithTrace(&mongolock.Trace{HandOver: func(context.Context, mongolock.HandOverInfo) { offered.Store(true) }}))
	b := e.provider(mongolock.WithTrace(&mongolock.Trace{AcquireDone: func(_ context.Context, info mongolock.AcquireDoneInfo) { done <- info }}))
	h := e.acquire(a.Lock("a"))
	waiting := start(func() (*mongolock.Handle, error) { return b.Lock("a").Acquire(e.Ctx) })
	var info mongolock.LockInfo
	e.pollUntil("the waiting Acquire's process claims the next turn", func() bool {
		var err error
		info, err = a.Inspect(e.Ctx, "a")
		require.NoError(e.T, err)
		return info.Waiting
	})
	require.NotEmpty(e.T, info.Claim.Process)
	e.release(h)
	next := e.receive(waiting)
	require.False(e.T, offered.Load(), "the Release offered the lock to another provider's Acquire")
	require.False(e.T, (<-done).HandedOver, "the waiting Acquire was handed the lock")
	require.Greater(e.T, next.FencingToken(), h.FencingToken())
	e.release(next)
}

func acquireHeldUntilCtxEnds(e *Env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	ctx, cancel := context.WithTimeout(e.Ctx, 200*time.Millisecond)
	defer cancel()
	_, err := p.Lock("a").Acquire(ctx)
	require.ErrorIs(e.T, err, context.DeadlineExceeded)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
	requireOp(e.T, err, "acquire")
	e.release(h)
}

func fencingTokensIncrease(e *Env) {
	p := e.provider()
	var last int64
	next := func(h *mongolock.Handle) {
		require.Greater(e.T, h.FencingToken(), last)
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
func (e *Env) loseByForce(p *mongolock.Provider, h *mongolock.Handle) {
	e.T.Helper()
	ended, err := p.ForceRelease(e.Ctx, h.Name())
	require.NoError(e.T, err)
	require.True(e.T, ended)
	e.await(h.Lost(), "Lost closes after ForceRelease")
}

func forceReleaseMakesLost(e *Env) {
	p := e.provider()
	ended, err := p.ForceRelease(e.Ctx, "a")
	require.NoError(e.T, err)
	require.False(e.T, ended, "nothing held a lock never used")
	h := e.acquire(p.Lock("a"))
	e.loseByForce(p, h)
	require.ErrorIs(e.T, context.Cause(h.Context()), mongolock.ErrLockLost)
	err = h.Release(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrLockLost)
	requireOp(e.T, err, "release")
	require.NoError(e.T, h.Release(e.Ctx), "later calls return nil")
	next, err := p.Lock("a").TryAcquire(e.Ctx)
	require.NoError(e.T, err, "a lost lock is free for others")
	require.Greater(e.T, next.FencingToken(), h.FencingToken())
	e.release(next)
	ended, err = p.ForceRelease(e.Ctx, "a")
	require.NoError(e.T, err)
	require.False(e.T, ended, "the lock was released already")
}

func doRunsAndReleases(e *Env) {
	p := e.provider()
	failed := errors.New("fn failed")
	ran := false
	err := p.Lock("a").Do(e.Ctx, func(ctx context.Context) error {
		ran = true
		_, err := p.Lock("a").TryAcquire(ctx)
		require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "held while fn runs")
		return failed
	})
	require.True(e.T, ran)
	require.ErrorIs(e.T, err, failed)
	e.requireFree(p.Lock("a"), "released after fn")
	require.Error(e.T, p.Lock("a").Do(e.Ctx, nil))
}

func doReportsLoss(e *Env) {
	p := e.provider()
	err := p.Lock("a").Do(e.Ctx, func(ctx context.Context) error {
		if _, err := p.ForceRelease(e.Ctx, "a"); err != nil {
			return err
		}
		e.await(ctx.Done(), "fn's ctx ends on loss")
		require.ErrorIs(e.T, context.Cause(ctx), mongolock.ErrLockLost)
		return ctx.Err()
	})
	require.ErrorIs(e.T, err, mongolock.ErrLockLost)
}

func semaphoreAdmitsN(e *Env) {
	p, other := e.provider(), e.provider()
	s := p.Semaphore("s", 2)
	a, err := s.TryAcquire(e.Ctx)
	require.NoError(e.T, err)
	b := e.acquire(p.Lock("unrelated")) // a Lock of another name: no slot
	e.release(b)
	b, err = other.Semaphore("s", 2).TryAcquire(e.Ctx)
	require.NoError(e.T, err)
	_, err = s.TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
	waiting := start(func() (*mongolock.Handle, error) { return s.Acquire(e.Ctx) })
	e.notYet(waiting, "Acquire of a full semaphore")
	e.release(a)
	c := e.receive(waiting)
	require.Greater(e.T, c.FencingToken(), b.FencingToken())
	e.release(b)
	e.release(c)
	e.requireFree(p.Lock("s"), "a Lock and a Semaphore of one name are unrelated")
}

func semaphoreMismatch(e *Env) {
	p := e.provider()
	h, err := p.Semaphore("s", 2).TryAcquire(e.Ctx)
	require.NoError(e.T, err)
	for _, l := range []func() (*mongolock.Handle, error){
		func() (*mongolock.Handle, error) { return p.Semaphore("s", 3).TryAcquire(e.Ctx) },
		func() (*mongolock.Handle, error) { return p.Semaphore("s", 3).Acquire(e.Ctx) },
		func() (*mongolock.Handle, error) { return p.RWLock("s").Reader().TryAcquire(e.Ctx) },
	} {
		_, err := l()
		require.ErrorIs(e.T, err, mongolock.ErrMismatch)
		require.NotErrorIs(e.T, err, mongolock.ErrNotAcquired)
	}
	e.release(h)
	h, err = p.Semaphore("s", 3).TryAcquire(e.Ctx)
	require.NoError(e.T, err, "with no slot held, the next acquisition sets n")
	e.release(h)
	_, err = p.RWLock("s").Writer().TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrMismatch, "a semaphore's name stays a semaphore's")
	_, err = p.Semaphore("zero", 0).TryAcquire(e.Ctx)
	require.Error(e.T, err)
	require.NotErrorIs(e.T, err, mongolock.ErrNotAcquired)
}

func rwLockReadersAndWriter(e *Env) {
	p := e.provider()
	rw := p.RWLock("rw")
	r1 := e.acquire(rw.Reader())
	r2, err := rw.Reader().TryAcquire(e.Ctx)
	require.NoError(e.T, err, "readers share")
	_, err = rw.Writer().TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "no writer while readers hold")
	writer := start(func() (*mongolock.Handle, error) { return rw.Writer().Acquire(e.Ctx) })
	e.pollUntil("the writer waits", func() bool {
		info, err := rw.Inspect(e.Ctx)
		return err == nil && info.WriterWaiting
	})
	_, err = rw.Reader().TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "a waiting writer holds off new readers")
	e.release(r1)
	e.notYet(writer, "the writer, while a reader holds")
	e.release(r2)
	w := e.receive(writer)
	require.Greater(e.T, w.FencingToken(), r2.FencingToken())
	_, err = rw.Reader().TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "no reader while the writer holds")
	e.release(w)
	r3, err := rw.Reader().TryAcquire(e.Ctx)
	require.NoError(e.T, err)
	e.release(r3)
}

func electionLeaderProclaimResign(e *Env) {
	p := e.provider(mongolock.WithOwner("node-1"))
	el := p.Election("leader")
	_, err := el.Leader(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNoLeader)
	l, err := el.Campaign(e.Ctx, "a")
	require.NoError(e.T, err)
	got, err := el.Leader(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, mongolock.Leader{Value: "a", Owner: "node-1", FencingToken: l.FencingToken(), Since: got.Since}, got)
	require.False(e.T, got.Since.IsZero())
	require.NoError(e.T, l.Proclaim(e.Ctx, "b"))
	got, err = el.Leader(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, "b", got.Value)
	_, err = p.Lock("leader").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "an election is the lock of its name")
	require.NoError(e.T, l.Release(e.Ctx))
	_, err = el.Leader(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNoLeader)
	err = l.Proclaim(e.Ctx, "c")
	require.Error(e.T, err, "no Proclaim after Release")
	requireOp(e.T, err, "proclaim")
	require.NoError(e.T, l.Release(e.Ctx))

	l, err = el.Campaign(e.Ctx, "d")
	require.NoError(e.T, err)
	e.loseByForce(p, l.Handle)
	err = l.Proclaim(e.Ctx, "e")
	require.ErrorIs(e.T, err, mongolock.ErrLockLost)
	_, err = el.Campaign(e.Ctx, string(make([]byte, mongolock.MaxValueLen+1)))
	requireOp(e.T, err, "campaign")
}

func electionCampaignWaits(e *Env) {
	p, other := e.provider(mongolock.WithOwner("node-1")), e.provider(mongolock.WithOwner("node-2"))
	first, err := p.Election("leader").Campaign(e.Ctx, "one")
	require.NoError(e.T, err)
	second := start(func() (*mongolock.Handle, error) {
		l, err := other.Election("leader").Campaign(e.Ctx, "two")
		if err != nil {
			return nil, err
		}
		return l.Handle, nil
	})
	e.notYet(second, "a campaign while another leads")
	require.NoError(e.T, first.Release(e.Ctx))
	h := e.receive(second)
	got, err := p.Election("leader").Leader(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, "two", got.Value)
	require.Equal(e.T, "node-2", got.Owner)
	require.Equal(e.T, h.FencingToken(), got.FencingToken)
	require.Greater(e.T, h.FencingToken(), first.FencingToken())
	e.release(h)
	ctx, cancel := context.WithTimeout(e.Ctx, 100*time.Millisecond)
	defer cancel()
	third, err := p.Election("leader").Campaign(e.Ctx, "three")
	require.NoError(e.T, err)
	_, err = other.Election("leader").Campaign(ctx, "four")
	require.ErrorIs(e.T, err, context.DeadlineExceeded)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
	requireOp(e.T, err, "campaign")
	require.NoError(e.T, third.Release(e.Ctx))
}

func electionObserve(e *Env) {
	p := e.provider()
	el := p.Election("leader")
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	states := el.Observe(ctx)
	next := func(what string, want func(mongolock.Leader) bool) {
		e.T.Helper()
		for {
			select {
			case l, ok := <-states:
				require.True(e.T, ok, "Observe's channel closed early")
				if want(l) {
					return
				}
			case <-e.Ctx.Done():
				e.T.Fatalf("Observe did not deliver: %s", what)
			}
		}
	}
	next("nobody leads", func(l mongolock.Leader) bool { return l == mongolock.Leader{} })
	l, err := el.Campaign(e.Ctx, "a")
	require.NoError(e.T, err)
	next("the leader", func(got mongolock.Leader) bool { return got.Value == "a" && got.FencingToken == l.FencingToken() })
	require.NoError(e.T, l.Proclaim(e.Ctx, "b"))
	next("the new value", func(got mongolock.Leader) bool { return got.Value == "b" })
	require.NoError(e.T, l.Release(e.Ctx))
	next("nobody leads again", func(got mongolock.Leader) bool { return got == mongolock.Leader{} })
	cancel()
	for range states { // closes once ctx ended
	}
}

func electionRun(e *Env) {
	p := e.provider()
	ctx, cancel := context.WithCancel(e.Ctx)
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
	case <-e.Ctx.Done():
		e.T.Fatal("Run did not lead")
	}
	got, err := p.Election("leader").Leader(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, mongolock.Leader{Value: "runner", Owner: got.Owner, FencingToken: token, Since: got.Since}, got)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(e.T, err, context.Canceled)
	case <-e.Ctx.Done():
		e.T.Fatal("Run did not return after ctx ended")
	}
	_, err = p.Election("leader").Leader(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNoLeader, "Run resigned")
}

func inspectAndLocks(e *Env) {
	p := e.provider(mongolock.WithOwner("node-1"))
	_, err := p.Inspect(e.Ctx, "a/1")
	require.ErrorIs(e.T, err, mongolock.ErrNoLock)
	requireOp(e.T, err, "inspect")
	var hs []*mongolock.Handle
	for _, name := range []string{"b", "a/2", "a/1"} {
		hs = append(hs, e.acquire(p.Lock(name)))
	}
	info, err := p.Inspect(e.Ctx, "a/1")
	require.NoError(e.T, err)
	require.True(e.T, info.Held)
	require.Equal(e.T, "a/1", info.Name)
	require.Equal(e.T, "node-1", info.Owner)
	require.Equal(e.T, "", info.Value)
	require.Equal(e.T, hs[2].FencingToken(), info.FencingToken)
	require.True(e.T, info.ExpiresAt.After(info.AcquiredAt))
	require.False(e.T, info.ServerTime.IsZero())
	e.release(hs[2])
	info, err = p.Inspect(e.Ctx, "a/1")
	require.NoError(e.T, err)
	require.False(e.T, info.Held)
	require.Equal(e.T, "", info.Owner)
	require.Equal(e.T, hs[2].FencingToken(), info.FencingToken, "the token stays")

	var names []string
	for info, err := range p.Locks(e.Ctx, "a/") {
		require.NoError(e.T, err)
		names = append(names, fmt.Sprintf("%s held=%v", info.Name, info.Held))
	}
	require.Equal(e.T, []string{"a/1 held=false", "a/2 held=true"}, names)
	for _, h := range hs[:2] {
		e.release(h)
	}
	var all []string
	for info, err := range p.Locks(e.Ctx, "") {
		require.NoError(e.T, err)
		all = append(all, info.Name)
	}
	require.True(e.T, slices.IsSorted(all))
	require.Len(e.T, all, 3)
}

func inspectSlots(e *Env) {
	p := e.provider(mongolock.WithOwner("node-1"))
	_, err := p.Semaphore("s", 2).Inspect(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNoLock)
	_, err = p.RWLock("rw").Inspect(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNoLock)
	a, err := p.Semaphore("s", 2).Acquire(e.Ctx)
	require.NoError(e.T, err)
	s, err := p.Semaphore("s", 5).Inspect(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, 2, s.N, "Inspect ignores the Semaphore's n")
	require.Len(e.T, s.Holders, 1)
	require.Equal(e.T, "node-1", s.Holders[0].Owner)
	require.False(e.T, s.Holders[0].Write)
	require.Equal(e.T, a.FencingToken(), s.Holders[0].FencingToken)
	require.Equal(e.T, a.FencingToken(), s.FencingToken)
	e.release(a)
	s, err = p.Semaphore("s", 2).Inspect(e.Ctx)
	require.NoError(e.T, err)
	require.Empty(e.T, s.Holders)

	w := e.acquire(p.RWLock("rw").Writer())
	rw, err := p.RWLock("rw").Inspect(e.Ctx)
	require.NoError(e.T, err)
	require.Len(e.T, rw.Holders, 1)
	require.True(e.T, rw.Holders[0].Write)
	require.False(e.T, rw.WriterWaiting)
	e.release(w)
	r := e.acquire(p.RWLock("rw").Reader())
	rw, err = p.RWLock("rw").Inspect(e.Ctx)
	require.NoError(e.T, err)
	require.Len(e.T, rw.Holders, 1)
	require.False(e.T, rw.Holders[0].Write)
	require.Equal(e.T, r.FencingToken(), rw.FencingToken)
	e.release(r)
}

func closeReleasesAndRefuses(e *Env) {
	p, other := e.provider(), e.provider()
	h := e.acquire(p.Lock("a"))
	waiting := start(func() (*mongolock.Handle, error) { return p.Lock("a").Acquire(e.Ctx) })
	e.notYet(waiting, "Acquire of a held lock")
	observing := p.Election("leader").Observe(e.Ctx)
	<-observing // the first state: Observe runs
	require.NoError(e.T, p.Close(e.Ctx))
	for range observing { // closes with the provider
	}
	select {
	case r := <-waiting:
		require.ErrorIs(e.T, r.err, mongolock.ErrClosed)
	case <-e.Ctx.Done():
		e.T.Fatal("a waiting Acquire did not return after Close")
	}
	e.await(h.Context().Done(), "Close releases the handles")
	require.ErrorIs(e.T, context.Cause(h.Context()), context.Canceled)
	e.notLost(h, "Close made the handle lost")
	require.NoError(e.T, h.Release(e.Ctx), "a handle Close released")
	_, err := p.Lock("a").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrClosed)
	_, err = p.Semaphore("s", 1).Acquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrClosed)
	require.NoError(e.T, p.Close(e.Ctx), "a second Close")
	e.requireFree(other.Lock("a"), "free for others at once")
}

func readsWithEndedContext(e *Env) {
	p := e.provider()
	h := e.acquire(p.Lock("a"))
	s, err := p.Semaphore("s", 1).Acquire(e.Ctx)
	require.NoError(e.T, err)
	_, err = p.Inspect(e.ended(), "a")
	require.ErrorIs(e.T, err, context.Canceled)
	requireOp(e.T, err, "inspect")
	_, err = p.Semaphore("s", 1).Inspect(e.ended())
	require.ErrorIs(e.T, err, context.Canceled)
	_, err = p.ForceRelease(e.ended(), "a")
	require.ErrorIs(e.T, err, context.Canceled)
	requireOp(e.T, err, "force release")
	yielded := 0
	for _, err := range p.Locks(e.ended(), "") {
		yielded++
		require.ErrorIs(e.T, err, context.Canceled)
		requireOp(e.T, err, "list")
	}
	require.Equal(e.T, 1, yielded, "the error, once")
	require.NoError(e.T, h.Context().Err(), "nothing was released")
	e.release(h)
	e.release(s)
}

func compositeAllOrNone(e *Env) {
	p, q := e.provider(), e.provider()
	ab, err := mongolock.NewComposite(p.Lock("a"), p.Semaphore("s", 2), p.RWLock("rw").Reader(), p.Lock("b"))
	require.NoError(e.T, err)
	ba, err := mongolock.NewComposite(q.Lock("b"), q.Lock("a"))
	require.NoError(e.T, err)

	// All or none: with b held elsewhere, nothing is left taken.
	b := e.acquire(q.Lock("b"))
	_, err = ab.TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
	e.requireFree(p.Lock("a"), "a failed composite left a part held")
	e.requireFree(p.RWLock("rw").Writer(), "a failed composite left a reader")
	e.release(b)

	// Given in opposite orders, two composites take turns without deadlock.
	done := make(chan error, 2)
	for _, c := range []*mongolock.Composite{ab, ba} {
		go func() {
			for range 5 {
				h, err := c.Acquire(e.Ctx)
				if err != nil {
					done <- err
					return
				}
				if err := h.Release(e.Ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		require.NoError(e.T, <-done)
	}

	// One handle: every part's token, and the loss of any part.
	h, err := ab.Acquire(e.Ctx)
	require.NoError(e.T, err)
	require.Len(e.T, h.Handles(), 4)
	for _, part := range h.Handles() {
		require.Positive(e.T, part.FencingToken(), part.Name())
	}
	ended, err := q.ForceRelease(e.Ctx, "b")
	require.NoError(e.T, err)
	require.True(e.T, ended)
	e.await(h.Lost(), "the composite's Lost closes when a part is lost")
	require.ErrorIs(e.T, context.Cause(h.Context()), mongolock.ErrLockLost)
	require.ErrorIs(e.T, h.Release(e.Ctx), mongolock.ErrLockLost)
	e.requireFree(p.Lock("a"), "Release of a composite that lost a part released the others")
}

// A composite call that fails took parts for a job that never ran: it
// frees them at once, whatever WithHoldAtLeast says, so that no replica
// skips a period for it. Each failure: a part refused (TryAcquire), ctx
// ending while waiting for a part (Acquire), a semaphore part refusing the
// hold option.
func compositeFailureHoldsNothing(e *Env) {
	p, q := e.provider(mongolock.WithHoldAtLeast(time.Hour)), e.provider()
	b := e.acquire(q.Lock("b"))
	ab, err := mongolock.NewComposite(p.Lock("a"), p.Lock("b"))
	require.NoError(e.T, err)

	_, err = ab.TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
	e.requireFree(q.Lock("a"), "a refused TryAcquire left its first part held")

	ctx, cancel := context.WithTimeout(e.Ctx, 200*time.Millisecond)
	defer cancel()
	_, err = ab.Acquire(ctx)
	require.ErrorIs(e.T, err, context.DeadlineExceeded)
	e.requireFree(q.Lock("a"), "an Acquire whose ctx ended left its first part held")
	e.release(b)

	cs, err := mongolock.NewComposite(p.Lock("c"), p.Semaphore("s", 2))
	require.NoError(e.T, err)
	_, err = cs.TryAcquire(e.Ctx)
	require.ErrorContains(e.T, err, "apply to locks only")
	e.requireFree(q.Lock("c"), "a semaphore part that refused the hold left the lock part held")

	// A job that ran keeps its hold.
	h, err := ab.Acquire(e.Ctx)
	require.NoError(e.T, err)
	require.NoError(e.T, h.Release(e.Ctx))
	_, err = q.Lock("a").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "a composite that was held kept no hold")
}
