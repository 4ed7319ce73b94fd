package mongolock

import (
	"cmp"
	"math"
	"time"
)

// The turn rule, as the code reads it. A line is one process's Acquire
// calls waiting for one lock; only its head asks the database. A refused
// Acquire claims the next turn for its process, which is then the claimant,
// unless a process that has waited longer claims it; then it is next after
// the claim, and claims once the claimant has the lock. While a claim
// lasts, a freed lock is the claimant's, and the holder's process hands the
// lock on within itself only until its streak (acquisitions in a row, the
// document's processStreak) reaches the turn's length; then it steps
// aside. A slot's kinds (semaphores, RWLocks) have no turns to time.

// pacer decides how long a line's head sleeps after each refused attempt,
// by the rules below. It learns the lock's pace (how long holders hold,
// how fast a streak grows, a round trip), which outlives the line for a
// while: only a process whose turn can come next polls faster than the
// lock changes hands, and a lock that stays with one holder costs little.
type pacer struct {
	// This wait's, from the line's first waiter to an acquisition:
	failures          int           // attempts refused or failed
	firstToken        int64         // the fencing token of the first refusal, which claims are made with; 0: none yet
	lockID            string        // the holder's lockId at the last refusal
	lookedAt          time.Time     // when the last refusal was; zero: none yet
	holderSince       time.Time     // when that lockId was first seen
	streakProcess     string        // the holder's process, as its streak was last seen growing
	streakLength      int           // that streak
	streakSeenAt      time.Time     // when
	retakenUnderClaim bool          // the holder's process took the lock again while this one was placed
	standby           time.Duration // the growing sleep while one holder keeps the lock; 0: none
	// Learnt of the lock, kept across waits:
	unrefusedWaits int           // waits in a row that were never refused
	perAcquisition time.Duration // time between a streak's acquisitions; 0: unknown
	holdTime       time.Duration // how long holders keep the lock, as this process saw; 0: unknown
	quickestTrip   time.Duration // an attempt's: the quickest, drifting up slowly
	lastAcquired   time.Time     // this process's last acquisition
}

// begin starts a new wait with what was learnt of the lock.
func (w *pacer) begin() { *w = w.learnt() }

// learnt is w without what only its wait needs.
func (w *pacer) learnt() pacer {
	return pacer{unrefusedWaits: w.unrefusedWaits, perAcquisition: w.perAcquisition, holdTime: w.holdTime, quickestTrip: w.quickestTrip, lastAcquired: w.lastAcquired}
}

// unclaimedAfter is how many waits in a row must have gone unrefused before
// an Acquire first tries the cheaper statement, which takes only a lock
// nobody waits for: where waits are refused now and then, it costs a round
// trip.
const unclaimedAfter = 8

// unclaimedFirst reports whether the line's next attempt may be the cheaper one.
func (w *pacer) unclaimedFirst() bool { return w.unrefusedWaits >= unclaimedAfter && w.failures == 0 }

// newHolder learns how long the holder last seen at w.lookedAt, first seen
// at w.holderSince, held, now that it is gone, and times the next from now.
func (w *pacer) newHolder(now time.Time) {
	if w.lockID != "" && !w.lookedAt.IsZero() { // one was seen
		w.holdTime = average(w.holdTime, w.lookedAt.Sub(w.holderSince)+now.Sub(w.lookedAt)/2)
	}
	w.holderSince = now
}

// average moves a running figure a quarter of the way to sample.
func average(running, sample time.Duration) time.Duration {
	running = cmp.Or(running, sample) // none yet: the sample
	return running + (sample-running)/4
}

// observation is what one refusal showed, as the rules read it. first:
// the wait's first refusal; claimant: this process claims the next turn;
// next: it is next after the claim; ownWasLast: it made the lock's last
// acquisition; changing: the holder's process is on a streak, or the lock
// changed hands since a recent observation; slot: a semaphore's or an
// RWLock's, no turns to time; notified: release events arrive.
type observation struct {
	*pacer
	o           config
	doc         reply
	now         time.Time
	prevStandby time.Duration // the standby sleep before this observation

	first, claimant, next, ownWasLast, changing, slot, notified bool
}

// refused returns the sleep after a refusal that returned doc, for an
// Acquire of process proc with options o.
func (w *pacer) refused(o config, proc string, doc reply, now time.Time, trip time.Duration, notified bool) time.Duration {
	s := w.observe(o, proc, doc, now, trip)
	s.notified, s.prevStandby, w.standby = notified, w.standby, 0 // only the standby rule keeps it
	for _, r := range rules {
		if r.applies(&s) {
			return r.sleep(&s)
		}
	}
	return s.theTurnAfterTheClaimants()
}

// rules are the pacer's cases, tried in this order after a refusal: the
// first that applies gives the sleep, and where none does,
// theTurnAfterTheClaimants. Each says when it applies, then why.
var rules = [...]struct {
	applies func(*observation) bool
	sleep   func(*observation) time.Duration
}{
	// The claimant, notified: a lease that runs out sends no event, so it looks twice per claim lifetime.
	{func(s *observation) bool { return s.notified && s.claimant }, func(s *observation) time.Duration { return s.o.notifiedClaimantSleep() }},
	// Watched: a release wakes every waiter, so polls are a safety net.
	{func(s *observation) bool { return s.notified }, func(s *observation) time.Duration { return s.o.standbySleep() }},
	// The lock is the claimant's once freed: look again as its holder should leave.
	{(*observation).freedForTheClaimant, (*observation).halfAHold},
	// A slot's claimant: no turns to time, so look again as the newest holder may leave.
	{func(s *observation) bool { return s.slot && s.claimant }, func(s *observation) time.Duration { return s.o.slotClaimantSleep(s.heldFor()) }},
	// The first refusal: look again soon, to see whether the lock is changing hands.
	{func(s *observation) bool { return s.first }, func(s *observation) time.Duration { return s.o.sleepMin }},
	// The claimant of a lock that stays with one holder, or that its own process took last: nothing to time,
	// and its longest sleep keeps the claim.
	{func(s *observation) bool { return s.claimant && (!s.changing || s.ownWasLast) }, func(s *observation) time.Duration { return max(s.o.claimantSleep(), s.o.sleepMin) }},
	// The claimant while turns pass, at a known pace: close in on the turn's end, timing the pace again each look.
	{func(s *observation) bool { return s.claimant && s.perAcquisition > 0 }, func(s *observation) time.Duration {
		return max(min(s.o.claimantSleep(), s.after(s.turnLeft())/2), s.o.sleepMin)
	}},
	// Next after the claim while turns pass: it claims once the claimant has the lock, and must ask before its place lapses.
	{func(s *observation) bool { return s.next && s.changing }, func(s *observation) time.Duration { return max(min(s.o.claimantSleep(), s.configured()), s.o.sleepMin) }},
	// One holder keeps the lock: a lock held for long costs little to wait for, so the sleep quadruples.
	{(*observation).oneHolderKeepsIt, (*observation).growStandby},
	// A slot's other waiters: no turns to time, so the configured sleep.
	{func(s *observation) bool { return s.slot }, (*observation).configured},
	// The pace unknown: learn it.
	{func(s *observation) bool { return s.perAcquisition == 0 }, func(s *observation) time.Duration { return s.o.sleepMin }},
}

// freedForTheClaimant: this process claims, or is next after the claim
// while the lock changes hands or is free; its holder frees it for the
// claimant rather than handing it on; and how long holders hold is known.
func (s *observation) freedForTheClaimant() bool {
	return (s.claimant || s.next && (s.changing || s.doc.LockID == "")) && (s.slot || !s.retakenUnderClaim) && s.holdTime > 0
}

// oneHolderKeepsIt: the same acquisition seen across the longest sleep, or
// a standby sleep under way, or a lock whose pace is unknown, not changing hands.
func (s *observation) oneHolderKeepsIt() bool {
	return !s.changing && (s.heldFor() >= s.o.sleepMax || s.prevStandby > 0 || s.perAcquisition == 0)
}

// halfAHold is half as long as holders held, or as this one has if longer:
// sooner than the minimum sleep if they are that quick, never within a
// round trip.
func (s *observation) halfAHold() time.Duration {
	return max(min(max(s.holdTime, s.heldFor())/2, s.o.claimantSleep()), s.quickestTrip)
}

// heldFor is how long the holder seen last has held, as far as this process saw.
func (s *observation) heldFor() time.Duration { return s.now.Sub(s.holderSince) }

func (s *observation) configured() time.Duration { return s.o.backoff().next(s.failures) }

// growStandby is the standby rule's sleep: four times the last standby,
// at least the configured sleep, at most WithStandbySleep's; the pacer
// keeps it for the next refusal.
func (s *observation) growStandby() time.Duration {
	s.standby = min(max(s.prevStandby*4, s.configured()), s.o.standbySleep())
	return max(s.standby, s.o.sleepMin)
}

// theTurnAfterTheClaimants sleeps until the claimant has had its
// acquisition, with one to spare, so that this process claims the turn
// after; if its own process just stepped aside, a whole turn first.
func (s *observation) theTurnAfterTheClaimants() time.Duration {
	left := s.turnLeft()
	if s.ownWasLast {
		left = s.doc.turn
	}
	return min(max(s.after(left+2), s.o.sleepMin), s.configured())
}

// turnLeft is how many acquisitions the holder's process has left before
// it steps aside.
func (s *observation) turnLeft() int { return max(s.doc.turn-s.doc.ProcessStreak, 0) }

// after is how long n more acquisitions of a streak take, to the middle of the last.
func (w *pacer) after(n int) time.Duration { return time.Duration(2*n+1) * w.perAcquisition / 2 }

// observe learns from a refusal that returned doc and took trip.
func (w *pacer) observe(o config, proc string, doc reply, now time.Time, trip time.Duration) observation {
	w.failure()
	rt := cmp.Or(w.quickestTrip, trip)
	w.quickestTrip = min(trip, rt+(trip-rt)/16) // the quickest: a slow one (a new connection) must not slow the claimant
	w.firstToken = cmp.Or(w.firstToken, doc.FencingToken)
	s := observation{pacer: w, o: o, doc: doc, now: now, first: w.lookedAt.IsZero(), slot: doc.turn == 0,
		claimant: doc.WaitingProcess == proc, next: doc.NextProcess == proc, ownWasLast: doc.LastProcess == proc}
	moved := !s.first && doc.LockID != w.lockID
	s.changing = doc.ProcessStreak > 1 || moved && now.Sub(w.lookedAt) <= o.sleepMax
	if moved || s.first {
		w.newHolder(now)
	}
	w.lockID, w.lookedAt = doc.LockID, now
	if doc.LastProcess == w.streakProcess && doc.ProcessStreak > w.streakLength && !w.streakSeenAt.IsZero() {
		w.perAcquisition = now.Sub(w.streakSeenAt) / time.Duration(doc.ProcessStreak-w.streakLength)
		w.retakenUnderClaim = w.retakenUnderClaim || doc.placed(proc)
	}
	if doc.LastProcess != w.streakProcess || doc.ProcessStreak != w.streakLength {
		w.streakProcess, w.streakLength, w.streakSeenAt = doc.LastProcess, doc.ProcessStreak, now
	}
	return s
}

// slotClaimantSleep is the sleep of a slot's claimant that has seen no
// holder leave yet, or of an Upgrade waiting for the other readers to go:
// after half as long as the holders it waits for were seen holding, from
// the minimum sleep up to the claimant's.
func (o config) slotClaimantSleep(seen time.Duration) time.Duration {
	return min(max(seen/2, o.sleepMin), o.claimantSleep())
}

func (w *pacer) failure() { w.failures++; w.unrefusedWaits = 0 }

// failed returns the sleep after an attempt that failed with a transient
// error.
func (w *pacer) failed(o config) time.Duration {
	w.failure()
	return o.backoff().next(w.failures)
}

// acquired records an acquisition by this process at now. Two in a row,
// less than streakGap apart, time the pace of a streak, which other
// processes' streaks tend to share. What the pacer learnt of its failures
// is forgotten.
func (w *pacer) acquired(now time.Time, streakGap time.Duration) {
	if d := now.Sub(w.lastAcquired); d < streakGap {
		w.perAcquisition = d
	}
	w.newHolder(now)
	w.lastAcquired = now
	if w.failures == 0 { // else a refusal or an error reset it
		w.unrefusedWaits++
	}
	w.begin()
}

// released records that a handle of this process stopped holding at now:
// how long this process holds the lock tells how long others may.
func (w *pacer) released(now time.Time) {
	if !w.lastAcquired.IsZero() {
		w.holdTime = average(w.holdTime, now.Sub(w.lastAcquired))
	}
}

// waitToken returns the token to claim with: the one seen when the line
// began to wait, or, before any refusal, one that outranks every other.
func (w *pacer) waitToken() int64 { return cmp.Or(w.firstToken, math.MaxInt64) }

// The pacer's sleeps derive from the busy-wait sleep. Each
// duration is capped at maxDerived: no overflow, and server-side dates stay
// sane for sleeps of centuries.
const maxDerived = 24 * time.Hour

// claimantSleep is the longest sleep of the process whose claim on the next
// turn is in the document: a sixth of the longest sleep, at most a second,
// at least the shortest.
func (o config) claimantSleep() time.Duration {
	return min(max(o.sleepMin, min(o.sleepMax/6, time.Second)), maxDerived)
}

// claimLifetime is how long a claim counts after its process last asked:
// long enough for a few of its sleeps and a round trip, short enough that a
// claimant that went away soon stops making the holder's process step aside.
func (o config) claimLifetime() time.Duration {
	return min(4*o.claimantSleep()+250*time.Millisecond, maxDerived)
}

// watchingClaimantSleep is the claimant's sleep while release events
// arrive: a lease that runs out (its holder crashed) sends none, so it
// still looks every longest sleep, at most a second, but twice within its
// claim's lifetime, so that the claim never lapses between looks.
func (o config) notifiedClaimantSleep() time.Duration {
	return min(max(min(o.sleepMax, time.Second), o.sleepMin), o.claimLifetime()/2)
}

// nextLifetime is how long a place as next after a lock's claim counts
// after its process last asked: longer than the standby sleep, so that a
// waiter that looks rarely while the lock stays with one holder keeps it.
func (o config) nextLifetime() time.Duration {
	return min(3*o.standbySleep(), maxDerived)
}

// standbySleep is the longest sleep of a waiter while the lock stays with
// one holder (WithStandbySleep).
func (o config) standbySleep() time.Duration {
	if o.standby > 0 {
		return min(o.standby, maxDerived)
	}
	return min(o.sleepMax, maxDerived/16) * 16
}

// observeAgainIn is when Observe reads again, unless a change is signalled
// first: every longest busy-wait sleep, or standby sleep while a change
// stream runs, and just after a leader's lease ends.
func (o config) observeAgainIn(streaming, led bool, left time.Duration) time.Duration {
	next := o.sleepMax
	if streaming {
		next = o.standbySleep()
	}
	if led {
		next = min(next, left+time.Millisecond)
	}
	return next
}
