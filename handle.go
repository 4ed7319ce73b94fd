package mongolock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A Handle is one acquisition of a lock, or of a slot of a Semaphore, held
// until it is released or lost; its lease is extended while it is held.
//
// Of a Semaphore's slot, what it says of the lock holds for the slot. While
// it is held, its lease is extended every extension cadence, together with
// the other handles of its Provider: one round trip per 500 handles, and
// no goroutine per handle.
//
// Loss (the lease could not be extended in time, or someone else took the
// lock over, or its document was deleted) closes Lost and cancels Context
// with the cause ErrLockLost, before the server would let anyone else take
// the lock, so work that must not run unprotected can stop in time. Once
// the lease's local deadline has passed, the first look reports the loss:
// Context's Err or Done, Lost, Release, or a fenced write (refused
// unsent), also when no timer has run since (a process stopped or starved
// of CPU past it runs again with its timers overdue). A lease that ended
// while the machine was suspended (a laptop asleep, a paused VM) is lost
// as soon as the holder resumes and looks, and within a quarter of a
// second otherwise.
//
// A Handle is safe for concurrent use. Call Release when done: a Handle
// that becomes unreachable while it holds its lock is released when the
// garbage collector finds it, with a warning logged (WithLogger).
//
// A nil *Handle (a failed Acquire's) holds nothing, and no method of it
// panics: Release returns nil, so that a deferred Release written before
// the error check is harmless; Context is done and Lost closed; the
// accessors return zero values; Ticket is ErrInvalidArgument.
type Handle struct {
	*acquisition
}

// held returns h's acquisition, or nil for a nil Handle (or its zero
// value), whose methods answer as for nothing held.
func (h *Handle) held() *acquisition {
	if h == nil {
		return nil
	}
	return h.acquisition
}

// errNilHandle is the error of a call that needs a held handle on a nil
// one.
var errNilHandle error = invalid("a nil handle: its Acquire failed")

// nothingHeld is the Context of a nil handle: done, as nothing is held;
// context.Cause says why.
var nothingHeld = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNilHandle)
	return ctx
}()

// closedChan is the Lost of a nil handle: closed, as nothing is held.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// acquisition is what the library keeps of a Handle while it is held. It
// never refers to its Handle, so that a Handle its owner dropped becomes
// unreachable.
type acquisition struct {
	lock       *Lock
	lockID     string
	token      atomic.Int64 // changes with an RWLock's upgrade
	acquiredAt time.Time    // by the server's clock
	// The lease lasts, by this machine's clock, at least until the earlier
	// of lastSentAt plus the expiry and atMostFromSent; and it ends on the
	// server no later than the earlier of lastReplyAt plus the expiry and
	// atMostFromReply.
	lastSentAt      atomic.Int64 // unix nanos: when the last acquisition or extension the server confirmed was sent
	lastReplyAt     atomic.Int64 // unix nanos: when that one's reply came
	atMostFromSent  time.Time    // WithHoldAtMost's bound from the acquisition's sending; zero: none
	atMostFromReply time.Time    // WithHoldAtMost's bound from the acquisition's reply; zero: none
	// deadline: the local end of the lease while it is extended (lease.go),
	// in nanoseconds of its provider's monotonic clock since its clocks'
	// start, for looks to read without a lock; math.MaxInt64 once it is
	// not extended.
	deadline atomic.Int64
	// Lost at the local deadline, while the server may still hold the lock
	// for it (until serverEnd): Release frees it then.
	serverMayHold atomic.Bool

	ctx    context.Context
	cancel context.CancelCauseFunc
	lctx   leaseContext // ctx, looking at the lease when asked: what Context returns
	lost   chan struct{}

	extendingStopped chan struct{} // closed when the lease is no longer extended

	released   atomic.Bool // Release was called
	dropped    atomic.Bool // its Handle became unreachable (in-memory store); the next tick abandons it
	lostOnce   sync.Once
	lostErr    error       // why the lock was lost, wrapping ErrLockLost; set before isLost
	isLost     atomic.Bool // set as lost closes; lossError reads it where lost may not be read
	unholdOnce sync.Once   // tells the local line, once, that this handle no longer holds

	// Guarded by the local lines' mutex (queues.mu): whether its line counts
	// it among the name's local holders, and as exclusive (an RWLock's writer's).
	heldLocally, exclusive bool

	mode     atomic.Uint32 // an RWLock's handle's rwMode, as upgrades and downgrades change it; 0 for other kinds
	changing atomic.Bool   // an Upgrade or Downgrade is under way
}

// Name returns the name of the lock this handle holds ("" for a nil
// Handle).
func (h *Handle) Name() string {
	if h.held() == nil {
		return ""
	}
	return h.lock.name
}

// FencingToken returns this acquisition's fencing token, greater than any
// earlier acquisition's of the lock name; a nil Handle's is 0, which no
// acquisition has.
//
// Tokens of one lock name strictly increase across acquisitions, including
// after an expiry, a takeover or the deletion of the lock document. Pass it
// to the resource the lock protects so that it can refuse writes from a
// holder that lost the lock and does not know it yet (a write with a token
// lower than the last one it accepted).
func (h *Handle) FencingToken() int64 {
	if h.held() == nil {
		return 0
	}
	return h.token.Load()
}

// AcquiredAt returns when the lock (a semaphore's slot, an RWLock's read or
// write lock, a leadership) was acquired, by the server's clock (the zero
// time for a nil Handle).
func (h *Handle) AcquiredAt() time.Time {
	if h.held() == nil {
		return time.Time{}
	}
	return h.acquiredAt
}

// Owner returns the owner the acquisition was made with (WithOwner; by
// default the host name and process id), as Inspect shows it ("" for a
// nil Handle).
func (h *Handle) Owner() string {
	if h.held() == nil {
		return ""
	}
	return h.lock.p.opts.owner
}

// LeaseEnd returns until when, by this machine's wall clock, the lease is
// known to last; the server's lease ends at that or later. A nil Handle's
// is the zero time.
//
// It is the time the last acquisition or extension that the server
// confirmed was sent, plus the expiry, but no later than WithHoldAtMost's
// bound after the acquisition was sent. After a release or a loss it stays
// what it was last.
func (h *Handle) LeaseEnd() time.Time {
	if h.held() == nil {
		return time.Time{}
	}
	end := time.Unix(0, h.lastSentAt.Load()).Add(h.lock.p.opts.expiry)
	if !h.atMostFromSent.IsZero() && h.atMostFromSent.Before(end) {
		return h.atMostFromSent.Round(0) // by the wall clock, which counts suspended time
	}
	return end
}

// lossError returns why the lock was lost, or nil. It touches no channel:
// the garbage collector's cleanup (abandoned) asks it outside the
// testing/synctest bubble, if any, that the handle was made in.
func (h *acquisition) lossError() error {
	if h.isLost.Load() {
		return h.lostErr
	}
	return nil
}

// leaseContext is a Handle's or a CompositeHandle's context, which looks
// at the lease whenever it is asked whether it is done. Everything else,
// Value (and so context.Cause, and the cancellation of contexts derived
// from it) among it, is the handle's cancelable context's. Each handle
// keeps one, so that Context allocates nothing.
type leaseContext struct {
	context.Context
	h interface{ look() }
}

func (c leaseContext) Done() <-chan struct{} {
	c.h.look()
	return c.Context.Done()
}

func (c leaseContext) Err() error {
	c.h.look()
	return c.Context.Err()
}

// heldState returns why h no longer holds, looking at its lease first, or
// nil: its loss, else ErrReleased once Release was called. A fenced write
// asks before it is sent.
func (h *acquisition) heldState() error {
	if err := h.knownLost(); err != nil {
		return err
	}
	if h.released.Load() {
		return ErrReleased
	}
	return nil
}
