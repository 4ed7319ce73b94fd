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

// Lease keeping.
//
// Each provider extends the leases of its handles together: a timer fires
// every cadence while handles are held, and every lease not already being
// extended is extended then, maxBatch handles per round trip. So a process
// holding N locks sends about ceil(N/maxBatch) round trips per cadence, and
// no goroutine waits between ticks. A new lease is first extended at the
// next tick, within one cadence, or at once if its acquisition's round trip
// was so slow that an extension as slow, sent at that tick, could come
// back too late.
//
// Each handle's lease is measured on the client's monotonic clock from when
// its last successful acquire or extend was *sent*: the server computed its
// expiresAt from a $$NOW no earlier than that, so the client's deadline
// (minus a safety margin) comes before the server's. A timer per handle
// (time.AfterFunc: no goroutine until it fires) signals loss at that
// deadline, however long a round trip takes, so the loss is signalled before
// anyone else can take the lock. Transient errors are retried until the
// deadline; a handle that an extension did not match (someone else holds the
// lock, or its document was deleted) is lost at once. The monotonic clock
// stands while the machine is suspended: a suspension that a look finds
// (suspend.go) moves every deadline earlier by its length, and a lease
// confirmed by a reply that came after one counts from that much earlier.
//
// The timer is not the only one to tell: a process stopped, or starved
// of CPU, past a deadline runs again with the timer overdue, not yet run.
// So each look on behalf of a handle's owner (its Context's Err and Done,
// Lost, Release, a fenced write) compares the monotonic time with the
// handle's deadline, which it reads without a lock, and a deadline passed
// is the loss at once. Leases are measured by the monotonic clock of the
// provider's clocks (suspend.go), which a test moves.

// maxBatch bounds how many handles one extension round trip covers.
const maxBatch = 500

// leases keeps the leases of one provider's handles.
type leases struct {
	mu    sync.Mutex
	held  map[*acquisition]*lease
	timer *time.Timer // the next tick, while handles are held
	watch *time.Timer // the next look for a suspension, while handles are held
}

type lease struct {
	deadline time.Time     // the client's end of the lease
	cap      time.Time     // WithHoldAtMost's client end of the lease; zero: none
	loss     *time.Timer   // fires at deadline
	busy     bool          // an extension is on its way
	missed   bool          // a tick came while it was: extend again at once
	lastErr  error         // the last failed extension's error
	slept    time.Duration // suspended time by which deadline came earlier
}

func newLeases() leases { return leases{held: make(map[*acquisition]*lease)} }

// releaseKept releases, at once, every handle whose lease p keeps (Close),
// and returns the errors of the releases that failed; a lock already lost
// is not an error here.
func (p *Provider) releaseKept(ctx context.Context) error {
	p.leases.mu.Lock()
	held := slices.Collect(maps.Keys(p.leases.held))
	p.leases.mu.Unlock()
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
	return errors.Join(errs...)
}

// keep starts keeping h's lease, acquired by a request sent at sent (by
// now, after a look for a suspension). A lease that a suspension during
// the round trip ended is lost before keep returns.
func (p *Provider) keep(h *acquisition, sent time.Time) {
	ls, o := &p.leases, p.opts
	p.lookForSuspension()
	ls.mu.Lock()
	l := &lease{slept: p.susp.since(sent)}
	if !h.atMostFromSent.IsZero() {
		l.cap = h.atMostFromSent.Add(-o.safetyMargin() - l.slept)
	}
	p.setDeadline(h, l, l.until(o, sent.Add(-l.slept)))
	now := p.susp.now()
	l.loss = time.AfterFunc(l.deadline.Sub(now), func() { p.expire(h) })
	ls.held[h] = l
	if ls.timer == nil {
		ls.timer = time.AfterFunc(o.cadence, p.tick)
	}
	if ls.watch == nil {
		ls.watch = time.AfterFunc(watchEvery, p.watch)
	}
	ended := !now.Before(l.deadline)
	// The deadline counts from the send, the first tick from now.
	soon := !ended && l.tooLateForTheNextTick(o, sent, now)
	l.busy = soon
	ls.mu.Unlock()
	switch {
	case ended:
		p.expire(h)
	case soon:
		go p.extend([]*acquisition{h})
	}
}

// now is the monotonic time for a request that a lease will count from:
// it looks for a suspension first, so that one found later came after it.
func (p *Provider) now() time.Time {
	p.lookForSuspension()
	return p.susp.now()
}

// look is a look on behalf of h's owner: for a suspension, and at h's
// deadline, which, passed, is h's loss now, whether or not its timer has
// run.
func (h *acquisition) look() { h.lookAt(h.lock.p.lookForSuspension()) }

// lookAt is look at h's deadline, by now, what a look for a suspension
// read.
func (h *acquisition) lookAt(now time.Time) {
	if p := h.lock.p; now.Sub(p.susp.monoAt) >= time.Duration(h.deadline.Load()) {
		p.expire(h)
	}
}

// lookForSuspension looks at the clocks (suspend.go): if the machine was
// suspended since the last look, every kept lease's deadline moves earlier
// by the suspension, and the handles whose leases it ended are lost now.
// It returns the monotonic time it read first.
func (p *Provider) lookForSuspension() time.Time {
	mono, ahead := p.susp.ahead()
	if !ahead {
		return mono
	}
	ls := &p.leases
	ls.mu.Lock()
	d := p.susp.find()
	var ended []*acquisition
	if d > 0 {
		now := p.susp.now()
		for h, l := range ls.held {
			p.setDeadline(h, l, l.deadline.Add(-d))
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
		p.expire(h)
	}
	return mono
}

// setDeadline moves the deadline of l, h's lease, to d; looks read it
// from h without a lock. leases.mu is held.
func (p *Provider) setDeadline(h *acquisition, l *lease, d time.Time) {
	l.deadline = d
	h.deadline.Store(int64(d.Sub(p.susp.monoAt)))
}

// watch looks for a suspension, and again after watchEvery while any
// lease is kept: the timer's own wait stands with the monotonic clock,
// so it comes within watchEvery after the machine resumes.
func (p *Provider) watch() {
	p.lookForSuspension()
	ls := &p.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.held) == 0 || ls.watch == nil {
		ls.watch = nil
		return
	}
	ls.watch.Reset(watchEvery)
}

// tooLateForTheNextTick reports whether an extension sent at the next
// tick, as slow as the round trip sent at sent and answered by now, could
// come back after l's deadline: then l is extended at once instead.
func (l *lease) tooLateForTheNextTick(o config, sent, now time.Time) bool {
	return l.deadline.Sub(now) < o.cadence+now.Sub(sent)
}

// until is the client's end of l once an acquisition or extension sent at
// sent succeeded: a lease's, but never past its cap.
func (l *lease) until(o config, sent time.Time) time.Time {
	if d := sent.Add(o.clientLease()); l.cap.IsZero() || d.Before(l.cap) {
		return d
	}
	return l.cap
}

// tick extends every lease not already being extended, in batches, and
// sets the next tick while any lease is kept. A lease whose Handle became
// unreachable is released instead.
func (p *Provider) tick() {
	ls := &p.leases
	ls.mu.Lock()
	if len(ls.held) == 0 {
		ls.timer = nil
		ls.mu.Unlock()
		return
	}
	ls.timer.Reset(p.opts.cadence)
	due := map[*collection][]*acquisition{} // a batch is of one collection
	var dropped []*acquisition
	for h, l := range ls.held {
		if h.dropped.CompareAndSwap(true, false) {
			dropped = append(dropped, h)
			continue
		}
		if l.missed = l.busy; !l.busy { // busy: extend again once it is back
			sp := h.lock.collection()
			l.busy, due[sp] = true, append(due[sp], h)
		}
	}
	ls.mu.Unlock()
	for _, h := range dropped {
		h.abandon()
	}
	for _, hs := range due {
		for batch := range slices.Chunk(hs, maxBatch) {
			go p.extend(batch)
		}
	}
}

// forget stops keeping h's lease (it is being released, or was lost) and
// returns it, or nil if it was not kept. No extension of h starts afterwards; one
// already on its way cannot match once the release has cleared the lockId.
func (p *Provider) forget(h *acquisition) *lease {
	p.leases.mu.Lock()
	defer p.leases.mu.Unlock()
	return p.drop(h)
}

// drop removes h's lease and returns it, or nil if it was not kept;
// leases.mu must be held.
func (p *Provider) drop(h *acquisition) *lease {
	ls := &p.leases
	l := ls.held[h]
	if l != nil {
		l.loss.Stop()
		h.deadline.Store(math.MaxInt64) // nothing for a look to find
		delete(ls.held, h)
		close(h.extendingStopped)
	}
	if len(ls.held) == 0 && ls.timer != nil { // nothing to tick for
		ls.timer.Stop()
		ls.timer = nil
	}
	if len(ls.held) == 0 && ls.watch != nil { // nor to watch
		ls.watch.Stop()
		ls.watch = nil
	}
	return l
}

// expire runs when h's loss timer fires, or a suspension moved its
// deadline past: unless an extension moved the deadline meanwhile, the
// lease ran out (while the machine was suspended, if it would still run
// but for the suspension).
func (p *Provider) expire(h *acquisition) {
	p.leases.mu.Lock()
	l := p.leases.held[h]
	now := p.susp.now()
	if l == nil || now.Before(l.deadline) {
		p.leases.mu.Unlock()
		return
	}
	p.drop(h)
	p.leases.mu.Unlock()
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

// extend extends the leases of hs and records the outcome for each. It
// extends again at once those for which a tick came meanwhile and the next
// tick could be too late (round trips slower than the cadence), and, after a
// transient error, tries again for the handles still kept until their leases
// are extended or run out. A batch that fails otherwise is extended in
// halves, down to single handles: only a handle refused on its own fails.
func (p *Provider) extend(hs []*acquisition) {
	ls, o := &p.leases, p.opts
	retry := min(o.cadence/4, 250*time.Millisecond)
	for len(hs) > 0 {
		ls.mu.Lock()
		var latest time.Time
		for _, h := range hs {
			if l := ls.held[h]; l != nil && l.deadline.After(latest) {
				latest = l.deadline
			}
		}
		ls.mu.Unlock()
		sent := p.now()
		ctx, cancel := context.WithTimeout(context.Background(), latest.Sub(sent))
		ctx = p.tel.startExtension(ctx, hs)
		lost, err := p.extendLeases(ctx, hs)
		replied := time.Now()
		p.tel.endExtension(ctx, hs, lost, err, sent)
		cancel()
		if err != nil && len(hs) > 1 && !isTransient(err) && !isClosed(err) {
			// Names adding up past a limit, say: each half on its own.
			go p.extend(hs[len(hs)/2:])
			hs = hs[:len(hs)/2]
			continue
		}
		reason, why := lossTakenOver, fmt.Errorf("%w: someone else holds it, or its document was deleted", ErrLockLost)
		if isClosed(err) { // nothing sent through its client will ever succeed
			lost, reason, why = hs, lossClientClosed, fmt.Errorf("%w: its client was disconnected (%w)", ErrLockLost, err)
		}
		for _, h := range lost {
			if p.forget(h) != nil {
				h.markLost(reason, why)
			}
		}
		var again []*acquisition
		p.lookForSuspension()
		ls.mu.Lock()
		slept := p.susp.since(sent) // while the round trip was on its way
		now := p.susp.now()
		for _, h := range hs {
			l := ls.held[h]
			switch {
			case l == nil: // lost, released, or its lease ran out, meanwhile
			case err != nil:
				l.lastErr = err
				again = append(again, h)
			default:
				l.lastErr, l.slept = nil, slept
				p.setDeadline(h, l, l.until(o, sent.Add(-slept)))
				h.lastSentAt.Store(sent.UnixNano())
				h.lastReplyAt.Store(replied.UnixNano())
				l.loss.Reset(l.deadline.Sub(now))
				// A tick came while this was on its way: extend again now
				// if an extension at the next tick could come back too late.
				l.busy = l.missed && l.tooLateForTheNextTick(o, sent, now)
				if l.missed = false; l.busy {
					again = append(again, h)
				}
			}
		}
		ls.mu.Unlock()
		if hs = again; err != nil && len(hs) > 0 {
			time.Sleep(retry)
		}
	}
}

// extendLeases pushes the leases of hs, all locks' or all slots', to
// $$NOW + expiry (a lock's at most to WithHoldAtMost's bound) in one
// owner-checked round trip (5 or 18), and returns the
// handles it did not match. Only when a batch may have matched some but not
// all does it read their documents to find out which (one more round trip:
// 6 or 19).
func (p *Provider) extendLeases(ctx context.Context, hs []*acquisition) ([]*acquisition, error) {
	names, ids, seen := make(bson.A, 0, len(hs)), make(bson.A, len(hs)), make(map[string]bool, len(hs))
	for i, h := range hs {
		if !seen[h.lock.name] {
			seen[h.lock.name], names = true, append(names, h.lock.name)
		}
		ids[i] = h.lockID
	}
	kind, st := hs[0].lock.kind, hs[0].lock.collection().store
	filter, update := kind.extend(p, names, ids)
	matched, _, err := st.updateMany(ctx, filter, update)
	switch {
	case err != nil || len(names) == len(hs) && int(matched) == len(hs):
		return nil, err // one handle per document: a match is its own
	case matched == 0:
		return hs, nil
	}
	f, projection := kind.holders(names)
	docs, err := st.find(ctx, f, projection)
	if err != nil {
		return nil, err
	}
	held := make(map[string]bool, len(hs))
	for _, raw := range docs {
		if err := kind.heldBy(raw, held); err != nil {
			return nil, err
		}
	}
	return slices.DeleteFunc(slices.Clone(hs), func(h *acquisition) bool { return held[h.lockID] }), nil
}
