package mongolock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A Handle's life. newHandle begins it: the lease kept with the
// provider's others (lease.go), the name held in its process's line
// (line.go). It ends by a release, which may hand the lock over to the
// next in line in the same round trip, or by a loss; Context and Lost
// signal either.

// newHandle makes the handle of the acquisition lockID of l, whose request
// was sent at sent and whose reply is doc.
func newHandle(l *Lock, lockID string, doc reply, sent time.Time) *Handle {
	a := &acquisition{lock: l, lockID: lockID, acquiredAt: doc.AcquiredAt,
		lost: make(chan struct{}), extendingStopped: make(chan struct{})}
	a.token.Store(doc.FencingToken)
	a.mode.Store(uint32(l.kind.describe().mode))
	a.lastSentAt.Store(sent.UnixNano())
	now := time.Now()
	a.lastReplyAt.Store(now.UnixNano())
	if o := l.p.opts; o.atMostSet {
		// The server's bound, acquiredAt + atMost, is no earlier: its
		// $$NOW came after sent; and no later than atMostFromReply: it came
		// before the reply.
		a.atMostFromSent = sent.Add(o.atMost.Truncate(time.Millisecond))
		a.atMostFromReply = now.Add(o.atMost)
	}
	a.ctx, a.cancel = context.WithCancelCause(context.Background())
	a.lctx = leaseContext{a.ctx, a}
	l.collection().lines.hold(a, time.Now())
	l.p.tel.acquired(l)
	l.p.leases.keep(a, sent)
	h := &Handle{a}
	runtime.AddCleanup(h, (*acquisition).abandoned, a)
	return h
}

// abandoned runs once a's Handle is unreachable, in the runtime's cleanup
// goroutine. A provider over the in-memory store, the one store not on
// MongoDB, may run in a testing/synctest bubble, where that goroutine must
// not touch a's channels or timers (a fatal error): there it only marks a,
// and the next tick of the provider's leases abandons it.
func (a *acquisition) abandoned() {
	if _, onServer := a.lock.collection().store.(mongoStore); !onServer {
		a.dropped.Store(true)
		return
	}
	a.abandon()
}

// abandon releases a, whose Handle is unreachable, if it still holds the
// lock: nobody can release it any more.
func (a *acquisition) abandon() {
	if a.released.Load() || a.lossError() != nil {
		return
	}
	a.lock.p.tel.abandoned(a)
	a.lock.p.background(cleanupTimeout, func(ctx context.Context) { _ = a.release(ctx) })
}

// release is Release, holding the lock as its provider's WithHoldAtLeast
// says.
func (h *acquisition) release(ctx context.Context) error {
	return h.releaseHolding(ctx, h.lock.p.opts.atLeast)
}

// releaseHolding is Release, keeping the lock held until hold after its
// acquisition (0: freeing it at once).
func (h *acquisition) releaseHolding(ctx context.Context, hold time.Duration) (err error) {
	if ctx == nil {
		return h.lock.errorf("release", errNilContext)
	}
	h.look() // a lease whose deadline has passed is reported lost
	if h.released.Swap(true) {
		return nil
	}
	ctx = h.lock.p.tel.startHolderWrite(ctx, h, opReleaseTrace)
	defer func() { h.lock.p.tel.endHolderWrite(ctx, h, opReleaseTrace, "released", err) }()
	// Stop extending, but signal the loss if the lease runs out before the
	// round trip ends: a release stuck behind a partition must not leave
	// work running under a live Context.
	p := h.lock.p
	if l := p.leases.forget(h); l != nil {
		defer time.AfterFunc(l.deadline.Sub(p.leases.susp.now()), func() {
			h.markLost(lossExpired, fmt.Errorf("%w: its lease ran out before the release's round trip ended", ErrLockLost))
		}).Stop()
	}
	defer h.unhold() // local waiters are woken once the release is decided
	if err := h.lossError(); err != nil {
		if h.serverMayHold.Swap(false) {
			// Lost at the local deadline, the lock stays held on the
			// server until its lease ends there; its owner, done with it,
			// frees it now, without waiting for the round trip.
			h.lock.releaseInBackground(h.lockID, afterReply, hold)
		}
		if errors.Is(err, ErrTakenOver) {
			return nil // a hand-off by choice, not a failure
		}
		return h.lock.errorf("release", err)
	}
	err = h.sendRelease(ctx, hold)
	return h.releaseAnswered(err, hold, isNoMatch(err) && h.wasTakenOver(ctx))
}

// loseUnmatched marks h lost, if it was not yet, after an owner-checked
// write of it matched nothing (why): as taken over by its ticket
// (ErrTakenOver) if its document records so, else for why.
func (h *acquisition) loseUnmatched(ctx context.Context, why error) {
	if h.lock.p.leases.forget(h) == nil {
		return
	}
	if h.wasTakenOver(ctx) {
		why = ErrTakenOver
	}
	h.markLost(lossTakenOver, why)
}

// wasTakenOver reports whether h's document records that h's acquisition
// was taken over by its ticket: asked when h's owner-checked write matched
// nothing, to tell a hand-off from a loss. It reads no more than an
// extension does when it finds a handle lost (the holders statement).
func (h *acquisition) wasTakenOver(ctx context.Context) bool {
	seen, err := readHolders(ctx, h.lock.collection().store, h.lock.kind, bson.A{h.lock.name})
	// A failed read is a loss, as it was before the two could be told apart.
	return err == nil && seen.takenOver[h.lockID]
}

// sendRelease releases h in one round trip: a hand-over to the head of its
// process's line, if one waits, else the kind's release. A hold is not
// handed over: the hand-over would be built with the waiter's options, and
// the waiter must wait for the hold's end anyway.
func (h *acquisition) sendRelease(ctx context.Context, hold time.Duration) error {
	if hold == 0 {
		if w := h.lock.collection().lines.offer(h.lock.name); w != nil {
			return h.handOver(ctx, w) // sends nothing if ctx is done
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	filter, update := h.lock.kind.release(h.lock.name, h.lockID, hold)
	matched, _, err := h.lock.collection().store.updateOne(ctx, filter, update)
	if err == nil && matched == 0 {
		err = mongo.ErrNoDocuments
	}
	return err
}

// releaseAnswered ends h by the release's answer err: released, found
// taken over by its ticket or lost (its filter matched nothing), or to be
// freed in the background.
func (h *acquisition) releaseAnswered(err error, hold time.Duration, takenOver bool) error {
	switch {
	case err == nil:
		h.cancel(context.Canceled)
		return nil
	case takenOver:
		h.markLost(lossTakenOver, ErrTakenOver)
		return nil
	case isNoMatch(err):
		h.markLost(lossTakenOver, fmt.Errorf("%w: at release, the lock was held by someone else or its document was gone", ErrLockLost))
		return h.lock.errorf("release", h.lossError())
	default:
		h.lock.releaseInBackground(h.lockID, undoSchedule(err), hold)
		h.cancel(context.Canceled)
		if lost := h.lossError(); lost != nil { // the lease ran out meanwhile
			err = fmt.Errorf("%w (and the release failed: %w)", lost, err)
		}
		return h.lock.errorf("release", err)
	}
}

// handOver releases h and, in the same round trip, acquires the lock for w
// with the acquisition pipeline of w's provider, in hand-over mode: if
// another process's turn has come, the round trip only releases, and w goes
// on waiting. It returns the round trip's error.
func (h *acquisition) handOver(ctx context.Context, w *waiter) error {
	lockID, sent := newLockID(), w.lock.p.leases.now()
	doc, err := w.lock.acquireRoundTrip(ctx, attempt{id: lockID, releasing: h.lockID, mode: handOverMode})
	var next *Handle
	if err == nil && doc.LockID == lockID {
		next = newHandle(w.lock, lockID, doc, sent)
	}
	h.lock.p.tel.handOver(ctx, h.lock, next != nil)
	if !w.lock.collection().lines.deliver(w, next) && next != nil {
		next.releaseUntaken() // its Acquire ended meanwhile
	}
	return err
}

// releaseUntaken releases, in the background of its provider, a handle
// handed over to an Acquire that ended before taking it: an orphan, which
// nobody used, so it is not held.
func (a *acquisition) releaseUntaken() {
	p := a.lock.p
	p.background(cleanupTimeout, func(ctx context.Context) {
		if a.releaseHolding(ctx, 0) == nil {
			p.tel.orphanReleased(a.lock)
		}
	})
}

// markLost records why the lock was lost and signals it, once; reason
// classifies why for telemetry.
func (h *acquisition) markLost(reason lossReason, why error) {
	h.lostOnce.Do(func() {
		h.lostErr = why
		// The cause names its lock: it is printed on its own.
		cause := &Error{Name: shortName(h.lock.name), Err: why}
		// Cancel first: whoever wakes on Lost sees the cause already, and
		// the loss counted (a few microseconds); logging may be slow, so
		// it comes after the signal.
		h.cancel(cause)
		h.unhold()
		h.lock.p.tel.countLoss(h, reason, cause)
		h.isLost.Store(true)
		close(h.lost)
		h.lock.p.tel.logLoss(h, reason, why)
	})
}

// unhold tells local waiters, once, that this handle holds the lock no more.
func (h *acquisition) unhold() {
	h.unholdOnce.Do(func() {
		h.lock.collection().lines.unhold(h)
		h.lock.p.tel.unheld(h.lock)
	})
}

// leaseOver signals loss when the local lease ran out (lastErr: the last
// extension's error, if any; capped: it reached WithHoldAtMost's bound;
// slept: the machine was suspended for that long while it was kept, and
// would have held but for that).
// The lock stays held on the server until the lease it last confirmed has
// ended there: the safety margin is the holder's time to stop, and nobody
// else may get in before. Then, in case a late extension did reach the
// server, the lock is freed in the background; a Release of the lost
// handle (its work has stopped) frees it at once.
func (h *acquisition) leaseOver(lastErr error, capped bool, slept time.Duration) {
	// Counted as background work before Lost closes, so that whoever wakes
	// on Lost and waits for the background work waits for it.
	h.serverMayHold.Store(true)
	h.lock.releaseInBackground(h.lockID, delayed(afterNoReply, time.Until(h.serverEnd())), h.lock.p.opts.atLeast)
	why := fmt.Errorf("%w: its lease ran out before an extension succeeded", ErrLockLost)
	if slept > 0 {
		why = fmt.Errorf("%w: its lease ran out while this machine was suspended (for %v)", ErrLockLost, slept.Round(time.Millisecond))
	} else if capped {
		why = fmt.Errorf("%w: it was held as long as it may be (WithHoldAtMost: %v after its acquisition)", ErrLockLost, h.lock.p.opts.atMost)
	} else if lastErr != nil {
		why = fmt.Errorf("%w (last error: %w)", why, lastErr)
	}
	h.markLost(lossExpired, why)
}

// serverEnd is when, by this machine's clock, the lease that the server
// last confirmed has certainly ended there: the reply of the last
// confirmed acquisition or extension came after the server's $$NOW that
// its expiresAt counts from, and WithHoldAtMost's bound counts from the
// acquisition's, whose reply came later still.
func (h *acquisition) serverEnd() time.Time {
	return h.leaseEndFrom(h.lastReplyAt.Load(), h.atMostFromReply)
}

// Releasing in the background what no caller will keep: an acquisition
// nobody got a handle for, a Release whose round trip failed, a mark of a
// failed upgrade (updateInBackground). A claim whose maker left is
// withdrawn by the engine (Lock.withdraw).

// Schedules for releaseInBackground. Once an acquisition's reply has
// arrived, one try does. Without the reply, the request may still be on its
// way to the server, and a release on another connection can overtake it:
// the release is repeated for a while.
var (
	afterReply   = []time.Duration{0}
	afterNoReply = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond}
)

// undoSchedule is the schedule of the undo of a request that failed with
// err: repeated if no reply came, as the request may still be in flight.
func undoSchedule(err error) []time.Duration {
	if isReply(err) {
		return afterReply
	}
	return afterNoReply
}

// releaseInBackground releases lockID's acquisition of l, if it holds it,
// without waiting: for acquisitions nobody will get a handle for, and for a
// Release whose round trip failed. It is owner-checked, so it can never free
// someone else's acquisition. It stops once a try matches
// (updateInBackground). It holds the lock until hold after its acquisition
// (WithHoldAtLeast's, for a handle's release).
func (l *Lock) releaseInBackground(lockID string, schedule []time.Duration, hold time.Duration) {
	filter, update := l.kind.release(l.name, lockID, hold)
	l.updateInBackground(filter, update, schedule, func() bool { return true })
}

// releaseOrphan is releaseInBackground of an orphan, an acquisition nobody
// got a handle for: nobody used it, so it holds nothing, and it is counted
// and logged as it is released.
func (l *Lock) releaseOrphan(lockID string, schedule []time.Duration) {
	filter, update := l.kind.release(l.name, lockID, 0)
	l.updateInBackground(filter, update, schedule, func() bool { l.p.tel.orphanReleased(l); return true })
}

// updateInBackground sends updateOne(filter, update) to l's collection
// without waiting. It tries after each wait of schedule, and again after a
// short, growing backoff while a try fails transiently; it stops once a try
// matches and matched returns true, an error is not transient (the client
// closed), or cleanupTimeout has passed.
func (l *Lock) updateInBackground(filter bson.D, update any, schedule []time.Duration, matched func() bool) {
	l.p.background(cleanupTimeout+schedule[0], func(ctx context.Context) { // a delayed schedule's time to wait too
		for _, wait := range schedule {
			for retry := 20 * time.Millisecond; ; retry = min(2*retry, 500*time.Millisecond) {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
				n, _, err := l.collection().store.updateOne(ctx, filter, update)
				if err == nil && n > 0 && matched() || err != nil && !isTransient(err) {
					return
				}
				if err == nil {
					break // no match: try again at the schedule's next wait, if any
				}
				l.p.tel.retrying(l, err)
				wait = retry
			}
		}
	})
}
