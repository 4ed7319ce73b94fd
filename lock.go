package mongolock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// A Lock is a named distributed lock. It is safe for concurrent use.
//
// It holds no state of its own: every Acquire or TryAcquire that succeeds
// returns a new Handle, and the lock is held until that Handle is released
// or lost. Two Acquire calls on the same Lock compete like any two holders.
type Lock struct {
	p    *Provider
	name string
	kind kindDriver // what it is: a lock, an election's, a semaphore's slot, a reader-writer lock's mode
}

// Name returns the lock's name, exactly as given.
func (l *Lock) Name() string { return l.name }

// checkName refuses a name that is not valid UTF-8: BSON's strings are
// UTF-8, and a server may refuse or alter such a string. Every other Go
// string is a name.
func checkName(name string) error {
	if !utf8.ValidString(name) {
		return errNameNotUTF8
	}
	return nil
}

var errNameNotUTF8 error = invalid("the name is not valid UTF-8, as BSON's strings must be")

// collection is where l's document is.
func (l *Lock) collection() *lockCollection { return l.kind.collection(l.p) }

const (
	// maxCreateTries bounds how often one attempt creates the lock document
	// and tries again (attempt).
	maxCreateTries = 5
	// cleanupTimeout bounds a background release of an acquisition nobody
	// will get a handle for, or of a failed Release.
	cleanupTimeout = 5 * time.Second
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
	return l.traced(ctx, "try acquire", opTryAcquireTrace, false)
}

// traced runs Acquire's wait (wait) or TryAcquire's attempt, op, while l's
// provider is open, told of its calls as trace. It calls them by name, so
// that call stays on the stack.
func (l *Lock) traced(ctx context.Context, op, trace string, wait bool) (h *Handle, err error) {
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
	if wait {
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
	return l.traced(ctx, "acquire", opAcquireTrace, true)
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
	a := &acquireWait{waitLoop: waitLoop{l: l, op: "acquire", w: l.collection().queues.join(l, false)}, call: *call}
	a.cutShort(checked)
	defer func() { *call = a.call; a.leave(err != nil && a.mayHaveClaimed) }()
	err = a.run(ctx, a.try)
	return a.handle, err
}

// A waitLoop is the engine's wait, an Acquire's or an Upgrade's: try; unless
// the try ends the wait, sleep until woken (a release in this process, or
// a release event), until the try's next is due, or until the wait gives
// up (ctx ends, the provider closes); and again.
type waitLoop struct {
	l         *Lock
	op        string          // the operation its errors name
	w         *waiter         // its place in its process's line, or beside it
	ended     <-chan struct{} // an Upgrade's handle's end (release, loss); nil for an Acquire
	watching  bool            // counted among the waiters that release events wake
	contended bool            // someone else held the lock when it looked
	lastErr   error           // the last transient error
}

// afterTry is what a try says comes after it.
type afterTry int

const (
	sleepThenTry afterTry = iota // until woken, or due (nil: woken)
	tryAtOnce
	waitOver
)

// errHandleEnded ends an Upgrade's wait: its handle was released or lost.
var errHandleEnded = errors.New("the handle ended")

// run tries with try until a try ends the wait, sleeping between tries.
func (wt *waitLoop) run(ctx context.Context, try func(context.Context) (afterTry, <-chan time.Time, error)) error {
	for {
		select {
		case <-wt.w.wake: // what woke it is seen by this try
		default:
		}
		n, due, err := try(ctx)
		switch {
		case n == waitOver:
			return err
		case n == tryAtOnce:
			continue
		}
		select {
		case <-wt.w.wake:
		case <-due:
		case <-wt.ended:
			return errHandleEnded
		case <-wt.l.p.done:
			return wt.l.errorf(wt.op, ErrClosed)
		case <-ctx.Done():
			return wt.gaveUp(ctx)
		}
	}
}

// refused records that someone else holds the lock. From then on, release
// events wake the wait too.
func (wt *waitLoop) refused() {
	wt.contended = true
	if !wt.watching {
		wt.watching = true
		lc := wt.l.collection()
		lc.notify.join(lc.store, lc.queues.wakeHead, &lc.bg)
	}
}

// failed records err, a transient error of a try's round trip, as the
// wait's last.
func (wt *waitLoop) failed(err error) { wt.lastErr = withServerErrors(err) }

// cutShort records what err, of a try's round trip that ctx cut short,
// tells of the server: a server selection that ctx ended knows each
// server's last error (a refused connection). Other such errors say only
// that ctx ended.
func (wt *waitLoop) cutShort(err error) {
	if len(serverErrors(err)) > 0 {
		wt.lastErr = withServerErrors(err)
	}
}

// gaveUp is the wait's error when ctx ended: with the last transient
// error, or as contention if the lock was held by someone else.
func (wt *waitLoop) gaveUp(ctx context.Context) error {
	switch {
	case wt.lastErr != nil:
		return wt.l.errorf(wt.op, fmt.Errorf("%w (last error: %w)", ctx.Err(), wt.lastErr))
	case wt.contended:
		return wt.l.errorf(wt.op, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err()))
	}
	return wt.l.errorf(wt.op, ctx.Err()) // no attempt came back in time
}

// leave takes the wait out of its line. A handle handed over to it as it
// gave up is released, and its process's claim withdrawn if withdraw: a
// claim is its maker's, and the next in line claims again.
func (wt *waitLoop) leave(withdraw bool) {
	lc := wt.l.collection()
	if wt.watching {
		lc.notify.leave()
	}
	if h := lc.queues.leave(wt.w); h != nil {
		h.releaseUntaken()
	}
	if withdraw {
		wt.l.withdraw()
	}
}

// An acquireWait is an Acquire's wait.
type acquireWait struct {
	waitLoop
	call   acquireCall // counts its attempts for telemetry
	handle *Handle     // acquired, or handed over
	// An attempt that may claim the next turn was sent. A claim: the lock's
	// document keeps its next turn for this process (waitingProcess).
	mayHaveClaimed bool
	lastRefusal    reply // the last refused attempt's reply
}

// try takes a hand-over to the wait, if any, else attempts if its line
// lets it: it is the head, and no handle of this process fills the lock.
func (a *acquireWait) try(ctx context.Context) (afterTry, <-chan time.Time, error) {
	handedOver, mayAttempt, waitToken, nobodyWaited := a.l.collection().queues.standing(a.w)
	switch {
	case handedOver != nil:
		a.takeHandOver(ctx, handedOver)
		return waitOver, nil, nil
	case !mayAttempt:
		a.contended = true // someone of this process goes first
		return sleepThenTry, nil, nil
	}
	mode := waitMode
	if nobodyWaited && a.l.kind.unclaimed() {
		mode = unclaimedMode // nobody waited for it lately: the cheaper statement first
	}
	return a.attempt(ctx, mode, waitToken)
}

// takeHandOver takes h, handed over by a release in this process. An
// attempt refused after the hand-over (it saw the hand-over's token) has
// claimed the next turn again, or taken a place as next: nobody needs
// that, and it is withdrawn before the caller goes on, or else in the
// background.
func (a *acquireWait) takeHandOver(ctx context.Context, h *Handle) {
	a.call.handedOver, a.handle = true, h
	if a.lastRefusal.placed(a.l.collection().process) && a.lastRefusal.FencingToken >= h.token.Load() && a.l.withdrawNow(ctx) != nil {
		a.l.withdraw()
	}
}

// attempt sends one attempt in mode and reads its outcome: when the next
// try is due, or the end of the wait.
func (a *acquireWait) attempt(ctx context.Context, mode attemptMode, waitToken int64) (afterTry, <-chan time.Time, error) {
	a.mayHaveClaimed = a.mayHaveClaimed || mode == waitMode && ctx.Err() == nil // else it claims nothing
	qs, sent := &a.l.collection().queues, time.Now()
	h, doc, err := a.l.attempt(ctx, mode, waitToken)
	a.call.attempted(ctx, err)
	switch {
	case err == nil:
		a.handle = h
		return waitOver, nil, nil
	case errors.Is(err, errUnclaimedRefused):
		a.contended = true // held, or kept for another process's turn
		qs.unclaimedRefused(a.w)
		return tryAtOnce, nil, nil // claiming
	case errors.Is(err, ErrNotAcquired):
		a.lastRefusal = doc
		a.refused()
		return sleepThenTry, qs.after(a.w, &doc, time.Since(sent)), nil
	case ctx.Err() != nil || endedByDeadline(ctx, err): // cut short by ctx
		a.cutShort(err)
		return sleepThenTry, nil, nil
	case isTransient(err):
		a.failed(err)
		return sleepThenTry, qs.after(a.w, nil, 0), nil
	}
	return waitOver, nil, a.l.errorf("acquire", err)
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
func acquireAndDo[H holding](ctx context.Context, fn func(ctx context.Context) error, errorf func(op string, err error) error, acquire func(context.Context) (H, error)) error {
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

// A holding is what Do runs a function under: a Handle or a
// CompositeHandle.
type holding interface {
	Context() context.Context
	Release(ctx context.Context) error
}

// do runs fn with a ctx that ends when ctx ends or h is lost (cause
// ErrLockLost), then releases h, also when fn panics. It returns fn's
// error as it is if the release succeeded, else Release's error as Do's,
// its cause joined with fn's error.
func do(ctx context.Context, h holding, fn func(ctx context.Context) error) (err error) {
	defer func() {
		// Release even when ctx is already over: the caller is done with
		// the lock, and others should not wait for its lease to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := h.Release(rctx); rerr != nil {
			err = doError(err, rerr)
		}
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })()
	return fn(fctx)
}

// doError is Do's error when fn returned fnErr and the release failed
// with rerr, an *Error.
func doError(fnErr, rerr error) error {
	e, ok := renamed("do", rerr).(*Error)
	switch {
	case !ok: // not a Release's
		return errors.Join(fnErr, rerr)
	case fnErr != nil:
		e.Err = errors.Join(fnErr, e.Err)
	}
	return e
}

// attempt is one acquisition attempt, claiming with waitToken (Acquire):
// one round trip on an existing lock document. A missing document (no
// match; or a duplicate key on FerretDB, racing another client that creates
// it) is created with a plain insert and the attempt repeated.
func (l *Lock) attempt(ctx context.Context, mode attemptMode, waitToken int64) (*Handle, reply, error) {
	if err := l.p.ensureCollection(ctx, l.collection()); err != nil {
		return nil, reply{}, err // a done ctx's: nothing sent, not even the index
	}
	l.p.ensureIndex(l.collection())
	for tries := 1; ; tries++ {
		// A fresh lockId per round trip: a cleanup of one can never free
		// another.
		lockID, sent := newLockID(), l.p.now()
		doc, err := l.acquireRoundTrip(ctx, attempt{id: lockID, waitToken: waitToken, mode: mode})
		switch {
		case err == nil && doc.LockID == lockID:
			return newHandle(l, lockID, doc, sent), doc, nil
		case err == nil && doc.wrong != nil:
			return nil, doc, doc.wrong
		case err == nil:
			return nil, doc, ErrNotAcquired
		case !isNoMatch(err) && !isDuplicateKey(err):
			return nil, doc, err
		case tries == maxCreateTries:
			// The document keeps vanishing, or others keep racing to
			// create it: contention, not failure.
			return nil, doc, fmt.Errorf("%w (the lock document was created and removed concurrently: %w)", ErrNotAcquired, err)
		}
		if err := l.collection().store.insertOne(ctx, l.kind.create(l.name)); err != nil && !isDuplicateKey(err) {
			return nil, reply{}, err
		}
	}
}

// acquireRoundTrip sends one acquisition of l, or a hand-over from the
// acquisition releasing, and waits for its reply, for ctx, or for the
// provider to close (ErrClosed), as roundTrip: an acquisition whose reply
// nobody waits for any more is released, a claim it made is withdrawn. A
// request that fails ambiguously (the connection dropped after sending, a
// write concern error) is released in the background too.
func (l *Lock) acquireRoundTrip(ctx context.Context, a attempt) (reply, error) {
	p, lc, lockID := l.p, l.collection(), a.id
	send := func(ctx context.Context) (reply, error) {
		testHookSend(p, a.mode)
		doc, err := l.kind.acquire(ctx, p, l.name, a)
		if err = testHookReply(p, err); isAmbiguous(err) {
			l.releaseInBackground(lockID, undoSchedule(err), 0, true)
		}
		return doc, err
	}
	return roundTrip(ctx, p, send, func(doc reply, err error) {
		switch {
		case err == nil && doc.LockID == lockID:
			l.releaseInBackground(lockID, afterReply, 0, true)
		case err == nil && a.mode == waitMode && doc.placed(lc.process):
			l.withdraw()
		}
	})
}

// roundTrip sends one request with send and waits for its reply, for ctx,
// or for p to close (ErrClosed).
//
// If ctx ends (or p closes) first, the request may already be on the
// server, and an undo sent now could overtake it there: so the request is
// left to finish in the background (for at most cleanupTimeout
// more), and undo is called with its outcome once it is in.
func roundTrip[T any](ctx context.Context, p *Provider, send func(context.Context) (T, error), undo func(T, error)) (T, error) {
	var none T
	if err := ctx.Err(); err != nil {
		return none, err
	}
	if ctx.Done() == nil { // ctx cannot end it (Close waits for it): no need for a goroutine
		return send(ctx)
	}
	type result struct {
		v   T
		err error
	}
	replied := make(chan result) // unbuffered: the reply is taken, or abandoned
	abandoned := make(chan struct{})
	opCtx, cancelOp := context.WithCancel(context.WithoutCancel(ctx))
	p.sendAsync(func() {
		defer cancelOp()
		var r result
		r.v, r.err = send(opCtx)
		select {
		case replied <- r:
		case <-abandoned: // nobody takes the reply: undo what it did
			undo(r.v, r.err)
		}
	})
	select {
	case r := <-replied:
		return r.v, r.err
	case <-ctx.Done():
	case <-p.done:
	}
	close(abandoned)
	time.AfterFunc(cleanupTimeout, cancelOp)
	return none, cmp.Or(ctx.Err(), ErrClosed)
}

// withdraw removes this process's claim on l's next turn, and its place as
// next after another's, in the background, then wakes the head of its line,
// if any, to claim again: a claim is its maker's, and must not outlive it.
func (l *Lock) withdraw() {
	l.p.background(cleanupTimeout, func(ctx context.Context) { _ = l.withdrawNow(ctx) })
}

// withdrawNow is withdraw within ctx, in the caller's goroutine.
func (l *Lock) withdrawNow(ctx context.Context) error {
	lc := l.collection()
	_, _, err := lc.store.updateOne(ctx, withdrawFilter(l.name, lc.process), withdrawUpdate(lc.process))
	lc.queues.wakeHead(l.name)
	return err
}

// errorf wraps err with the operation and the lock's name, shortened
// without splitting a character: names may be megabytes long.
func (l *Lock) errorf(op string, err error) error {
	return &Error{Op: op, Name: shortName(l.name), Err: err}
}
