package mongolock_test

// Leader election: campaigns, leaders, proclamations, observers and Run,
// against the real server, with campaigners on clients of their own.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/testdb"
)

// fastPolls makes waiters and observers poll every few milliseconds.
var fastPolls = mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond)

// receive returns the next state an observer delivers, failing the test
// if none comes within d or the channel closes.
func receive(t *testing.T, ch <-chan mongolock.Leader, d time.Duration) mongolock.Leader {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "the observer's channel closed")
		return l
	case <-timer.C:
		require.FailNow(t, "nothing observed", "no state delivered within %v", d)
		return mongolock.Leader{}
	}
}

// awaitChannelClosed drains ch and fails the test if it is not closed
// within d.
func awaitChannelClosed(t *testing.T, ch <-chan mongolock.Leader, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			require.FailNow(t, "the observer's channel is still open", "after %v", d)
		}
	}
}

// Campaigners on clients of their own, each leading several terms: never
// two leaders at once, tokens increasing from leader to leader, Leader
// showing each leader while it leads, and an observer on another client
// seeing every leader, in order. Each leader resigns only once the
// observer has seen it: a leader shorter than one poll may go unseen.
func TestElectionHasOneLeaderAtATimeSeenInOrder(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprintf("%d campaigners", n), func(t *testing.T) { electionTrial(t, n, 10/n+1) })
	}
}

func electionTrial(t *testing.T, campaigners, termsEach int) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	observed := newProvider(t, ownClient(t, db, nil), fastPolls).Election("primary").Observe(octx)
	r := &electionRecord{seen: map[int64]chan struct{}{}}
	observerDone := make(chan struct{})
	go func() {
		defer close(observerDone)
		r.observe(observed)
	}()
	var wg sync.WaitGroup
	for i := range campaigners {
		owner := fmt.Sprintf("node-%d", i)
		e := newProvider(t, ownClient(t, db, nil), fastPolls, mongolock.WithOwner(owner)).Election("primary")
		wg.Go(func() { r.lead(ctx, t, e, owner, fmt.Sprintf("http://10.0.0.%d:8080", i), termsEach) })
	}
	wg.Wait()
	stopObserving()
	<-observerDone
	r.check(t, campaigners*termsEach)
}

// electionRecord is what an election trial's campaigners and observer saw.
type electionRecord struct {
	mu       sync.Mutex
	seen     map[int64]chan struct{} // closed once the observer saw that leader
	observed []mongolock.Leader
	won      []mongolock.Leader // recorded while leading: in order
	inside   atomic.Int32
	overlaps atomic.Int32
}

func (r *electionRecord) seenChan(token int64) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[token] == nil {
		r.seen[token] = make(chan struct{})
	}
	return r.seen[token]
}

// observe records each leader that Observe delivers, until it closes.
func (r *electionRecord) observe(observed <-chan mongolock.Leader) {
	for l := range observed {
		if l == (mongolock.Leader{}) {
			continue // nobody leads, between terms
		}
		r.mu.Lock()
		r.observed = append(r.observed, l)
		r.mu.Unlock()
		close(r.seenChan(l.FencingToken))
	}
}

// lead campaigns for terms terms, each led until the observer has seen it.
func (r *electionRecord) lead(ctx context.Context, t *testing.T, e *mongolock.Election, owner, value string, terms int) {
	for range terms {
		l, err := e.Campaign(ctx, value)
		if !assert(t, err == nil, "campaign: %v", err) {
			return
		}
		if r.inside.Add(1) > 1 {
			r.overlaps.Add(1)
		}
		r.mu.Lock()
		r.won = append(r.won, mongolock.Leader{Value: value, Owner: owner, FencingToken: l.FencingToken()})
		r.mu.Unlock()
		got, err := e.Leader(ctx)
		assert(t, err == nil && got.FencingToken == l.FencingToken() && got.Value == value,
			"Leader while leading: %+v, %v; want token %d, value %q", got, err, l.FencingToken(), value)
		select {
		case <-r.seenChan(l.FencingToken()):
		case <-ctx.Done():
		}
		r.inside.Add(-1)
		assert(t, l.Release(ctx) == nil, "resign")
	}
}

// check requires terms terms, one leader at a time, with increasing
// tokens, each observed in order.
func (r *electionRecord) check(t *testing.T, terms int) {
	require.Zero(t, r.overlaps.Load(), "two leaders at once")
	require.Len(t, r.won, terms)
	for i := 1; i < len(r.won); i++ {
		require.Greater(t, r.won[i].FencingToken, r.won[i-1].FencingToken, "term %d's token", i)
	}
	require.Len(t, r.observed, len(r.won), "leaders observed")
	for i, l := range r.observed {
		require.Equal(t, r.won[i].FencingToken, l.FencingToken, "observed leader %d", i)
		require.Equal(t, r.won[i].Value, l.Value, "observed leader %d", i)
		require.Equal(t, r.won[i].Owner, l.Owner, "observed leader %d", i)
		require.False(t, l.Since.IsZero())
	}
}

// A resignation hands over at once to a campaign of the same process (in
// its own round trip: the campaign's sleeps are an hour), and within the
// claimant's short poll to one of another process.
func TestResignHandsOverToAWaitingCampaigner(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	t.Run("same process", func(t *testing.T) {
		e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
		el := e.p.Election("handed")
		first, err := el.Campaign(ctx, "first")
		require.NoError(t, err)
		next := make(chan *mongolock.Leadership, 1)
		go func() {
			l, err := el.Campaign(ctx, "second")
			assert(t, err == nil, "second campaign: %v", err)
			next <- l
		}()
		awaitQueueLen(t, e.p, "handed", 1)
		require.NoError(t, first.Release(ctx))
		var second *mongolock.Leadership
		select {
		case second = <-next:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the waiting campaign was not handed leadership")
		}
		require.NotNil(t, second)
		require.Greater(t, second.FencingToken(), first.FencingToken())
		leader, err := el.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "second", leader.Value, "the hand-over carries the new leader's value")
		require.NoError(t, second.Release(ctx))
	})
	t.Run("another process", func(t *testing.T) {
		// The claimant polls every sleepMax/6; the bound below is half of
		// sleepMax, long enough that a stalled machine only slows the test.
		const sleepMax = 12 * time.Second
		e := newLockEnv(t, mongolock.WithBusyWaitSleep(5*time.Millisecond, sleepMax))
		first, err := e.other.Election("handed").Campaign(ctx, "first")
		require.NoError(t, err)
		next := make(chan *mongolock.Leadership, 1)
		go func() {
			l, err := e.p.Election("handed").Campaign(ctx, "second")
			assert(t, err == nil, "second campaign: %v", err)
			next <- l
		}()
		awaitClaim(t, e.p, "handed")
		resigned := time.Now()
		require.NoError(t, first.Release(ctx))
		second := <-next
		took := time.Since(resigned)
		require.NotNil(t, second)
		require.Less(t, took, sleepMax/2, "leadership changed hands %v after the resignation", took)
		require.NoError(t, second.Release(ctx))
		t.Logf("led by the other process %v after the resignation", took.Round(time.Millisecond))
	})
}

// Proclaim replaces the leader's value (same token); a stale leader, whose
// document someone else took over, is refused with ErrLockLost, writes
// nothing, and learns of the loss at once.
func TestProclaimIsRefusedToAStaleLeader(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	el := e.p.Election("proclaimed")
	l, err := el.Campaign(ctx, "v1")
	require.NoError(t, err)
	releaseAtCleanup(t, l.Handle)
	require.NoError(t, l.Proclaim(ctx, "v2"))
	leader, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "v2", leader.Value)
	require.Equal(t, l.FencingToken(), leader.FencingToken, "a proclamation is no new leadership")

	const usurper = "0123456789abcdef0123456789abcdef"
	_, err = e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "proclaimed"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "lockId", Value: usurper},
		{Key: "expiresAt", Value: time.Now().Add(time.Minute)},
	}}})
	require.NoError(t, err)
	err = l.Proclaim(ctx, "v3")
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	require.Contains(t, err.Error(), `proclaim "proclaimed"`)
	require.True(t, closedNow(l.Lost()), "the refused proclamation signalled the loss")
	require.ErrorIs(t, context.Cause(l.Context()), mongolock.ErrLockLost)
	require.Equal(t, "v2", rawLockDoc(t, e.coll, "proclaimed").Lookup("value").StringValue())
	require.ErrorIs(t, l.Release(ctx), mongolock.ErrLockLost)
	require.Equal(t, usurper, rawLockDoc(t, e.coll, "proclaimed").Lookup("lockId").StringValue())
}

// Values are bounded: a campaign or a proclamation with a longer one is
// refused before anything is sent; and a proclamation after Release is an
// error that sends nothing.
func TestValuesAreBoundedAndAResignedLeaderCannotProclaim(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	el := e.p.Election("bounded")
	tooLong := strings.Repeat("v", mongolock.MaxValueLen+1)
	_, err := el.Campaign(ctx, tooLong)
	require.ErrorContains(t, err, "MaxValueLen")
	require.ErrorContains(t, err, `campaign "bounded"`)
	requireInvalid(t, err, "campaign")
	require.Zero(t, e.count.commands.Load(), "a refused value sent nothing")
	require.ErrorContains(t, el.Run(ctx, tooLong, func(context.Context, *mongolock.Leadership) {}), "MaxValueLen")

	l, err := el.Campaign(ctx, strings.Repeat("v", mongolock.MaxValueLen))
	require.NoError(t, err)
	require.ErrorContains(t, l.Proclaim(ctx, tooLong), "MaxValueLen")
	require.NoError(t, l.Release(ctx))
	sent := e.count.commands.Load()
	err = l.Proclaim(ctx, "after")
	require.ErrorContains(t, err, "resigned")
	require.NotErrorIs(t, err, mongolock.ErrLockLost)
	require.Equal(t, sent, e.count.commands.Load(), "a proclamation after Release sent nothing")
}

// Leader shows the leader's value, owner, token and election time, and
// ErrNoLeader for a name never used, after a resignation, and once the
// leader's lease has run out.
func TestLeaderReportsTheLeaderOrErrNoLeader(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	watcher := e.other.Election("led")
	_, err := watcher.Leader(ctx)
	require.ErrorIs(t, err, mongolock.ErrNoLeader)
	require.ErrorContains(t, err, `leader "led"`)

	el := newProvider(t, e.db, mongolock.WithOwner("node-a")).Election("led")
	l, err := el.Campaign(ctx, "http://10.0.0.7:8080")
	require.NoError(t, err)
	releaseAtCleanup(t, l.Handle)
	leader, err := watcher.Leader(ctx)
	require.NoError(t, err)
	info, err := e.other.Inspect(ctx, "led")
	require.NoError(t, err)
	require.Equal(t, mongolock.Leader{Value: "http://10.0.0.7:8080", Owner: "node-a", FencingToken: l.FencingToken(), Since: info.AcquiredAt}, leader)

	require.NoError(t, l.Release(ctx))
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, mongolock.ErrNoLeader, "after resigning")

	l, err = el.Campaign(ctx, "again")
	require.NoError(t, err)
	releaseAtCleanup(t, l.Handle)
	// Its lease ends on the server (the next extension is ten seconds away).
	_, err = e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "led"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: time.Now().Add(-time.Second)}}}})
	require.NoError(t, err)
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, mongolock.ErrNoLeader, "after the lease ran out")
}

// Campaign's errors are Acquire's: its ctx's error, with ErrNotAcquired
// when someone else led the whole time, and ErrClosed after Close, also for
// a campaign waiting then.
func TestCampaignEndsWithItsContextOrTheProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, net, other := d.holderAndRival(fastPolls)
		net.Delay(time.Millisecond) // a round trip takes time, as a server's does
		leader, err := other.Election("contested").Campaign(ctx, "incumbent")
		require.NoError(t, err)
		releaseAtCleanup(t, leader.Handle)

		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = p.Election("contested").Campaign(cctx, "challenger")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.ErrorContains(t, err, `campaign "contested"`)

		closing, _ := d.process(fastPolls)
		waiting := make(chan error, 1)
		go func() { _, err := closing.Election("contested").Campaign(ctx, "challenger"); waiting <- err }()
		awaitQueueLen(t, closing, "contested", 1)
		require.NoError(t, closing.Close(ctx))
		require.ErrorIs(t, <-waiting, mongolock.ErrClosed)
		_, err = closing.Election("contested").Campaign(ctx, "challenger")
		require.ErrorIs(t, err, mongolock.ErrClosed)
	})
}

// term is one run of Run's function: its leadership's token and ctx.
type term struct {
	token int64
	ctx   context.Context
}

// runReportingTerms starts el.Run until ctx ends, with an fn that reports
// its term and waits for its ctx to end; next returns the next term, and
// ran Run's error.
func runReportingTerms(t *testing.T, ctx context.Context, el *mongolock.Election) (next func() term, ran <-chan error) {
	terms, done := make(chan term), make(chan error, 1)
	go func() {
		done <- el.Run(ctx, "runner", func(ctx context.Context, l *mongolock.Leadership) {
			select {
			case terms <- term{l.FencingToken(), ctx}:
				<-ctx.Done()
			case <-ctx.Done():
			}
		})
	}()
	return func() term {
		t.Helper()
		select {
		case tm := <-terms:
			return tm
		case <-time.After(10 * time.Second):
			require.FailNow(t, "fn did not run")
			return term{}
		}
	}, done
}

// Run runs fn while it leads, and only then; fn's ctx ends when leadership
// is lost (the document deleted, or taken over by hand), with the cause
// ErrLockLost; Run campaigns again and runs fn again with a greater token;
// when Run's ctx ends, fn's ctx ends, leadership is given up, and Run
// returns ctx's error.
func TestRunLeadsWhileItCanAndCampaignsAgainAfterALoss(t *testing.T) {
	conformance.Over(t, runCampaignsAgainAfterALoss)
}

func runCampaignsAgainAfterALoss(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, other, within := lossWatch(e, fastPolls)
	el := p.Election("run")
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	next, ran := runReportingTerms(t, rctx, el)
	first := next()
	leader, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "runner", leader.Value)
	require.Equal(t, first.token, leader.FencingToken)
	_, err = other.Lock("run").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "fn runs while Run leads")

	e.Remove(mongolock.DefaultCollection, "run")
	awaitClosed(t, first.ctx.Done(), within, "fn's ctx after the document was deleted")
	require.ErrorIs(t, context.Cause(first.ctx), mongolock.ErrLockLost)
	second := next()
	require.Greater(t, second.token, first.token)

	e.Edit(mongolock.DefaultCollection, "run", bson.D{{Key: "$set", Value: bson.D{
		{Key: "lockId", Value: "0123456789abcdef0123456789abcdef"},
		{Key: "expiresAt", Value: time.Now().Add(300 * time.Millisecond)},
	}}})
	awaitClosed(t, second.ctx.Done(), within, "fn's ctx after a takeover")
	require.ErrorIs(t, context.Cause(second.ctx), mongolock.ErrLockLost)
	third := next() // once the intruder's lease has run out
	require.Greater(t, third.token, second.token)

	stop()
	select {
	case err = <-ran:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return after its ctx ended")
	}
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, `run "run"`)
	require.True(t, closedNow(third.ctx.Done()))
	_, err = el.Leader(ctx)
	require.ErrorIs(t, err, mongolock.ErrNoLeader, "Run gave leadership up")
}

// Two Runs on clients of their own, whose fn returns at once: fn never
// runs in both at once, both lead in turn, tokens increase, and both
// return when their ctx ends.
func TestRunsOfTwoProcessesNeverLeadAtOnce(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, fastPolls)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu       sync.Mutex
		tokens   []int64
		byRunner [2]int
		inside   atomic.Int32
		overlaps atomic.Int32
	)
	const terms = 40
	var wg sync.WaitGroup
	for i, p := range []*mongolock.Provider{e.p, e.other} {
		wg.Go(func() {
			err := p.Election("alternating").Run(rctx, fmt.Sprint(i), func(ctx context.Context, l *mongolock.Leadership) {
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer inside.Add(-1)
				mu.Lock()
				defer mu.Unlock()
				tokens = append(tokens, l.FencingToken())
				if byRunner[i]++; len(tokens) >= terms && byRunner[0] > 0 && byRunner[1] > 0 {
					stop()
				}
			})
			assert(t, errors.Is(err, context.Canceled), "Run returned %v", err)
		})
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "fn ran in both at once")
	require.Positive(t, byRunner[0])
	require.Positive(t, byRunner[1])
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1])
	}
	t.Logf("terms: %d and %d", byRunner[0], byRunner[1])
}

// Close ends a leading Run: fn's ctx ends (Close gives leadership up) and
// Run returns ErrClosed. Nil arguments, to Run and the election's other
// calls, are errors, not panics.
func TestRunEndsWithCloseAndRefusesNilArguments(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, fastPolls)
	p := newProvider(t, e.db, fastPolls)
	el := p.Election("closing")
	var nilCtx context.Context // a variable: staticcheck (SA1012) rejects a literal nil
	require.ErrorContains(t, el.Run(nilCtx, "v", func(context.Context, *mongolock.Leadership) {}), "nil context")
	require.ErrorContains(t, el.Run(ctx, "v", nil), "nil function")
	requireInvalid(t, el.Run(ctx, "v", nil), "run")
	_, err := el.Campaign(nilCtx, "v")
	require.ErrorContains(t, err, "nil context")
	requireInvalid(t, err, "campaign")
	_, err = el.Leader(nilCtx)
	require.ErrorContains(t, err, "nil context")
	l, err := el.Campaign(ctx, "v")
	require.NoError(t, err)
	require.ErrorContains(t, l.Proclaim(nilCtx, "w"), "nil context")
	require.ErrorContains(t, l.Release(nilCtx), "nil context")
	require.NoError(t, l.Release(ctx))

	running := make(chan context.Context, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- el.Run(ctx, "v", func(ctx context.Context, _ *mongolock.Leadership) {
			running <- ctx
			<-ctx.Done()
		})
	}()
	fctx := <-running
	require.NoError(t, p.Close(ctx))
	awaitClosed(t, fctx.Done(), 5*time.Second, "fn's ctx after Close")
	require.ErrorIs(t, <-ran, mongolock.ErrClosed)
	_, err = e.other.Election("closing").Leader(ctx)
	require.ErrorIs(t, err, mongolock.ErrNoLeader)
}

// Observe delivers the current state at once (nobody leads a fresh name),
// then each new leader, each proclaimed value, and nobody after a
// resignation; its channel closes when its ctx ends.
func TestObserveDeliversTheStateThenEachChange(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, fastPolls)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	observed := e.other.Election("observed").Observe(octx)
	require.Equal(t, mongolock.Leader{}, receive(t, observed, 10*time.Second), "nobody leads a fresh name")

	el := newProvider(t, e.db, mongolock.WithOwner("node-a")).Election("observed")
	l, err := el.Campaign(ctx, "a")
	require.NoError(t, err)
	got := receive(t, observed, 10*time.Second)
	require.Equal(t, l.FencingToken(), got.FencingToken)
	require.Equal(t, "a", got.Value)
	require.Equal(t, "node-a", got.Owner)
	require.NoError(t, l.Proclaim(ctx, "b"))
	got = receive(t, observed, 10*time.Second)
	require.Equal(t, l.FencingToken(), got.FencingToken)
	require.Equal(t, "b", got.Value)
	require.NoError(t, l.Release(ctx))
	require.Equal(t, mongolock.Leader{}, receive(t, observed, 10*time.Second), "nobody leads after a resignation")
	l, err = el.Campaign(ctx, "c")
	require.NoError(t, err)
	got = receive(t, observed, 10*time.Second)
	require.Greater(t, got.FencingToken, l.FencingToken()-1)
	require.Equal(t, "c", got.Value)
	require.NoError(t, l.Release(ctx))

	stop()
	awaitChannelClosed(t, observed, 5*time.Second)
}

// A receiver that falls behind gets the latest state, not a backlog: after
// several proclamations it has not received, the next state it receives is
// the last one, and then the next change.
func TestObserveGivesASlowReceiverTheLatestState(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, fastPolls)
	observed := e.p.Election("slow").Observe(ctx)
	require.Equal(t, mongolock.Leader{}, receive(t, observed, 10*time.Second))

	l, err := e.other.Election("slow").Campaign(ctx, "v0")
	require.NoError(t, err)
	releaseAtCleanup(t, l.Handle)
	for i := 1; i <= 5; i++ {
		require.NoError(t, l.Proclaim(ctx, fmt.Sprintf("v%d", i)))
		// The observer reads the election in between, unreceived.
		n := e.count.named("aggregate")
		pollUntil(t, 10*time.Second, "the observer reading the election", func() bool { return e.count.named("aggregate") >= n+2 })
	}
	require.Equal(t, "v5", receive(t, observed, 10*time.Second).Value, "the latest state, not the first unreceived")
	require.NoError(t, l.Proclaim(ctx, "v6"))
	require.Equal(t, "v6", receive(t, observed, 10*time.Second).Value, "the next change, not a backlog")
}

// The observer's channel closes when its provider is closed; a nil ctx
// gets a closed channel.
func TestObserveEndsWithTheProvider(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, fastPolls)
	p := newProvider(t, e.db, fastPolls)
	observed := p.Election("closing").Observe(ctx)
	require.Equal(t, mongolock.Leader{}, receive(t, observed, 10*time.Second))
	require.NoError(t, p.Close(ctx))
	awaitChannelClosed(t, observed, 5*time.Second)
	awaitChannelClosed(t, p.Election("closing").Observe(ctx), time.Second)
	var nilCtx context.Context // a variable: staticcheck (SA1012) rejects a literal nil
	awaitChannelClosed(t, e.p.Election("closing").Observe(nilCtx), time.Second)
}

// Where the server has change streams, an observer learns of a new leader
// at once, though it polls only every hour.
func TestObserveSeesANewLeaderAtOnceByChangeStream(t *testing.T) {
	testdb.Require(t, testdb.ChangeStreams)
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	observed := e.p.Election("streamed").Observe(ctx)
	require.Equal(t, mongolock.Leader{}, receive(t, observed, 10*time.Second))
	l, err := e.other.Election("streamed").Campaign(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, l.FencingToken(), receive(t, observed, 10*time.Second).FencingToken)
	require.NoError(t, l.Proclaim(ctx, "b"))
	require.Equal(t, "b", receive(t, observed, 10*time.Second).Value)
	require.NoError(t, l.Release(ctx))
	require.Equal(t, mongolock.Leader{}, receive(t, observed, 10*time.Second))
}

// Over the model: a proclamation whose round trip fails returns its error
// and leaves the leader leading; one of a stale leader (force released,
// and someone else leads) is refused with ErrLockLost, writes nothing, and
// signals the loss at once. An observer of a nil context, or of a closed
// provider, gets a closed channel.
func TestElectionOverTheModelProclaimOfAStaleLeaderSignalsTheLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, net := d.process()
		rival, _ := d.process()
		el := p.Election("leader")
		require.Equal(t, "leader", el.Name())
		l, err := el.Campaign(ctx, "v1")
		require.NoError(t, err)

		net.Refuse(1)
		require.ErrorContains(t, l.Proclaim(ctx, "v2"), "ShutdownInProgress")
		require.False(t, closedNow(l.Lost()), "a failed round trip is no loss")
		require.NoError(t, l.Proclaim(ctx, "v2"))

		forced, err := rival.ForceRelease(ctx, "leader")
		require.NoError(t, err)
		require.True(t, forced)
		usurper, err := rival.Election("leader").Campaign(ctx, "usurper")
		require.NoError(t, err)
		err = l.Proclaim(ctx, "v3")
		require.ErrorIs(t, err, mongolock.ErrLockLost)
		require.Contains(t, err.Error(), `proclaim "leader"`)
		require.True(t, closedNow(l.Lost()), "the refused proclamation signalled the loss")
		now, err := rival.Election("leader").Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "usurper", now.Value)
		require.Equal(t, usurper.FencingToken(), now.FencingToken)
		require.NoError(t, usurper.Release(ctx))

		var nilCtx context.Context
		awaitChannelClosed(t, el.Observe(nilCtx), time.Second)
		require.NoError(t, p.Close(ctx))
		awaitChannelClosed(t, el.Observe(ctx), time.Second)
	})
}
