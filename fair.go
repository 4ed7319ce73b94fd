package mongolock

import (
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Cross-process fairness.
//
// The local line (queue.go) hands a lock from one goroutine of a process to
// the next in about a round trip, far sooner than a waiter in another
// process polls again: left alone, one busy process would keep a contended
// lock for itself. Two fields in the lock document prevent that, written by
// the same findOneAndUpdate that attempts the acquisition (no extra round
// trips), and ignored by DistributedLock.MongoDB:
//
//   - A line of waiting processes, waiters: [{p: process, u: until}]. When
//     an Acquire attempt finds the lock taken, its process joins the end of
//     the line if it is not in it yet; an entry lives until u = $$NOW + a
//     lifetime, renewed by the process's later attempts, so a process that
//     stops waiting (gone, crashed) drops out. When the lock comes free, the
//     first live entry's process is first: others are refused, and the
//     entry is removed once its process acquires.
//   - A streak: how many times in a row the last holder's process acquired
//     (process, streak). A process may pass over the first waiter only while
//     its streak is below maxStreak, so local hand-offs stay fast, and the
//     first waiting process gets its turn after at most maxStreak more
//     acquisitions by the holder's process.
//
// So every process waiting on a contended lock gets a turn of up to
// maxStreak+1 acquisitions, in the order the processes arrived, and no
// process can be passed over forever. Processes in line poll with short
// sleeps (adaptive from the busy-wait minimum up to frontSleepFactor times
// it: without change streams a process learns that its turn has come only
// by polling), and the first in line times its next poll for when the
// holder's process is likely done with its turn (pace), so a turn passes
// quickly; one goroutine per process polls (queue.go). TryAcquire never
// joins the line: a single attempt must not reserve the lock for a caller
// that will not come back. Mutual exclusion does not depend on any of this: a
// lock is only ever taken when it is free (expired), as before.
//
// The line is written only while no DistributedLock.MongoDB acquisition
// holds the lock (lockId is absent, or it is processLock, the last mongolock
// acquisition's), and an entry is renewed only once half spent, so most
// refused attempts leave the document unchanged. Two reasons:
// DistributedLock.MongoDB releases by deleting the document, which erases
// the line anyway; and on FerretDB/DocumentDB a deleteOne that races with an
// update that changes the document can miss it (measured: 5 of 30), so
// writing while a .NET holder releases would leave its lock held until it
// expires.
const maxStreak = 8

// frontSleepFactor caps the sleep of processes in line at this many times
// the busy-wait minimum.
const frontSleepFactor = 5

// frontBackoff is the backoff of a process in line: adaptive, from the
// busy-wait minimum up to frontSleepFactor times it (at most the maximum).
func (o config) frontBackoff() backoff {
	front := o.sleepMax
	if o.sleepMin <= o.sleepMax/frontSleepFactor { // no overflow
		front = frontSleepFactor * o.sleepMin
	}
	return backoff{min: o.sleepMin, max: front, adaptive: true}
}

// waiterLifetime is how long a line entry outlives its process's last
// attempt: long enough for the longest sleep between two attempts, and
// short enough that a process that went away holds up a free lock only
// briefly.
func (o config) waiterLifetime() time.Duration {
	const extra = 500 * time.Millisecond
	if o.sleepMax > (math.MaxInt64-extra)/2 {
		return math.MaxInt64 // sleeps of centuries: no overflow
	}
	return 2*o.sleepMax + extra
}

// fairness builds the expressions of the acquire pipeline that implement
// the line and the streak for process proc.
type fairness struct {
	proc      string        // this process (per client, database, collection)
	lockID    string        // the attempt's lockId
	join      bool          // Acquire (true) or TryAcquire (false)
	entryLife time.Duration // how long a line entry lives
	// from is set for a hand-over (handoff.go): the releasing handle's
	// lockId. The lock is then also free while from holds it.
	from string
}

// Fields the acquire pipeline computes once in its first stages and removes
// in its last: the live entries of the line, and whether the lock is free
// for this attempt. Referring to them, rather than repeating their
// expressions in every field's $cond, halves the server's work per attempt
// (measured on FerretDB: 1.5 ms -> 1.15 ms per attempt).
const (
	liveField = "_live"
	freeField = "_free"
)

// exprs returns the expressions of the line's live entries and of "free",
// and the fairness fields of the acquire pipeline, which refer to the first
// two as $_live and $_free.
func (f fairness) exprs() (live, free bson.D, fields bson.D) {
	eq := func(a, b any) bson.D { return bson.D{{Key: "$eq", Value: bson.A{a, b}}} }
	and := func(xs ...any) bson.D { return bson.D{{Key: "$and", Value: bson.A(xs)}} }
	or := func(xs ...any) bson.D { return bson.D{{Key: "$or", Value: bson.A(xs)}} }
	not := func(x any) bson.D { return bson.D{{Key: "$not", Value: bson.A{x}}} }
	cond := func(c, a, b any) bson.D { return bson.D{{Key: "$cond", Value: bson.A{c, a, b}}} }
	filter := func(input, c any) bson.D {
		return bson.D{{Key: "$filter", Value: bson.D{{Key: "input", Value: input}, {Key: "as", Value: "w"}, {Key: "cond", Value: c}}}}
	}

	// The live entries of the line, in order.
	live = filter(bson.D{{Key: "$ifNull", Value: bson.A{"$waiters", bson.A{}}}},
		bson.D{{Key: "$gt", Value: bson.A{"$$w.u", "$$NOW"}}})
	const liveRef, liveProcs, isFree = "$" + liveField, "$" + liveField + ".p", "$" + freeField
	liveOthers := filter(liveRef, bson.D{{Key: "$ne", Value: bson.A{"$$w.p", f.proc}}})
	firstIsAnother := and(
		bson.D{{Key: "$gt", Value: bson.A{bson.D{{Key: "$size", Value: liveRef}}, 0}}},
		bson.D{{Key: "$ne", Value: bson.A{bson.D{{Key: "$arrayElemAt", Value: bson.A{liveProcs, 0}}}, f.proc}}},
	)
	lastWasMine := eq("$process", f.proc)
	streakLeft := and(lastWasMine, bson.D{{Key: "$lt", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$streak", 0}}}, maxStreak}}})
	available := any(expired)
	if f.from != "" {
		available = or(expired, eq("$lockId", f.from))
	}
	free = and(available, or(not(firstIsAnother), streakLeft))

	// Refused: join the line or renew this process's entry once half
	// spent, while a mongolock acquisition holds the lock. Acquired: leave
	// the line.
	waiters := any("$waiters")
	if f.join {
		entry := bson.D{{Key: "p", Value: f.proc}, {Key: "u", Value: leaseEnd(f.entryLife)}}
		inLine := bson.D{{Key: "$in", Value: bson.A{f.proc, liveProcs}}}
		renew := bson.D{{Key: "$map", Value: bson.D{{Key: "input", Value: liveRef}, {Key: "as", Value: "w"}, {Key: "in",
			Value: cond(and(eq("$$w.p", f.proc), bson.D{{Key: "$lt", Value: bson.A{"$$w.u", leaseEnd(f.entryLife / 2)}}}), entry, "$$w")}}}}
		joined := cond(inLine, renew, bson.D{{Key: "$concatArrays", Value: bson.A{liveRef, bson.A{entry}}}})
		// Not while a DistributedLock.MongoDB acquisition holds the lock.
		noDotnetHolder := or(eq("$lockId", "$processLock"), eq(bson.D{{Key: "$type", Value: "$lockId"}}, "missing"))
		waiters = cond(noDotnetHolder, joined, "$waiters")
	}
	fields = bson.D{
		{Key: "process", Value: cond(isFree, f.proc, "$process")},
		{Key: "processLock", Value: cond(isFree, f.lockID, "$processLock")},
		{Key: "streak", Value: cond(isFree,
			cond(lastWasMine, bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$streak", 0}}}, 1}}}, 1),
			"$streak")},
		{Key: "waiters", Value: cond(isFree, liveOthers, waiters)},
	}
	return live, free, fields
}

// leaveLineUpdate removes proc's entry from the line, for an Acquire that
// gives up while nobody else of its process waits.
func leaveLineUpdate(proc string) mongo.Pipeline {
	return mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "waiters", Value: bson.D{{Key: "$filter", Value: bson.D{
		{Key: "input", Value: "$waiters"}, {Key: "as", Value: "w"},
		{Key: "cond", Value: bson.D{{Key: "$ne", Value: bson.A{"$$w.p", proc}}}},
	}}}}}}}}
}

// turn is what a refused Acquire attempt learned about its process's place
// in the line.
type turn struct {
	inLine bool // this process is in the line
	soon   bool // poll often: its turn may come any moment
	first  bool // first in line: the lock is ours once the holder's process is done
	ahead  int  // live entries of other processes ahead of this one
	// The holder's process and its acquisitions in a row, if it is
	// another process.
	holder string
	streak int
}

// turnOf reads doc, as a refused attempt of process proc returned it.
// Entries whose time is up count as gone, as the pipeline treats them; doc
// has the server's times, compared here with the client's clock, which
// matters only for how soon to poll.
func turnOf(doc lockDoc, proc string) turn {
	var t turn
	ahead := 0 // live entries of other processes come first
	now := time.Now()
	for _, w := range doc.Waiters {
		if w.P == proc {
			t.inLine, t.soon, t.first, t.ahead = true, true, ahead == 0, ahead
			break
		}
		if w.U.After(now) {
			ahead++
		}
	}
	if doc.Process != proc {
		t.holder, t.streak = doc.Process, doc.Streak
	}
	return t
}

// pace estimates, for a process in line, when its turn will come: from two
// refused attempts that saw the holder's process's streak grow, the time per
// acquisition, and from it how long the holder's process will take to use up
// its turn (maxStreak acquisitions in a row), plus a whole turn for each
// other process ahead in line but the first (a process polls as the first in
// line once it is), but only while turns are seen to be full: a process
// with a single waiting goroutine may be done after one acquisition.
// Without change streams (notify.go) this is what
// lets the first process in line poll just when the lock is due to come
// free rather than at an arbitrary point of its backoff, and the processes
// behind it poll less.
type pace struct {
	holder string
	streak int
	seen   time.Time
	per    time.Duration // time per acquisition; 0: unknown
	// The last holder's process was seen using up its turn: turns are full
	// (its goroutines keep the lock busy), so a whole turn can be waited
	// out. Otherwise a process may be done after one acquisition, and the
	// processes behind the first in line poll as usual.
	fullTurns bool
}

func (p *pace) observe(t turn, now time.Time) (time.Duration, bool) {
	switch {
	case !t.inLine || t.holder == "":
		// Out of line, or this process held the lock last (its turn just
		// ended): time the pace anew (keeping it across its own turn made
		// the processes behind sleep past their turns: measured, 4
		// processes x 16 goroutines fell from 78 to 54 acq/s), but
		// remember, while in line, whether turns are full (forgetting it
		// made them poll through a whole turn each time: 2.2 rather than
		// 1.96 commands per acquisition).
		*p = pace{fullTurns: p.fullTurns && t.inLine}
		return 0, false
	case t.holder == p.holder && t.streak > p.streak:
		p.per = now.Sub(p.seen) / time.Duration(t.streak-p.streak)
	}
	// (A new holder's process keeps the time per acquisition seen so
	// far: the turns of processes on one lock tend to look alike.)
	if t.holder != p.holder && p.holder != "" && p.per > 0 {
		// The last holder's final streak, as far as its pace tells.
		final := p.streak + int(now.Sub(p.seen)/p.per)
		p.fullTurns = final >= maxStreak-1
	}
	if t.holder != p.holder || t.streak != p.streak {
		// Each streak is timed from when it was first seen.
		p.holder, p.streak, p.seen = t.holder, t.streak, now
	}
	if p.per == 0 || t.ahead > 0 && !p.fullTurns {
		return 0, false
	}
	// The current acquisition is, on average, half done.
	// For a process behind others: until it is first in line, when it
	// times its polls again.
	left := time.Duration(max(maxStreak-t.streak, 0))*p.per + p.per/2
	return left + time.Duration(max(t.ahead-1, 0)*maxStreak)*p.per, true
}
