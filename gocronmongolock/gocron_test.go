package gocronmongolock_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/gocronmongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// skewedClock is a replica's clock that is off by skew, as
// examples/schedule's workers' are: the scheduler fires by it.
type skewedClock struct {
	clockwork.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time                  { return c.Clock.Now().Add(c.skew) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// A scheduleRun is one gocron scenario: replicas whose clocks are off by
// skews, each a scheduler with a Locker over a Provider of its own, run a
// fast job every period for the duration.
type scheduleRun struct {
	providers func(i int) *mongolock.Provider
	skews     []time.Duration
	period    time.Duration
	periods   int // full periods that every replica's scheduler sees
}

// run starts the replicas' schedulers, lets periods+2 periods pass, shuts
// them down, and returns how often the job ran in each period that every
// replica saw whole (by each replica's own clock, the period it fired for).
func (r scheduleRun) run(t *testing.T) (perPeriod map[time.Time]int, checked []time.Time) {
	t.Helper()
	var mu sync.Mutex
	runs := map[time.Time]int{}
	var schedulers []gocron.Scheduler
	for i, skew := range r.skews {
		locker, err := gocronmongolock.NewLocker(r.providers(i))
		require.NoError(t, err)
		clock := skewedClock{clockwork.NewRealClock(), skew}
		s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedLocker(locker))
		require.NoError(t, err)
		_, err = s.NewJob(gocron.CronJob(cronEvery(r.period), true), gocron.NewTask(func() {
			at := clock.Now().Truncate(r.period) // the period this replica fired for
			mu.Lock()
			runs[at]++
			mu.Unlock()
		}), gocron.WithName("report"))
		require.NoError(t, err)
		schedulers = append(schedulers, s)
	}
	for _, s := range schedulers {
		s.Start()
	}
	began := time.Now()
	// The first period that every replica sees whole begins a period
	// later than the largest skew could make it fire before began.
	first := began.Add(slices.Max(r.skews)).Truncate(r.period).Add(r.period)
	for range r.periods {
		checked = append(checked, first.Add(time.Duration(len(checked))*r.period))
	}
	// Until the last checked period has fired on every replica, with the
	// period after it to spare.
	time.Sleep(time.Until(checked[len(checked)-1].Add(r.period - slices.Min(r.skews))))
	for _, s := range schedulers {
		require.NoError(t, s.Shutdown())
	}
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(runs), checked
}

// cronEvery is a cron expression, with seconds, that fires every period
// (whole seconds), on the period.
func cronEvery(period time.Duration) string {
	return fmt.Sprintf("*/%d * * * * *", int(period/time.Second))
}

// replicasOnServer returns a provider maker: each replica a client of its
// own (a process of its own) on one database of the test server, closed
// when the test ends.
func replicasOnServer(t *testing.T, opts ...mongolock.Option) func(int) *mongolock.Provider {
	name := testdb.Database(t).Name()
	return func(int) *mongolock.Provider {
		p, err := mongolock.NewProvider(testdb.NewClient(t).Database(name), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
		return p
	}
}

var threeSkews = []time.Duration{-100 * time.Millisecond, 0, 100 * time.Millisecond}

// Three gocron schedulers on clocks up to 200 ms apart fire a job that
// takes no time every second: with a hold of half a second the job runs
// exactly once per period, however early the first replica fires.
func TestSkewedSchedulersWithHoldAtLeastRunEachPeriodExactlyOnce(t *testing.T) {
	r := scheduleRun{providers: replicasOnServer(t, mongolock.WithHoldAtLeast(500*time.Millisecond)),
		skews: threeSkews, period: time.Second, periods: 4}
	runs, checked := r.run(t)
	for _, at := range checked {
		require.Equalf(t, 1, runs[at], "the period of %v ran %d times; all runs: %v", at.Format(time.TimeOnly), runs[at], runs)
	}
}

// The same replicas without the hold: the replica whose clock is ahead
// runs the job and releases the lock before the others' clocks reach the
// period, and they run it again: the hold is what makes it once.
func TestSkewedSchedulersWithoutHoldRunAPeriodMoreThanOnce(t *testing.T) {
	r := scheduleRun{providers: replicasOnServer(t), skews: threeSkews, period: time.Second, periods: 3}
	runs, checked := r.run(t)
	more := 0
	for _, at := range checked {
		if runs[at] > 1 {
			more++
		}
	}
	require.Positivef(t, more, "every period ran once without a hold: %v", runs)
}

// The same over mongolocktest, in a testing/synctest bubble: ten periods
// of simulated time, each run once.
func TestSkewedSchedulersOverMongolocktestRunEachPeriodExactlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mongolocktest.NewStore()
		var providers []*mongolock.Provider
		r := scheduleRun{providers: func(int) *mongolock.Provider {
			p, err := store.NewProvider(mongolock.WithHoldAtLeast(500 * time.Millisecond))
			require.NoError(t, err)
			providers = append(providers, p)
			return p
		}, skews: threeSkews, period: time.Second, periods: 10}
		runs, checked := r.run(t)
		closeInBubble(t, providers...)
		for _, at := range checked {
			require.Equalf(t, 1, runs[at], "the period of %v ran %d times; all runs: %v", at.Format(time.TimeOnly), runs[at], runs)
		}
	})
}

// closeInBubble closes providers at the end of a testing/synctest bubble,
// and lets the second pass in which what they started ends (idle senders
// linger): the bubble fails on a goroutine left once its function returns.
func closeInBubble(t *testing.T, providers ...*mongolock.Provider) {
	t.Helper()
	for _, p := range providers {
		require.NoError(t, p.Close(context.Background()))
	}
	time.Sleep(time.Second)
}

func newLocker(t *testing.T, p *mongolock.Provider, opts ...gocronmongolock.LockerOption) *gocronmongolock.Locker {
	t.Helper()
	l, err := gocronmongolock.NewLocker(p, opts...)
	require.NoError(t, err)
	return l
}

// A run whose lock another replica holds is refused with one attempt,
// ErrNotAcquired, not made to wait: gocron skips it.
func TestLockWhileAnotherReplicaHoldsItIsRefusedAtOnce(t *testing.T) {
	providers := replicasOnServer(t)
	a, b := newLocker(t, providers(0)), newLocker(t, providers(1))
	ctx := t.Context() // no deadline: a waiting Lock would never return
	held, err := a.Lock(ctx, "report")
	require.NoError(t, err)
	_, err = b.Lock(ctx, "report")
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, held.Unlock(ctx))
	again, err := b.Lock(ctx, "report")
	require.NoError(t, err, "free once unlocked, without a hold")
	require.NoError(t, again.Unlock(ctx))
}

// gocron unlocks with the job's context, which its shutdown has cancelled
// by then: Unlock releases all the same, and the next run gets the lock.
func TestUnlockWithACancelledContextReleasesTheLock(t *testing.T) {
	providers := replicasOnServer(t)
	a, b := newLocker(t, providers(0)), newLocker(t, providers(1))
	jobCtx, cancel := context.WithCancel(t.Context())
	held, err := a.Lock(jobCtx, "report")
	require.NoError(t, err)
	cancel() // the scheduler shuts down while the job runs
	require.NoError(t, held.Unlock(jobCtx))
	next, err := b.Lock(t.Context(), "report")
	require.NoError(t, err, "the lock was released")
	require.NoError(t, next.Unlock(t.Context()))
}

// A job that runs for several expiries keeps its lock: the lease is
// extended while it runs, and no other replica gets in.
func TestJobLongerThanTheExpiryKeepsItsLock(t *testing.T) {
	const expiry = time.Second
	providers := replicasOnServer(t, mongolock.WithExpiry(expiry))
	a, b := newLocker(t, providers(0)), newLocker(t, providers(1))
	ctx := t.Context()
	held, err := a.Lock(ctx, "report")
	require.NoError(t, err)
	for end := time.Now().Add(3 * expiry); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		_, err := b.Lock(ctx, "report")
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "another replica got in while the job ran")
	}
	require.NoError(t, held.Unlock(ctx), "still held after three expiries")
}

// A lock lost while the job runs is told to WithOnLost at once, and
// Unlock reports it; the job itself is not stopped (gocron cannot).
func TestLockLostWhileTheJobRunsIsToldToOnLostAndByUnlock(t *testing.T) {
	p, err := mongolocktest.NewProvider()
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	type loss struct {
		name string
		err  error
	}
	lost := make(chan loss, 1)
	locker := newLocker(t, p, gocronmongolock.WithNamePrefix("jobs/"),
		gocronmongolock.WithOnLost(func(name string, err error) { lost <- loss{name, err} }))
	ctx := t.Context()
	held, err := locker.Lock(ctx, "report")
	require.NoError(t, err)
	h := held.(*gocronmongolock.Lock).Handle()
	require.Equal(t, "jobs/report", h.Name())
	mongolocktest.Lose(h)
	got := <-lost
	require.Equal(t, "jobs/report", got.name)
	require.ErrorIs(t, got.err, mongolock.ErrLockLost)
	require.ErrorIs(t, held.Unlock(ctx), mongolock.ErrLockLost)
}

// A release is not a loss: WithOnLost is not called.
func TestUnlockIsNotToldToOnLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := mongolocktest.NewProvider()
		require.NoError(t, err)
		called := false
		locker := newLocker(t, p, gocronmongolock.WithOnLost(func(string, error) { called = true }))
		held, err := locker.Lock(t.Context(), "report")
		require.NoError(t, err)
		require.NoError(t, held.Unlock(t.Context()))
		synctest.Wait() // the release's AfterFunc has run
		require.False(t, called)
		closeInBubble(t, p)
	})
}

func TestNewLockerRefusesBadArguments(t *testing.T) {
	p, err := mongolocktest.NewProvider()
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	for name, try := range map[string]func() error{
		"nil provider": func() error { _, err := gocronmongolock.NewLocker(nil); return err },
		"nil option":   func() error { _, err := gocronmongolock.NewLocker(p, nil); return err },
		"zero timeout": func() error { _, err := gocronmongolock.NewLocker(p, gocronmongolock.WithTimeout(0)); return err },
		"nil elector":  func() error { _, err := gocronmongolock.NewElector(nil, "x"); return err },
		"nil context": func() error {
			//lint:ignore SA1012 the nil context is the test
			_, err := newLocker(t, p).Lock(nil, "x")
			return err
		},
	} {
		require.Error(t, try(), name)
	}
}

func newElector(t *testing.T, p *mongolock.Provider, name, value string) *gocronmongolock.Elector {
	t.Helper()
	e, err := gocronmongolock.NewElector(p, name, gocronmongolock.WithValue(value))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	return e
}

// leaders returns which of electors say they lead.
func leaders(electors ...*gocronmongolock.Elector) []int {
	var out []int
	for i, e := range electors {
		if e.IsLeader(context.Background()) == nil {
			out = append(out, i)
		}
	}
	return out
}

// waitForOneLeader polls until exactly one of electors leads, and returns it.
func waitForOneLeader(t *testing.T, electors ...*gocronmongolock.Elector) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := leaders(electors...)
		if len(l) == 1 {
			return l[0]
		}
		require.LessOrEqual(t, len(l), 1, "two lead at once")
		if time.Now().After(deadline) {
			t.Fatal("nobody led within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two replicas' Electors: one leads, the other's IsLeader says
// ErrNotLeader; when the leader closes, the other leads.
func TestOneElectorLeadsAndAnotherTakesOverWhenItCloses(t *testing.T) {
	providers := replicasOnServer(t)
	a, b := newElector(t, providers(0), "scheduler", "a"), newElector(t, providers(1), "scheduler", "b")
	first := waitForOneLeader(t, a, b)
	electors := []*gocronmongolock.Elector{a, b}
	require.ErrorIs(t, electors[1-first].IsLeader(t.Context()), gocronmongolock.ErrNotLeader)
	require.NotNil(t, electors[first].Leadership())
	require.Nil(t, electors[1-first].Leadership())
	require.NoError(t, electors[first].Close(t.Context()))
	require.ErrorIs(t, electors[first].IsLeader(t.Context()), gocronmongolock.ErrNotLeader)
	require.Equal(t, 1-first, waitForOneLeader(t, a, b), "the other leads once the leader closed")
}

// IsLeader asks nothing of the server: cut off from it, the leader still
// leads until its lease could have run out, and then no longer does,
// before anyone else could lead.
func TestIsLeaderAnswersFromTheCampaignWithoutARoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const expiry = 3 * time.Second
		store := mongolocktest.NewStore()
		p, err := store.NewProvider(mongolock.WithExpiry(expiry))
		require.NoError(t, err)
		e, err := gocronmongolock.NewElector(p, "scheduler")
		require.NoError(t, err)
		for e.IsLeader(t.Context()) != nil {
			time.Sleep(time.Millisecond)
		}
		store.Partition()
		require.NoError(t, e.IsLeader(t.Context()), "a round trip would have failed")
		time.Sleep(expiry) // no extension got through
		require.ErrorIs(t, e.IsLeader(t.Context()), gocronmongolock.ErrNotLeader)
		store.Heal()
		require.NoError(t, e.Close(t.Context()))
		closeInBubble(t, p)
	})
}

// Two replicas' schedulers with Electors: the job runs only on the
// leader's, and moves to the other replica when the leader closes its
// Elector.
func TestSchedulersRunJobsOnlyOnTheLeaderAndMoveWithIt(t *testing.T) {
	providers := replicasOnServer(t)
	var (
		mu   sync.Mutex
		runs [2]int
	)
	electors := make([]*gocronmongolock.Elector, 2)
	for i := range electors {
		electors[i] = newElector(t, providers(i), "scheduler", fmt.Sprint("replica-", i))
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(electors[i]))
		require.NoError(t, err)
		_, err = s.NewJob(gocron.DurationJob(20*time.Millisecond), gocron.NewTask(func() {
			mu.Lock()
			runs[i]++
			mu.Unlock()
		}))
		require.NoError(t, err)
		s.Start()
		t.Cleanup(func() { require.NoError(t, s.Shutdown()) })
	}
	count := func() [2]int { mu.Lock(); defer mu.Unlock(); return runs }
	waitFor := func(what string, cond func([2]int) bool) [2]int {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if c := count(); cond(c) {
				return c
			}
			require.Truef(t, time.Now().Before(deadline), "%s: not within 20 s: %v", what, count())
		}
	}
	leader := waitForOneLeader(t, electors...)
	before := count()
	waitFor("the leader runs the job", func(c [2]int) bool { return c[leader] >= before[leader]+5 })
	require.Equal(t, before[1-leader], count()[1-leader], "the other replica ran the job while not leading")

	require.NoError(t, electors[leader].Close(t.Context()))
	stopped := count()[leader] // a run that began before Close may end after
	waitFor("the other replica runs the job", func(c [2]int) bool { return c[1-leader] >= 5 })
	require.LessOrEqual(t, count()[leader], stopped+1, "the closed replica kept running the job")
}

// An Election cannot be held with WithHoldAtLeast: an Elector over such a
// Provider never leads, and IsLeader and Close say why.
func TestElectorOverAProviderWithHoldAtLeastSaysWhyItCannotLead(t *testing.T) {
	p, err := mongolocktest.NewProvider(mongolock.WithHoldAtLeast(time.Second))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	e, err := gocronmongolock.NewElector(p, "scheduler")
	require.NoError(t, err)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		err := e.IsLeader(t.Context())
		require.ErrorIs(t, err, gocronmongolock.ErrNotLeader)
		if strings.Contains(err.Error(), "WithHoldAtLeast") {
			break
		}
		require.True(t, time.Now().Before(deadline), "IsLeader still says only %v", err)
	}
	require.ErrorContains(t, e.Close(t.Context()), "WithHoldAtLeast")
}
