package mongolock

import (
	"context"
)

// Reader-writer locks.
//
// An RWLock is held by any number of readers at once or by one writer, in
// this process and in others, by the server's clock. It is a semaphore-like
// document whose holders carry a mode, and its Handles are a Semaphore's in
// every way (protocol.go, 20 creates; 16 to 19 acquire, hand over, release
// and extend).

// An RWLock is a distributed reader-writer lock, named as Lock's are.
// RWLocks live in the collection "<collection>_semaphores" with the
// Semaphores: a Semaphore's acquisition under an RWLock's name, or the
// other way round, fails at once with an error (not ErrNotAcquired).
//
// A writer that waits in Lock blocks new readers, as with sync.RWMutex: once
// a writer is refused, RLock and TryRLock are refused until the writer has
// acquired (or stopped asking), so a stream of readers cannot starve
// writers. Every acquisition, read or write, takes the next
// fencing token of the lock: a writer's token is greater than that of every
// reader before it, and a reader's greater than that of every writer before
// it. An RWLock is safe for concurrent use.
type RWLock struct {
	r, w *Lock
}

// RWLock returns the reader-writer lock called name.
func (p *Provider) RWLock(name string) *RWLock {
	return &RWLock{r: &Lock{p: p, name: name, kind: slotDriver{n: 1, rw: readMode}}, w: &Lock{p: p, name: name, kind: slotDriver{n: 1, rw: writeMode}}}
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
// Handle if nobody held the lock, ErrNotAcquired if someone did (or an
// RLock of another process waits for it), or another error as
// Lock.TryAcquire. A refused TryLock does not block readers.
func (rw *RWLock) TryLock(ctx context.Context) (*Handle, error) { return rw.w.TryAcquire(ctx) }

// RLock waits until it holds the lock for reading or ctx ends, as
// Lock.Acquire waits for a lock: calls of one process, for reading and for
// writing, wait in one line, first come first served. A reader refused
// while a writer holds the lock claims the next turn for its process, which
// keeps writers of other processes out until it has read, so writers cannot
// starve readers either. Errors are as Lock.Acquire's.
func (rw *RWLock) RLock(ctx context.Context) (*Handle, error) { return rw.r.Acquire(ctx) }

// Lock waits until it holds the lock for writing or ctx ends, as
// Lock.Acquire waits for a lock. While it waits, new readers are refused;
// current readers keep the lock until they release it or lose it. Errors
// are as Lock.Acquire's; a Lock whose ctx ends withdraws its claim, and
// readers are let in again.
func (rw *RWLock) Lock(ctx context.Context) (*Handle, error) { return rw.w.Acquire(ctx) }

// RDo acquires the lock for reading (waiting, as RLock), runs fn, and
// releases the lock, also when fn panics; as Lock.Do.
func (rw *RWLock) RDo(ctx context.Context, fn func(ctx context.Context) error) error {
	return rw.r.Do(ctx, fn)
}

// Do acquires the lock for writing (waiting, as Lock), runs fn, and
// releases the lock, also when fn panics; as Lock.Do.
func (rw *RWLock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return rw.w.Do(ctx, fn)
}
