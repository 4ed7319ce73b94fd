package mongolock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A Handle is one acquisition of a lock. While it is held, its lease is
// extended every extension cadence, together with the other handles of its
// collection, by one background goroutine per collection that runs while
// handles are held (lease.go).
//
// Loss (the lease could not be extended in time, or someone else took the
// lock over, or its document was deleted) closes Lost and cancels Context
// with the cause ErrLockLost, before the server would let anyone else take
// the lock, so work that must not run unprotected can stop in time.
//
// A Handle is safe for concurrent use.
type Handle struct {
	lock   *Lock
	lockID string
	token  int64

	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}

	keeperDone chan struct{} // closed when the lease is no longer kept

	mu       sync.Mutex
	lostErr  error // why the lock was lost; wraps ErrLockLost
	released bool  // Release was called

	unholdOnce sync.Once // tells the local queue, once, that this handle no longer holds
}

func newHandle(l *Lock, lockID string, token int64, sent time.Time) *Handle {
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &Handle{
		lock:       l,
		lockID:     lockID,
		token:      token,
		ctx:        ctx,
		cancel:     cancel,
		lost:       make(chan struct{}),
		keeperDone: make(chan struct{}),
	}
	l.p.shared.queues.hold(l.name)
	l.p.shared.leases.keep(h, sent)
	return h
}

// unhold tells local waiters, once, that this handle holds the lock no more.
func (h *Handle) unhold() {
	h.unholdOnce.Do(func() { h.lock.p.shared.queues.unhold(h.lock.name) })
}

// Name returns the name of the lock this handle holds.
func (h *Handle) Name() string { return h.lock.name }

// FencingToken returns this acquisition's fencing token. Tokens of one lock
// name strictly increase across acquisitions, including after an expiry, a
// takeover or the deletion of the lock document. Pass it to the resource the
// lock protects so that it can refuse writes from a holder that lost the
// lock and does not know it yet (a write with a token lower than the last
// one it accepted).
func (h *Handle) FencingToken() int64 { return h.token }

// Context returns a context that is done when the lock is lost or released.
// On loss, context.Cause returns ErrLockLost; on release, context.Canceled.
func (h *Handle) Context() context.Context { return h.ctx }

// Lost returns a channel that is closed when the lock is lost. It is never
// closed by a normal Release.
func (h *Handle) Lost() <-chan struct{} { return h.lost }

// Release releases the lock, if it is still held, in one owner-checked round
// trip bounded by ctx: others can take it at once, and its fencing token is
// kept for the next holder to outrank. The handle stops extending the lease
// before Release returns. If a goroutine of this process waits for the lock
// in Acquire, the same round trip hands the lock over to it (a new
// acquisition, with a higher fencing token), unless another process's turn
// has come.
//
// The first call returns nil if the lock was still held, and an error
// wrapping ErrLockLost if it had been lost. If the round trip fails (ctx
// ended, network), Release returns that error and frees the lock in the
// background with a short timeout; failing that, the lock frees itself when
// its lease expires. Later calls return nil.
func (h *Handle) Release(ctx context.Context) error {
	if ctx == nil {
		return h.lock.errorf("release", errNilContext)
	}
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return nil
	}
	h.released = true
	h.mu.Unlock()

	// Stop extending before releasing. Local waiters are woken once the
	// release is decided.
	h.lock.p.shared.leases.forget(h)
	defer h.unhold()
	if err := h.lossError(); err != nil {
		return h.lock.errorf("release", err)
	}

	p := h.lock.p
	if w := p.shared.queues.offer(h.lock.name); w != nil {
		return h.handOver(ctx, w)
	}
	res, err := p.coll.UpdateOne(ctx, ownerFilter(h.lock.name, h.lockID), releaseUpdate)
	switch {
	case err != nil:
		p.releaseInBackground(h.lock.name, h.lockID, cleanupSchedule)
		h.cancel(context.Canceled)
		return h.lock.errorf("release", err)
	case res.MatchedCount == 0:
		h.markLost(fmt.Errorf("%w: at release, the lock was held by someone else or its document was gone", ErrLockLost))
		return h.lock.errorf("release", h.lossError())
	}
	h.cancel(context.Canceled)
	return nil
}

func (h *Handle) lossError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErr
}

// markLost records why the lock was lost and signals it, once.
func (h *Handle) markLost(why error) {
	h.mu.Lock()
	first := h.lostErr == nil
	if first {
		h.lostErr = why
	}
	h.mu.Unlock()
	if first {
		// Cancel first: whoever wakes on Lost sees the cause already.
		h.cancel(ErrLockLost)
		close(h.lost)
		h.unhold()
	}
}

// extendUpdate pushes the lease to $$NOW + expiry.
func extendUpdate(expiry time.Duration) mongo.Pipeline {
	return mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: leaseEnd(expiry)}}}}}
}

// leaseOver signals loss when the local lease ran out, then frees the lock
// on the server in case a late extension did reach it.
func (h *Handle) leaseOver(lastErr error) {
	// Counted as background work before Lost closes, so that whoever wakes
	// on Lost and waits for the background (WaitBackground) waits for it.
	h.lock.p.releaseInBackground(h.lock.name, h.lockID, cleanupSchedule)
	if lastErr != nil {
		h.markLost(fmt.Errorf("%w: its lease ran out before an extension succeeded (last error: %w)", ErrLockLost, lastErr))
	} else {
		h.markLost(fmt.Errorf("%w: its lease ran out before an extension succeeded", ErrLockLost))
	}
}
