package mongolock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A waitLoop is the engine's wait, an Acquire's or an Upgrade's: try; unless
// the try ends the wait, sleep until woken (a release in this process, or
// a release event), until the try's next is due, or until the wait gives
// up (ctx ends, the provider closes); and again.
type waitLoop struct {
	l         *Lock
	op        string          // the operation its errors name
	w         *waiter         // its place in its process's line, or beside it
	ended     <-chan struct{} // an Upgrade's handle's end (release, loss); nil for an Acquire
	notified  bool            // counted among the waiters that release events wake
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
	if !wt.notified {
		wt.notified = true
		lc := wt.l.collection()
		lc.notify.join(lc.store, lc.lines.wakeHead, &lc.bg)
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
	if e, ok := withServerErrors(err).(withCauses); ok {
		wt.lastErr = e
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
// gave up is released.
func (wt *waitLoop) leave() {
	lc := wt.l.collection()
	if wt.notified {
		lc.notify.leave()
	}
	if h := lc.lines.leave(wt.w); h != nil {
		h.releaseUntaken()
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
	s := a.l.collection().lines.standing(a.w)
	switch {
	case s.handedOver != nil:
		a.takeHandOver(ctx, s.handedOver)
		return waitOver, nil, nil
	case !s.mayAttempt:
		a.contended = true // someone of this process goes first
		return sleepThenTry, nil, nil
	}
	mode := waitMode
	if s.nobodyWaited && a.l.kind.unclaimed() {
		mode = unclaimedMode // nobody waited for it lately: the cheaper statement first
	}
	return a.attempt(ctx, mode, s.waitToken)
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
	qs, sent := &a.l.collection().lines, time.Now()
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
	lc.lines.wakeHead(l.name)
	return err
}
