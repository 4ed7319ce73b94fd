package mongolock

// The pacer: how long a line's head sleeps after a refusal, and the sleeps
// it derives from the options.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Sleeps of centuries are valid options; what is derived from them must not
// overflow into negative durations (an immediate retry).
func TestWaitingDurationsDoNotOverflow(t *testing.T) {
	for _, d := range []time.Duration{time.Hour, 1 << 61, 1 << 62, math.MaxInt64} {
		o := defaultConfig()
		o.sleepMin, o.sleepMax = d, d
		for _, got := range []time.Duration{o.claimantSleep(), o.claimLifetime(), o.standbySleep()} {
			require.Positive(t, got, "derived from sleeps of %v", d)
		}
		require.GreaterOrEqual(t, o.claimLifetime(), o.claimantSleep())
		var w pacer
		now := time.Now()
		for i := range 5 {
			now = now.Add(time.Millisecond)
			require.GreaterOrEqual(t, w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "other", LockID: fmt.Sprint(i)}, now, testTrip, false), d, "sleep %d", i)
			// The claimant, seeing holders leave within a millisecond,
			// looks again as soon: after one round trip.
			require.GreaterOrEqual(t, w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "me", LockID: fmt.Sprint(i)}, now, testTrip, false), testTrip, "sleep %d", i)
		}
	}
	o := defaultConfig()
	require.Equal(t, DefaultBusyWaitMax/6, o.claimantSleep())
	require.Equal(t, 16*DefaultBusyWaitMax, o.standbySleep())
}

// refusals feeds w the refusals of a lock whose holder's process takes it
// every per, from streak 1 on, polled every poll; it returns the last sleep.
func refusals(w *pacer, o config, doc reply, t0 time.Time, per, poll time.Duration, n int) time.Duration {
	var d time.Duration
	for i := range n {
		at := time.Duration(i) * poll
		doc.ProcessStreak = 1 + int(at/per)
		doc.LockID = fmt.Sprint(doc.ProcessStreak)
		d = w.refused(o, "me", doc, t0.Add(at), testTrip, false)
	}
	return d
}

// The claimant, whose claim is in the document, polls faster than the
// configured sleep, never faster than its minimum; while the holder's
// process takes the lock again and again, about when its turn should end.
func TestTheClaimantPollsAtMostEveryClaimantSleep(t *testing.T) {
	o := defaultConfig()
	var w pacer
	t0 := time.Now()
	d := w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "me", LastProcess: "holder", LockID: "h"}, t0, testTrip, false)
	require.Equal(t, o.sleepMin, d, "first refusal: look again soon")
	for i := 1; i < 20; i++ {
		d := w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "me", LastProcess: "holder", LockID: "h"}, t0.Add(time.Duration(i)*time.Second), testTrip, false)
		require.Equal(t, o.claimantSleep(), d, "a lock held for long: the claimant's longest sleep")
	}
	// The holder's process takes the lock every 10 ms; polled every 20 ms,
	// the third refusal sees a streak of 5: 3 more and half of one are 35 ms,
	// and the claimant looks again halfway.
	w = pacer{}
	d = refusals(&w, o, reply{turn: turnLength, WaitingProcess: "me", LastProcess: "holder"}, t0, 10*time.Millisecond, 20*time.Millisecond, 3)
	require.Equal(t, 35*time.Millisecond/2, d)
	// A turn already over: poll at the minimum, not sooner.
	d = refusals(&w, o, reply{turn: turnLength, WaitingProcess: "me", LastProcess: "holder"}, t0, time.Millisecond, 20*time.Millisecond, 3)
	require.Equal(t, o.sleepMin, d)
}

// A slot's claimant (a semaphore's, an RWLock's) has no turns to time: it
// looks again after half as long as the newest holder has held, so the
// sleeps grow by half from the minimum while nobody new comes, up to the
// claimant's longest, and start again when someone does.
func TestASlotsClaimantLooksAgainAfterHalfAsLongAsTheNewestHolderHeld(t *testing.T) {
	o := defaultConfig()
	var w pacer
	doc := reply{WaitingProcess: "me", LockID: "a"} // a slot's: turn 0
	now := time.Now()
	var sleeps []time.Duration
	for range 10 {
		d := w.refused(o, "me", doc, now, testTrip, false)
		sleeps = append(sleeps, d)
		now = now.Add(d)
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{10 * ms, 10 * ms, 10 * ms, 15 * ms, 22500 * time.Microsecond, 33750 * time.Microsecond,
		50625 * time.Microsecond, 75937500, 113906250, o.claimantSleep()}, sleeps)
	doc.LockID = "b" // a holder left after about 0.4 s: the next may as well
	require.Equal(t, o.claimantSleep(), w.refused(o, "me", doc, now, testTrip, false))
}

// A claimant that has seen holders leave quickly looks again after half as
// long as they held, sooner than the minimum sleep, but never within one
// round trip; and backs off once the holder holds longer.
func TestAClaimantLooksAgainAsSoonAsHoldersHaveLeft(t *testing.T) {
	o := defaultConfig()
	var w pacer
	now := time.Now()
	refused := func(lockID string, at time.Duration) time.Duration {
		return w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "me", LastProcess: "holder", ProcessStreak: 1, LockID: lockID}, now.Add(at), 500*time.Microsecond, false)
	}
	ms := time.Millisecond
	require.Equal(t, o.sleepMin, refused("a", 0), "nothing learnt yet: the minimum sleep")
	require.Equal(t, ms, refused("b", 4*ms), "a, seen at 0 and gone by 4 ms, held about 2 ms: b may be gone in 1")
	require.Equal(t, 875*time.Microsecond, refused("c", 6*ms), "b held about 1 ms: holders hold 1.75 ms on average")
	require.Equal(t, 875*time.Microsecond, refused("c", 7*ms))
	require.Equal(t, 3*ms, refused("c", 12*ms), "c has held 6 ms, longer than holders did: half of that")
	w = pacer{holdTime: 2 * ms}
	require.Equal(t, 5*ms, w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "me", LockID: "d"}, now, 5*ms, false),
		"never within one round trip")
}

// Waiters behind another process's claim back off while the lock stays with
// one holder, quadrupling their sleep up to the standby sleep.
func TestOtherWaitersBackOffWhileTheLockStaysWithOneHolder(t *testing.T) {
	o := defaultConfig()
	o.sleepMin, o.sleepMax = 100*time.Millisecond, 100*time.Millisecond
	var w pacer
	doc := reply{turn: turnLength, WaitingProcess: "claimant", LockID: "1"}
	var sleeps []time.Duration
	now := time.Now()
	for range 10 { // held by one holder: the token never changes
		d := w.refused(o, "me", doc, now, testTrip, false)
		sleeps = append(sleeps, d/time.Millisecond)
		now = now.Add(d)
	}
	require.Equal(t, []time.Duration{100, 100, 400, 1600, 1600, 1600, 1600, 1600, 1600, 1600}, sleeps,
		"sleeps in ms: a second look at the minimum, then x4 up to 16x the longest sleep")
	require.Equal(t, o.standbySleep(), 16*o.sleepMax)
	// A poll long after the last one sees another holder: held for long
	// still, as far as it knows.
	doc.LockID = "2"
	require.Equal(t, o.standbySleep(), w.refused(o, "me", doc, now.Add(time.Second), testTrip, false))
	// The lock changed hands since the last poll, 100 ms ago: back to the
	// configured sleep.
	doc.LockID = "3"
	require.Equal(t, o.sleepMax, w.refused(o, "me", doc, now.Add(1100*time.Millisecond), testTrip, false))
	// Release events arrive: polling is a safety net, except for the
	// claimant, which looks every longest sleep: a lease that runs out
	// (a crashed holder) sends no event.
	require.Equal(t, o.standbySleep(), w.refused(o, "me", doc, now.Add(2*time.Second), testTrip, true))
	require.Equal(t, o.sleepMax, (&pacer{}).refused(o, "claimant", doc, now, testTrip, true))
}

// While the lock changes hands, a waiter behind another process's claim
// polls when the next turn can be claimed: once the claimant holds the
// lock, or a whole turn later if its own process just stepped aside.
func TestOtherWaitersPollWhenTheNextTurnCanBeClaimed(t *testing.T) {
	o := defaultConfig()
	o.sleepMin, o.sleepMax, o.adaptive = time.Millisecond, time.Second, true
	t0 := time.Now()
	var w pacer
	w.failures = 50 // the configured sleep has grown to its maximum
	// Every 10 ms; the last refusal sees a streak of 3: 5 more by the
	// holder's process, then the claimant's, one to spare, and half of one:
	// 75 ms.
	d := refusals(&w, o, reply{turn: turnLength, WaitingProcess: "claimant", LastProcess: "holder"}, t0, 10*time.Millisecond, 10*time.Millisecond, 3)
	require.Equal(t, 75*time.Millisecond, d)
	// Its own process stepped aside: a whole turn, the claimant's, and one
	// to spare.
	d = w.refused(o, "me", reply{turn: turnLength, WaitingProcess: "claimant", LastProcess: "me", ProcessStreak: 8, LockID: "other"}, t0.Add(40*time.Millisecond), testTrip, false)
	require.Equal(t, 105*time.Millisecond, d)
}

// Two polls within one short acquisition do not send a waiter of a busy
// lock (its process has been taking it in streaks) into its standby
// backoff: until the same acquisition has been seen across the longest
// sleep, it sleeps as while the lock changes hands.
func TestAShortAcquisitionSeenTwiceIsNotALongHold(t *testing.T) {
	o := defaultConfig()
	o.sleepMin, o.sleepMax = 10*time.Millisecond, 100*time.Millisecond
	t0 := time.Now()
	doc := reply{turn: turnLength, WaitingProcess: "claimant", LastProcess: "holder", LockID: "a", ProcessStreak: 1}
	var d time.Duration
	// Its own process took the lock every 10 ms: it knows the pace.
	o.sleepMax, o.adaptive = time.Second, true
	var w pacer
	w.acquired(t0, o.sleepMax)
	w.acquired(t0.Add(10*time.Millisecond), o.sleepMax)
	w.failures = 50 // the configured sleep has grown to its maximum
	w.refused(o, "me", doc, t0.Add(20*time.Millisecond), testTrip, false)
	d = w.refused(o, "me", doc, t0.Add(30*time.Millisecond), testTrip, false)
	// 7 more by the holder's process, the claimant's, one to spare, and
	// half of one.
	require.Equal(t, 95*time.Millisecond, d)
	require.Zero(t, w.standby)
}

// defaultConfig is the configuration of a provider made without options.
func defaultConfig() config {
	o, err := buildConfig("db", nil)
	if err != nil {
		panic(err)
	}
	return o
}

// Whatever the refusals say, each sleep keeps the bound its options'
// documentation gives: at least the busy-wait min; the next in line (its
// process claims) at most the busy-wait max, and where release events
// arrive, at most half its claim's lifetime, so that the claim cannot lapse
// between its looks; every other waiter at most the standby sleep.
// testTrip is the round trip the schedule is told of in these tests.
const testTrip = time.Millisecond

func TestSleepsKeepTheirDocumentedBounds(t *testing.T) {
	for _, o := range []config{
		defaultConfig(),
		{sleepMin: 10 * time.Millisecond, sleepMax: 250 * time.Millisecond, standby: time.Second},
		{sleepMin: 50 * time.Millisecond, sleepMax: 5 * time.Second, adaptive: true},
		{sleepMin: time.Millisecond, sleepMax: time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%v..%v standby %v", o.sleepMin, o.sleepMax, o.standbySleep()), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
			var w pacer
			now := time.Now()
			for i := range 20000 {
				doc := reply{
					LockID: pick("a", "b", "c"), LastProcess: pick("me", "holder", "other"), ProcessStreak: rng.IntN(12),
					WaitingProcess: pick("me", "other", ""), NextProcess: pick("me", "other", ""), FencingToken: int64(i), turn: []int{0, 1, turnLength}[rng.IntN(3)],
				}
				notified := rng.IntN(4) == 0
				now = now.Add(time.Duration(rng.Int64N(int64(2 * o.sleepMax))))
				failed := rng.IntN(10) == 0 // a transient error: no reply
				var d time.Duration
				if failed {
					d = w.failed(o)
				} else {
					d = w.refused(o, "me", doc, now, testTrip, notified)
				}
				placed := !failed && (doc.WaitingProcess == "me" || doc.NextProcess == "me")
				if placed && w.holdTime > 0 {
					require.GreaterOrEqual(t, d, min(o.sleepMin, testTrip), "sleep %d of the next in line", i)
				} else {
					require.GreaterOrEqual(t, d, o.sleepMin, "sleep %d", i)
				}
				require.LessOrEqual(t, d, o.standbySleep(), "sleep %d", i)
				if !failed && doc.WaitingProcess == "me" {
					require.LessOrEqual(t, d, o.sleepMax, "sleep %d of the next in line", i)
					require.Less(t, d, o.claimLifetime(), "sleep %d of the next in line: its claim would lapse", i)
				}
				if rng.IntN(50) == 0 {
					w.acquired(now, o.sleepMax)
				}
				if rng.IntN(50) == 0 {
					w.released(now.Add(time.Duration(rng.Int64N(int64(o.sleepMin)))))
				}
			}
		})
	}
}

// What a line's schedule learnt of the lock's pace outlives the line, for
// the next wait of a process that takes the lock now and then; the memory is
// swept of paces older than paceMemory as it grows.
func TestALinesPaceOutlivesTheLineForAWhile(t *testing.T) {
	qs := lines{byName: map[string]*line{}}
	q := qs.get("x")
	q.pace.holdTime, q.pace.failures = 5*time.Millisecond, 3
	qs.drop("x", q)
	require.Empty(t, qs.byName, "no line without waiters or holders")
	q = qs.get("x")
	require.Equal(t, 5*time.Millisecond, q.pace.holdTime, "the pace learnt before")
	require.Zero(t, q.pace.failures, "what only the last wait needed is gone")

	qs.drop("x", q)
	old := qs.paces["x"]
	old.at = old.at.Add(-paceMemory - time.Second)
	qs.paces["x"] = old
	for i := range 64 {
		qs.drop(fmt.Sprint(i), qs.get(fmt.Sprint(i)))
	}
	require.NotContains(t, qs.paces, "x", "an old pace is swept")
	require.Len(t, qs.paces, 64)

	q = qs.get("0")
	qs.drop("0", q)
	stale := qs.paces["0"]
	stale.at, stale.pace.holdTime = stale.at.Add(-paceMemory-time.Second), time.Second
	qs.paces["0"] = stale
	require.Zero(t, qs.get("0").pace.holdTime, "a pace older than paceMemory that no sweep took yet is not used")
}
