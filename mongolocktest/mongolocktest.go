// Package mongolocktest provides mongolock Providers over a database in
// process memory, for unit tests of code that takes locks, semaphores,
// RWLocks and elections: no server is needed.
//
// NewProvider returns a real *mongolock.Provider, so code that takes a
// *mongolock.Provider (or the *mongolock.Lock, *mongolock.Handle and the
// other types it mints) is tested unchanged; only the constructor differs.
// And it is the library's engine that runs, the one that runs over
// MongoDB: its statements are applied to documents in process memory, as
// the server applies them, by the Store's clock. So everything behaves as
// over a database, with the same errors: options, waits and lines,
// fencing tokens, leases that are extended and that run out, handles that
// are lost when they cannot be, Semaphores, RWLocks, elections, the
// scheduled jobs' holds, Inspect, Locks, ForceRelease and Close.
//
// Each Provider is a process of its own, as a replica of a service with its
// own client would be: two Providers of one Store are two replicas that
// share a database, taking turns as two processes do. Store.Crash makes
// one die, as a process killed while it holds.
//
// The clock is time.Now. Inside a testing/synctest bubble it is the
// bubble's fake clock: a Store and its Providers made in a bubble run
// there, so a test can let a lease run out in microseconds of real time
// (the package's simulatedTime example shows a whole test):
//
//	synctest.Test(t, func(t *testing.T) {
//		ctx := t.Context()
//		store := mongolocktest.NewStore()
//		locks, _ := store.NewProvider(mongolock.WithExpiry(30 * time.Second))
//		h, _ := locks.Lock("ledger").Acquire(ctx)
//		store.Partition()            // no extension gets through
//		time.Sleep(31 * time.Second) // at once
//		<-h.Lost()                   // closed: the lease ran out
//		store.Heal()
//		locks.Close(ctx)
//	})
//
// Every goroutine a Provider starts ends after its Close, within a
// second (its idle senders and its change stream linger briefly).
//
// Where it differs from a server: the Store has no TTL monitor (released
// documents stay, which only Locks shows), and it is one database with
// change streams (reporting changes as MongoDB 8.0 does), reached without
// a network unless Partition says otherwise. Its change streams read a
// history of its last 1,024 writes, as MongoDB's read the capped oplog: a
// stream that falls behind it ends, and the Provider opens another, as
// over MongoDB. A Handle dropped without Release is released at its
// Provider's next extension of leases, rather than as soon as the garbage
// collector finds it: the collector's cleanups run outside any synctest
// bubble.
package mongolocktest

import (
	"sync"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
)

// dbName is the name of a Store's database, as LockInfo and errors name it.
const dbName = "mongolocktest"

// A Store is a database in process memory: the Providers of one Store
// share its locks, as providers of one database do, and exclude each other.
//
// Locks are shared by collection and name. The zero Store is not usable;
// NewStore makes one. A Store is safe for concurrent use.
//
// Each Provider is a process of its own, as a replica of a service with its
// own client is: its Acquire calls wait in a line of their own, and take
// turns with the other Providers' through the documents, as over a server.
// A release hands the lock over only to a waiter of its own Provider.
type Store struct {
	db *memdb.Store

	mu          sync.Mutex
	clients     map[*mongolock.Provider]*memdb.Store // each Provider's way to db, with its faults
	crashed     map[*mongolock.Provider]bool
	partitioned bool
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{db: memdb.NewStore(dbName, nil), clients: map[*mongolock.Provider]*memdb.Store{}, crashed: map[*mongolock.Provider]bool{}}
}

// NewProvider returns a Provider over s with opts, or the error
// mongolock.NewProvider returns for them. It is a process of its own.
func (s *Store) NewProvider(opts ...mongolock.Option) (*mongolock.Provider, error) {
	c := s.db.Client()
	p, err := backend.NewProvider(c, dbName, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pp := p.(*mongolock.Provider)
	s.clients[pp] = c
	if s.partitioned {
		c.Faults.Partition()
	}
	return pp, nil
}

// Partition cuts every Provider of s off from it until Heal, as a network
// partition cuts a process off from its server.
//
// Every statement fails at once with the driver's server selection error,
// which the library treats as transient. Handles are then lost as their leases run out, Acquire
// keeps trying until its ctx ends, and Release frees nothing.
func (s *Store) Partition() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partitioned = true
	for _, c := range s.clients {
		c.Faults.Partition()
	}
}

// Heal ends a partition, but for the Providers that crashed.
func (s *Store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partitioned = false
	for p, c := range s.clients {
		if !s.crashed[p] {
			c.Faults.Heal()
		}
	}
}

// Crash cuts p, a Provider of s, off from s for good, as the process that
// dies: its locks stay held until their leases run out, as a crashed
// holder's do. It panics if p is not a Provider of s.
//
// Nothing p sends arrives from then on; Heal does not undo it. p itself
// goes on, as a process that hangs would: its handles are lost as their
// leases run out, and its Close releases nothing.
func (s *Store) Crash(p *mongolock.Provider) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[p]
	if !ok {
		panic("mongolocktest.Store.Crash: the Provider is not of this Store")
	}
	s.crashed[p] = true
	c.Faults.Partition()
}

// NewProvider returns a Provider over a Store of its own: its locks are
// shared with no other Provider.
func NewProvider(opts ...mongolock.Option) (*mongolock.Provider, error) {
	return NewStore().NewProvider(opts...)
}

// Lose makes h lost, as the server's verdict would, and h learns of it at
// once. It panics if h is not of a Provider of this package.
//
// Its holder is force released in the store (ForceReleaseHolder), and h
// learns of it as its next extension would: h's Lost channel closes, its Context ends
// with the cause mongolock.ErrLockLost, its lock (or slot) is free for
// the next in line, and its Release returns an error wrapping
// ErrLockLost. A handle released or lost already is left as it is. In a
// partition the store keeps the holder until its lease ends.
func Lose(h *mongolock.Handle) {
	if !backend.Lose(h) {
		panic("mongolocktest.Lose: the handle is not of a mongolocktest Provider")
	}
}
