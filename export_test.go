package mongolock

import (
	"cmp"
	"context"
	"sync"
	"time"
)

// Test-only access to internals.

// WaitBackground waits for the provider's background work (TTL index
// creation, cleanup of orphaned acquisitions) to end.
func WaitBackground(p *Provider) { p.bg.Wait() }

// LockWithValue is p's lock called name whose acquisitions carry value (as
// an election's do).
func LockWithValue(p *Provider, name, value string) *Lock {
	return &Lock{p: p, name: name, kind: electionDriver{value: value}}
}

// Locals is how many collections of live clients this process keeps
// state for.
func Locals() (n int) {
	collStates.Range(func(any, any) bool { n++; return true })
	return n
}

// LeaseUnkept is closed when the handle's lease is no longer extended.
func LeaseUnkept(h *Handle) <-chan struct{} { return h.extendingStopped }

// Process is the id of p's process in lock documents (lastProcess,
// waitingProcess).
func Process(p *Provider) string { return p.locks.process }

// SlotsProcess is the id of p's process in semaphores' and RWLocks'
// documents.
func SlotsProcess(p *Provider) string { return p.slots.process }

// ClaimLifetime is how long a claim of p's process counts after it last
// asked.
func ClaimLifetime(p *Provider) time.Duration { return p.opts.claimLifetime() }

// TTLGraceSeconds is how long the TTL index keeps a document after its
// lease ended.
const TTLGraceSeconds = ttlGraceSeconds

// TurnLength is how many times in a row a process may take a lock before
// it steps aside for a claimant.
const TurnLength = turnLength

// SafetyMargin is the margin by which the client's lease ends before the
// server's.
func SafetyMargin(p *Provider) time.Duration { return p.opts.safetyMargin() }

// CollectionName is the provider's collection.
func CollectionName(p *Provider) string { return p.locks.name }

// CalmWaits is how many unrefused waits in a row make an Acquire send the
// statement for a lock nobody waits for first.
const CalmWaits = unclaimedAfter

// QueueLen is the number of Acquire calls of this process waiting in line
// for name; QueueNames the number of names with a local line.
// SlotQueueLen is QueueLen for a Semaphore's or an RWLock's name.
func QueueLen(p *Provider, name string) int { return p.locks.lines.waiters(name) }

func SlotQueueLen(p *Provider, name string) int { return p.slots.lines.waiters(name) }

func QueueNames(p *Provider) int {
	qs := &p.locks.lines
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return len(qs.byName)
}

// DatabaseName is the provider's database.
func DatabaseName(p *Provider) string { return p.locks.db }

// SetReleaseSource replaces the change streams that wake waiters of p's
// collections (the locks', the semaphores') when a lock or slot is released
// (an in-memory source, for tests). Call it before the collections have
// waiters.
func SetReleaseSource(p *Provider, source func(ctx context.Context, released func(name string)) error) {
	for _, n := range []*notifier{&p.locks.notify, &p.slots.notify} {
		n.mu.Lock()
		n.source = func(ctx context.Context, _ store, ready func(), released func(string)) error {
			ready()
			return source(ctx, released)
		}
		n.none = false
		n.mu.Unlock()
	}
}

// PollOnly makes p's collections poll only, as on a server that refused
// change streams. Call it before the collections have waiters.
func PollOnly(p *Provider) {
	for _, n := range []*notifier{&p.locks.notify, &p.slots.notify} {
		n.mu.Lock()
		n.none = true
		n.mu.Unlock()
	}
}

// Notifying reports whether one of p's collections runs its release source
// and the source is ready (a change stream: opened).
func Notifying(p *Provider) bool {
	return p.locks.notify.isOpen() || p.slots.notify.isOpen()
}

// LockID is the lockId of h's acquisition.
func LockID(h *Handle) string { return h.lockID }

// KeptDeadline starts keeping the lease of a handle of l acquired by a
// request sent at sent, stops keeping it, and returns its client deadline.
func KeptDeadline(l *Lock, sent time.Time) time.Time {
	h := &acquisition{lock: l, extendingStopped: make(chan struct{})}
	l.p.leases.keep(h, sent)
	return l.p.leases.forget(h).deadline
}

// SetReplyError makes f replace the error of each of p's acquisition round
// trips (and hand-overs to p's waiters) once the real round trip has
// returned. Call it before p is used.
func SetReplyError(p *Provider, f func(err error) error) {
	setHooks(p, func(h *providerHooks) { h.reply = f })
}

// SetSendHook makes f run as each of p's acquisition round trips is about
// to be sent (in the goroutine that sends it). Call it before p is used.
func SetSendHook(p *Provider, f func()) { setHooks(p, func(h *providerHooks) { h.send = f }) }

// SetStatementHook makes f run as each of p's acquisition round trips is
// about to be sent, told whether it is the statement for a lock nobody
// waits for. Call it before p is used.
func SetStatementHook(p *Provider, f func(unclaimed bool)) {
	setHooks(p, func(h *providerHooks) { h.statement = f })
}

// CleanupOf tells how an acquisition whose round trip returned err is
// cleaned up: not at all (ambiguous false: it cannot have been applied),
// by one owner-checked release (replied: the server answered), or by
// releases repeated for a while (the request may still be on its way).
func CleanupOf(err error) (ambiguous, replied bool) { return isAmbiguous(err), isReply(err) }

// SetListBatchSize sets the batch size of p's listings (Locks). Call it
// before p is used.
func SetListBatchSize(p *Provider, n int32) { setHooks(p, func(h *providerHooks) { h.listBatch = n }) }

// providerHooks are what the Set… functions above set for one provider.
type providerHooks struct {
	send      func()
	statement func(unclaimed bool)
	reply     func(error) error
	listBatch int32
}

var hooks sync.Map // *Provider -> *providerHooks, replaced whole on each change

func setHooks(p *Provider, set func(*providerHooks)) {
	var h providerHooks
	if old, ok := hooks.Load(p); ok {
		h = *old.(*providerHooks)
	}
	set(&h)
	hooks.Store(p, &h)
}

func init() {
	testHookSend = func(p *Provider, mode attemptMode) {
		h, ok := hooks.Load(p)
		if !ok {
			return
		}
		if f := h.(*providerHooks).send; f != nil {
			f()
		}
		if f := h.(*providerHooks).statement; f != nil {
			f(mode == unclaimedMode)
		}
	}
	testHookReply = func(p *Provider, err error) error {
		if h, ok := hooks.Load(p); ok && h.(*providerHooks).reply != nil {
			return h.(*providerHooks).reply(err)
		}
		return err
	}
	testHookListBatch = func(p *Provider) int32 {
		if h, ok := hooks.Load(p); ok {
			return h.(*providerHooks).listBatch
		}
		return 0
	}
}

// TelemetryCycle runs the telemetry hooks of an Acquire that succeeds at
// its first attempt and of the handle's Release, without I/O: what
// telemetry adds to one acquisition.
func TelemetryCycle(ctx context.Context, l *Lock) {
	a := &acquisition{lock: l}
	a.token.Store(1)
	actx, call := l.p.tel.startAcquire(ctx, l, opAcquireTrace)
	call.attempted(actx, nil)
	l.p.tel.acquired(l)
	call.end(actx, &Handle{a}, nil)
	ctx = l.p.tel.startHolderWrite(ctx, a, opReleaseTrace)
	l.p.tel.unheld(l)
	l.p.tel.endHolderWrite(ctx, a, opReleaseTrace, "released", nil)
}

// StatementRoundTrips sends one of l's acquisition statements (statement:
// "acquire", an Acquire's first attempt with a claim; "try", TryAcquire's;
// "unclaimed", the one for a lock nobody waits for) and, if it acquired,
// l's release statement, as the driver calls alone: no handle, lease, line
// or goroutine. What an uncontended acquisition costs the server and the
// driver, without the engine.
func StatementRoundTrips(ctx context.Context, l *Lock, statement string) error {
	id, mode := newLockID(), map[string]attemptMode{"acquire": waitMode, "try": tryMode, "unclaimed": unclaimedMode}[statement]
	doc, err := l.kind.acquire(ctx, l.p, l.name, attempt{id: id, mode: mode})
	if err != nil || doc.LockID != id {
		return cmp.Or(err, ErrNotAcquired)
	}
	filter, update := l.kind.release(l.name, id, l.p.opts.atLeast)
	_, _, err = l.collection().store.updateOne(ctx, filter, update)
	return err
}

// waiters returns how many Acquire calls wait in line for name.
func (qs *lines) waiters(name string) int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[name]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Abandon runs what the garbage collector's cleanup runs once h is
// unreachable, in the caller's goroutine.
func Abandon(h *Handle) { h.abandoned() }

// Tick extends at once every lease p keeps, as its next tick would.
func Tick(p *Provider) { p.leases.tick() }
