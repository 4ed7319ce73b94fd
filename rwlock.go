package mongolock

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
// Its Reader and its Writer are Locks of the same name: the Reader is held
// by any number of holders at once, the Writer by one, and never together.
// Acquire, TryAcquire and Do are a Lock's, with these rules. A writer that
// waits blocks new readers, as with sync.RWMutex: once a Writer().Acquire
// is refused, readers are refused until the writer has acquired (or
// stopped asking), so a stream of readers cannot starve writers. A reader
// refused while a writer holds claims the next turn for its process, which
// keeps writers of other processes out until it has read, so writers
// cannot starve readers either. Between processes, the claim goes to the
// one that has waited longest. Calls of one process, for reading and for
// writing, wait in one line, first come first served. Every acquisition,
// read or write, takes the next fencing token of the lock: a writer's
// token is greater than that of every reader before it, and a reader's
// greater than that of every writer before it. An RWLock is safe for
// concurrent use.
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

// Reader returns the lock held for reading: its TryAcquire is refused
// (ErrNotAcquired) if a writer holds the lock or waits for it.
func (rw *RWLock) Reader() *Lock { return rw.r }

// Writer returns the lock held for writing: its TryAcquire is refused if
// anyone holds the lock, or a reader of another process waits for it; a
// refused TryAcquire does not block readers. While its Acquire waits, new
// readers are refused; current readers keep the lock until they release it
// or lose it. An Acquire that ends without the lock withdraws its claim,
// and readers are let in again.
func (rw *RWLock) Writer() *Lock { return rw.w }
