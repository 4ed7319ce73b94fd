package mongolock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Lease keeping (docs/guarantees.md, "Lost before expired").
//
// A provider extends its handles' leases together, on one timer, every
// cadence and maxBatch handles per round trip: no goroutine per handle. A
// lease counts on the monotonic clock from when its last successful
// acquisition or extension was sent, as the server's $$NOW came later, less
// the safety margin and the members' clock skew: the client's deadline
// comes first. A timer per handle signals the loss at that deadline, however
// slow a round trip; a look on the owner's behalf compares the clock with
// the deadline too, for a process that ran again with that timer overdue.
// Suspended time (suspend.go) moves every deadline earlier.

// maxBatch bounds how many handles one extension round trip covers: a
// larger batch saves round trips but takes the server longer, and a batch
// whose names are past the server's limits is split.
const maxBatch = 1000

// leases keeps the leases of one provider's handles.
type leases struct {
	opts         config
	extendUpdate bson.A       // the extension's update of a lock's lease (extendUpdate)
	susp         *suspensions // the machine's suspended time, which shortens them
	tel          *telemetry

	mu     sync.Mutex
	held   map[*acquisition]*keptLease
	timer  *time.Timer // the next tick, while handles are held
	looker *time.Timer // the next look for a suspension, while handles are held
}

// A keptLease is what leases keeps of one handle's lease.
type keptLease struct {
	deadline time.Time     // the client's end of the lease
	cap      time.Time     // WithHoldAtMost's client end of the lease; zero: none
	loss     *time.Timer   // fires at deadline
	busy     bool          // an extension is on its way
	missed   bool          // a tick came while busy: extend again once back, if the next tick could be too late
	lastErr  error         // the last failed extension's error
	slept    time.Duration // suspended time by which deadline came earlier
}

func newLeases(o config, susp *suspensions, tel *telemetry) leases {
	return leases{opts: o, extendUpdate: extendUpdate(o.expiry, o.atMost), susp: susp, tel: tel, held: make(map[*acquisition]*keptLease)}
}

// releaseKept releases, at once, every handle whose lease p keeps (Close),
// and returns the errors of the releases that failed; a lock already lost
// is not an error here.
func (ls *leases) releaseKept(ctx context.Context) error {
	ls.mu.Lock()
	held := slices.Collect(maps.Keys(ls.held))
	ls.mu.Unlock()
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, h := range held {
		wg.Go(func() {
			if err := h.release(ctx); !errors.Is(err, ErrLockLost) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return inner(errs...)
}

// keep starts keeping h's lease, acquired by a request sent at sent (by
// now, after a look for a suspension). A lease that a suspension during
// the round trip ended is lost before keep returns.
func (ls *leases) keep(h *acquisition, sent time.Time) {
	o := ls.opts
	ls.lookForSuspension()
	ls.mu.Lock()
	l := &keptLease{slept: ls.susp.since(sent)}
	if !h.atMostFromSent.IsZero() {
		l.cap = h.atMostFromSent.Add(-o.earlier() - l.slept)
	}
	ls.setDeadline(h, l, l.until(o, sent.Add(-l.slept)))
	now := ls.susp.now()
	l.loss = time.AfterFunc(l.deadline.Sub(now), func() { ls.expire(h) })
	ls.held[h] = l
	if ls.timer == nil {
		ls.timer = time.AfterFunc(o.cadence, ls.tick)
	}
	if ls.looker == nil {
		ls.looker = time.AfterFunc(lookEvery, ls.lookRegularly)
	}
	ended := !now.Before(l.deadline)
	// The deadline counts from the send, the first tick from now.
	soon := !ended && l.tooLateForTheNextTick(o, sent, now)
	l.busy = soon
	ls.mu.Unlock()
	switch {
	case ended:
		ls.expire(h)
	case soon:
		go ls.extend([]*acquisition{h})
	}
}

// now is the monotonic time for a request that a lease will count from:
// it looks for a suspension first, so that one found later came after it.
func (ls *leases) now() time.Time {
	ls.lookForSuspension()
	return ls.susp.now()
}

// look is a look on behalf of h's owner: for a suspension, and at h's
// deadline, which, passed, is h's loss now, whether or not its timer has
// run.
func (h *acquisition) look() { h.lookAt(h.lock.p.leases.lookForSuspension()) }

// lookAt is look at h's deadline, by now, what a look for a suspension
// read.
func (h *acquisition) lookAt(now time.Time) {
	if ls := &h.lock.p.leases; now.Sub(ls.susp.monoAt) >= time.Duration(h.deadline.Load()) {
		ls.expire(h)
	}
}

// knownLost returns why h was lost, looking at its lease first, or nil. A
// fenced write asks before it is sent.
func (h *acquisition) knownLost() error {
	h.look()
	return h.lossError()
}

// heldState returns why h no longer holds, looking at its lease first, or
// nil: its loss, else ErrReleased once Release was called. A fenced write
// asks before it is sent.
func (h *acquisition) heldState() error {
	if err := h.knownLost(); err != nil {
		return err
	}
	if h.released.Load() {
		return ErrReleased
	}
	return nil
}

// leaseContext is a Handle's or a CompositeHandle's context, which looks
// at the lease whenever it is asked whether it is done. Everything else,
// Value (and so context.Cause, and the cancellation of contexts derived
// from it) among it, is the handle's cancelable context's. Each handle
// keeps one, so that Context allocates nothing.
type leaseContext struct {
	context.Context
	h interface{ look() }
}

func (c leaseContext) Done() <-chan struct{} {
	c.h.look()
	return c.Context.Done()
}

func (c leaseContext) Err() error {
	c.h.look()
	return c.Context.Err()
}

// lookForSuspension looks at the clocks (suspend.go): if the machine was
// suspended since the last look, every kept lease's deadline moves earlier
// by the suspension, and the handles whose leases it ended are lost now.
// It returns the monotonic time it read first.
func (ls *leases) lookForSuspension() time.Time {
	mono, ahead := ls.susp.ahead()
	if !ahead {
		return mono
	}
	ls.mu.Lock()
	d := ls.susp.find()
	var ended []*acquisition
	if d > 0 {
		now := ls.susp.now()
		for h, l := range ls.held {
			ls.setDeadline(h, l, l.deadline.Add(-d))
			l.slept += d
			if !l.cap.IsZero() {
				l.cap = l.cap.Add(-d)
			}
			if now.Before(l.deadline) {
				l.loss.Reset(l.deadline.Sub(now))
			} else {
				ended = append(ended, h)
			}
		}
	}
	ls.mu.Unlock()
	for _, h := range ended {
		ls.expire(h)
	}
	return mono
}

// setDeadline moves the deadline of l, h's lease, to d; looks read it
// from h without a lock. leases.mu is held.
func (ls *leases) setDeadline(h *acquisition, l *keptLease, d time.Time) {
	l.deadline = d
	h.deadline.Store(int64(d.Sub(ls.susp.monoAt)))
}

// lookRegularly looks for a suspension, and again after lookEvery while any
// lease is kept: the timer's own wait stands with the monotonic clock,
// so it comes within lookEvery after the machine resumes.
func (ls *leases) lookRegularly() {
	ls.lookForSuspension()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.held) == 0 || ls.looker == nil {
		ls.looker = nil
		return
	}
	ls.looker.Reset(lookEvery)
}

// tooLateForTheNextTick reports whether an extension sent at the next
// tick, as slow as the round trip sent at sent and answered by now, could
// come back after l's deadline: then l is extended at once instead.
func (l *keptLease) tooLateForTheNextTick(o config, sent, now time.Time) bool {
	return l.deadline.Sub(now) < o.cadence+now.Sub(sent)
}

// until is the client's end of l once an acquisition or extension sent at
// sent succeeded: a lease's, but never past its cap.
func (l *keptLease) until(o config, sent time.Time) time.Time {
	if d := sent.Add(o.clientLease()); l.cap.IsZero() || d.Before(l.cap) {
		return d
	}
	return l.cap
}

// tick extends every lease not already being extended, in batches, and
// sets the next tick while any lease is kept. A lease whose Handle became
// unreachable is released instead.
func (ls *leases) tick() {
	ls.mu.Lock()
	if len(ls.held) == 0 {
		ls.timer = nil
		ls.mu.Unlock()
		return
	}
	ls.timer.Reset(ls.opts.cadence)
	due := map[store][]*acquisition{} // a batch is of one collection, by its store
	var dropped []*acquisition
	for h, l := range ls.held {
		if h.dropped.CompareAndSwap(true, false) {
			dropped = append(dropped, h)
			continue
		}
		if l.missed = l.busy; !l.busy { // busy: extend again once it is back
			st := h.lock.collection().store
			l.busy, due[st] = true, append(due[st], h)
		}
	}
	ls.mu.Unlock()
	for _, h := range dropped {
		h.abandon()
	}
	for _, hs := range due {
		for batch := range slices.Chunk(hs, maxBatch) {
			go ls.extend(batch)
		}
	}
}

// forget stops keeping h's lease (it is being released, or was lost) and
// returns it, or nil if it was not kept. No extension of h starts
// afterwards; one on its way cannot match once the release has cleared
// the lockId.
func (ls *leases) forget(h *acquisition) *keptLease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.drop(h)
}

// drop removes h's lease and returns it, or nil if it was not kept;
// leases.mu must be held.
func (ls *leases) drop(h *acquisition) *keptLease {
	l := ls.held[h]
	if l != nil {
		l.loss.Stop()
		h.deadline.Store(math.MaxInt64) // nothing for a look to find
		delete(ls.held, h)
		close(h.extendingStopped)
	}
	if len(ls.held) == 0 {
		stopTimer(&ls.timer)  // nothing to tick for
		stopTimer(&ls.looker) // nor to look for
	}
	return l
}

// expire runs when h's loss timer fires, or a suspension moved its
// deadline past: unless an extension moved the deadline meanwhile, the
// lease ran out (while the machine was suspended, if it would still run
// but for the suspension).
func (ls *leases) expire(h *acquisition) {
	ls.mu.Lock()
	l := ls.held[h]
	now := ls.susp.now()
	if l == nil || now.Before(l.deadline) {
		ls.mu.Unlock()
		return
	}
	ls.drop(h)
	ls.mu.Unlock()
	var slept time.Duration
	if now.Before(l.deadline.Add(l.slept)) {
		slept = l.slept
	}
	h.leaseOver(l.lastErr, l.deadline.Equal(l.cap), slept)
}

// delayed is schedule with its first try wait d (at least 0) rather than
// at once.
func delayed(schedule []time.Duration, d time.Duration) []time.Duration {
	s := slices.Clone(schedule)
	s[0] = max(d, 0)
	return s
}

// extend extends the leases of hs and records the outcome for each, until
// none needs extending again at once: after a transient error (until its
// lease is extended or runs out), or where a tick came meanwhile and the
// next could be too late (round trips slower than the cadence).
func (ls *leases) extend(hs []*acquisition) {
	retry := min(ls.opts.cadence/4, 250*time.Millisecond)
	for len(hs) > 0 {
		e := ls.sendExtension(hs)
		if refusedAsABatch(hs, e.err) {
			go ls.extend(hs[len(hs)/2:])
			hs = hs[:len(hs)/2]
			continue
		}
		ls.loseUnmatched(hs, e)
		if hs = ls.recordExtension(hs, e); e.err != nil && len(hs) > 0 {
			time.Sleep(retry)
		}
	}
}

// An extensionOutcome is one extension round trip's outcome: when it was sent,
// when its reply came, the handles it did not match (lost) and the lock
// ids of those among them taken over by ticket, and its error.
type extensionOutcome struct {
	sent, replied time.Time
	lost          []*acquisition
	takenOver     map[string]bool
	err           error
}

// sendExtension is one extension round trip of hs, given until the latest
// of their deadlines.
func (ls *leases) sendExtension(hs []*acquisition) (e extensionOutcome) {
	ls.mu.Lock()
	var latest time.Time
	for _, h := range hs {
		if l := ls.held[h]; l != nil && l.deadline.After(latest) {
			latest = l.deadline
		}
	}
	ls.mu.Unlock()
	e.sent = ls.now()
	ctx, cancel := context.WithTimeout(context.Background(), latest.Sub(e.sent))
	defer cancel()
	ctx = ls.tel.startExtension(ctx, hs)
	e.lost, e.takenOver, e.err = ls.extendLeases(ctx, hs)
	e.replied = time.Now()
	ls.tel.endExtension(ctx, hs, e.lost, e.err, e.sent)
	return e
}

// refusedAsABatch reports whether hs failed together by an error that
// retrying cannot fix (names adding up past a limit, say): then each half
// is extended on its own, down to single handles, so that only a handle
// refused on its own fails.
func refusedAsABatch(hs []*acquisition, err error) bool {
	return err != nil && len(hs) > 1 && !isTransient(err) && !isClosed(err)
}

// loseUnmatched marks lost the handles an extension did not match (those
// taken over by ticket as such), and every one of hs if their client was
// disconnected: nothing sent through it will ever succeed.
func (ls *leases) loseUnmatched(hs []*acquisition, e extensionOutcome) {
	lost, reason, why := e.lost, lossTakenOver, fmt.Errorf("%w: someone else holds it, or its document was deleted", ErrLockLost)
	if isClosed(e.err) {
		lost, reason, why = hs, lossClientClosed, fmt.Errorf("%w: its client was disconnected (%w)", ErrLockLost, e.err)
	}
	for _, h := range lost {
		if ls.forget(h) == nil {
			continue
		}
		if e.takenOver[h.lockID] {
			h.markLost(lossTakenOver, ErrTakenOver)
		} else {
			h.markLost(reason, why)
		}
	}
}

// recordExtension records e, the outcome of the extension of hs, for those
// still kept, and returns those to extend again at once.
func (ls *leases) recordExtension(hs []*acquisition, e extensionOutcome) []*acquisition {
	o := ls.opts
	var again []*acquisition
	ls.lookForSuspension()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	slept := ls.susp.since(e.sent) // while the round trip was on its way
	now := ls.susp.now()
	for _, h := range hs {
		l := ls.held[h]
		switch {
		case l == nil: // lost, released, or its lease ran out, meanwhile
		case e.err != nil:
			l.lastErr = e.err
			again = append(again, h)
		default:
			l.lastErr, l.slept = nil, slept
			ls.setDeadline(h, l, l.until(o, e.sent.Add(-slept)))
			h.lastSentAt.Store(e.sent.UnixNano())
			h.lastReplyAt.Store(e.replied.UnixNano())
			l.loss.Reset(l.deadline.Sub(now))
			l.busy = l.missed && l.tooLateForTheNextTick(o, e.sent, now)
			if l.missed = false; l.busy {
				again = append(again, h)
			}
		}
	}
	return again
}

// extendLeases pushes the leases of hs, all locks' or all slots', to
// $$NOW + expiry (a lock's at most to WithHoldAtMost's bound) in one
// owner-checked round trip (the extend statement), and returns the handles
// it did not match, and the lock ids of those taken over by ticket. Only
// when a batch matched fewer than all does it read their documents to find
// out which, and whether by a take-over (the holders statement).
func (ls *leases) extendLeases(ctx context.Context, hs []*acquisition) (lost []*acquisition, takenOver map[string]bool, err error) {
	names, ids, named := make(bson.A, 0, len(hs)), make(bson.A, len(hs)), make(map[string]bool, len(hs))
	for i, h := range hs {
		if !named[h.lock.name] {
			named[h.lock.name], names = true, append(names, h.lock.name)
		}
		ids[i] = h.lockID
	}
	kind, st := hs[0].lock.kind, hs[0].lock.collection().store
	filter, update := kind.extend(ls.extendUpdate, ls.opts.expiry, names, ids)
	matched, _, err := st.updateMany(ctx, filter, update)
	if err != nil || len(names) == len(hs) && int(matched) == len(hs) {
		return nil, nil, err // one handle per document: a match is its own
	}
	seen, err := readHolders(ctx, st, kind, names)
	switch {
	case err != nil && matched == 0:
		return hs, nil, nil // every one lost, a take-over or not: no match is a loss at once
	case err != nil:
		return nil, nil, err
	}
	return slices.DeleteFunc(slices.Clone(hs), func(h *acquisition) bool { return seen.held[h.lockID] }), seen.takenOver, nil
}

// readHolders sends the holders statement of kind for names and returns
// what its reply says: the lock ids that hold, and those taken over by
// ticket.
func readHolders(ctx context.Context, st store, kind kindDriver, names bson.A) (holderIDs, error) {
	f, projection := kind.holders(names)
	docs, err := st.find(ctx, f, projection)
	if err != nil {
		return holderIDs{}, err
	}
	seen := holderIDs{held: map[string]bool{}, takenOver: map[string]bool{}}
	for _, raw := range docs {
		if err := kind.heldBy(raw, seen); err != nil {
			return holderIDs{}, err
		}
	}
	return seen, nil
}
