package memdb

import (
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Stream is a change stream of one collection: the events of its writes
// since Watch, in order, that pass its pipeline. It has no goroutine: the
// caller takes the events with Next, and may wait on Ready. Safe for
// concurrent use.
type Stream struct {
	filters []bson.D // of the pipeline's $match stages
	ready   chan struct{}
	mu      sync.Mutex
	events  []bson.D
	closed  bool
}

// Watch opens a change stream over the collection's writes from now on.
// pipeline is $match stages over the events (nil: every event), as
// mongo.Collection.Watch takes them.
func (c *Table) Watch(pipeline any) (s *Stream, err error) {
	defer guard(&err)
	s = &Stream{ready: make(chan struct{}, 1)}
	if pipeline != nil {
		for _, st := range as[bson.A](norm(pipeline), "pipeline") {
			if st := stageOf(st); st.Key != "$match" {
				panic(notModelled("change stream stage %s", st.Key))
			} else {
				s.filters = append(s.filters, as[bson.D](st.Value, st.Key))
			}
		}
	}
	c.streams = append(c.streams, s)
	return s, nil
}

// Next returns the next event that passes the pipeline, or nil if there
// is none yet.
func (s *Stream) Next() (event bson.Raw, err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.events) > 0 {
		ev := s.events[0]
		s.events = s.events[1:]
		if !slices.ContainsFunc(s.filters, func(f bson.D) bool { return !matches(ev, f) }) {
			return encode(ev), nil
		}
	}
	return nil, nil
}

// Ready receives after events arrived that Next has not taken (once for
// several).
func (s *Stream) Ready() <-chan struct{} { return s.ready }

// Close ends the stream: it receives no more events.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.events = true, nil
}

// emit gives each open stream the event of a write of doc
// (changeEvent); desc is an update's description of its change.
func (c *Table) emit(now time.Time, op string, doc, desc bson.D) {
	c.seq++
	ev := c.changeEvent(now, c.seq, op, doc, desc)
	c.streams = slices.DeleteFunc(c.streams, func(s *Stream) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.events = append(s.events, ev)
			select {
			case s.ready <- struct{}{}:
			default:
			}
		}
		return s.closed
	})
}
