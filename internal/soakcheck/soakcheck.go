// Package soakcheck is what the soak (internal/soak, against a server) and
// the simulation (internal/simulate, over the in-memory store in simulated
// time) share: the kinds they exercise, how a trial acquires, the counts
// of trials, faults and violations per kind and the summary lines that
// print them, and the rules of the fenced resource that every critical
// section writes to.
//
// The soak keeps its fenced resources on the server, one document per
// name, and states the rules as the filters of its updates, so that
// processes that are killed lose no count; the simulation runs in one
// process and keeps them in a Resource, which applies the same rules at
// the instant of each call, by the simulation's clock.
package soakcheck

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// A Kind is a primitive the soak exercises.
type Kind int

const (
	Mutex     Kind = iota // Provider.Lock
	Semaphore             // Provider.Semaphore
	RWLock                // Provider.RWLock
	Election              // Provider.Election: a leadership is checked as a mutex's hold
	NumKinds
)

// KindNames are the kinds' names, as the summary and the soak's resource
// documents spell them.
var KindNames = [NumKinds]string{"mutex", "semaphore", "rwlock", "election"}

func (kd Kind) String() string { return KindNames[kd] }

// Single reports whether kd has one holder at a time; the others have
// several inside at once.
func (kd Kind) Single() bool { return kd == Mutex || kd == Election }

// Counts are one kind's trials, faults and violations.
type Counts struct {
	Trials      int64 // critical sections entered: acquisitions
	WriteTrials int64 // of an rwlock's trials, the writers'
	Upgrades    int64 // of an rwlock's writers' trials, those that upgraded
	Peak        int64 // a semaphore's or rwlock's: the most holders inside at once
	Killed      int64 // holders inside a process that died (SIGKILLed)
	Dropped     int64 // holders whose client was closed under them

	MaxWait  time.Duration // the longest wait of an acquisition that got its handle
	MaxWaitW time.Duration // an rwlock's: of a writer's
	MaxUnfin time.Duration // the longest wait of one that never did (gave up, or the run ended)
	GaveUp   int64         // acquisitions that gave up

	Overlap     int64 // an entrant found a conflicting live holder inside (n of them, for a semaphore)
	OutOfOrder  int64 // an entrant's token was not greater than one it must outrank
	Displaced   int64 // a holder's write or exit found that someone had entered who must not have
	Unsignalled int64 // a dropped client's handle did not report its loss in time
	Vanished    int64 // a holder not told of a loss was no longer shown holding by the lock's document
	LeftInside  int64 // a live holder still inside after every process ended
}

// Violations is the number of broken guarantees seen; it must be 0.
func (c *Counts) Violations() int64 {
	return c.Overlap + c.OutOfOrder + c.Displaced + c.Unsignalled + c.Vanished + c.LeftInside
}

// Summary returns the summary lines of per: the trials and violations of
// each kind, then faults (what was injected, said by the caller), then a
// line per kind. n is a semaphore's slots, giveUp how long an acquisition
// waited before it gave up.
func Summary(per *[NumKinds]Counts, n int, giveUp time.Duration, faults string) string {
	m, s, rw, el := &per[Mutex], &per[Semaphore], &per[RWLock], &per[Election]
	var b strings.Builder
	fmt.Fprintf(&b, "trials: mutex %d, semaphore %d, rwlock %d (%d writers, %d by upgrade), election %d; violations: mutex %d, semaphore %d, rwlock %d, election %d; %s",
		m.Trials, s.Trials, rw.Trials, rw.WriteTrials, rw.Upgrades, el.Trials, m.Violations(), s.Violations(), rw.Violations(), el.Violations(), faults)
	for kd := range NumKinds {
		c := &per[kd]
		fmt.Fprintf(&b, "\n  %-10s overlaps %d, out-of-order tokens %d, displaced holders %d, unsignalled losses %d, vanished holders %d, left inside %d;"+
			" holders killed %d, clients closed under a holder %d",
			kd.String()+":", c.Overlap, c.OutOfOrder, c.Displaced, c.Unsignalled, c.Vanished, c.LeftInside, c.Killed, c.Dropped)
		switch kd {
		case Semaphore:
			fmt.Fprintf(&b, "; at most %d of %d slots inside at once", c.Peak, n)
		case RWLock:
			fmt.Fprintf(&b, "; at most %d holders inside at once", c.Peak)
		}
		fmt.Fprintf(&b, "; longest wait for a handle %v", c.MaxWait.Round(time.Millisecond))
		if kd == RWLock {
			fmt.Fprintf(&b, " (a writer's %v)", c.MaxWaitW.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, ", without one %v (%d gave up after %v)", c.MaxUnfin.Round(time.Millisecond), c.GaveUp, giveUp)
	}
	return b.String()
}

// LeastHit returns the kinds with names whose count is the least: where
// the next fault is to fall, so that faults reach every kind.
func LeastHit(counts [NumKinds]int64, names [NumKinds]int) []Kind {
	var least []Kind
	for kd := range NumKinds {
		switch {
		case names[kd] == 0:
		case len(least) == 0 || counts[kd] < counts[least[0]]:
			least = []Kind{kd}
		case counts[kd] == counts[least[0]]:
			least = append(least, kd)
		}
	}
	return least
}

// Closed reports whether ch is closed, without waiting.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Sleep waits for d, or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
