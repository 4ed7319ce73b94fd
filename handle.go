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
// the other handles of its Provider: one round trip per 1,000 handles, and
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

	// Guarded by the local lines' mutex (lines.mu): whether its line counts
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
	return h.leaseEndFrom(h.lastSentAt.Load(), h.atMostFromSent)
}

// leaseEndFrom is the end of a lease counted from unixNanos (when an
// acquisition or extension was sent, or its reply came): the expiry after
// it, but no later than bound, WithHoldAtMost's (zero: none).
func (h *acquisition) leaseEndFrom(unixNanos int64, bound time.Time) time.Time {
	end := time.Unix(0, unixNanos).Add(h.lock.p.opts.expiry)
	if !bound.IsZero() && bound.Before(end) {
		return bound.Round(0) // by the wall clock, which counts suspended time
	}
	return end
}

// Context returns a context that is done when the lock is lost or released.
// On loss, context.Cause is an *Error that names the lock and wraps
// ErrLockLost (ErrTakenOver after a take-over); on release, context.Canceled.
//
// A Release whose round trip outlasts the lease signals the loss at the
// lease's end, as if it had not been called. The context's Err and Done
// first look at the lease: once its local deadline has passed (a process
// stopped past it, a machine suspended), the first answer says done, and
// Done's channel is closed already. A nil Handle's is done, its cause
// ErrInvalidArgument.
func (h *Handle) Context() context.Context {
	if h.held() == nil {
		return nothingHeld
	}
	return &h.lctx
}

// Lost returns a channel that is closed when the lock is lost, never by a
// normal Release.
//
// Like the Context's Err and Done, it first looks at the lease: once its
// local deadline has passed, the channel it returns is closed. A nil
// Handle's is closed: nothing is held.
func (h *Handle) Lost() <-chan struct{} {
	if h.held() == nil {
		return closedChan
	}
	h.look()
	return h.lost
}

// Release releases the lock in one owner-checked round trip bounded by ctx.
// The first call returns nil if the lock was still held or was taken over
// by its ticket, else an error wrapping ErrLockLost; later calls, nil.
//
// Others can take the lock at once, and its fencing token is kept for the
// next holder to outrank. The handle stops extending the lease before
// Release returns. If an Acquire of this process waits for the lock, the
// same round trip hands the lock over to it (a new acquisition, with a
// higher fencing token), unless another process's turn has come. A take-over
// by ticket (Handle.Ticket) is a hand-off by choice, also when the taker
// runs in another process, so it is no error here.
//
// A handle lost because its lease ran out (extensions kept failing, or
// WithHoldAtMost's bound) leaves the lock held on the server until that
// lease has ended there, so that nobody else gets in while its work may
// still run; Release then frees it at once, owner-checked and in the
// background, without waiting (call it once the work has stopped). If ctx
// is done before the round trip, or the round trip fails (ctx ended,
// network), Release returns that error and frees the lock in the
// background with a short timeout; failing that, the lock frees itself when
// its lease expires. Either way the handle is released: its Context is
// done.
//
// With WithHoldAtLeast, the same round trip keeps the lock held until the
// hold ends (by the server's clock) instead of freeing it, and hands it to
// nobody.
//
// Release of a nil Handle returns nil: a deferred Release written before
// the Acquire's error check does nothing.
func (h *Handle) Release(ctx context.Context) error {
	if h.held() == nil {
		return nil
	}
	return h.release(ctx)
}

// releaseUnused is Release of a handle whose job never ran (a part of a
// composite call that failed): it frees the lock at once, whatever
// WithHoldAtLeast says.
func (h *Handle) releaseUnused(ctx context.Context) error { return h.releaseHolding(ctx, 0) }

// ticketed are this program's acquisitions that made a ticket, by lockId,
// until they end: a take-over in this program tells the one it took at
// once.
var ticketed sync.Map // lockId -> *acquisition

// Ticket returns a ticket of h's acquisition: a string that any process
// passes to Provider.TakeOver (or Election.TakeOver) to take it over with
// no moment in which anyone else could get in; an error if h has ended.
//
// The take-over is one owner-checked round trip. The ticket is
// URL-safe, so a file, an HTTP header or an environment variable carries it
// as it is, and opaque: its format is the library's, and a later one will
// be told apart from this one.
//
// A ticket is a bearer credential for this one acquisition: whoever
// presents it takes the acquisition from h while h holds it, with a
// connection of its own to the database. Pass it as a secret, and only to
// the process that is to take over. It grants nothing else (no access to
// the database), and nothing once the acquisition has ended: released,
// lost, run out, or taken over already, as a ticket works once.
//
// Making a ticket sends nothing: h holds as before until it is taken over,
// released or lost. Taken over, h is lost (Lost closes, Context ends with
// ErrTakenOver, which is an ErrLockLost): at once if the taker runs in
// this program, else at h's next extension, within the extension cadence;
// h's Release then frees nothing and returns nil, as the hand-off was
// chosen. So stop the work the lock protects before passing the ticket:
// the taker's fencing token outranks h's, and a fenced write of h's is
// refused once the taker has written. A released handle, or one known
// lost, has no ticket: Ticket returns an error, wrapping ErrLockLost if it
// was lost.
func (h *Handle) Ticket() (string, error) {
	a := h.held()
	if a == nil {
		return "", &Error{Op: "ticket", Err: errNilHandle}
	}
	if a.released.Load() {
		return "", a.lock.errorf("ticket", ErrReleased)
	}
	if err := a.knownLost(); err != nil {
		return "", a.lock.errorf("ticket", err)
	}
	if _, loaded := ticketed.LoadOrStore(a.lockID, a); !loaded {
		context.AfterFunc(a.ctx, func() { ticketed.CompareAndDelete(a.lockID, a) })
	}
	return a.ticketContents().encode(), nil
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
