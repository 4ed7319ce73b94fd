// Package backend is what a mongolock.Provider runs against when it keeps
// its locks in process memory instead of a database: the operations its
// public methods hand over to, and the hooks by which package mongolocktest
// builds such a provider. It exists so that the root package exports
// nothing for it.
//
// A later kind or option adds a field to Lock or Config, or a method here,
// and the in-memory store implements it; until it does, the store refuses
// the request with an error that names what it lacks.
package backend

import (
	"context"
	"errors"
	"time"

	"github.com/mongolock/mongolock/internal/memdb"
)

// Kind is what a lock is.
type Kind uint8

const (
	Unsupported Kind = iota // a kind the store does not implement (yet)
	Mutex                   // a Lock's, or an election's campaign
	Semaphore               // a Semaphore's slot
	Reader                  // an RWLock held for reading
	Writer                  // an RWLock held for writing
	Upgradeable             // an RWLock held by its upgradeable reader
)

// Lock is one acquisition's request: the name and what it takes.
type Lock struct {
	Name  string
	Kind  Kind
	N     int     // a Semaphore's slots
	Value *string // a campaign's value; nil for a Lock
}

// Config is what a provider's validated options say that a store needs.
type Config struct {
	Collection string
	Owner      string
	Expiry     time.Duration
	// AtLeast and AtMost are WithHoldAtLeast's and WithHoldAtMost's; 0:
	// none. The root package refuses them to every kind but a Lock.
	AtLeast, AtMost time.Duration
}

// Provider is one provider's view of a store. Its errors wrap mongolock's
// sentinel errors; the root package adds the operation and the name.
type Provider interface {
	// Acquire takes l: at once, or if wait, once it frees or ctx ends.
	Acquire(ctx context.Context, l Lock, wait bool) (Handle, error)
	// Inspect returns the state of a Lock or an election; false if the
	// name was never used.
	Inspect(name string) (LockState, bool)
	// List returns the states of the Locks and elections whose names
	// begin with prefix, in byte order of name.
	List(prefix string) []LockState
	// InspectSlots returns the state of a Semaphore or an RWLock; false if
	// the name was never used.
	InspectSlots(name string) (Slots, bool)
	// ListSlots returns the states of the Semaphores and RWLocks whose
	// names begin with prefix, in byte order of name.
	ListSlots(prefix string) []Slots
	// ForceRelease ends whatever holds the Lock or the election of name
	// (a holder is made lost; a hold of WithHoldAtLeast ends), and every
	// holder of the Semaphore or RWLock of name; it reports whether
	// anything held.
	ForceRelease(name string) bool
	// ForceReleaseHolder ends the one acquisition of name whose ID is id,
	// as ForceRelease, and reports whether there was one.
	ForceReleaseHolder(name, id string) bool
	// Changed returns a channel that closes at the next change of the
	// holder, or of the value, of a Lock or an election.
	Changed(name string) <-chan struct{}
	// Done is closed by Close.
	Done() <-chan struct{}
	// Close releases the provider's handles and ends its waiting calls.
	Close()
}

// Handle is one acquisition.
type Handle interface {
	Token() int64
	AcquiredAt() time.Time
	LeaseEnd() time.Time
	// Context ends on release (cause context.Canceled) or loss (cause
	// mongolock.ErrLockLost).
	Context() context.Context
	// Lost is closed on loss, by the store only.
	Lost() chan struct{}
	// Release releases the acquisition, holding the lock as
	// Config.AtLeast says if hold, else freeing it at once (an
	// acquisition of a call that failed: no job ran). released reports
	// whether this call did; err wraps mongolock.ErrLockLost on the first
	// call after a loss. Later calls return false and nil.
	Release(hold bool) (released bool, err error)
	// Proclaim replaces a campaign's value: ErrReleased after Release, an
	// error wrapping mongolock.ErrLockLost after a loss.
	Proclaim(value string) error
	// Upgrade makes an upgradeable reader the writer once the other
	// readers have left, holding new readers off meanwhile, and returns its
	// new token. If ctx ends first, it returns an error wrapping
	// mongolock.ErrNotAcquired and ctx.Err(), and the handle stays an
	// upgradeable reader. Other errors are Downgrade's, and ErrSwitching
	// while another Upgrade of the handle waits.
	Upgrade(ctx context.Context) (token int64, err error)
	// Downgrade makes a writer a reader at once: an upgraded one an
	// upgradeable reader again. It returns ErrWrongMode if the handle is
	// not in the mode the operation needs, ErrReleased after Release, and
	// an error wrapping mongolock.ErrLockLost after a loss.
	Downgrade() error
}

// LockState is a Lock's or an election's state, as mongolock.LockInfo.
type LockState struct {
	Name                  string
	Election              bool // the last acquisition was a campaign's
	Held                  bool
	ID                    string // the holder's, while Held
	Owner, Value          string
	AcquiredAt, ExpiresAt time.Time
	FencingToken          int64
	Waiting               bool
	Now                   time.Time
}

// Slots is a Semaphore's or an RWLock's state, as mongolock.SemaphoreInfo
// and mongolock.RWLockInfo.
type Slots struct {
	Name                   string
	RW                     bool // an RWLock's; else a Semaphore's
	N                      int
	Holders                []Holder
	FencingToken           int64
	Waiting, WriterWaiting bool
	Now                    time.Time
}

// Holder is one holder of a Semaphore's slot or of an RWLock.
type Holder struct {
	ID, Owner             string
	Write, Upgradeable    bool
	AcquiredAt, ExpiresAt time.Time
	FencingToken          int64
}

// Errors of a Handle's operations, which the root package words as it
// does over a database.
var (
	// ErrReleased reports a Proclaim, Upgrade or Downgrade after Release.
	ErrReleased = errors.New("released")
	// ErrWrongMode reports an Upgrade of a handle that is not an
	// upgradeable reader's, or a Downgrade of one that is not a writer's.
	ErrWrongMode = errors.New("the handle is not in the mode the operation needs")
	// ErrSwitching reports an Upgrade while another of the handle waits.
	ErrSwitching = errors.New("another upgrade of the handle is under way")
)

// Hooks the root package sets in its init.
var (
	// NewProvider validates opts (a []mongolock.Option) as
	// mongolock.NewProvider does, and returns a *mongolock.Provider over
	// the Provider that open returns for its configuration.
	NewProvider func(opts any, open func(Config) Provider) (any, error)
	// NewEngineProvider validates opts (a []mongolock.Option) as
	// mongolock.NewProvider does, and returns a *mongolock.Provider whose
	// engine is the one that runs over MongoDB, its statements applied to
	// s, a database named db in process memory.
	NewEngineProvider func(s *memdb.Store, db string, opts any) (any, error)
	// HandleOf returns the Handle beneath h, a *mongolock.Handle of such a
	// provider, or nil.
	HandleOf func(h any) Handle
	// ReleaseUnused releases h, a *mongolock.Handle whose job never ran
	// (the mongolock command's could not start), freeing its lock at once
	// whatever WithHoldAtLeast says; it returns Release's error.
	ReleaseUnused func(ctx context.Context, h any) error
	// LossOf returns why h, a *mongolock.Handle, was lost, or nil, without
	// releasing it: the mongolock command says why at once, and releases
	// only once its command has stopped.
	LossOf func(h any) error
)
