package soakcheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// A Board is the fenced resources of one process's run, one per name of
// each kind, in process memory, with the counts of every kind: the
// simulation's form of the soak's resource documents. Each call applies
// at once, under one mutex, the rule the soak's update filters state on
// the server:
//
//   - a mutex's or an election's holder enters only if nobody is inside
//     (but a holder of a dead process) and its token is greater than the
//     last one entered;
//   - a semaphore's enters only if fewer than n are inside and none with
//     its token, and its token is greater than the last one entered
//     before it acquired (Floor);
//   - an rwlock's reader enters only if no writer is inside and its token
//     is greater than the last writer's entered; a writer only if nobody
//     is inside and its token is greater than the last one entered;
//   - every write and the exit find the holder among those inside, and a
//     mutex's, an election's or an rwlock's token is still at least the
//     one it had to outrank: otherwise someone entered meanwhile.
//
// A refused entry is counted as a violation and the holder enters anyway,
// so that the run goes on and those inside see it too. A Board is safe
// for concurrent use.
type Board struct {
	mu         sync.Mutex
	n          int // a semaphore's slots
	per        [NumKinds]Counts
	res        map[string]*resource
	dead       map[string]bool // processes that died: they write nothing more
	writes     int64
	reports    []string // the violations, as said, the first few
	total      int64    // entries, every kind
	violations int64    // found so far, every kind

	// Explain, if set, returns what to add to the report of an overlap or
	// an out-of-order token on the resource of a lock name (the lock's
	// document as the store has it, say). It is called with the Board's
	// mutex held, at the instant of the entry.
	Explain func(name string) string
}

type resource struct {
	kind        Kind
	last, lastW int64       // the greatest token entered; an rwlock's greatest writer's
	inside      *occupant   // a mutex's or an election's
	holders     []*occupant // a semaphore's or an rwlock's
}

// An occupant is a holder inside a resource, as its entry recorded it.
type occupant struct {
	tok   int64
	proc  string
	write bool // an rwlock's writer
	units int  // a semaphore's units
	dead  bool
	note  string
	state func() string
}

func (h *occupant) String() string {
	s := fmt.Sprintf("%d of %s%s", h.tok, h.proc, role(h.write))
	if h.units > 1 {
		s += fmt.Sprintf(", %d units", h.units)
	}
	if h.note != "" {
		s += " (" + h.note + ")"
	}
	if h.state != nil {
		s += " [now: " + h.state() + "]"
	}
	return s
}

func role(write bool) string {
	if write {
		return " (writer)"
	}
	return ""
}

// NewBoard returns a Board whose semaphores have n slots.
func NewBoard(n int) *Board {
	return &Board{n: n, res: map[string]*resource{}, dead: map[string]bool{}}
}

// A Section names a critical section: the resource (kind and lock name),
// the holder's token and process, an rwlock holder's mode.
type Section struct {
	Kind    Kind
	Name    string
	Tok     int64
	Proc    string
	Write   bool          // an rwlock's writer
	Upgrade bool          // a writer that Upgrade made one
	Units   int           // a semaphore's units; 0: one
	Note    string        // said with the holder in reports
	State   func() string // if set, what the holder is doing, said with it in reports
}

func (s Section) who() string {
	return "token " + (&occupant{tok: s.Tok, proc: s.Proc, write: s.Write, note: s.Note}).String()
}

func (b *Board) resource(kd Kind, name string) *resource {
	r := b.res[name]
	if r == nil {
		r = &resource{kind: kd}
		b.res[name] = r
	}
	return r
}

func (b *Board) violation(kd Kind, field *int64, format string, args ...any) {
	*field++
	b.violations++
	if len(b.reports) < 20 {
		b.reports = append(b.reports, kd.String()+": "+fmt.Sprintf(format, args...))
	}
}

// Violation counts a violation of s's kind found by the caller (a loss
// not signalled in time, a holder no longer shown holding, a leader
// displaced): which names the count, one of Unsignalled, Vanished,
// Displaced.
func (b *Board) Violation(kd Kind, which string, format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &b.per[kd]
	field := map[string]*int64{"unsignalled": &c.Unsignalled, "vanished": &c.Vanished, "displaced": &c.Displaced}[which]
	if field == nil {
		panic("soakcheck: no violation " + which)
	}
	b.violation(kd, field, format, args...)
}

// Floor returns the last token entered into a semaphore's resource: its
// next holder's token must be greater (checked by Enter).
func (b *Board) Floor(kd Kind, name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resource(kd, name).last
}

// Enter enters s's resource after an acquisition that waited waited
// (floor: a semaphore's Floor before it). It reports false, entering
// nothing, if s's process is dead.
func (b *Board) Enter(s Section, floor int64, waited time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead[s.Proc] {
		return false
	}
	r, c := b.resource(s.Kind, s.Name), &b.per[s.Kind]
	me := &occupant{tok: s.Tok, proc: s.Proc, write: s.Write, units: max(s.Units, 1), note: s.Note, state: s.State}
	before := c.Violations()
	defer func() {
		if c.Violations() > before && b.Explain != nil && len(b.reports) < 20 {
			b.reports = append(b.reports, "  "+b.Explain(s.Name))
		}
	}()
	c.Trials++
	b.total++
	b.writes++
	if s.Kind.Single() {
		b.enterSingle(s, r, me, waited)
	} else {
		b.enterShared(s, r, me, floor, waited)
	}
	return true
}

// enterSingle enters me, s's holder, into a mutex's or an election's
// resource r, counting what its entry breaks of the rule.
func (b *Board) enterSingle(s Section, r *resource, me *occupant, waited time.Duration) {
	c := &b.per[s.Kind]
	if r.last >= s.Tok {
		b.violation(s.Kind, &c.OutOfOrder, "%s acquired after token %d was accepted", s.who(), r.last)
	}
	if r.inside != nil && !r.inside.dead {
		b.violation(s.Kind, &c.Overlap, "%s entered while %s was inside", s.who(), r.inside)
	}
	r.inside = me
	r.last = max(r.last, s.Tok)
	c.MaxWait = max(c.MaxWait, waited)
}

// enterShared enters me, s's holder, into a semaphore's or an rwlock's
// resource r, counting what its entry breaks of the rule: its token's
// order first, then the room.
func (b *Board) enterShared(s Section, r *resource, me *occupant, floor int64, waited time.Duration) {
	c := &b.per[s.Kind]
	b.checkOrder(s, r, floor)
	b.checkRoom(s, r, me)
	r.holders = append(r.holders, me)
	r.last = max(r.last, s.Tok)
	c.Peak = max(c.Peak, int64(len(r.holders)))
	if s.Kind == Semaphore {
		c.Peak = max(c.Peak, int64(r.units()))
	}
	if s.Write {
		r.lastW = max(r.lastW, s.Tok)
		c.WriteTrials++
		c.MaxWaitW = max(c.MaxWaitW, waited)
		if s.Upgrade {
			c.Upgrades++
		}
	} else {
		c.MaxWait = max(c.MaxWait, waited)
	}
}

// checkOrder counts an out-of-order token of s entering the shared
// resource r: a semaphore's not above floor or held already, an rwlock
// writer's not above the last entered, a reader's not above the last
// writer's.
func (b *Board) checkOrder(s Section, r *resource, floor int64) {
	c := &b.per[s.Kind]
	dup := slices.ContainsFunc(r.holders, func(h *occupant) bool { return h.tok == s.Tok })
	switch {
	case s.Kind == Semaphore && s.Tok <= floor:
		b.violation(s.Kind, &c.OutOfOrder, "%s acquired after token %d had entered", s.who(), floor)
	case s.Kind == Semaphore && dup:
		b.violation(s.Kind, &c.OutOfOrder, "%s entered while a holder with the same token was inside", s.who())
	case s.Kind == RWLock && s.Write && r.last >= s.Tok:
		b.violation(s.Kind, &c.OutOfOrder, "%s acquired after token %d had entered", s.who(), r.last)
	case s.Kind == RWLock && !s.Write && r.lastW >= s.Tok:
		b.violation(s.Kind, &c.OutOfOrder, "%s acquired after writer's token %d had entered", s.who(), r.lastW)
	}
}

// checkRoom counts an overlap of me, s's holder, entering the shared
// resource r: a semaphore's beyond its slots, an rwlock's writer beside
// anyone or anyone beside a writer.
func (b *Board) checkRoom(s Section, r *resource, me *occupant) {
	c := &b.per[s.Kind]
	var inside []string
	writer := false
	for _, h := range r.holders {
		inside = append(inside, h.String())
		writer = writer || h.write
	}
	units := r.units()
	switch {
	case s.Kind == Semaphore && units+me.units > b.n:
		b.violation(s.Kind, &c.Overlap, "%s entered, %d units, while %d of %d slots were taken: [%s]", s.who(), me.units, units, b.n, strings.Join(inside, ", "))
	case s.Kind == RWLock && (s.Write && len(r.holders) > 0 || writer):
		b.violation(s.Kind, &c.Overlap, "%s entered while a conflicting holder was inside: [%s]", s.who(), strings.Join(inside, ", "))
	}
}

// units is the units of the holders inside r.
func (r *resource) units() int {
	n := 0
	for _, h := range r.holders {
		n += h.units
	}
	return n
}

// mine returns s's holder in its resource, if it is inside and its token
// still outranks what it had to.
func (r *resource) mine(s Section) *occupant {
	if s.Kind.Single() {
		if r.inside != nil && r.inside.tok == s.Tok && r.last <= s.Tok {
			return r.inside
		}
		return nil
	}
	fence := r.lastW
	if s.Write {
		fence = r.last
	}
	i := slices.IndexFunc(r.holders, func(h *occupant) bool { return h.tok == s.Tok })
	if i < 0 || s.Kind == RWLock && fence > s.Tok {
		return nil
	}
	return r.holders[i]
}

// Write is one write of s's critical section: it reports whether it was
// accepted (s is inside and nobody entered who must not have). A process
// that died writes nothing (accepted).
func (b *Board) Write(s Section) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead[s.Proc] {
		return true
	}
	if b.resource(s.Kind, s.Name).mine(s) == nil {
		return false
	}
	b.writes++
	return true
}

// Exit takes s out of its resource: it reports whether s was inside
// (a mutex's or an election's: and nobody else entered). A process that
// died exits nothing (true).
func (b *Board) Exit(s Section) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead[s.Proc] {
		return true
	}
	r := b.resource(s.Kind, s.Name)
	if s.Kind.Single() {
		if r.inside == nil || r.inside.tok != s.Tok {
			return false
		}
		r.inside = nil
		return true
	}
	n := len(r.holders)
	r.holders = slices.DeleteFunc(r.holders, func(h *occupant) bool { return h.tok == s.Tok })
	return len(r.holders) < n
}

// Waited records a wait that ended in a handle lost before its section
// began (nothing entered).
func (b *Board) Waited(kd Kind, write bool, waited time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &b.per[kd]
	if write {
		c.MaxWaitW = max(c.MaxWaitW, waited)
	} else {
		c.MaxWait = max(c.MaxWait, waited)
	}
}

// Unfinished records an acquisition of kd that never got its handle after
// waiting waited: it gave up, or the run ended.
func (b *Board) Unfinished(kd Kind, waited time.Duration, gaveUp bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &b.per[kd]
	c.MaxUnfin = max(c.MaxUnfin, waited)
	if gaveUp {
		c.GaveUp++
	}
}

// Dropped counts a client closed under a holder of kd.
func (b *Board) Dropped(kd Kind) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.per[kd].Dropped++
}

// Kill marks proc dead: from now on it enters and writes nothing; a
// mutex's or an election's holder of it is left inside, dead (the next
// one may enter), and it is taken out of the semaphores' and rwlocks'
// holders, each counted as killed. It returns the kinds it was inside of.
func (b *Board) Kill(proc string) (inside [NumKinds]int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dead[proc] = true
	for _, r := range b.res {
		n := int64(0)
		if r.inside != nil && r.inside.proc == proc && !r.inside.dead {
			r.inside.dead = true
			n++
		}
		before := len(r.holders)
		r.holders = slices.DeleteFunc(r.holders, func(h *occupant) bool { return h.proc == proc })
		n += int64(before - len(r.holders))
		b.per[r.kind].Killed += n
		inside[r.kind] += n
	}
	return inside
}

// Inside returns the processes with a live holder inside a resource of
// one of kinds.
func (b *Board) Inside(kinds []Kind) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var procs []string
	for _, r := range b.res {
		if !slices.Contains(kinds, r.kind) {
			continue
		}
		if r.inside != nil && !r.inside.dead {
			procs = append(procs, r.inside.proc)
		}
		for _, h := range r.holders {
			procs = append(procs, h.proc)
		}
	}
	slices.Sort(procs) // the caller's choice among them is its seed's
	return slices.Compact(procs)
}

// Entries is the number of critical sections entered so far, of every
// kind.
func (b *Board) Entries() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Violations is the number of violations found so far, of every kind.
func (b *Board) Violations() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.violations
}

// End counts the live holders still inside, once every process has ended,
// and returns the counts per kind, the writes accepted and the first
// violations said.
func (b *Board) End() (per [NumKinds]Counts, writes int64, reports []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(b.res)) {
		r := b.res[name]
		c := &b.per[r.kind]
		if r.inside != nil && !r.inside.dead {
			b.violation(r.kind, &c.LeftInside, "%s: token %d of %s left inside", name, r.inside.tok, r.inside.proc)
		}
		for _, h := range r.holders {
			b.violation(r.kind, &c.LeftInside, "%s: %s left inside", name, h)
		}
		r.inside, r.holders = nil, nil
	}
	return b.per, b.writes, slices.Clone(b.reports)
}
