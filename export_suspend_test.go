package mongolock

import (
	"sync/atomic"
	"time"
)

// Clocks are a provider's clocks that count suspended time, moved by a
// test while the monotonic clock goes on as before.
type Clocks struct {
	jump, step, stop atomic.Int64
	noBoot           bool
	bootAt           time.Duration // the machine's boot clock at monoAt
	monoAt           time.Time
}

// FakeClocks makes p read clocks that a test moves: the machine's, with
// Suspend and StepWall added; boot false: as on a platform without a boot
// clock, where the wall clock alone witnesses suspended time. Call it
// before p is used.
func FakeClocks(p *Provider, boot bool) *Clocks {
	c := &Clocks{noBoot: !boot, monoAt: time.Now()}
	c.bootAt, _ = systemClocks{}.boot()
	p.leases.susp = newSuspensions(c, p.opts.expiry)
	return c
}

// Suspend moves the clocks that count suspended time d ahead of the
// monotonic clock, as a suspension of d does.
func (c *Clocks) Suspend(d time.Duration) { c.jump.Add(int64(d)) }

// StepWall steps the wall clock alone by d, as NTP may.
func (c *Clocks) StepWall(d time.Duration) { c.step.Add(int64(d)) }

// Stop moves every clock d ahead, the monotonic one too, as a process
// stopped for d (SIGSTOP, a frozen cgroup, a long GC pause) finds them
// when it runs again: nothing was suspended, and none of its timers has
// run for that time (they run by the machine's clock, or the bubble's,
// which Stop leaves where it was).
func (c *Clocks) Stop(d time.Duration) { c.stop.Add(int64(d)) }

func (c *Clocks) read() (time.Time, time.Time) {
	mono, wall := systemClocks{}.read()
	stop := time.Duration(c.stop.Load())
	return mono.Add(stop), wall.Add(time.Duration(c.jump.Load()+c.step.Load()) + stop)
}

func (c *Clocks) boot() (time.Duration, bool) {
	if c.noBoot {
		return 0, false
	}
	// The boot clock moves with the monotonic clock the provider reads,
	// not the machine's: in a testing/synctest bubble, the bubble's, so
	// that only Suspend and Stop move it ahead there too.
	return c.bootAt + time.Since(c.monoAt) + time.Duration(c.jump.Load()+c.stop.Load()), true
}

// BootClock reads this machine's clock that counts suspended time, where
// the platform has one, and time.Now from the same moment.
func BootClock() (time.Duration, time.Time, bool) {
	b, ok := systemClocks{}.boot()
	return b, time.Now(), ok
}

// LeaseDeadline is when, by the monotonic clock, h's lease ends for its
// provider; false if it is not kept.
func LeaseDeadline(h *Handle) (time.Time, bool) {
	ls := &h.lock.p.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.held[h.acquisition]; l != nil {
		return l.deadline, true
	}
	return time.Time{}, false
}
