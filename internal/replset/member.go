package replset

import (
	"context"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/memdb"
)

// Member is one mongod of a set: a database, a clock and an oplog.
type Member struct {
	set         *Set
	id          int
	clock       Clock
	lag         time.Duration
	store       *memdb.Store
	oplog       oplog
	committed   int // entries known majority-committed: the commit point
	primary     bool
	term        int64     // the term it is primary of, when primary
	side        int       // its side of a partition: 0 or 1
	since       time.Time // when its side took its present shape
	lostPrimary time.Time // when an election on its side last failed
	down        bool      // crashed, until upAt
	upAt        time.Time
	changedAt   time.Time // when it last went down or came back
}

// stepDown makes m a secondary, if it was primary, and ends its change
// streams with err.
func (m *Member) stepDown(err error) {
	m.primary = false
	m.store.EndStreams(err)
}

// commitTo sets the member's commit point to its first n entries, and lets
// its change streams deliver their events.
func (m *Member) commitTo(n int) {
	if n > m.committed {
		m.store.SetVisible(m.oplog.at(n - 1).pos)
	}
	m.committed = n
}

// ID returns the member's index in its set.
func (m *Member) ID() int { return m.id }

// Now returns the member's clock's time: the $$NOW of its database.
func (m *Member) Now() time.Time {
	b := m.set.base()
	drift := time.Duration(float64(b.Sub(m.set.start)) * m.clock.Drift)
	return b.Add(m.clock.Offset + drift)
}

// IsPrimary reports whether the member is a primary now, as its hello
// reply says: a cut-off primary says so until it steps down.
func (m *Member) IsPrimary() bool {
	m.set.mu.Lock()
	defer m.set.mu.Unlock()
	m.set.advance()
	return m.primary
}

// LastOpTime returns the optime of the last entry the member applied.
func (m *Member) LastOpTime() OpTime {
	m.set.mu.Lock()
	defer m.set.mu.Unlock()
	m.set.advance()
	return m.last()
}

// Concern is a write concern's w.
type Concern int

// The write concerns modelled.
const (
	W1       Concern = iota // acknowledged once the primary applied it
	Majority                // acknowledged once a majority applied it
)

// Write runs op on the member's collection coll, as a write: refused with
// NotWritablePrimary (10107) unless the member is primary. At W1 it returns
// once applied; at Majority once a majority applied it, or with
// PrimarySteppedDown (189) if the member steps down first, or ctx's error
// if ctx ends first (the write stays applied). op's error is returned as
// is, and a failed op writes nothing to the oplog.
func (m *Member) Write(ctx context.Context, w Concern, coll string, op func(c *memdb.Table, now time.Time) error) error {
	s := m.set
	s.mu.Lock()
	s.advance()
	switch {
	case m.down:
		s.mu.Unlock()
		return errDown(m)
	case !m.primary:
		s.mu.Unlock()
		return errNotWritablePrimary
	}
	var changes []memdb.Change
	err := m.store.Do(ctx, coll, func(c *memdb.Table, now time.Time) (err error) {
		changes, err = c.Record(func() error { return op(c, now) })
		return err
	})
	if len(changes) > 0 {
		m.appendEntry(entry{at: s.base(), coll: coll, changes: changes})
		s.commit(m)
	}
	target, term := m.oplog.len(), m.term
	s.mu.Unlock()
	if err != nil || w == W1 {
		return err
	}
	return m.awaitCommit(ctx, target, term)
}

// awaitCommit waits until the member, primary of term, has committed its
// first n entries.
func (m *Member) awaitCommit(ctx context.Context, n int, term int64) error {
	s := m.set
	for {
		s.mu.Lock()
		s.advance()
		switch {
		case m.down:
			s.mu.Unlock()
			return errDown(m)
		case !m.primary || m.term != term:
			s.mu.Unlock()
			return errSteppedDown
		case m.committed >= n:
			s.mu.Unlock()
			return nil
		}
		changed, next := s.changed, s.nextDue()
		s.mu.Unlock()
		if err := awaitChange(ctx, nil, changed, next); err != nil {
			return err
		}
	}
}

// ReadConcern is a read concern's level.
type ReadConcern int

// The read concerns modelled.
const (
	Local        ReadConcern = iota // what the member applied
	MajorityRead                    // what the member knows a majority applied
)

// Read runs op on the member's collection coll as the read concern rc
// sees it. op must not write.
func (m *Member) Read(ctx context.Context, rc ReadConcern, coll string, op func(c *memdb.Table, now time.Time) error) error {
	s := m.set
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if m.down {
		return errDown(m)
	}
	if rc == Local || !m.uncommitted(coll) {
		return m.store.Do(ctx, coll, op)
	}
	// The majority-committed state: the data as it is, with the entries
	// past the commit point undone on a copy.
	var docs []bson.Raw
	_ = m.store.Do(ctx, coll, func(c *memdb.Table, _ time.Time) error { docs = c.Docs(); return nil })
	view := memdb.NewStore("", m.Now)
	return view.Do(ctx, coll, func(c *memdb.Table, now time.Time) error {
		for _, d := range docs {
			if err := c.InsertOne(now, d); err != nil {
				return err
			}
		}
		for i := m.oplog.len() - 1; i >= m.committed; i-- {
			if e := m.oplog.at(i); e.coll == coll {
				undo(c, now, *e)
			}
		}
		return op(c, now)
	})
}

// asPrimary runs op on the member's collection coll at "local", refused
// unless the member is up and primary now: a read at read preference
// primary, or the opening of a change stream.
func (m *Member) asPrimary(ctx context.Context, coll string, op func(t *memdb.Table, now time.Time) error) error {
	s := m.set
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	switch {
	case m.down:
		return errDown(m)
	case !m.primary:
		return errNotPrimaryNoSecondaryOk
	}
	return m.store.Do(ctx, coll, op)
}

// uncommitted reports whether an entry past the member's commit point
// changed coll.
func (m *Member) uncommitted(coll string) bool {
	for i := m.committed; i < m.oplog.len(); i++ {
		if e := m.oplog.at(i); e.coll == coll && len(e.changes) > 0 {
			return true
		}
	}
	return false
}

func (m *Member) last() OpTime { return m.oplog.last().optime }

// appendEntry writes e to the primary's oplog at its next optime, and
// nowhere else: replicate brings it to the secondaries.
func (m *Member) appendEntry(e entry) {
	e.optime = OpTime{Term: m.term, Index: int64(m.oplog.len()) + 1}
	e.pos = m.store.Position()
	m.oplog.add(e)
}

// apply applies a primary's entry on a secondary.
func (m *Member) apply(e entry) {
	if len(e.changes) > 0 {
		_ = m.store.Do(context.Background(), e.coll, func(c *memdb.Table, now time.Time) error {
			for _, ch := range e.changes {
				put(c, now, ch.ID, ch.After)
			}
			return nil
		})
	}
	e.pos = m.store.Position()
	m.oplog.add(e)
}

// rollBackTo undoes the member's entries that p's oplog lacks, newest
// first, as MongoDB's rollback does back to the common point; the member
// then replicates from p.
func (m *Member) rollBackTo(p *Member) {
	if m.committed < p.oplog.start {
		m.resync(p) // p dropped what would find the common point
		return
	}
	common := max(m.oplog.start, p.oplog.start)
	for common < m.oplog.len() && p.oplog.matches(common, m.oplog.at(common)) {
		common++
	}
	for i := m.oplog.len() - 1; i >= common; i-- {
		e := m.oplog.at(i)
		_ = m.store.Do(context.Background(), e.coll, func(c *memdb.Table, now time.Time) error {
			undo(c, now, *e)
			return nil
		})
	}
	if m.oplog.len() > common {
		m.set.rolled++
	}
	m.oplog.truncate(common)
	m.committed = min(m.committed, common)
}

// resync makes the member a copy of p, data and oplog, as MongoDB's
// initial sync does for a member that fell off the end of its sync
// source's oplog, or diverged before it: what it held that p lacks is
// lost, as no majority applied it.
func (m *Member) resync(p *Member) {
	colls := append(m.store.Collections(), p.store.Collections()...)
	for _, coll := range colls {
		var docs []bson.Raw
		_ = p.store.Do(context.Background(), coll, func(c *memdb.Table, _ time.Time) error { docs = c.Docs(); return nil })
		_ = m.store.Do(context.Background(), coll, func(c *memdb.Table, now time.Time) error {
			for _, d := range c.Docs() {
				put(c, now, d.Lookup("_id"), nil)
			}
			for _, d := range docs {
				put(c, now, d.Lookup("_id"), d)
			}
			return nil
		})
	}
	pos := m.store.Position()
	m.oplog = oplog{start: p.oplog.start, entries: slices.Clone(p.oplog.entries)}
	for i := range m.oplog.entries {
		m.oplog.entries[i].pos = pos
	}
	m.committed = min(p.committed, m.oplog.len())
	m.store.SetVisible(pos)
}

func undo(c *memdb.Table, now time.Time, e entry) {
	for i := len(e.changes) - 1; i >= 0; i-- {
		put(c, now, e.changes[i].ID, e.changes[i].Before)
	}
}

// put makes the document of _id id be doc (nil: absent).
func put(c *memdb.Table, now time.Time, id bson.RawValue, doc bson.Raw) {
	if err := c.Put(now, id, doc); err != nil {
		panic(err) // the model's own documents: always modelled
	}
}
