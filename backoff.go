package mongolock

import (
	"math"
	"math/rand/v2"
	"time"
)

// backoff is the configured sleep between Acquire's attempts.
type backoff struct {
	min, max time.Duration
	adaptive bool
}

// next returns the sleep after the given number of failed attempts (1 for
// the first failure).
//
// Fixed mode draws uniformly from [min, max], as DistributedLock.MongoDB does.
// Adaptive mode starts at min and grows by x1.5 per failed attempt up to max,
// with +-20% jitter so that waiters that failed together do not retry
// together; the result always stays within [min, max].
func (b backoff) next(failures int) time.Duration {
	if !b.adaptive {
		return b.min + rand.N(b.max-b.min+1)
	}
	// Compare in floating point before converting: a value at or past
	// MaxInt64 would wrap around to a negative Duration.
	d := min(float64(b.min)*math.Pow(1.5, float64(max(failures-1, 0))), float64(b.max)) * (0.8 + 0.4*rand.Float64())
	if d >= float64(b.max) {
		return b.max
	}
	return max(time.Duration(d), b.min)
}

func (o config) backoff() backoff {
	return backoff{min: o.sleepMin, max: o.sleepMax, adaptive: o.adaptive}
}

// pacer is the schedule between refused attempts of one lock's local
// line, kept across the line's successive heads; what it learns of the
// lock's pace outlives the line for a while. Only the claimant polls
// faster than the lock changes hands, and nobody but the claimant and the
// next after it faster than the minimum sleep:
//
//   - The claimant, whose claim on the next turn the document holds, polls
//     at most every claimantSleep. While the holder's process hands the lock
//     on within itself, it closes in on when that turn should end, halving
//     what is left each look, as timed by how fast the holder's streak grows
//     (at the minimum sleep until it knows). Where the holder frees the lock
//     for it, it looks again after half as long as holders have held the
//     lock (as its looks and this process's own holds saw), or as this
//     holder has held so far if longer: every round trip on a lock held for
//     a millisecond, every claimantSleep on one held for hours; never within
//     one round trip. The process next after the claim looks as often, as
//     it claims once the claimant has the lock.
//   - While the lock changes hands (its holder's process is on a streak, or
//     it changed hands since a recent poll), other waiters poll when the
//     next turn can be claimed: once the claimant holds the lock, or a turn
//     later for the process that just stepped aside. Never later than the configured
//     sleep, and at the minimum sleep until they know the pace. A claim
//     goes to the process that has waited longest.
//   - While the lock stays with one holder, others quadruple their sleep up
//     to standbySleep (WithStandbySleep): a lock held for hours costs little
//     to wait for. A waiter
//     whose own process has been taking the lock in streaks (a busy lock)
//     does so only once the same acquisition has been seen across the
//     longest sleep.
//   - A semaphore's or an RWLock's waiters have no turns to time: their
//     claimant looks again after half as long as the newest holder has
//     held (from the minimum sleep up to the claimant's), others at the
//     configured sleep, and they back off as above while the holders stay.
//   - While release events arrive (change streams), a release wakes every
//     waiter, and polling is a safety net at standbySleep; but a lease that
//     runs out sends no event, so the claimant looks every longest sleep,
//     at most a second, and twice per claim lifetime (watchingClaimantSleep),
//     to find a crashed holder's lock free.
type pacer struct {
	// This wait's, from the line's first waiter to an acquisition:
	failures int
	lockID   string    // the holder's lockId the last refusal saw
	seen     time.Time // when
	heldFrom time.Time // when that lockId was first seen
	holder   string    // the holder's process and streak as last seen changing
	streak   int
	streakAt time.Time // when that streak was seen
	standby  time.Duration
	began    int64 // the fencing token seen when the line began to wait; 0: not yet
	passing  bool  // the holder's process took the lock again under this one's claim
	// Learnt of the lock, kept across waits:
	quiet    int           // waits in a row that were never refused
	per      time.Duration // time per acquisition in a streak; 0: unknown
	hold     time.Duration // how long holders kept it, as this process's looks saw; 0: unknown
	trip     time.Duration // an attempt's round trip
	lastHeld time.Time     // this process's last acquisition
}

// begin starts a new wait with what was learnt of the lock.
func (w *pacer) begin() { *w = w.learnt() }

// learnt is w without what only its wait needs.
func (w *pacer) learnt() pacer {
	return pacer{quiet: w.quiet, per: w.per, hold: w.hold, trip: w.trip, lastHeld: w.lastHeld}
}

// calmWaits is how many waits in a row must have gone unrefused before an
// Acquire tries the cheaper statement for a lock nobody waits for first:
// where waits are refused now and then, that try would cost them a round
// trip.
const calmWaits = 8

// calm reports whether the line's next attempt may be the cheaper one.
func (w *pacer) calm() bool { return w.quiet >= calmWaits && w.failures == 0 }

// sawHold learns how long the holder last seen at w.seen, first seen at
// w.heldFrom, held: it was gone by now.
func (w *pacer) sawHold(now time.Time) {
	if w.lockID == "" || w.seen.IsZero() {
		return // none was seen
	}
	w.hold = average(w.hold, w.seen.Sub(w.heldFrom)+now.Sub(w.seen)/2)
}

// average moves a running figure a quarter of the way to sample.
func average(running, sample time.Duration) time.Duration {
	if running == 0 {
		return sample
	}
	return running + (sample-running)/4
}

// refused returns the sleep after a refusal that returned doc, for an
// Acquire of process proc with options o.
func (w *pacer) refused(o config, proc string, doc reply, now time.Time, trip time.Duration, notified bool) time.Duration {
	w.failures++
	w.quiet = 0
	if w.trip == 0 || trip < w.trip {
		w.trip = trip // the quickest: a slow one (a new connection) must not slow the claimant
	} else {
		w.trip += (trip - w.trip) / 16
	}
	first := w.seen.IsZero()
	if w.began == 0 {
		w.began = doc.FencingToken
	}
	// The lock changes hands: its holder's process is on a streak, or it
	// changed hands since the last refusal, not long ago.
	changing := doc.ProcessStreak > 1 ||
		!first && doc.LockID != w.lockID && now.Sub(w.seen) <= o.sleepMax
	if doc.LockID != w.lockID || first {
		w.sawHold(now)
		w.heldFrom = now
	}
	w.lockID, w.seen = doc.LockID, now
	// Held for long: the same acquisition seen across the longest sleep.
	long := now.Sub(w.heldFrom) >= o.sleepMax
	if doc.LastProcess == w.holder && doc.ProcessStreak > w.streak && !w.streakAt.IsZero() {
		w.per = now.Sub(w.streakAt) / time.Duration(doc.ProcessStreak-w.streak)
		w.passing = w.passing || doc.placed(proc)
	}
	if doc.LastProcess != w.holder || doc.ProcessStreak != w.streak {
		w.holder, w.streak, w.streakAt = doc.LastProcess, doc.ProcessStreak, now
	}
	// after returns how long n more acquisitions should take.
	after := func(n int) time.Duration { return time.Duration(n)*w.per + w.per/2 }
	left := max(doc.turn-doc.ProcessStreak, 0) // before the holder's process steps aside
	b := o.backoff()
	switch {
	case notified && doc.WaitingProcess == proc:
		return o.watchingClaimantSleep()
	case notified:
		return o.standbySleep()
	case (doc.WaitingProcess == proc || doc.NextProcess == proc && (changing || doc.LockID == "")) &&
		(doc.turn == 0 || !w.passing) && w.hold > 0:
		// The claimant of a lock that its holder frees for it, or of a
		// slot: it looks again after half as long as holders held so far,
		// or as this one has, if longer; sooner than the minimum sleep if
		// holders are that quick, but not within one round trip. So does
		// the next after it while the lock changes hands or is free for
		// the claimant: it claims once the claimant has the lock.
		w.standby = 0
		return max(min(max(w.hold, now.Sub(w.heldFrom))/2, o.claimantSleep()), w.trip)
	case doc.turn == 0 && doc.WaitingProcess == proc:
		w.standby = 0
		return o.slotClaimantSleep(now.Sub(w.heldFrom))
	case doc.WaitingProcess == proc:
		w.standby = 0
		d := o.claimantSleep()
		switch {
		case first:
			d = 0 // look again soon: is the lock changing hands?
		case !changing || doc.LastProcess == proc:
		case w.per > 0:
			// Close in on the turn's end, timing the pace again each look.
			d = min(d, after(left)/2)
		default:
			d = 0 // learn the pace
		}
		return max(d, o.sleepMin)
	case first:
		return o.sleepMin // look again soon: is the lock changing hands?
	case doc.NextProcess == proc && changing:
		// Next after the claim while turns pass: it claims when that
		// claim is met, and must ask before its claim lapses.
		w.standby = 0
		return max(min(o.claimantSleep(), b.next(w.failures)), o.sleepMin)
	case !changing && (long || w.standby > 0 || w.per == 0):
		w.standby = min(max(w.standby*4, b.next(w.failures)), o.standbySleep())
		return max(w.standby, o.sleepMin)
	}
	w.standby = 0
	if doc.turn == 0 {
		return b.next(w.failures) // a slot's: no turns to time
	}
	if w.per == 0 {
		return o.sleepMin // learn the pace
	}
	if doc.LastProcess == proc {
		left = doc.turn // this process just stepped aside
	}
	// After the claimant's acquisition, with one acquisition to spare: a
	// waiter that comes while the lock is still free takes the claimant's
	// turn.
	return min(max(after(left+2), o.sleepMin), b.next(w.failures))
}

// slotClaimantSleep is the sleep of a slot's claimant that has seen no
// holder leave yet, or of an Upgrade waiting for the other readers to go:
// after half as long as the holders it waits for were seen holding, from
// the minimum sleep up to the claimant's.
func (o config) slotClaimantSleep(seen time.Duration) time.Duration {
	return min(max(seen/2, o.sleepMin), o.claimantSleep())
}

// failed returns the sleep after an attempt that failed with a transient
// error.
func (w *pacer) failed(o config) time.Duration {
	w.failures++
	return o.backoff().next(w.failures)
}

// acquired records an acquisition by this process at now. Two in a row,
// less than streakGap apart, time the pace of a streak, which other
// processes' streaks tend to share. What the schedule learnt of its failures
// is forgotten.
func (w *pacer) acquired(now time.Time, streakGap time.Duration) {
	if d := now.Sub(w.lastHeld); d < streakGap {
		w.per = d
	}
	w.sawHold(now)
	w.lastHeld = now
	if w.failures == 0 {
		w.quiet++
	} else {
		w.quiet = 0
	}
	w.begin()
}

// released records that a handle of this process stopped holding at now:
// how long this process holds the lock tells how long others may.
func (w *pacer) released(now time.Time) {
	if !w.lastHeld.IsZero() {
		w.hold = average(w.hold, now.Sub(w.lastHeld))
	}
}

// waitToken returns the token to claim with: the one seen when the line
// began to wait, or, before any refusal, one that outranks every other.
func (w *pacer) waitToken() int64 {
	if w.began == 0 {
		return math.MaxInt64
	}
	return w.began
}
