package memdb

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The defaults of a Store's change history (WithHistory,
// WithCursorTimeout).
const (
	// DefaultHistory is how many events a database keeps: small, so that
	// a model runs in little memory for as long as it runs. MongoDB's
	// oplog keeps far more (by size or age); a stream that cannot keep up
	// with that many writes is behind on MongoDB too.
	DefaultHistory = 1024
	// DefaultCursorTimeout is how long an unread change stream lives on
	// MongoDB 8.0 with the Go driver: its cursor belongs to the implicit
	// session the driver opens for it, and from MongoDB 4.4.8 on, such a
	// cursor is not killed by cursorTimeoutMillis (10 minutes) but with
	// its session, which expires after logicalSessionTimeoutMinutes (30)
	// without use.
	DefaultCursorTimeout = 30 * time.Minute
)

// history is a database's change events, as MongoDB's oplog: one for all
// its collections, capped, each event at a position. Streams read it by
// position and keep no events of their own, so that an unread stream
// costs nothing but its cursor, and a cursor left unread is killed.
type history struct {
	op      *sync.Mutex // the database's operations', nil for a lone Table: a read is one of them
	mu      sync.Mutex
	now     func() time.Time
	size    int
	timeout time.Duration
	ring    []entry // position p at ring[p%size], for p from next-len(ring)
	next    uint64  // the position of the next event
	visible uint64  // streams read the events before it alone (SetVisible)
	streams []*Stream
	cursors int64 // cursor ids given
}

// entry is an event at its position in a history.
type entry struct {
	coll *Table
	ev   bson.D
}

// newHistory returns an empty history read at the clock now, whose
// reads are operations of the database that op orders.
func newHistory(now func() time.Time, op *sync.Mutex) *history {
	return &history{op: op, now: now, size: DefaultHistory, timeout: DefaultCursorTimeout, visible: math.MaxUint64}
}

// history returns the history c's events go to: its database's, or one
// of its own for a Table used alone.
func (c *Table) history() *history {
	if c.hist == nil {
		c.hist = newHistory(time.Now, nil)
	}
	return c.hist
}

// add appends the event ev of a write to coll, dropping the oldest beyond
// the cap, and wakes coll's streams, and the others once half the history
// has passed them: a getMore scans the whole oplog, so a stream that is
// read does not fall behind while its own collection has no writes.
func (h *history) add(coll *Table, ev bson.D) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) < h.size {
		h.ring = append(h.ring, entry{coll, ev})
	} else {
		h.ring[h.next%uint64(h.size)] = entry{coll, ev}
	}
	h.next++
	h.sweep()
	for _, s := range h.streams {
		if s.coll == coll || h.next-s.pos >= uint64(h.size+1)/2 {
			s.wake()
		}
	}
}

// setVisible lets streams read the events before position pos alone,
// and wakes those that may read more.
func (h *history) setVisible(pos uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.visible = pos
	for _, s := range h.streams {
		if s.pos < pos {
			s.wake()
		}
	}
}

// endAll ends every open stream with err, which its next read returns.
func (h *history) endAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.streams {
		if s.err == nil {
			s.cause = err
			s.end(err)
		}
	}
	h.sweep()
}

// open returns the number of open cursors.
func (h *history) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep()
	return len(h.streams)
}

// sweep kills the cursors left unread for the cursor timeout, as MongoDB's
// cursor monitor does, and forgets the streams that ended; h.mu is held.
func (h *history) sweep() {
	now := h.now()
	h.streams = slices.DeleteFunc(h.streams, func(s *Stream) bool {
		if s.idle(now) {
			s.end(cursorNotFound(s.id))
		}
		return s.err != nil
	})
}

// Stream is a change stream of one collection: the events of its writes
// since Watch, in order, that pass its pipeline, read from its database's
// history (WithHistory) by position, as a change stream's cursor reads
// MongoDB's oplog. It has no goroutine: the caller takes the events with
// Next, and waits for more with Wait, as the driver's getMore does with
// awaitData. A stream that fell behind the history fails with
// ChangeStreamHistoryLost; one neither read nor waited on for the cursor
// timeout (WithCursorTimeout) is killed, and fails with CursorNotFound.
// Safe for concurrent use.
type Stream struct {
	h       *history
	coll    *Table
	filters []bson.D // of the pipeline's $match stages
	ready   chan struct{}
	id      int64
	// Under h.mu:
	pos      uint64    // of the next event to read
	used     time.Time // when last read, or waited on
	awaiting int       // calls of Wait under way: a getMore in progress is never idle
	err      error     // why it ended: its next read's error
	cause    error     // an error EndStreams ended it with, for its next read
}

// Watch opens a change stream over the collection's writes from now on.
// pipeline is $match stages over the events (nil: every event), as
// mongo.Collection.Watch takes them.
func (c *Table) Watch(pipeline any) (s *Stream, err error) {
	defer guard(&err)
	h := c.history()
	s = &Stream{h: h, coll: c, ready: make(chan struct{}, 1)}
	if pipeline != nil {
		for _, st := range as[bson.A](norm(pipeline), "pipeline") {
			if st := stageOf(st); st.Key != "$match" {
				panic(notModelled("change stream stage %s", st.Key))
			} else {
				s.filters = append(s.filters, as[bson.D](st.Value, st.Key))
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cursors++
	s.id, s.pos, s.used = h.cursors, h.next, h.now()
	h.streams = append(h.streams, s)
	return s, nil
}

// Next returns the next event that passes the pipeline, or nil if there
// is none yet: a getMore, an operation of the database, ordered with its
// writes. Its error is the server's as the driver returns it:
// ChangeStreamHistoryLost if events it had not read were dropped from
// the history, CursorNotFound if it was closed, killed after the cursor
// timeout, or failed before.
func (s *Stream) Next() (event bson.Raw, err error) {
	defer guard(&err)
	h := s.h
	if h.op != nil {
		h.op.Lock()
		defer h.op.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	switch {
	case s.cause != nil:
		err, s.cause = s.cause, nil
		return nil, err
	case s.err != nil:
		return nil, cursorNotFound(s.id) // killed on the server with its error
	case s.idle(now):
		s.end(cursorNotFound(s.id))
		return nil, s.err
	}
	s.used = now
	for ; s.pos < min(h.next, h.visible); s.pos++ {
		if h.next-s.pos > uint64(len(h.ring)) {
			s.end(historyLost)
			return nil, s.err
		}
		e := h.ring[s.pos%uint64(h.size)]
		if e.coll == s.coll && !slices.ContainsFunc(s.filters, func(f bson.D) bool { return !matches(e.ev, f) }) {
			s.pos++
			return encode(e.ev), nil
		}
	}
	return nil, nil
}

// Wait returns once events may have arrived that Next has not taken
// (once for several), or when the stream ends, or with ctx's error when
// ctx ends. While it waits, the stream is in use, as a cursor is during
// a getMore with awaitData: never idle.
func (s *Stream) Wait(ctx context.Context) error {
	h := s.h
	h.mu.Lock()
	s.awaiting++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		s.awaiting--
		s.used = h.now()
		h.mu.Unlock()
	}()
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the stream, as the driver's Close kills its cursor.
func (s *Stream) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.err == nil {
		s.end(cursorNotFound(s.id))
	}
}

// idle reports whether s was left unread for the cursor timeout at now;
// h.mu is held.
func (s *Stream) idle(now time.Time) bool {
	return s.err == nil && s.awaiting == 0 && now.Sub(s.used) >= s.h.timeout
}

// end ends s with err, and wakes a Wait for it; h.mu is held. The history
// forgets it at its next sweep.
func (s *Stream) end(err error) {
	s.err = err
	s.wake()
}

func (s *Stream) wake() {
	select {
	case s.ready <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// historyLost is the error of a change stream whose next event is no
// longer in the oplog, as MongoDB returns it; it is not resumable, so the
// Go driver returns it to the caller.
var historyLost error = mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost",
	Labels:  []string{"NonResumableChangeStreamError"},
	Message: "memdb: Resume of change stream was not possible, as the resume point may no longer be in the oplog."}

// cursorNotFound is a getMore's error for a cursor that does not exist
// (any more) on the server.
func cursorNotFound(id int64) error {
	return mongo.CommandError{Code: 43, Name: "CursorNotFound", Message: fmt.Sprintf("memdb: cursor id %d not found", id)}
}

// emit adds to the history the event of a write of doc (changeEvent);
// desc is an update's description of its change.
func (c *Table) emit(now time.Time, op string, doc, desc bson.D) {
	c.seq++
	ev := c.changeEvent(now, c.seq, op, doc, desc)
	c.history().add(c, ev)
}
