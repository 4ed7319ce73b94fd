// Package gocronmongolock runs github.com/go-co-op/gocron/v2 jobs once
// across replicas, with github.com/mongolock/mongolock's locks: a Locker
// (gocron.WithDistributedLocker, gocron.WithDistributedJobLocker) and an
// Elector (gocron.WithDistributedElector). It is a module of its own, so
// that an application that uses mongolock without gocron does not get
// gocron's modules.
//
//	locks, err := mongolock.NewProvider(db,
//		mongolock.WithHoldAtLeast(30*time.Second), // > the replicas' clock skew, < the period
//		mongolock.WithHoldAtMost(50*time.Second))  // a stuck run gives the lock up before the next one
//	locker, err := gocronmongolock.NewLocker(locks)
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//
// # The Locker
//
// Each run of a job takes the lock named after the job (gocron passes its
// name: WithName, else the function's) with one attempt, Lock.TryAcquire:
// if another replica holds it, Lock returns at once an error wrapping
// mongolock.ErrNotAcquired and gocron skips the run. While the job runs,
// the lock's lease is extended in the background (every third of
// mongolock.WithExpiry), so a job longer than the expiry keeps it.
// gocron calls Unlock when the job returns, with the job's context, which
// is cancelled when the job is removed or the scheduler shuts down:
// Unlock releases under a context of its own (WithTimeout), so the lock is
// released all the same.
//
// Every replica's scheduler starts the job at the same time by its own
// clock, and clocks differ: a job that ends sooner than they differ would
// otherwise run again on a replica whose clock is behind, once per
// replica in the worst case. mongolock.WithHoldAtLeast on the Provider
// keeps each run's lock held until that long after it was taken, by the
// server's clock, whenever the job ends: the hold must be longer than the
// largest difference between two replicas' clocks plus the scheduler's
// delay in firing and one round trip to the server (with clocks kept by
// NTP, a second is ample), and shorter than the job's period, or the next
// run finds the lock still held and is skipped. Half the period satisfies
// both for any period of a few seconds or more. mongolock.WithHoldAtMost,
// shorter than the period, bounds how long a stuck run can keep it.
//
// If the lock is lost while the job runs (its lease could not be extended,
// through a partition longer than the expiry, or WithHoldAtMost's bound
// came), gocron is not told and the job is not stopped: gocron gives the
// job no context tied to the lock. Another replica can then take the lock
// and run the job's next run beside it. WithOnLost is told at once (before
// the server lets anyone else take the lock), Unlock returns an error
// wrapping mongolock.ErrLockLost (gocron ignores it), and Lock.Handle
// gives the mongolock.Handle, whose fencing token a resource can check.
//
// # The Elector
//
// NewElector campaigns in the background for one mongolock.Election (one
// campaign per process: make one Elector and share it), keeps leadership
// while the process lives and campaigns again when it is lost. IsLeader
// answers from what the campaign knows, without a round trip: gocron asks
// before every run of every job. Only the leader's scheduler runs jobs.
//
// # Errors
//
// Errors of mongolock's calls come back as mongolock returns them, each a
// *mongolock.Error: Lock's and Unlock's, and the error that ended a
// campaign (Close's, and IsLeader's, wrapped). The package's own (a nil
// argument, a timeout that is not positive, ErrNotLeader, Close's ctx's
// error) are not mongolock's.
package gocronmongolock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/mongolock/mongolock"
)

// DefaultTimeout bounds each of the Locker's round trips, unless WithTimeout
// says otherwise.
const DefaultTimeout = 10 * time.Second

// A Locker takes a lock per job run for gocron (gocron.WithDistributedLocker,
// gocron.WithDistributedJobLocker). It is safe for concurrent use.
type Locker struct {
	p       *mongolock.Provider
	prefix  string
	timeout time.Duration
	onLost  func(name string, err error)
}

var _ gocron.Locker = (*Locker)(nil)

// A LockerOption configures NewLocker.
type LockerOption func(*Locker)

// WithNamePrefix puts prefix before each job's name in its lock's name
// (default: none, the lock is called as the job is).
func WithNamePrefix(prefix string) LockerOption {
	return func(l *Locker) { l.prefix = prefix }
}

// WithTimeout bounds each acquisition attempt and each release (default
// DefaultTimeout). It must be positive.
func WithTimeout(d time.Duration) LockerOption {
	return func(l *Locker) { l.timeout = d }
}

// WithOnLost sets a function called, in a goroutine of its own, when a
// job's lock is lost while the job runs: with the lock's name and why, an
// error wrapping mongolock.ErrLockLost.
//
// The job goes on running (gocron cannot stop it); log it, or stop the
// job's work by means of your own.
func WithOnLost(f func(name string, err error)) LockerOption {
	return func(l *Locker) { l.onLost = f }
}

// NewLocker returns a Locker whose locks p mints: p's options apply
// (mongolock.WithHoldAtLeast, WithHoldAtMost, WithExpiry, WithCollection).
// A nil p, a nil option or a timeout that is not positive is an error.
func NewLocker(p *mongolock.Provider, opts ...LockerOption) (*Locker, error) {
	if p == nil {
		return nil, errors.New("gocronmongolock: nil *mongolock.Provider")
	}
	l := &Locker{p: p, timeout: DefaultTimeout}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("gocronmongolock: nil LockerOption")
		}
		opt(l)
	}
	if l.timeout <= 0 {
		return nil, fmt.Errorf("gocronmongolock: WithTimeout(%v): the timeout must be positive", l.timeout)
	}
	return l, nil
}

// Lock takes the lock of the job called key with one attempt, bounded by
// ctx and the Locker's timeout. On any error gocron skips the run; if
// another replica holds the lock, the error wraps mongolock.ErrNotAcquired.
//
// A lock held still for WithHoldAtLeast counts as held. Other errors are
// the server's or the network's.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if ctx == nil {
		return nil, errors.New("gocronmongolock: Lock with a nil context")
	}
	actx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	h, err := l.p.Lock(l.prefix + key).TryAcquire(actx)
	if err != nil {
		return nil, err
	}
	lk := &Lock{h: h, timeout: l.timeout}
	if l.onLost != nil {
		name := h.Name()
		// Context ends on release too: only a loss's cause is
		// ErrLockLost. It ends either way, and so does this.
		context.AfterFunc(h.Context(), func() {
			if cause := context.Cause(h.Context()); errors.Is(cause, mongolock.ErrLockLost) {
				l.onLost(name, cause)
			}
		})
	}
	return lk, nil
}

// A Lock is one run's lock, as Locker.Lock returns it.
type Lock struct {
	h       *mongolock.Handle
	timeout time.Duration
}

var _ gocron.Lock = (*Lock)(nil)

// Handle returns the lock's mongolock.Handle: its FencingToken, Lost and
// Context.
func (l *Lock) Handle() *mongolock.Handle { return l.h }

// Unlock releases the lock (mongolock.Handle.Release). It returns an error
// wrapping mongolock.ErrLockLost if the lock was lost while the job ran;
// later calls return nil.
//
// If the Provider has WithHoldAtLeast, the lock stays held until the hold
// ends. Unlock releases also when ctx is already cancelled, as gocron's is
// once the scheduler shuts down: the round trip is bounded by the Locker's
// timeout instead.
func (l *Lock) Unlock(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	return l.h.Release(rctx)
}

// ErrNotLeader is what IsLeader returns, wrapped, when this process does
// not lead.
var ErrNotLeader = errors.New("gocronmongolock: not the leader")

// An Elector campaigns for one election in the background, for gocron's
// scheduler (gocron.WithDistributedElector): only the leader's scheduler
// runs jobs. It is safe for concurrent use.
type Elector struct {
	election *mongolock.Election
	leading  atomic.Pointer[mongolock.Leadership]
	cancel   context.CancelFunc
	done     chan struct{} // closed when the campaign has ended
	err      error         // why it ended; set before done closes
	closing  sync.Once
}

var _ gocron.Elector = (*Elector)(nil)

// An ElectorOption configures NewElector.
type ElectorOption func(*electorConfig)

type electorConfig struct{ value string }

// WithValue sets what the leader campaigns with, as mongolock.Election's
// Leader and `mongolock list` show it (default: empty; the owner,
// mongolock.WithOwner, shows who leads).
func WithValue(value string) ElectorOption {
	return func(c *electorConfig) { c.value = value }
}

// NewElector starts campaigning in the background for the election called
// name (mongolock.Provider.Election), among p's and other processes'
// Electors. A nil p or option is an error.
//
// It leads whenever it can, keeps leadership in the background (extending
// its lease as a held lock's), and campaigns again when leadership is lost.
// Make one per process and election, and Close it before p. An election
// cannot be held with p's mongolock.WithHoldAtLeast or WithHoldAtMost (give
// a Locker's holds a Provider of its own): the campaign then ends at once,
// and IsLeader and Close return its error.
func NewElector(p *mongolock.Provider, name string, opts ...ElectorOption) (*Elector, error) {
	if p == nil {
		return nil, errors.New("gocronmongolock: nil *mongolock.Provider")
	}
	e := &Elector{election: p.Election(name), done: make(chan struct{})}
	var c electorConfig
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("gocronmongolock: nil ElectorOption")
		}
		opt(&c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		e.err = e.election.Run(ctx, c.value, func(ctx context.Context, l *mongolock.Leadership) {
			e.leading.Store(l)
			<-ctx.Done() // resigned, lost, or Close
			e.leading.CompareAndSwap(l, nil)
		})
	}()
	return e, nil
}

// IsLeader returns nil while this process leads the election, and otherwise
// an error wrapping ErrNotLeader (and, once the campaign has ended on an
// error, that error).
//
// It asks nothing of the server: it reads the campaign's state, and a
// leadership whose lease this process could not extend in time counts as
// lost before anyone else can lead. ctx is not used.
func (e *Elector) IsLeader(context.Context) error {
	if l := e.leading.Load(); l != nil && l.Context().Err() == nil {
		return nil
	}
	select {
	case <-e.done:
		if e.err != nil {
			return fmt.Errorf("%w: the campaign ended: %w", ErrNotLeader, e.err)
		}
	default:
	}
	return fmt.Errorf("%w of %q", ErrNotLeader, e.election.Name())
}

// Leadership returns this process's leadership while it leads, else nil:
// its FencingToken, Lost and Context.
func (e *Elector) Leadership() *mongolock.Leadership {
	if l := e.leading.Load(); l != nil && l.Context().Err() == nil {
		return l
	}
	return nil
}

// Close ends the campaign and resigns leadership if it leads, and waits
// for that, bounded by ctx. It returns nil, or ctx's error if ctx ends
// first, or the error that ended the campaign before Close.
//
// Resigning lets another process lead at once. If ctx ends first, the
// resignation goes on in the background. The campaign may have ended on
// an error such as a missing permission. Later calls do the same.
func (e *Elector) Close(ctx context.Context) error {
	e.closing.Do(e.cancel)
	select {
	case <-e.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.err == nil || errors.Is(e.err, context.Canceled) || errors.Is(e.err, mongolock.ErrClosed) {
		return nil
	}
	return e.err
}
