package mongolock

import (
	"context"
	"errors"
	"time"
)

// Reader-writer locks.
//
// An RWLock is held by any number of readers at once or by one writer, in
// this process and in others, by the server's clock. It is a semaphore-like
// document whose holders carry a mode, and its Handles are a Semaphore's in
// every way (protocol.go, 20 and 21 acquire; 17 to 19 release and extend).

// An RWLock is a distributed reader-writer lock, named as Lock's are.
// RWLocks live in the collection "<collection>_semaphores" with the
// Semaphores: do not give an RWLock and a Semaphore the same name.
//
// A writer that waits in Lock blocks new readers, as with sync.RWMutex: once
// a writer is refused, RLock and TryRLock are refused until the writer has
// acquired (or stopped asking for a short while), so a stream of readers
// cannot starve writers. Every acquisition, read or write, takes the next
// fencing token of the lock: a writer's token is greater than that of every
// reader before it, and a reader's greater than that of every writer before
// it. An RWLock is safe for concurrent use.
type RWLock struct {
	r, w *Lock
}

// RWLock returns the reader-writer lock called name.
func (p *Provider) RWLock(name string) *RWLock {
	return &RWLock{r: &Lock{p: p, name: name, n: 1, rw: readMode}, w: &Lock{p: p, name: name, n: 1, rw: writeMode}}
}

// rwMode is what an RWLock's acquisition holds.
type rwMode byte

const (
	readMode  rwMode = 'r'
	writeMode rwMode = 'w'
)

// Name returns the lock's name, exactly as given.
func (rw *RWLock) Name() string { return rw.r.name }

// TryRLock makes one attempt to take the lock for reading. It returns a
// Handle if no writer held the lock and none was waiting, ErrNotAcquired if
// one was, or another error as Lock.TryAcquire.
func (rw *RWLock) TryRLock(ctx context.Context) (*Handle, error) { return rw.r.TryAcquire(ctx) }

// TryLock makes one attempt to take the lock for writing. It returns a
// Handle if nobody held the lock, ErrNotAcquired if someone did, or another
// error as Lock.TryAcquire. A refused TryLock does not block readers.
func (rw *RWLock) TryLock(ctx context.Context) (*Handle, error) { return rw.w.TryAcquire(ctx) }

// RLock waits until it holds the lock for reading or ctx ends, trying at the
// configured sleep (WithBusyWaitSleep, WithAdaptiveBackoff). Errors are as
// Lock.Acquire's.
func (rw *RWLock) RLock(ctx context.Context) (*Handle, error) {
	if ctx == nil {
		return nil, rw.r.errorf("acquire", errNilContext)
	}
	return rw.r.acquireSlot(ctx, tryMode)
}

// Lock waits until it holds the lock for writing or ctx ends. While it
// waits, new readers are refused; current readers keep the lock until they
// release it or lose it. Writers are not served in order. Errors are as
// Lock.Acquire's. A Lock whose ctx ends stops blocking readers once its
// claim lapses: by default within a second.
func (rw *RWLock) Lock(ctx context.Context) (*Handle, error) {
	if ctx == nil {
		return nil, rw.w.errorf("acquire", errNilContext)
	}
	return rw.w.acquireSlot(ctx, waitMode)
}

// acquireSlot is the waiting acquisition of a Semaphore's slot or an
// RWLock's: attempts in mode at the configured sleep, until one succeeds or
// ctx ends. A writer waiting (waitMode) sleeps at most as long as its claim
// lasts, so that its claim does not lapse between attempts.
func (l *Lock) acquireSlot(ctx context.Context, mode attemptMode) (*Handle, error) {
	p := l.p
	if !p.enter() {
		return nil, l.errorf("acquire", ErrClosed)
	}
	defer p.calls.Done()
	b := p.opts.backoff()
	var contended bool
	var lastErr error // the last transient error
	for failures := 1; ; failures++ {
		h, _, err := l.attempt(ctx, mode, 0)
		switch {
		case err == nil:
			return h, nil
		case errors.Is(err, ErrNotAcquired):
			contended, lastErr = true, nil
		case ctx.Err() != nil || endedByDeadline(ctx, err): // cut short by ctx: it tells nothing
		case isTransient(err):
			lastErr = err
		default:
			return nil, l.errorf("acquire", err)
		}
		sleep := b.next(failures)
		if mode == waitMode {
			sleep = min(sleep, p.opts.claimantSleep())
		}
		select {
		case <-time.After(sleep):
		case <-p.done:
			return nil, l.errorf("acquire", ErrClosed)
		case <-ctx.Done():
			return nil, l.gaveUp(ctx, lastErr, contended)
		}
	}
}
