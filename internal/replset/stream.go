package replset

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/memdb"
)

// Stream is a change stream of one collection of a member, at read
// concern "majority": a memdb.Stream whose events are those of the writes
// the member knows a majority applied, so never one of a write rolled
// back. Next and Wait bring the set up to date first, as the set has no
// goroutine of its own. Safe for concurrent use.
type Stream struct {
	m *Member
	*memdb.Stream
}

// Watch opens a change stream at "majority" of coll's writes from now on,
// as mongo.Collection.Watch does with a pipeline of $match stages (nil:
// every event). Only a primary opens one: a secondary refuses with
// NotPrimaryNoSecondaryOk (13435), a member that is down fails with a
// network error. When the member steps down its streams end, their next
// read failing with InterruptedDueToReplStateChange (11602), which the
// driver resumes on the new primary; when it goes down, with a network
// error.
func (m *Member) Watch(coll string, pipeline any) (*Stream, error) {
	st := &Stream{m: m}
	err := m.asPrimary(context.Background(), coll, func(c *memdb.Table, _ time.Time) (err error) {
		st.Stream, err = c.Watch(pipeline)
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Next returns the next event, or nil if there is none yet, as
// memdb.Stream's Next does.
func (st *Stream) Next() (bson.Raw, error) {
	st.m.set.sync()
	return st.Stream.Next()
}

// Wait returns once events may have arrived that Next has not taken, or
// the set may have changed so that they have (a write replicated, a
// member stepped down, a partition healed), or when the stream ends, or
// with ctx's error when ctx ends.
func (st *Stream) Wait(ctx context.Context) error {
	s := st.m.set
	s.mu.Lock()
	s.advance()
	next, changed := s.nextDue(), s.changed
	s.mu.Unlock()
	due, cancel := context.WithCancel(ctx)
	defer cancel()
	if !next.IsZero() {
		due, cancel = context.WithDeadline(due, next)
		defer cancel()
	}
	// The set has no goroutine: this one ends with Wait.
	go func() {
		select {
		case <-changed:
			cancel()
		case <-due.Done():
		}
	}()
	if st.Stream.Wait(due) != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// sync brings the set up to the base clock's now.
func (s *Set) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
}
