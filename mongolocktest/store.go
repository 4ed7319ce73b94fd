package mongolocktest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
)

// The store keeps every name's state under one mutex. A name's waiters
// stand in one line, first come first served; whatever frees a lock or a
// slot serves the line at once, in the same critical section, so a waiter
// is woken by a closed channel, never by polling. An RWLock's upgrade
// waits beside the line, and is served first. The ends of holds
// (WithHoldAtLeast's, WithHoldAtMost's) are timers that do the same.

// semSuffix names the collection of the Semaphores and RWLocks after the
// locks', as mongolock does: a Lock and a Semaphore of one name are
// unrelated.
const semSuffix = "_semaphores"

type store struct {
	mu      sync.Mutex
	names   map[key]*entry
	changed map[key]chan struct{} // closed at the next change of a Lock's or an election's holder or value
}

func newStore() *store {
	return &store{names: map[key]*entry{}, changed: map[key]chan struct{}{}}
}

// key is a document's place: its collection and name.
type key struct{ coll, name string }

// entry is one name's state: its document, and its line.
type entry struct {
	key        key
	kind       backend.Kind // Mutex, Semaphore, or Reader for an RWLock's
	upgrade    *upgrade     // an RWLock's upgradeable reader's Upgrade that waits for the other readers to leave
	election   bool         // a Mutex's last acquisition was a campaign's
	n          int          // a Semaphore's slots, set by the acquisition that finds none held
	token      int64        // the last acquisition's
	holders    []*handle    // in the order they acquired; a released one while its hold lasts
	line       []*waiter
	acquiredAt time.Time // the last acquisition's
	freedAt    time.Time // when the last holder left
}

type provider struct {
	s       *store
	cfg     backend.Config
	done    chan struct{}
	closed  bool                 // guarded by s.mu, as the maps are
	held    map[*handle]struct{} // handles that hold
	waiting map[*waiter]*entry   // Acquire calls in a line
}

func (s *store) provider(c backend.Config) *provider {
	return &provider{s: s, cfg: c, done: make(chan struct{}), held: map[*handle]struct{}{}, waiting: map[*waiter]*entry{}}
}

// An upgrade is one Upgrade call that waits; done closes once h writes.
type upgrade struct {
	h    *handle
	done chan struct{}
}

// A waiter is one Acquire call in a line. ready closes once h or err is set.
type waiter struct {
	p     *provider
	req   backend.Lock
	ready chan struct{}
	h     *handle
	err   error
}

type handleState uint8

const (
	held handleState = iota
	lost
	released
)

type handle struct {
	p           *provider
	e           *entry
	id          string // HolderInfo.ID
	upgradeable bool   // an RWLock's upgradeable reader, or that reader upgraded
	acquiredAt  time.Time
	ctx         context.Context
	cancel      context.CancelCauseFunc
	lostCh      chan struct{}

	// Guarded by the store's mu.
	write     bool   // an RWLock's writer (an upgraded reader's too), or an exclusive lock
	token     int64  // changes with an upgrade
	value     string // a campaign's
	state     handleState
	lostErr   error
	ended     time.Time   // when it was released or lost
	holdUntil time.Time   // while a released handle holds its lock (WithHoldAtLeast); else zero
	timer     *time.Timer // ends WithHoldAtMost's bound while it holds, the hold after its release
}

// class is the kind of document a request of kind k takes.
func class(k backend.Kind) backend.Kind {
	if k == backend.Writer || k == backend.Upgradeable {
		return backend.Reader
	}
	return k
}

func (p *provider) key(r backend.Lock) key {
	if r.Kind == backend.Mutex {
		return p.lockKey(r.Name)
	}
	return p.slotsKey(r.Name)
}

// lockKey is the place of a Lock's or an election's name, slotsKey of a
// Semaphore's or an RWLock's.
func (p *provider) lockKey(name string) key  { return key{p.cfg.Collection, name} }
func (p *provider) slotsKey(name string) key { return key{p.cfg.Collection + semSuffix, name} }

// entry returns the state of r's name, created if it has none, as an
// attempt creates the document; ErrMismatch if it is of another kind.
func (s *store) entry(k key, r backend.Lock) (*entry, error) {
	e := s.names[k]
	if e == nil {
		e = &entry{key: k, kind: class(r.Kind)}
		s.names[k] = e
	}
	if e.kind != class(r.Kind) {
		return nil, fmt.Errorf("%w (the name is taken by another kind of lock)", mongolock.ErrMismatch)
	}
	return e, nil
}

// fits reports whether r may take e now, ignoring its line; ErrMismatch if
// r's Semaphore has another n than e's holders.
func (e *entry) fits(r backend.Lock) (bool, error) {
	switch r.Kind {
	case backend.Semaphore:
		if len(e.holders) > 0 && e.n != r.N {
			return false, fmt.Errorf("%w: it has %d slots, not %d", mongolock.ErrMismatch, e.n, r.N)
		}
		return len(e.holders) < r.N, nil
	case backend.Reader: // and no upgrade holds readers off
		return e.upgrade == nil && !slices.ContainsFunc(e.holders, func(h *handle) bool { return h.write }), nil
	case backend.Upgradeable:
		return !slices.ContainsFunc(e.holders, func(h *handle) bool { return h.write || h.upgradeable }), nil
	}
	return len(e.holders) == 0, nil // a Lock's, an RWLock's writer
}

// errUnsupported refuses a kind of lock the store does not implement yet.
var errUnsupported = errors.New("this kind of lock is not supported by mongolocktest yet")

// grant makes a new holder of e for p.
func (s *store) grant(p *provider, e *entry, r backend.Lock) *handle {
	now := time.Now()
	e.token++
	e.acquiredAt = now
	switch r.Kind {
	case backend.Semaphore:
		e.n = r.N
	case backend.Mutex:
		e.election = r.Value != nil
	}
	h := &handle{p: p, e: e, id: strings.ReplaceAll(uuid.NewString(), "-", ""), write: r.Kind == backend.Mutex || r.Kind == backend.Writer,
		upgradeable: r.Kind == backend.Upgradeable, token: e.token, acquiredAt: now, lostCh: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	if r.Value != nil {
		h.value = *r.Value
	}
	if most := p.cfg.AtMost; most > 0 {
		// Lost a safety margin before the bound, as over a database: the
		// lock stays held until the bound, the lost job's time to stop.
		margin := min(p.cfg.Expiry/10, time.Second)
		h.timer = time.AfterFunc(most-margin, func() {
			h.loseAtBound(fmt.Sprintf("it was held as long as it may be (WithHoldAtMost: %v after its acquisition)", most), margin)
		})
	}
	e.holders = append(e.holders, h)
	p.held[h] = struct{}{}
	s.notify(e.key)
	return h
}

// serve makes e's upgrading reader the writer once it holds alone, then
// hands e to the head of its line while it fits; a head that can never fit
// (another n) gets its error. An upgradeable reader waits for the one that
// holds, not for readers: those behind it are served past it.
func (s *store) serve(e *entry) {
	if u := e.upgrade; u != nil && len(e.holders) == 1 {
		e.upgrade = nil
		e.token++
		u.h.token, u.h.write = e.token, true
		s.notify(e.key)
		close(u.done)
	}
	for i := 0; i < len(e.line); {
		w := e.line[i]
		ok, err := e.fits(w.req)
		if err == nil && !ok {
			if w.req.Kind != backend.Upgradeable {
				return
			}
			i++
			continue
		}
		e.line = slices.Delete(e.line, i, i+1)
		delete(w.p.waiting, w)
		if err == nil {
			w.h = s.grant(w.p, e, w.req)
		}
		w.err = err
		close(w.ready)
	}
}

// drop takes h out of e's holders, and serves the line.
func (s *store) drop(h *handle, now time.Time) {
	e := h.e
	e.holders = slices.DeleteFunc(e.holders, func(o *handle) bool { return o == h })
	if e.upgrade != nil && e.upgrade.h == h { // its Upgrade returns as h's Context ends
		e.upgrade = nil
	}
	delete(h.p.held, h)
	h.stopTimer()
	if h.ended.IsZero() { // a hold's end leaves the release's
		h.ended = now
	}
	e.freedAt = now
	s.notify(e.key)
	s.serve(e)
}

func (s *store) notify(k key) {
	if ch := s.changed[k]; ch != nil {
		close(ch)
		delete(s.changed, k)
	}
}

func (p *provider) Acquire(ctx context.Context, r backend.Lock, wait bool) (backend.Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing asked, as a round trip that is never sent
	}
	if r.Kind == backend.Unsupported || r.Kind > backend.Upgradeable {
		return nil, errUnsupported
	}
	s := p.s
	s.mu.Lock()
	if p.closed {
		s.mu.Unlock()
		return nil, mongolock.ErrClosed
	}
	e, err := s.entry(p.key(r), r)
	var ok bool
	if err == nil {
		ok, err = e.fits(r)
	}
	switch {
	case err != nil:
		s.mu.Unlock()
		return nil, err
	case ok && e.passable():
		h := s.grant(p, e, r)
		s.mu.Unlock()
		return h, nil
	case !wait:
		s.mu.Unlock()
		return nil, mongolock.ErrNotAcquired
	}
	w := &waiter{p: p, req: r, ready: make(chan struct{})}
	e.line = append(e.line, w)
	p.waiting[w] = e
	s.mu.Unlock()

	select {
	case <-w.ready:
		return w.result()
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.ready: // served as ctx ended: a handle is a handle
		return w.result()
	default:
	}
	e.line = slices.DeleteFunc(e.line, func(o *waiter) bool { return o == w })
	delete(p.waiting, w)
	s.serve(e) // a writer that leaves lets readers in
	return nil, fmt.Errorf("%w: %w", mongolock.ErrNotAcquired, ctx.Err())
}

// passable reports whether a new request that fits may pass e's line: it
// holds only upgradeable readers, which wait for the one that holds.
func (e *entry) passable() bool {
	return !slices.ContainsFunc(e.line, func(w *waiter) bool { return w.req.Kind != backend.Upgradeable })
}

func (w *waiter) result() (backend.Handle, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.h, nil
}

func (p *provider) Close() {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.done)
	// Every waiter of p leaves before any line is served: one that leaves
	// (a writer) must not let in another of p (a reader behind it).
	lines := map[*entry]bool{}
	for w, e := range p.waiting {
		e.line = slices.DeleteFunc(e.line, func(o *waiter) bool { return o == w })
		w.err = mongolock.ErrClosed
		close(w.ready)
		lines[e] = true
	}
	clear(p.waiting)
	for e := range lines {
		s.serve(e)
	}
	now := time.Now()
	for h := range p.held {
		h.releaseLocked(now)
	}
}

func (p *provider) Done() <-chan struct{} { return p.done }

func (p *provider) Inspect(name string) (backend.LockState, bool) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	e := p.s.names[p.lockKey(name)]
	if e == nil {
		return backend.LockState{}, false
	}
	return e.lockState(time.Now()), true
}

func (e *entry) lockState(now time.Time) backend.LockState {
	st := backend.LockState{Name: e.key.name, Election: e.election, AcquiredAt: e.acquiredAt, ExpiresAt: e.freedAt,
		FencingToken: e.token, Waiting: len(e.line) > 0, Now: now}
	if len(e.holders) > 0 {
		h := e.holders[0]
		st.Held, st.ID, st.Owner, st.Value, st.ExpiresAt = true, h.holderID(), h.p.cfg.Owner, h.value, h.leaseEnd(now)
		if !h.holdUntil.IsZero() {
			st.ExpiresAt = h.holdUntil
		}
	}
	return st
}

func (p *provider) List(prefix string) []backend.LockState {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	now := time.Now()
	var sts []backend.LockState
	for _, e := range p.s.entries(p.cfg.Collection, prefix) {
		sts = append(sts, e.lockState(now))
	}
	return sts
}

// entries returns the entries of coll whose names begin with prefix, in
// byte order of name.
func (s *store) entries(coll, prefix string) []*entry {
	var es []*entry
	for k, e := range s.names {
		if k.coll == coll && strings.HasPrefix(k.name, prefix) {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.key.name, b.key.name) })
	return es
}

func (p *provider) InspectSlots(name string) (backend.Slots, bool) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	e := p.s.names[p.slotsKey(name)]
	if e == nil {
		return backend.Slots{}, false
	}
	return e.slots(time.Now()), true
}

func (p *provider) ListSlots(prefix string) []backend.Slots {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	now := time.Now()
	var sts []backend.Slots
	for _, e := range p.s.entries(p.cfg.Collection+semSuffix, prefix) {
		sts = append(sts, e.slots(now))
	}
	return sts
}

func (e *entry) slots(now time.Time) backend.Slots {
	st := backend.Slots{Name: e.key.name, RW: e.kind == backend.Reader, N: e.n, FencingToken: e.token, Now: now, Waiting: len(e.line) > 0,
		WriterWaiting: e.upgrade != nil || slices.ContainsFunc(e.line, func(w *waiter) bool { return w.req.Kind == backend.Writer })}
	for _, h := range e.holders {
		st.Holders = append(st.Holders, backend.Holder{ID: h.id, Owner: h.p.cfg.Owner, Write: h.write, Upgradeable: h.upgradeable && !h.write, AcquiredAt: h.acquiredAt,
			ExpiresAt: h.leaseEnd(now), FencingToken: h.token})
	}
	return st
}

// named returns the entries of name: its Lock's or election's, and its
// Semaphore's or RWLock's, where they exist.
func (p *provider) named(name string) []*entry {
	var es []*entry
	for _, k := range []key{p.lockKey(name), p.slotsKey(name)} {
		if e := p.s.names[k]; e != nil {
			es = append(es, e)
		}
	}
	return es
}

func (p *provider) ForceRelease(name string) bool {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	ended := false
	for _, e := range p.named(name) {
		for _, h := range slices.Clone(e.holders) {
			h.forceEndLocked("its lock was released by ForceRelease")
			ended = true
		}
	}
	return ended
}

func (p *provider) ForceReleaseHolder(name, id string) bool {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for _, e := range p.named(name) {
		for _, h := range e.holders {
			if h.holderID() == id {
				h.forceEndLocked("its acquisition was released by ForceReleaseHolder")
				return true
			}
		}
	}
	return false
}

func (p *provider) Changed(name string) <-chan struct{} {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	k := p.lockKey(name)
	ch := p.s.changed[k]
	if ch == nil {
		ch = make(chan struct{})
		p.s.changed[k] = ch
	}
	return ch
}

func (h *handle) AcquiredAt() time.Time    { return h.acquiredAt }
func (h *handle) Context() context.Context { return h.ctx }
func (h *handle) Lost() chan struct{}      { return h.lostCh }

func (h *handle) Token() int64 {
	h.p.s.mu.Lock()
	defer h.p.s.mu.Unlock()
	return h.token
}

func (h *handle) LeaseEnd() time.Time {
	h.p.s.mu.Lock()
	defer h.p.s.mu.Unlock()
	return h.leaseEnd(time.Now())
}

// leaseEnd: a held lease is extended all the time, up to WithHoldAtMost's
// bound; an ended one stays as it was last.
func (h *handle) leaseEnd(now time.Time) time.Time {
	if h.state != held {
		now = h.ended
	}
	end := now.Add(h.p.cfg.Expiry)
	if most := h.p.cfg.AtMost; most > 0 && h.acquiredAt.Add(most).Before(end) {
		end = h.acquiredAt.Add(most)
	}
	return end
}

// heldSuffix marks the ID of a released holder whose hold lasts, as the
// server marks it: the released handle's ID names it no more.
const heldSuffix = ":held"

func (h *handle) holderID() string {
	if !h.holdUntil.IsZero() {
		return h.id + heldSuffix
	}
	return h.id
}

func (h *handle) Release(hold bool) (bool, error) {
	h.p.s.mu.Lock()
	defer h.p.s.mu.Unlock()
	switch h.state {
	case lost:
		h.state = released
		if slices.Contains(h.e.holders, h) { // lost at its bound, held until then: its owner frees it
			h.releaseHolding(time.Now(), hold)
		}
		return false, h.lostErr
	case released:
		return false, nil
	}
	h.releaseHolding(time.Now(), hold)
	return true, nil
}

// releaseLocked releases h, which holds, as WithHoldAtLeast says.
func (h *handle) releaseLocked(now time.Time) { h.releaseHolding(now, true) }

// releaseHolding releases h, which holds. If hold, before WithHoldAtLeast's
// end its lock stays held until then, by h no more: nobody, h's provider's
// Acquire calls included, takes it before the hold ends or is force
// released.
func (h *handle) releaseHolding(now time.Time, hold bool) {
	h.state = released
	h.cancel(context.Canceled)
	end := h.acquiredAt.Add(h.p.cfg.AtLeast)
	if !hold || !end.After(now) {
		h.p.s.drop(h, now)
		return
	}
	h.stopTimer()
	delete(h.p.held, h)
	h.ended, h.holdUntil = now, end
	h.timer = time.AfterFunc(end.Sub(now), func() {
		h.p.s.mu.Lock()
		defer h.p.s.mu.Unlock()
		if slices.Contains(h.e.holders, h) { // not force released meanwhile
			h.p.s.drop(h, time.Now())
		}
	})
}

func (h *handle) Proclaim(value string) error {
	h.p.s.mu.Lock()
	defer h.p.s.mu.Unlock()
	switch h.state {
	case lost:
		return h.lostErr
	case released:
		return backend.ErrReleased
	}
	h.value = value
	h.p.s.notify(h.e.key)
	return nil
}

// switchable returns why h, which needs mode ok, cannot upgrade or
// downgrade now.
func (h *handle) switchable(ok bool) error {
	switch {
	case h.state == released:
		return backend.ErrReleased
	case h.state == lost:
		return h.lostErr
	case !ok:
		return backend.ErrWrongMode
	}
	return nil
}

func (h *handle) Upgrade(ctx context.Context) (int64, error) {
	s, e := h.p.s, h.e
	s.mu.Lock()
	if err := h.switchable(e.kind == backend.Reader && h.upgradeable && !h.write); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	if e.upgrade != nil {
		s.mu.Unlock()
		return 0, backend.ErrSwitching
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return 0, err // nothing asked, as a round trip that is never sent
	}
	u := &upgrade{h: h, done: make(chan struct{})}
	e.upgrade = u
	s.serve(e) // h the writer at once if it holds alone
	s.mu.Unlock()

	select {
	case <-u.done:
	case <-ctx.Done():
	case <-h.ctx.Done(): // released or lost, which withdrew the upgrade
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-u.done: // served as ctx ended: the upgrade is done
		return h.token, nil
	default:
	}
	switch {
	case h.p.closed:
		return 0, mongolock.ErrClosed
	case h.state != held:
		return 0, h.switchable(true)
	}
	e.upgrade = nil
	s.serve(e) // readers are let in again
	return 0, fmt.Errorf("%w: %w", mongolock.ErrNotAcquired, ctx.Err())
}

func (h *handle) Downgrade() error {
	s := h.p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := h.switchable(h.e.kind == backend.Reader && h.write); err != nil {
		return err
	}
	h.write = false
	s.notify(h.e.key)
	s.serve(h.e) // readers in line come in beside it, at once
	return nil
}

func (h *handle) stopTimer() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// forceEndLocked ends h as a force release does: a holder is made lost,
// a hold ends.
func (h *handle) forceEndLocked(why string) {
	if h.state == held {
		h.loseLocked(why)
		return
	}
	h.p.s.drop(h, time.Now())
}

// lose makes h lost, if it holds.
func (h *handle) lose(why string) {
	h.p.s.mu.Lock()
	defer h.p.s.mu.Unlock()
	h.loseLocked(why)
}

// loseAtBound makes h lost, if it holds, and keeps its lock held for
// margin more, until WithHoldAtMost's bound, unless h is released.
func (h *handle) loseAtBound(why string, margin time.Duration) {
	h.p.s.mu.Lock()
	defer h.p.s.mu.Unlock()
	if h.state != held {
		return
	}
	now := time.Now()
	h.state, h.lostErr, h.ended = lost, fmt.Errorf("%w: %s", mongolock.ErrLockLost, why), now
	h.cancel(mongolock.ErrLockLost)
	close(h.lostCh)
	delete(h.p.held, h)
	h.timer = time.AfterFunc(margin, func() {
		h.p.s.mu.Lock()
		defer h.p.s.mu.Unlock()
		if slices.Contains(h.e.holders, h) { // not released nor force released meanwhile
			h.p.s.drop(h, time.Now())
		}
	})
}

func (h *handle) loseLocked(why string) {
	if h.state != held {
		return
	}
	h.state, h.lostErr = lost, fmt.Errorf("%w: %s", mongolock.ErrLockLost, why)
	h.cancel(mongolock.ErrLockLost)
	close(h.lostCh)
	h.p.s.drop(h, time.Now())
}
