package mongolock

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"

	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
)

// Providers over process memory.
//
// Package mongolocktest builds a Provider whose locks live in process
// memory (backend.Provider) rather than in a database, so that code that
// takes a *Provider, *Lock or *Handle can be tested without a server. Each
// public method whose work reaches the database hands over to the mem
// functions here at its top; the rest (Do, Campaign, Run, Observe, Close,
// the accessors) works unchanged over what those return.

func init() {
	backend.NewProvider = newMemoryProvider
	backend.NewEngineProvider = func(s *memdb.Store, db string, opts any) (any, error) {
		p, err := newMemProvider(s, db, opts.([]Option))
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	backend.ReleaseUnused = func(ctx context.Context, h any) error { return h.(*Handle).releaseUnused(ctx) }
	backend.LossOf = func(h any) error { return h.(*Handle).lossOf() }
	backend.HandleOf = func(h any) backend.Handle {
		if h, ok := h.(*Handle); ok && h != nil && h.acquisition != nil {
			return h.mem
		}
		return nil
	}
}

// newMemoryProvider validates opts as NewProvider does, and returns a
// *Provider over the store's provider that open returns. An option whose
// effect the store does not implement belongs refused here, by name:
// silently ignored, it would make a test pass that fails over a database.
func newMemoryProvider(opts any, open func(backend.Config) backend.Provider) (any, error) {
	o, err := buildConfig(opts.([]Option))
	if err != nil {
		return nil, &Error{Op: opNewProvider, Err: err}
	}
	c := backend.Config{Collection: o.collection, Owner: o.owner, Expiry: o.expiry, AtLeast: o.atLeast}
	if o.atMostSet {
		c.AtMost = o.atMost
	}
	return &Provider{opts: o, mem: open(c), done: make(chan struct{}), drained: make(chan struct{})}, nil
}

// memRequest is what l takes.
func (l *Lock) memRequest() backend.Lock {
	r := backend.Lock{Name: l.name} // Unsupported, unless a case below says
	switch d := l.kind.(type) {
	case mutexDriver:
		r.Kind, r.Value = backend.Mutex, d.value
	case slotDriver:
		r.Kind, r.N = backend.Semaphore, d.n
		switch d.rw {
		case readMode:
			r.Kind = backend.Reader
		case writeMode:
			r.Kind = backend.Writer
		case upgradeMode:
			r.Kind = backend.Upgradeable
		}
	}
	return r
}

func (l *Lock) memAcquire(ctx context.Context, op string, wait bool) (*Handle, error) {
	if err := l.checkHolds(); err != nil {
		return nil, l.errorf(op, err)
	}
	mh, err := l.p.mem.Acquire(ctx, l.memRequest(), wait)
	if err != nil {
		return nil, l.errorf(op, err)
	}
	a := &acquisition{lock: l, acquiredAt: mh.AcquiredAt(), ctx: mh.Context(), lost: mh.Lost(), mem: mh}
	a.token.Store(mh.Token())
	return &Handle{a}, nil
}

// memRelease is Release (hold: as WithHoldAtLeast says; else freeing the
// lock at once): the loss first, then ctx, as the database's.
func (h *Handle) memRelease(ctx context.Context, hold bool) error {
	if ctx == nil {
		return h.lock.errorf("release", errNilContext)
	}
	released, err := h.mem.Release(hold)
	if err == nil && released {
		err = ctx.Err() // the lock is free all the same, as after a failed round trip
	}
	if err != nil {
		return h.lock.errorf("release", err)
	}
	return nil
}

// memUpgrade is Upgrade: the store's waits for the other readers to leave.
func (h *Handle) memUpgrade(ctx context.Context) error {
	token, err := h.mem.Upgrade(ctx)
	if err != nil {
		return h.lock.errorf("upgrade", memSwitchError(err, upgradeMode))
	}
	h.token.Store(token)
	return nil
}

// memDowngrade is Downgrade: the handle is a reader even if ctx ended, as
// after a failed round trip.
func (h *Handle) memDowngrade(ctx context.Context) error {
	err := h.mem.Downgrade()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return h.lock.errorf("downgrade", memSwitchError(err, writeMode))
	}
	return nil
}

// memSwitchError says the store's error of an Upgrade or Downgrade, which
// needs a handle in mode, as beginSwitch says it.
func memSwitchError(err error, mode rwMode) error {
	switch {
	case errors.Is(err, backend.ErrReleased):
		return errReleased
	case errors.Is(err, backend.ErrWrongMode):
		return notInMode(mode)
	case errors.Is(err, backend.ErrSwitching):
		return errSwitching
	}
	return err
}

func (l *Leadership) memProclaim(ctx context.Context, value string) error {
	err := checkValue(value)
	switch {
	case ctx == nil:
		err = errNilContext
	case err != nil:
	default:
		err = l.mem.Proclaim(value)
	}
	if errors.Is(err, backend.ErrReleased) {
		err = errResigned
	}
	if err != nil {
		return l.lock.errorf("proclaim", err)
	}
	return nil
}

// memWatch is watch over process memory: a change stream that never
// breaks.
func (e *Election) memWatch(ctx context.Context, changed chan<- struct{}, streaming *atomic.Bool) {
	streaming.Store(true)
	for {
		next := e.lock.p.mem.Changed(e.lock.name) // before the read it asks for: no change is missed
		select {
		case changed <- struct{}{}:
		default: // a read is pending already
		}
		select {
		case <-next:
		case <-ctx.Done():
			return
		}
	}
}

// memInspectLock is inspectLock: the lock's or the election's state alone.
func (p *Provider) memInspectLock(ctx context.Context, name string) (LockInfo, error) {
	if err := memCheck(ctx); err != nil {
		return LockInfo{}, p.Lock(name).errorf("inspect", err)
	}
	s, ok := p.mem.Inspect(name)
	if !ok {
		return LockInfo{}, p.Lock(name).errorf("inspect", ErrNoLock)
	}
	return lockInfo(s), nil
}

// memLocks is Locks: the locks' and the slots' listings, merged as the
// server's cursors are.
func (p *Provider) memLocks(ctx context.Context, prefix string) iter.Seq2[LockInfo, error] {
	return func(yield func(LockInfo, error) bool) {
		if err := memCheck(ctx); err != nil {
			yield(LockInfo{}, p.Lock(prefix).errorf("list", err))
			return
		}
		for info, err := range merged(infosOf(p.mem.List(prefix), lockInfo), infosOf(p.mem.ListSlots(prefix), slotsInfo)) {
			if !yield(info, err) {
				return
			}
		}
	}
}

// infosOf yields the LockInfo of each state of sts.
func infosOf[S any](sts []S, info func(S) LockInfo) iter.Seq2[LockInfo, error] {
	return func(yield func(LockInfo, error) bool) {
		for _, s := range sts {
			if !yield(info(s), nil) {
				return
			}
		}
	}
}

func lockInfo(s backend.LockState) LockInfo {
	info := LockInfo{Name: s.Name, Kind: KindLock, Held: s.Held, Owner: s.Owner, Value: s.Value, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt,
		FencingToken: s.FencingToken, Waiting: s.Waiting, ServerTime: s.Now}
	if s.Election {
		info.Kind = KindElection
	}
	if s.Held {
		info.Holders = []HolderInfo{{ID: s.ID, Owner: s.Owner, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt, FencingToken: s.FencingToken}}
	}
	return info
}

func slotsInfo(s backend.Slots) LockInfo {
	info := LockInfo{Name: s.Name, Kind: KindSemaphore, N: s.N, FencingToken: s.FencingToken, Waiting: s.Waiting,
		WriterWaiting: s.WriterWaiting, ServerTime: s.Now}
	if s.RW {
		info.Kind = KindRWLock // its N is 0, as the server's
	}
	return info.withHolders(holderInfos(s))
}

func (p *Provider) memForceRelease(ctx context.Context, name string) (bool, error) {
	if err := memCheck(ctx); err != nil {
		return false, p.Lock(name).errorf("force release", err)
	}
	return p.mem.ForceRelease(name), nil
}

func (p *Provider) memForceReleaseHolder(ctx context.Context, name, id string) (bool, error) {
	if err := memCheck(ctx); err != nil {
		return false, p.Lock(name).errorf("force release", err)
	}
	return p.mem.ForceReleaseHolder(name, id), nil
}

func (l *Lock) memInspectSemaphore(ctx context.Context) (SemaphoreInfo, error) {
	s, err := l.memInspectSlots(ctx)
	return SemaphoreInfo{Name: s.Name, N: s.N, Holders: holderInfos(s), FencingToken: s.FencingToken, ServerTime: s.Now}, err
}

func (l *Lock) memInspectRWLock(ctx context.Context) (RWLockInfo, error) {
	s, err := l.memInspectSlots(ctx)
	return RWLockInfo{Name: s.Name, Holders: holderInfos(s), FencingToken: s.FencingToken, WriterWaiting: s.WriterWaiting, ServerTime: s.Now}, err
}

func (l *Lock) memInspectSlots(ctx context.Context) (backend.Slots, error) {
	if err := memCheck(ctx); err != nil {
		return backend.Slots{}, l.errorf("inspect", err)
	}
	s, ok := l.p.mem.InspectSlots(l.name)
	if !ok {
		return backend.Slots{}, l.errorf("inspect", ErrNoLock)
	}
	return s, nil
}

func holderInfos(s backend.Slots) []HolderInfo {
	var hs []HolderInfo
	for _, h := range s.Holders {
		hs = append(hs, HolderInfo{ID: h.ID, Owner: h.Owner, Write: h.Write, Upgradeable: h.Upgradeable, AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt, FencingToken: h.FencingToken})
	}
	return hs
}

// memCheck is what a round trip would have said of ctx.
func memCheck(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	return ctx.Err()
}
