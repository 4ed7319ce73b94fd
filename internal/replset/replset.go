// Package replset is a model of a MongoDB 8.0 replica set over the model of
// one database (internal/memdb), for the simulation's failovers.
//
// Each member is a memdb.Store of its own, with a clock of its own (an
// offset and a drift over the base clock) and an oplog of the writes it
// applied. The primary applies a write at once; each secondary applies it
// after its replication lag. A write at w:"majority" is acknowledged once a
// majority applied it; a read at "majority" sees the member's majority
// commit point. A primary cut off from a majority keeps answering until its
// election timeout, then steps down; the majority side then elects the
// member with the highest optime, which holds every majority-committed
// write. When a cut-off member rejoins, the writes it applied that no
// majority applied are rolled back and it syncs from the primary. A member
// may go down and come back (Restart), as a mongod that crashes and
// restarts: absent meanwhile, its journaled data kept. A change stream
// (Member.Watch) delivers the events of majority-committed writes alone,
// and ends when its member steps down or goes down. The oplogs drop the
// entries every member applied and knows majority-committed, and, past
// their size, the oldest their member knows majority-committed: a member
// that needed them resyncs from the primary's data. With a
// Config.Rand, each election comes a random offset after its timeout.
//
// A Client (Set.Client) is a driver's client of the set and a memdb.Conn,
// through which the library's engine runs over it: it sends to the
// primary it selected until a heartbeat or a "not primary" reply finds
// another, waits for a primary as server selection does, and retries a
// write or read refused unapplied once, as retryable writes and reads do.
//
// Time is the base clock's (time.Now, the bubble's inside testing/synctest):
// the set has no goroutine, and catches up on replication, step-downs and
// elections whenever it is used.
//
// Not modelled yet: the driver's retry of a write that may have been
// applied (its reply lost, or PrimarySteppedDown while it waited for the
// majority), which needs the server's record of retried writes; the model
// returns the error, and the library retries it as its own. Nor
// replSetStepDown as a command (StepDown is its force: true, without the
// secondaries' catch-up), a secondary's delay in learning the commit
// point, an oplog's size in bytes (it is counted in entries), chained
// replication and arbiters.
package replset

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/memdb"
)

// DefaultElectionTimeout is MongoDB's electionTimeoutMillis default.
const DefaultElectionTimeout = 10 * time.Second

// electionOffsetLimit is the most an election comes after its timeout, as
// a fraction of it: MongoDB's electionTimeoutOffsetLimitFraction, by which
// it randomizes each member's election timer.
const electionOffsetLimit = 0.15

// DefaultOplogSize is how many entries an oplog keeps at most, beyond the
// last its member knows majority-committed: enough for a member down or
// cut off for minutes of a simulation's writes to catch up from it.
const DefaultOplogSize = 10_000

// Errors as MongoDB 8.0 replies them; the driver classes both as transient.
var (
	errNotWritablePrimary = mongo.CommandError{Code: 10107, Name: "NotWritablePrimary",
		Message: "replset: not primary"}
	errSteppedDown = mongo.CommandError{Code: 189, Name: "PrimarySteppedDown",
		Message: "replset: primary stepped down while waiting for replication"}
	errNotPrimaryNoSecondaryOk = mongo.CommandError{Code: 13435, Name: "NotPrimaryNoSecondaryOk",
		Message: "replset: not primary and secondaryOk=false"}
	// A change stream's getMore on a member that stepped down: resumable,
	// so the driver opens the stream again on the new primary.
	errInterrupted = mongo.CommandError{Code: 11602, Name: "InterruptedDueToReplStateChange",
		Labels:  []string{"ResumableChangeStreamError"},
		Message: "replset: operation was interrupted because the node stepped down"}
)

// errDown is the error of an operation on a member that is down, as the
// driver returns a connection refused or cut: a network error.
func errDown(m *Member) error {
	return mongo.CommandError{Labels: []string{"NetworkError"}, Name: "NetworkError",
		Message: fmt.Sprintf("replset: member %d is down", m.id)}
}

// Clock is a member's clock: the base clock, ahead by Offset, running
// faster by Drift (0.001: one millisecond a second) from the set's start.
type Clock struct {
	Offset time.Duration
	Drift  float64
}

// Config describes a set: one Clock and one replication lag per member.
type Config struct {
	DB              string              // the database's name
	Clocks          []Clock             // one per member; their number is the set's size
	Lags            []time.Duration     // replication lag per member (nil or short: 0)
	ElectionTimeout time.Duration       // 0: DefaultElectionTimeout
	OplogSize       int                 // 0: DefaultOplogSize
	Store           []memdb.StoreOption // each member's database's
	// Rand, if not nil, delays each election after its timeout by a
	// random offset of up to 15% of the timeout, as MongoDB randomizes
	// its election timers; nil: no offset. The set draws from it under
	// its lock: give it a source of its own, seeded to replay a run.
	Rand *rand.Rand
}

// Set is a replica set. Member 0 is the first primary, in term 1. Safe for
// concurrent use.
type Set struct {
	mu      sync.Mutex
	base    func() time.Time
	start   time.Time
	timeout time.Duration
	members []*Member
	changed chan struct{} // closed and replaced at each change of topology
	term    int64         // the highest term any member has seen
	rand    *rand.Rand
	size    int              // of an oplog: Config.OplogSize
	offset  [2]time.Duration // each side's next election's random offset
	rolled  int64            // rollbacks so far: a member undid writes
	ops     atomic.Int64     // operations its clients sent that reached it
}

// New returns a set as cfg describes, all members connected, member 0 its
// primary.
func New(cfg Config) *Set {
	if len(cfg.Clocks) == 0 {
		panic("replset: a set needs at least one member")
	}
	s := &Set{base: time.Now, start: time.Now(), timeout: cfg.ElectionTimeout, changed: make(chan struct{}), rand: cfg.Rand}
	if s.timeout == 0 {
		s.timeout = DefaultElectionTimeout
	}
	if s.size = cfg.OplogSize; s.size == 0 {
		s.size = DefaultOplogSize
	}
	for i, c := range cfg.Clocks {
		m := &Member{set: s, id: i, clock: c, side: 0, since: s.start}
		if i < len(cfg.Lags) {
			m.lag = cfg.Lags[i]
		}
		m.store = memdb.NewStore(cfg.DB, m.Now, cfg.Store...)
		s.members = append(s.members, m)
	}
	s.term = 1
	p := s.members[0]
	p.primary, p.term = true, 1
	p.appendEntry(entry{at: s.start})
	for _, m := range s.members[1:] {
		m.apply(*p.oplog.at(0))
	}
	s.commit(p)
	return s
}

// SetEvents sets the form of every member's change events, as
// memdb.Store.SetEvents does.
func (s *Set) SetEvents(e memdb.Events) {
	for _, m := range s.members {
		m.store.SetEvents(e)
	}
}

// Stats returns how many elections followed the first primary's, and how
// many times a member rolled back writes.
func (s *Set) Stats() (elections, rollbacks int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	return s.term - 1, s.rolled
}

// Member returns member i.
func (s *Set) Member(i int) *Member { return s.members[i] }

// Size returns the number of members.
func (s *Set) Size() int { return len(s.members) }

// Primary returns the primary of the highest term, as a driver that sees
// every member picks it, and whether there is one.
func (s *Set) Primary() (*Member, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	p := s.primaryOfAll()
	return p, p != nil
}

// Partition cuts the members given from the others, from now on until
// Heal: each side replicates, steps down and elects on its own.
func (s *Set) Partition(members ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	now := s.base()
	for _, m := range s.members {
		m.side, m.since = 0, now
	}
	for _, i := range members {
		s.members[i].side = 1
	}
	s.topologyChanged()
}

// Heal reconnects every member. A member whose oplog diverged from the
// primary's rolls back the writes no majority applied and syncs from it;
// of two primaries, the one of the lower term steps down.
func (s *Set) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	now := s.base()
	for _, m := range s.members {
		m.side, m.since = 0, now
	}
	s.topologyChanged()
}

// StepDown makes the primary of the highest term step down now, and its
// side elect another member at once, as replSetStepDown with force: true
// does. It reports whether there was a primary to step down.
func (s *Set) StepDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	var p *Member
	for _, m := range s.members {
		if m.primary && (p == nil || m.term > p.term) {
			p = m
		}
	}
	if p == nil {
		return false
	}
	p.stepDown(errInterrupted)
	s.elect(p.side, p, s.base())
	s.topologyChanged()
	return true
}

// Restart takes member i down now, as a crash does, and brings it back
// after down. While down it answers nothing (Member.Write and Read fail
// with a network error), applies nothing, and counts for no majority and
// no election: a primary that goes down is replaced by an election on its
// side an election timeout later. Its data and oplog survive (they are
// journaled); when it comes back it is a secondary, rolls back the writes
// its side's primary lacks (those no majority applied), and catches up.
// A Restart of a member that is down already moves its return.
func (s *Set) Restart(i int, down time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	now := s.base()
	m := s.members[i]
	m.down, m.upAt, m.changedAt = true, now.Add(down), now
	m.stepDown(errDown(m))
	s.topologyChanged()
}

// comeBack brings m back up at at, a secondary that syncs from its side's
// primary, if it has one (else from the one its side elects).
func (s *Set) comeBack(m *Member, at time.Time) {
	m.down, m.changedAt = false, at
	if p := s.primaryOf(m.side); p != nil {
		m.rollBackTo(p)
	}
	s.topologyChanged()
}

func (s *Set) topologyChanged() {
	s.drawOffsets()
	close(s.changed)
	s.changed = make(chan struct{})
	s.resolve()
}

// resolve settles each side after a change of topology: of its primaries
// only the one of the highest term stays, and every member that diverged
// from it rolls back.
func (s *Set) resolve() {
	for side := range 2 {
		p := s.primaryOf(side)
		if p == nil {
			continue
		}
		for _, m := range s.members {
			if m.side != side || m == p || m.down {
				continue
			}
			if m.primary && m.term < p.term {
				m.stepDown(errInterrupted)
			}
			if !m.primary {
				m.rollBackTo(p)
			}
		}
	}
}

// primaryOf returns the primary of the highest term on side, or nil.
func (s *Set) primaryOf(side int) *Member {
	var p *Member
	for _, m := range s.members {
		if m.side == side && m.primary && (p == nil || m.term > p.term) {
			p = m
		}
	}
	return p
}

// hasMajority reports whether side holds a majority of the members, of
// those up.
func (s *Set) hasMajority(side int) bool {
	n := 0
	for _, m := range s.members {
		if m.side == side && !m.down {
			n++
		}
	}
	return 2*n > len(s.members)
}

// sideSince returns when side took its present shape: its members, and
// which of them are up.
func (s *Set) sideSince(side int) (t time.Time) {
	for _, m := range s.members {
		if m.side == side && m.since.After(t) {
			t = m.since
		}
		if m.side == side && m.changedAt.After(t) {
			t = m.changedAt
		}
	}
	return t
}

// advance brings the set up to the base clock's now: replication, then
// each step-down and election in time order.
func (s *Set) advance() {
	now := s.base()
	for {
		at, do := s.nextChange()
		if do == nil || at.After(now) {
			break
		}
		s.replicate(at)
		do()
	}
	s.replicate(now)
	s.trim()
}

// trim drops from every oplog the entries that no rollback can need: those
// every member applied and knows majority-committed; and, past the oplog's
// size, those its member knows majority-committed, as MongoDB's capped
// oplog drops its oldest (by size): a member that needed them resyncs.
func (s *Set) trim() {
	n := s.members[0].committed
	for _, m := range s.members[1:] {
		n = min(n, m.committed)
	}
	for _, m := range s.members {
		m.oplog.drop(max(n, min(m.committed, m.oplog.len()-s.size)))
	}
}

// nextChange returns the earliest step-down, election or return of a
// member to come, and what makes it; nil if none is due at any time.
func (s *Set) nextChange() (at time.Time, do func()) {
	earliest := func(t time.Time, f func()) {
		if do == nil || t.Before(at) {
			at, do = t, f
		}
	}
	for _, m := range s.members {
		if m.down {
			earliest(m.upAt, func() { s.comeBack(m, m.upAt) })
		}
	}
	for side := range 2 {
		p := s.primaryOf(side)
		switch {
		case p != nil && !s.hasMajority(side):
			// A primary that cannot see a majority steps down.
			earliest(s.sideSince(side).Add(s.timeout), func() { p.stepDown(errInterrupted) })
		case p == nil && s.hasMajority(side):
			// A majority without a primary elects one.
			t := s.electionDue(side)
			earliest(t, func() { s.elect(side, nil, t) })
		}
	}
	return at, do
}

// electionDue returns when side, a majority without a primary, elects
// one: an election timeout, and its random offset, after it took its
// shape or after its last failed election.
func (s *Set) electionDue(side int) time.Time {
	since := s.sideSince(side)
	for _, m := range s.members {
		if m.side == side && m.lostPrimary.After(since) {
			since = m.lostPrimary
		}
	}
	return since.Add(s.timeout + s.offset[side])
}

// elect makes the member of side with the highest optime, other than not,
// primary of a new term, and writes the term's first entry, as a new
// primary writes its "new primary" no-op. Without a majority, or a member
// to elect, the election fails, and its side tries again a timeout later.
func (s *Set) elect(side int, not *Member, now time.Time) {
	s.drawOffsets()
	best := s.candidate(side, not)
	if best == nil || !s.hasMajority(side) {
		for _, m := range s.members {
			if m.side == side {
				m.lostPrimary = now
			}
		}
		return
	}
	s.term++
	best.primary, best.term = true, s.term
	best.appendEntry(entry{at: now})
	for _, m := range s.members {
		if m.side == side && m != best && !m.down {
			if m.primary {
				m.stepDown(errInterrupted)
			}
			m.since = now
			m.rollBackTo(best)
		}
	}
}

// candidate returns the member of side that is up, other than not, with
// the highest optime (the first of several), or nil.
func (s *Set) candidate(side int, not *Member) (best *Member) {
	for _, m := range s.members {
		if m.side == side && m != not && !m.down && (best == nil || best.last().less(m.last())) {
			best = m
		}
	}
	return best
}

// drawOffsets draws each side's next election's random offset, if the set
// has a source: anew whenever an election timer starts again.
func (s *Set) drawOffsets() {
	if s.rand == nil {
		return
	}
	limit := int64(float64(s.timeout) * electionOffsetLimit)
	for side := range s.offset {
		s.offset[side] = time.Duration(s.rand.Int64N(limit + 1))
	}
}

// replicate applies, on each secondary, the entries of its side's primary
// due by now: written, and reachable, at least a lag ago.
func (s *Set) replicate(now time.Time) {
	for side := range 2 {
		p := s.primaryOf(side)
		if p == nil {
			continue
		}
		for _, m := range s.members {
			if m.side != side || m.primary || m.down {
				continue
			}
			if m.committed < p.oplog.start {
				m.resync(p)
			}
			for n := m.oplog.len(); n < p.oplog.len(); n++ {
				e := *p.oplog.at(n)
				due := e.at
				if m.since.After(due) {
					due = m.since
				}
				if due.Add(m.lag).After(now) {
					break
				}
				m.apply(e)
			}
		}
		s.commit(p)
		for _, m := range s.members {
			if m.side == side && !m.primary && !m.down {
				m.commitTo(min(p.committed, m.oplog.len()))
			}
		}
	}
}

// commit advances p's commit point to the last entry of its term that a
// majority applied, and with it every entry before.
func (s *Set) commit(p *Member) {
	for n := p.oplog.len(); n > p.committed; n-- {
		e := p.oplog.at(n - 1)
		if e.optime.Term != p.term {
			break
		}
		have := 0
		for _, m := range s.members {
			if m.oplog.matches(n-1, e) {
				have++
			}
		}
		if 2*have > len(s.members) {
			p.commitTo(n)
			return
		}
	}
}

// nextDue returns when the set may next change by itself, zero if never.
func (s *Set) nextDue() (t time.Time) {
	if at, do := s.nextChange(); do != nil {
		t = at
	}
	for side := range 2 {
		p := s.primaryOf(side)
		if p == nil {
			continue
		}
		for _, m := range s.members {
			if m.side != side || m.primary || m.down || m.oplog.len() >= p.oplog.len() {
				continue
			}
			due := p.oplog.at(m.oplog.len()).at
			if m.since.After(due) {
				due = m.since
			}
			due = due.Add(m.lag)
			if t.IsZero() || due.Before(t) {
				t = due
			}
		}
	}
	return t
}

// OpTime is an oplog entry's place: its primary's term and its index.
type OpTime struct{ Term, Index int64 }

func (a OpTime) less(b OpTime) bool {
	return a.Term < b.Term || a.Term == b.Term && a.Index < b.Index
}

func (a OpTime) String() string { return fmt.Sprintf("(%d, %d)", a.Term, a.Index) }

// entry is one write in an oplog: the documents it changed, before and
// after (nil: absent), so that a rollback can undo it.
type entry struct {
	optime  OpTime
	pos     uint64    // the member's change history's position after it
	at      time.Time // when the primary applied it, on the base clock
	coll    string
	changes []memdb.Change
}
