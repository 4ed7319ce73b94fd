package mongolock

import (
	"context"
	"fmt"
	"time"
)

// Hand-over.
//
// When a handle is released while a goroutine of the same process waits in
// line for the lock (queue.go), the release and the next acquisition are
// one round trip instead of two: the release's findOneAndUpdate, filtered
// on the releasing lockId, gives the lock a fresh lockId, lease and fencing
// token for the head of the line, exactly as that waiter's own acquisition
// would have (same pipeline, with the lock also counting as free while the
// releasing lockId holds it: fair.go). If fairness forbids it (another
// process's turn has come after maxStreak acquisitions by this one), the
// same round trip releases the lock instead, as a plain Release would, and
// the waiter goes on waiting in line.
//
// The waiter does not attempt meanwhile: a handle of its process holds the
// lock until the round trip is over. If its Acquire ends before it takes
// the handed-over handle, the handle is released in the background; if
// the round trip fails, both lockIds are released in the background, as for
// any ambiguous write (guarantee 6).

// offer returns the head of name's line and marks it as being handed the
// lock, or nil if nobody waits (or a hand-over to the head is under way).
func (qs *queues) offer(name string) *waiter {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.byName[name]
	if q == nil || len(q.waiters) == 0 || q.waiters[0].offered {
		return nil
	}
	w := q.waiters[0]
	w.offered = true
	return w
}

// deliver ends the hand-over to w: h is the handed-over handle, or nil if
// the lock was not handed over. It wakes w and reports whether w is still
// in line; if not, h is not delivered.
func (qs *queues) deliver(name string, w *waiter, h *Handle) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	w.offered = false
	q := qs.byName[name]
	if q == nil {
		return false
	}
	for _, x := range q.waiters {
		if x == w {
			w.handoff = h
			w.signal()
			return true
		}
	}
	return false
}

// takeHandoff returns the handle handed over to w, if any.
func (qs *queues) takeHandoff(w *waiter) *Handle {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	h := w.handoff
	w.handoff = nil
	return h
}

// handOver releases h and, in the same round trip, acquires the lock for w
// (see above). Its result is Release's.
func (h *Handle) handOver(ctx context.Context, w *waiter) error {
	name := h.lock.name
	wp := w.lock.p
	qs := &h.lock.p.shared.queues
	lockID := newLockID()
	sent := time.Now()
	var doc lockDoc
	err := wp.coll.FindOneAndUpdate(ctx, ownerFilter(name, h.lockID),
		wp.handoffPipeline.with(lockID, h.lockID), wp.acquireOpts).Decode(&doc)
	switch {
	case err == nil && doc.LockID == lockID:
		next := newHandle(w.lock, lockID, doc.FencingToken, sent)
		if !qs.deliver(name, w, next) {
			// Its Acquire ended meanwhile.
			wp.background(cleanupTimeout, func(ctx context.Context) { _ = next.Release(ctx) })
		}
	case err == nil: // released: another process's turn
		qs.deliver(name, w, nil)
	case isNoMatch(err):
		qs.deliver(name, w, nil)
		h.markLost(fmt.Errorf("%w: at release, the lock was held by someone else or its document was gone", ErrLockLost))
		return h.lock.errorf("release", h.lossError())
	default:
		qs.deliver(name, w, nil)
		if isAmbiguous(err) {
			wp.releaseInBackground(name, lockID, cleanupSchedule)
		}
		h.lock.p.releaseInBackground(name, h.lockID, cleanupSchedule)
		h.cancel(context.Canceled)
		return h.lock.errorf("release", err)
	}
	h.cancel(context.Canceled)
	return nil
}
