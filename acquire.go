package mongolock

import (
	"context"
	"errors"
)

// TryAcquire makes one attempt to take the lock. It returns a Handle if the
// lock was free, ErrNotAcquired if someone else holds it, or another error
// if the attempt failed (the server, the network, or ctx).
//
// ErrNotAcquired is also returned if this process has just had a turn of
// several acquisitions in a row while another process waits. ctx bounds
// only the round trip; the Handle lives until released or lost. A refused
// TryAcquire leaves no trace: it claims no turn.
//
// With no server reachable, the round trip waits for one as long as the
// driver's server selection does (serverSelectionTimeoutMS, 30 s by
// default), unless ctx ends first: give ctx a deadline to bound it. The
// error then wraps the driver's, and each server's last error beside it (a
// refused connection), which errors.As finds.
func (l *Lock) TryAcquire(ctx context.Context) (*Handle, error) {
	return l.traced(ctx, "try acquire", opTryAcquireTrace, tryOnce)
}

// howToAcquire is an acquisition call's way: Acquire's, which waits until
// it holds, or TryAcquire's one attempt.
type howToAcquire int

const (
	waitUntilHeld howToAcquire = iota
	tryOnce
)

// traced runs Acquire's wait or TryAcquire's attempt (how), op, while l's
// provider is open, told of its calls as trace. It calls them by name, so
// that call stays on the stack.
func (l *Lock) traced(ctx context.Context, op, trace string, how howToAcquire) (h *Handle, err error) {
	switch {
	case ctx == nil:
		return nil, l.errorf(op, errNilContext)
	case checkName(l.name) != nil: // before anything is sent or reported
		return nil, l.errorf(op, errNameNotUTF8)
	}
	ctx, call := l.p.tel.startAcquire(ctx, l, trace)
	defer func() { call.end(ctx, h, err) }()
	if !l.p.enter() {
		return nil, l.errorf(op, ErrClosed)
	}
	defer l.p.calls.Done()
	if l.p.opts.holdOptionSet() && !l.kind.holdsApply() {
		return nil, l.errorf(op, errHoldKind)
	}
	if how == waitUntilHeld {
		return l.acquire(ctx, &call)
	}
	return l.tryAcquire(ctx, &call)
}

// tryAcquire is TryAcquire's attempt, counted by call.
func (l *Lock) tryAcquire(ctx context.Context, call *acquireCall) (*Handle, error) {
	h, _, err := l.attempt(ctx, tryMode, 0)
	call.attempted(ctx, err)
	if err != nil {
		return nil, l.errorf("try acquire", withServerErrors(err))
	}
	return h, nil
}

// Acquire waits until it holds the lock or ctx ends.
//
// Acquire calls of one process for the same lock (same client, database,
// collection and name) wait in line, first come first served, and only the
// first asks the database. A release in this process hands the lock to the
// next in line in the same round trip; a loss wakes it at once. Between
// processes, waiters take turns (docs/contention.md tells the rule),
// polling at the configured sleep (WithBusyWaitSleep, WithAdaptiveBackoff).
// Where the server has change streams, a release anywhere wakes the
// waiters at once.
//
// Acquire is not reentrant: an Acquire of a name that a handle of this
// process holds (through any Lock of the same client, database, collection
// and name) waits in line behind that handle, so a goroutine that asks
// again while it holds waits until its ctx ends. Pass the Handle, or its
// Context, to the code that needs the lock held instead. (A semaphore's
// second Acquire takes another slot if one is free; readers of a reader-writer
// lock share, but not with a writer of their own process that waits.)
//
// Transient server and network errors are retried; an error that retrying
// cannot fix (a name the server cannot store, missing permission) is
// returned at once. When ctx ends first, the error satisfies
// errors.Is(err, ctx.Err()), and also errors.Is(err, ErrNotAcquired) if the
// lock was held by someone else the whole time, so that contention can be
// told from an outage. A call that returns an error, whatever ended it,
// leaves the line without disturbing the others, and withdraws its
// process's claim if it may have made one: the next in line claims again.
//
// An outage says why: when the last round trip failed (no server
// reachable, a network error), the error wraps its error too, and each
// server's last error that a failed server selection knows of (a refused
// connection), which errors.As finds. A round trip waits for a server as
// long as the driver's server selection does (serverSelectionTimeoutMS, 30
// s by default): give ctx a deadline. One still waiting when ctx ends, on
// a collection this process has reached before, is left to finish in the
// background, and the error says only that ctx ended.
func (l *Lock) Acquire(ctx context.Context) (*Handle, error) {
	return l.traced(ctx, "acquire", opAcquireTrace, waitUntilHeld)
}

// acquire is Acquire's wait, its attempts counted by call.
func (l *Lock) acquire(ctx context.Context, call *acquireCall) (h *Handle, err error) {
	// A refused collection before the line: no claim to withdraw. Other
	// errors of the check are the attempts' to retry; one that ctx cut
	// short may still say why (no server reachable).
	checked := l.p.ensureCollection(ctx, l.collection())
	if errors.Is(checked, ErrCollation) {
		return nil, l.errorf("acquire", checked)
	}
	// The wait counts in a copy of call, given back as it ends: a pointer
	// kept in the wait would move call to the heap.
	a := &acquireWait{waitLoop: waitLoop{l: l, op: "acquire", w: l.collection().lines.join(l, false)}, call: *call}
	a.cutShort(checked)
	defer func() {
		*call = a.call
		a.leave()
		if err != nil && a.mayHaveClaimed {
			a.l.withdraw() // a claim is its maker's: the next in line claims again
		}
	}()
	err = a.run(ctx, a.try)
	return a.handle, err
}

// errHoldKind refuses an acquisition of a kind that the hold options
// (WithHoldAtLeast, WithHoldAtMost) of its provider do not apply to.
var errHoldKind error = invalid("WithHoldAtLeast and WithHoldAtMost apply to locks only, not to elections, semaphores or RWLocks: use a Provider without them")

// Do acquires the lock (waiting, as Acquire), runs fn, and releases the lock,
// also when fn panics. It returns fn's error (with ErrLockLost if the lock
// was lost), or Acquire's if the lock cannot be acquired.
//
// fn's ctx ends when ctx ends or the lock is lost; its cause is then
// ErrLockLost. Do returns fn's error as fn returned it; but if the lock was
// lost while fn ran, or the release failed, it returns an *Error of "do"
// that wraps the release's error and fn's, if any, so that errors.Is(err,
// ErrLockLost) holds after a loss. If the lock cannot be acquired, fn does
// not run and Do returns Acquire's error, as its own. A nil fn is an
// error, returned before anything is acquired. With WithHoldAtLeast, the
// release keeps the lock held until the hold ends.
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return acquireAndDo(ctx, fn, l.errorf, l.Acquire)
}

// acquireAndDo is Do's, of a Lock or a Composite: acquire, then do fn.
func acquireAndDo[H doHandle](ctx context.Context, fn func(ctx context.Context) error, errorf func(op string, err error) error, acquire func(context.Context) (H, error)) error {
	switch {
	case ctx == nil:
		return errorf("do", errNilContext)
	case fn == nil:
		return errorf("do", errNilFunction)
	}
	h, err := acquire(ctx)
	if err != nil {
		return renamed("do", err)
	}
	return do(ctx, h, fn)
}

// A doHandle is what Do runs a function under: a Handle or a
// CompositeHandle.
type doHandle interface {
	Context() context.Context
	Release(ctx context.Context) error
}

// do runs fn with a ctx that ends when ctx ends or h is lost (cause
// ErrLockLost), then releases h, also when fn panics. It returns fn's
// error as it is if the release succeeded, else Release's error as Do's,
// its cause joined with fn's error.
func do(ctx context.Context, h doHandle, fn func(ctx context.Context) error) (err error) {
	defer func() {
		// Release even when ctx is already over: the caller is done with
		// the lock, and others should not wait for its lease to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := h.Release(rctx); rerr != nil {
			err = doError(err, rerr, context.Cause(h.Context()))
		}
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })()
	return fn(fctx)
}

// doError is Do's error when fn returned fnErr and the release failed
// with rerr, an *Error, after h's Context ended with cause. fnErr that is
// cause adds nothing: the release's error says the loss.
func doError(fnErr, rerr, cause error) error {
	e, ok := renamed("do", rerr).(*Error)
	switch {
	case !ok: // not a Release's
		return errors.Join(fnErr, rerr)
	case fnErr != nil && fnErr != cause:
		e.Err = errors.Join(fnErr, e.Err)
	}
	return e
}
