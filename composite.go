package mongolock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Composite locks.
//
// A composite holds several locks as one: it acquires its parts one by one
// through their own Acquire or TryAcquire, in one order shared by every
// process, and keeps nothing of a failed call. It uses only what a Lock, a
// Semaphore and a Handle offer every caller, but for the order of its parts.

// A Part is a lock that a Composite can hold: a *Lock, a *Semaphore or an
// *UpgradeableLock, and only the library's types are parts.
//
// A *Lock includes an RWLock's Reader or Writer; a *Semaphore's part is one
// slot. Its methods but Name are the library's, which is why its types
// alone are parts.
type Part interface {
	// Name returns the name of the part's lock.
	Name() string
	// acquirePart is the part's Acquire or TryAcquire (how), as a Handle.
	acquirePart(ctx context.Context, how howToAcquire) (*Handle, error)
	// compositeKey is the part's place in every Composite's order, or why
	// it cannot be a part.
	compositeKey() (partKey, error)
}

// partKey orders a Composite's parts: by database, collection, name, and
// kind or mode. Parts that share a database, collection and name share a
// document, and a Composite holds at most one of them.
type partKey struct {
	db, coll, name string
	kind           kindInfo
}

func (k partKey) compare(o partKey) int {
	return cmp.Or(cmp.Compare(k.db, o.db), cmp.Compare(k.coll, o.coll), cmp.Compare(k.name, o.name), cmp.Compare(k.kind.part(), o.kind.part()))
}

func (l *Lock) compositeKey() (partKey, error) {
	if l == nil {
		return partKey{}, invalid("nil *Lock")
	}
	if err := checkName(l.name); err != nil {
		return partKey{}, fmt.Errorf("%q: %w", shortName(l.name), err)
	}
	sp := l.collection()
	return partKey{db: sp.db, coll: sp.name, name: l.name, kind: l.kind.describe()}, nil
}

func (s *Semaphore) compositeKey() (partKey, error) {
	if s == nil {
		return partKey{}, invalid("nil *Semaphore")
	}
	k, err := s.lock.compositeKey()
	return k, cmp.Or(err, s.err)
}

func (u *UpgradeableLock) compositeKey() (partKey, error) {
	if u == nil {
		return partKey{}, invalid("nil *UpgradeableLock")
	}
	return u.lock.compositeKey()
}

func (l *Lock) acquirePart(ctx context.Context, how howToAcquire) (*Handle, error) {
	if how == waitUntilHeld {
		return l.Acquire(ctx)
	}
	return l.TryAcquire(ctx)
}

// acquirePart: a Semaphore's n was checked by NewComposite (compositeKey).
func (s *Semaphore) acquirePart(ctx context.Context, how howToAcquire) (*Handle, error) {
	return s.lock.acquirePart(ctx, how)
}

// acquirePart: the handle is the upgradeable reader's, as a Handle (a
// Composite's handles are Handles); UpgradeableHandle{Handle: h} upgrades
// it.
func (u *UpgradeableLock) acquirePart(ctx context.Context, how howToAcquire) (*Handle, error) {
	return u.lock.acquirePart(ctx, how)
}

// A Composite is several locks held as one, all or none: locks, slots of
// semaphores, RWLocks held for reading or for writing, of one Provider or
// of several. It is safe for concurrent use.
//
// Its Acquire takes the parts one at a time in one order, the same in
// every process: by database, collection, name, then kind. So composites
// that share parts never deadlock, whatever order their parts were given
// in: each waits only for a part that comes after every part it holds, and
// a cycle of waits would need one that waits for a part before one it
// holds. That holds as long as nobody else waits for a lock while holding
// a later one: a goroutine that holds locks of its own while it acquires a
// composite should make them parts of it instead. Acquire is not
// reentrant: a goroutine that holds one of the parts (through its Handle)
// and acquires a composite that contains it waits until its ctx ends.
type Composite struct {
	parts []Part // as given
	order []int  // indices into parts, in acquisition order
}

// NewComposite returns the composite of parts, at least one, or an error
// that names the parts it refuses: nil parts, a semaphore of fewer than 1
// slot, and two parts of one lock.
//
// Two parts of one lock are the same name and kind twice, two modes of one
// RWLock, or a Semaphore and an RWLock of one name. Parts of one database,
// collection and name are one lock even when they
// come from Providers of different clients, which may reach one server.
func NewComposite(parts ...Part) (*Composite, error) {
	if len(parts) == 0 {
		return nil, &Error{Op: opNewComposite, Err: invalid("no parts")}
	}
	keys := make([]partKey, len(parts))
	for i, p := range parts {
		if p == nil {
			return nil, &Error{Op: opNewComposite, Err: invalidf("part %d is nil", i)}
		}
		k, err := p.compositeKey()
		if err != nil {
			return nil, &Error{Op: opNewComposite, Err: fmt.Errorf("part %d: %w", i, err)}
		}
		keys[i] = k
	}
	c := &Composite{parts: slices.Clone(parts), order: make([]int, len(parts))}
	for i := range c.order {
		c.order[i] = i
	}
	slices.SortFunc(c.order, func(i, j int) int { return keys[i].compare(keys[j]) })
	for n := 1; n < len(c.order); n++ {
		a, b := keys[c.order[n-1]], keys[c.order[n]]
		if a.db == b.db && a.coll == b.coll && a.name == b.name {
			return nil, &Error{Op: opNewComposite, Err: fmt.Errorf("%q: %w", shortName(a.name), samePart(a.kind, b.kind))}
		}
	}
	return c, nil
}

// samePart says why a composite cannot hold parts of these kinds of one lock.
func samePart(a, b kindInfo) error {
	switch {
	case a.kind == b.kind && a.mode == b.mode:
		return invalidf("the %s is a part twice", a.part())
	case a.mode != 0 && b.mode != 0:
		// Sorted by kind, b is the mode that can do what a can.
		return invalidf("%s and %s of one RWLock: hold the %s alone", modeNames[a.mode].a, modeNames[b.mode].a, modeNames[b.mode].part)
	}
	return fmt.Errorf("%w (%s and %s of one name)", errOtherKind, a.part(), b.part())
}

// Acquire waits until it holds every part or ctx ends, and returns their
// handles as one. On failure it holds nothing and returns the failed part's
// error, with the part's name.
//
// It acquires the parts in the Composite's order, each with its own
// Acquire. If a part it holds is lost while it waits for another, it
// releases what it holds and starts again.
//
// On failure it frees every part it acquired at once before it returns
// (without WithHoldAtLeast's hold: no job ran under them), and
// returns the failed part's error, with the part's name: when ctx ends,
// one for which errors.Is(err, ctx.Err()) holds, and also
// errors.Is(err, ErrNotAcquired) if that part was held by someone else the
// whole time; ErrMismatch, ErrClosed and errors that retrying cannot fix
// as the part's Acquire returns them.
func (c *Composite) Acquire(ctx context.Context) (*CompositeHandle, error) {
	if ctx == nil {
		return nil, c.errorf("acquire", errNilContext)
	}
	for {
		h, err := c.acquire(ctx, waitUntilHeld)
		if !errors.Is(err, errPartLost) {
			return h, err
		}
	}
}

// TryAcquire makes one attempt to take each part: it returns a
// CompositeHandle if every part was free, and otherwise the first refusal
// (ErrNotAcquired, with the part's name) or failure, holding nothing.
//
// It takes the parts in the Composite's order, each with the part's
// TryAcquire; on a refusal or failure it frees the parts it took at once
// (without WithHoldAtLeast's hold). ctx bounds only the round trips.
func (c *Composite) TryAcquire(ctx context.Context) (*CompositeHandle, error) {
	if ctx == nil {
		return nil, c.errorf("try acquire", errNilContext)
	}
	return c.acquire(ctx, tryOnce)
}

// Do acquires every part (waiting, as Acquire), runs fn, and releases them,
// also when fn panics. It returns fn's error as Lock.Do does, or Acquire's
// error, without running fn, if the parts cannot be acquired.
//
// fn's ctx ends when ctx ends or a part is lost; its cause is then
// ErrLockLost. fn's error is returned as fn returned it, unless a part was
// lost while fn ran or a release failed (then errors.Is(err, ErrLockLost)
// holds after a loss). Acquire's error is returned as Do's own. A nil fn
// is an error, returned before anything is acquired.
func (c *Composite) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return acquireAndDo(ctx, fn, c.errorf, c.Acquire)
}

// errPartLost ends an Acquire's wait for a part when a part it holds is
// lost: it starts again.
var errPartLost = errors.New("a part acquired earlier was lost")

// acquire takes every part in order, each as how says, or none: it
// releases what it took before it returns an error.
func (c *Composite) acquire(ctx context.Context, how howToAcquire) (*CompositeHandle, error) {
	handles := make([]*Handle, len(c.parts))
	wctx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	for _, i := range c.order {
		h, err := c.parts[i].acquirePart(wctx, how)
		if err == nil && how == waitUntilHeld {
			// Waiting for the next part while this one is lost would keep
			// the others from locks it no longer needs.
			hctx := h.Context()
			defer context.AfterFunc(hctx, func() {
				if errors.Is(context.Cause(hctx), ErrLockLost) {
					lose(errPartLost)
				}
			})()
		}
		if err == nil && !errors.Is(context.Cause(wctx), errPartLost) {
			handles[i] = h
			continue
		}
		releaseAll(ctx, append(handles, h))
		switch {
		case !errors.Is(context.Cause(wctx), errPartLost):
			return nil, err
		case ctx.Err() != nil: // err may be the lost part's cancellation
			return nil, c.errorf("acquire", ctx.Err())
		}
		return nil, errPartLost
	}
	return newCompositeHandle(handles), nil
}

// releaseAll releases handles (nil ones skipped) within cleanupTimeout,
// also when ctx is over: a failed composite call leaves nothing held, not
// even WithHoldAtLeast's hold, since no job ran. A release that fails
// frees its lock in the background.
func releaseAll(ctx context.Context, handles []*Handle) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, h := range handles {
		if h != nil {
			_ = h.releaseUnused(rctx)
		}
	}
}

// errorf wraps err with the operation and the names of c's parts.
func (c *Composite) errorf(op string, err error) error { return compositeError(op, c.parts, err) }

// compositeError is an *Error whose name lists the parts'.
func compositeError[P interface{ Name() string }](op string, parts []P, err error) error {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name()
	}
	return &Error{Op: op, Name: shortName(strings.Join(names, ", ")), Err: err}
}

// A CompositeHandle is a Composite held: one Handle per part. Loss of any
// part (see Handle) closes Lost and cancels Context with the part's cause,
// which wraps ErrLockLost. Call Release when done.
//
// It is safe for concurrent use. A CompositeHandle that becomes
// unreachable while held is released as its Handles are. A nil
// *CompositeHandle holds nothing, and no method of it panics, as a nil
// Handle's.
type CompositeHandle struct {
	handles []*Handle // in the order of the Composite's parts
	*compositeState
}

// compositeState is what a CompositeHandle's parts signal to. It never
// refers to the Handles, so that a CompositeHandle its owner dropped
// becomes unreachable, and its Handles are released; only to their
// acquisitions, which its looks look at.
type compositeState struct {
	parts     []*acquisition
	ctx       context.Context
	cancel    context.CancelCauseFunc
	lctx      leaseContext // ctx, looking at the parts when asked: what Context returns
	lost      chan struct{}
	lostOnce  sync.Once
	releasing atomic.Bool // Release was called
}

func newCompositeHandle(handles []*Handle) *CompositeHandle {
	s := &compositeState{lost: make(chan struct{}), parts: make([]*acquisition, len(handles))}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.lctx = leaseContext{s.ctx, s}
	for i, h := range handles {
		s.parts[i] = h.acquisition
		// No goroutine watches the parts: each part's Context runs this
		// once it is done.
		hctx := h.Context()
		context.AfterFunc(hctx, func() {
			switch {
			case errors.Is(context.Cause(hctx), ErrLockLost):
				s.markLost(context.Cause(hctx))
			case !s.releasing.Load(): // released on its own, or by its Provider's Close
				s.cancel(context.Canceled)
			}
		})
	}
	return &CompositeHandle{handles: handles, compositeState: s}
}

// markLost signals the loss of a part, with its Context's cause, once.
func (s *compositeState) markLost(cause error) {
	s.lostOnce.Do(func() {
		s.cancel(cause) // first: whoever wakes on Lost sees the cause
		close(s.lost)
	})
}

// look looks at each part's lease, as the part's own look does, reading
// the clocks once per provider, and signals a part's loss it finds at
// once, rather than when the part's Context runs its AfterFunc.
func (s *compositeState) look() {
	var p *Provider
	var now time.Time
	for _, a := range s.parts {
		if a.lock.p != p {
			p, now = a.lock.p, a.lock.p.leases.lookForSuspension()
		}
		if a.lookAt(now); a.lossError() != nil {
			s.markLost(context.Cause(a.ctx))
		}
	}
}

// Handles returns the handles of the parts, in the order the parts were
// given to NewComposite; a nil CompositeHandle's are none.
//
// Each part's FencingToken, for the resource it guards, is its Handle's.
// Release the CompositeHandle rather than its Handles; releasing one ends
// the CompositeHandle's Context.
func (h *CompositeHandle) Handles() []*Handle {
	if h.held() == nil {
		return nil
	}
	return slices.Clone(h.handles)
}

// held returns h's state, or nil for a nil CompositeHandle (or its zero
// value), whose methods answer as for nothing held.
func (h *CompositeHandle) held() *compositeState {
	if h == nil {
		return nil
	}
	return h.compositeState
}

// Context returns a context that is done when a part is lost or released.
// On loss, context.Cause returns the lost part's Context's cause, which
// wraps ErrLockLost; on release, context.Canceled.
//
// A part is released by Release, by the part's own Release, or by its
// Provider's Close. Its Err and Done first look at every part's lease, as
// a Handle's
// Context's do: once a part's local deadline has passed, the first answer
// says done. A nil CompositeHandle's is done, as a nil Handle's.
func (h *CompositeHandle) Context() context.Context {
	if h.held() == nil {
		return nothingHeld
	}
	return &h.lctx
}

// Lost returns a channel that is closed when any part is lost, never by a
// normal Release.
//
// Like the Context's Err and Done, it first looks at every part's lease. A
// nil CompositeHandle's is closed.
func (h *CompositeHandle) Lost() <-chan struct{} {
	if h.held() == nil {
		return closedChan
	}
	h.look()
	return h.lost
}

// Release releases every part, each as its Handle's Release does, within
// ctx. The first call returns nil if every part was still held, else the
// error of the part that was not; later calls, and a nil one's, nil.
//
// If several parts were not still held, the error is an *Error of the
// composite that joins theirs: errors.Is(err, ErrLockLost) holds if a part
// had been lost. A part whose release fails is freed in the background.
// Either way every part is released and Context is done.
func (h *CompositeHandle) Release(ctx context.Context) error {
	if h.held() == nil {
		return nil
	}
	if ctx == nil {
		return compositeError("release", h.handles, errNilContext)
	}
	if h.releasing.Swap(true) {
		return nil
	}
	var errs []error
	for _, p := range h.handles {
		if err := p.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	switch len(errs) {
	case 0:
	case 1:
		err = errs[0] // the part's
	default:
		err = compositeError("release", h.handles, inner(errs...))
	}
	if errors.Is(err, ErrLockLost) {
		h.look() // the lost part's loss is known: it signals it
	}
	h.cancel(context.Canceled)
	return err
}
