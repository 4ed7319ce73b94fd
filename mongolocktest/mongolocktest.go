// Package mongolocktest provides mongolock Providers that keep their locks
// in process memory, for unit tests of code that takes locks, semaphores,
// RWLocks and elections: no server is needed.
//
// NewProvider returns a real *mongolock.Provider, so code that takes a
// *mongolock.Provider (or the *mongolock.Lock, *mongolock.Handle and the
// other types it mints) is tested unchanged; only the constructor differs.
// Its locks keep mongolock's rules: Acquire waits, first come first served,
// and its ctx errors are mongolock's; TryAcquire returns ErrNotAcquired;
// fencing tokens strictly increase per name; Release, Do, Semaphores of n
// (ErrMismatch for another n or kind), RWLocks (a waiting writer holds off
// new readers) with their upgradeable readers, Upgrade (which holds off new
// readers, and becomes the writer as the last other reader leaves, with no
// writer in between) and Downgrade (which lets waiting readers in at once),
// elections, Close, and the scheduled jobs' holds behave as over a
// database: with WithHoldAtLeast a released lock stays held by its
// owner until the hold ends or is force released, with WithHoldAtMost a
// handle is lost at its bound, and both refuse every kind but locks.
// Inspect and Locks show every kind with its holders and their IDs;
// ForceRelease ends every holder of a name, ForceReleaseHolder one. Options
// are validated as mongolock.NewProvider validates them, with the same
// errors.
//
// Where it differs: a lease never runs out (the holder is this process,
// alive while the test runs), so a Handle is lost only through Lose,
// ForceRelease, ForceReleaseHolder or WithHoldAtMost's bound, and at once;
// a Handle dropped without Release keeps its lock; a lock frees at once
// when a hold ends; fencing tokens count from 1 per name; LockInfo.Waiting
// reports whether any Acquire waits; the busy-wait, standby and extension
// options change nothing, and the telemetry options record nothing.
package mongolocktest

import (
	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
)

// A Store is the in-memory stand-in for a database: the Providers of one
// Store share its locks, as providers of one database share theirs (by
// collection and name), and exclude each other. The zero Store is not
// usable; NewStore makes one. A Store is safe for concurrent use.
type Store struct {
	s *store
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{newStore()}
}

// NewProvider returns a Provider over s with opts, or the error
// mongolock.NewProvider returns for them.
func (s *Store) NewProvider(opts ...mongolock.Option) (*mongolock.Provider, error) {
	p, err := backend.NewProvider(opts, func(c backend.Config) backend.Provider { return s.s.provider(c) })
	if err != nil {
		return nil, err
	}
	return p.(*mongolock.Provider), nil
}

// NewProvider returns a Provider over a Store of its own: its locks are
// shared with no other Provider.
func NewProvider(opts ...mongolock.Option) (*mongolock.Provider, error) {
	return NewStore().NewProvider(opts...)
}

// Lose makes h lost, as the server's verdict would: h's Lost channel
// closes, its Context ends with the cause mongolock.ErrLockLost, its lock
// (or slot) is free for the next in line at once, and its Release returns
// an error wrapping ErrLockLost. A handle released or lost already is left
// as it is. It panics if h is not of a Provider of this package.
func Lose(h *mongolock.Handle) {
	mh, ok := backend.HandleOf(h).(*handle)
	if !ok {
		panic("mongolocktest.Lose: the handle is not of a mongolocktest Provider")
	}
	mh.lose("made lost by mongolocktest.Lose")
}
