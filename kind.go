package mongolock

// Kind is what a name of a Provider's collections is: a lock, an election,
// a semaphore or an RWLock, as LockInfo and TraceLock report it.
type Kind string

// The kinds. A semaphore or an RWLock lives apart from locks and
// elections: one of each may share a name.
const (
	// KindLock is the kind of a Lock's name, or DistributedLock.MongoDB's.
	KindLock Kind = "lock"
	// KindElection is the kind of an Election's name: a lock whose last
	// mongolock acquisition carried a value.
	KindElection Kind = "election"
	// KindSemaphore is the kind of a Semaphore's name.
	KindSemaphore Kind = "semaphore"
	// KindRWLock is the kind of an RWLock's name.
	KindRWLock Kind = "rwlock"
)
