package mongolock

// Kind is what a name of a Provider's collections is.
type Kind string

// The kinds. A semaphore or an RWLock lives apart from locks and
// elections: one of each may share a name.
const (
	KindLock      Kind = "lock"      // a Lock's, or DistributedLock.MongoDB's
	KindElection  Kind = "election"  // an Election's: a lock whose last mongolock acquisition carried a value
	KindSemaphore Kind = "semaphore" // a Semaphore's
	KindRWLock    Kind = "rwlock"    // an RWLock's
)
