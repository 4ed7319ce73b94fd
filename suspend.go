package mongolock

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Suspended time (docs/guarantees.md, "Lost before expired").
//
// Go's monotonic clock, and its timers, stand while the machine is
// suspended, so a resumed holder would think its lease had as long left
// as when it stopped. A provider also reads clocks that count suspended
// time, the wall clock and, on Linux, CLOCK_BOOTTIME: when both moved ahead
// of the monotonic clock by the same gap, the machine was suspended that
// long. Both must agree, so that a step of the wall clock ends no lease and
// a testing/synctest bubble sees no suspension. A look (at each of a
// handle's looks, at each send and reply, and every lookEvery while leases
// are kept) costs a time.Now and an atomic load; the boot clock is read only
// when the wall clock has moved ahead.

// lookEvery is how often a provider that keeps leases looks for a
// suspension when nothing else makes it look: the longest a resumed
// holder's loss can wait.
const lookEvery = 250 * time.Millisecond

// minSuspension is the shortest gap that counts as a suspension: shorter
// ones are the jitter of reading two clocks, which the safety margin
// (10 ms at least) covers.
const minSuspension = time.Millisecond

// clocks are what a provider reads to tell suspended time; a test replaces
// them to suspend the machine without suspending it.
type clocks interface {
	// read returns time.Now() (with its monotonic reading) and, of the
	// same instant, the wall clock's time.
	read() (mono, wall time.Time)
	// boot returns the time since boot by a clock that counts suspended
	// time (CLOCK_BOOTTIME); false where there is none.
	boot() (time.Duration, bool)
}

// systemClocks are the machine's; boot is per platform.
type systemClocks struct{}

func (systemClocks) read() (time.Time, time.Time) {
	t := time.Now()
	return t, t.Round(0)
}

// suspensions tells one provider's suspended time.
type suspensions struct {
	clocks         clocks
	monoAt, wallAt time.Time     // the clocks when it started: leads count from there
	wallLead       atomic.Int64  // how far the wall clock had moved ahead of the monotonic one at the last count
	mu             sync.Mutex    // guards what follows; taken with leases.mu held, if at all
	bootLead       time.Duration // the same for the boot clock
	keepFor        time.Duration // how long a suspension is remembered: the expiry
	seen           []suspension  // those of the last keepFor, oldest first
}

// A suspension is one that a look found at (by the monotonic clock): it
// happened since the look before.
type suspension struct {
	at time.Time
	d  time.Duration
}

func newSuspensions(c clocks, keepFor time.Duration) *suspensions {
	s := &suspensions{clocks: c, keepFor: keepFor}
	s.monoAt, s.wallAt = c.read()
	if b, ok := c.boot(); ok {
		s.bootLead = b
	}
	return s
}

// leads returns how far the wall clock has moved ahead of the monotonic
// one since s started, and the monotonic time since.
func (s *suspensions) leads() (mono time.Time, elapsed, wall time.Duration) {
	mono, w := s.clocks.read()
	elapsed = mono.Sub(s.monoAt)
	return mono, elapsed, w.Sub(s.wallAt) - elapsed
}

// now returns the monotonic time, by the clocks s reads: what leases are
// measured by.
func (s *suspensions) now() time.Time {
	mono, _ := s.clocks.read()
	return mono
}

// ahead returns the monotonic time, and whether the wall clock moved ahead
// of the monotonic one by minSuspension or more since the last count:
// then a look under leases.mu (find) tells whether the machine was
// suspended. A wall clock stepped back is counted from where it now is.
func (s *suspensions) ahead() (time.Time, bool) {
	mono, _, w := s.leads()
	last := s.wallLead.Load()
	gap := w - time.Duration(last)
	if gap <= -minSuspension {
		s.wallLead.CompareAndSwap(last, int64(w))
	}
	return mono, gap >= minSuspension
}

// find returns how long the machine was suspended since the last count
// (0: not at all), by what the wall clock and the boot clock agree on,
// and remembers it. leases.mu is held.
func (s *suspensions) find() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	mono, elapsed, w := s.leads()
	gap := w - time.Duration(s.wallLead.Swap(int64(w)))
	if b, ok := s.clocks.boot(); ok {
		lead := b - elapsed
		gap = min(gap, lead-s.bootLead)
		s.bootLead = lead
	}
	if gap < minSuspension {
		return 0
	}
	s.seen = slices.DeleteFunc(s.seen, func(x suspension) bool { return mono.Sub(x.at) > s.keepFor })
	s.seen = append(s.seen, suspension{mono, gap})
	return gap
}

// since returns how long the machine was suspended after sent, as far as
// looks have found: a request sent at sent whose reply came later was
// confirmed for that much less by the clocks that count it. leases.mu is
// held.
func (s *suspensions) since(sent time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, x := range s.seen {
		// One found at sent's own instant (a clock that stood, as a
		// bubble's does) most likely came after the look that read sent;
		// counting one that came before only shortens the lease.
		if !x.at.Before(sent) {
			d += x.d
		}
	}
	return d
}
