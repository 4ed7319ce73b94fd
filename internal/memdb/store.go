package memdb

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// Store is a database: collections by name, a clock and the faults of the
// network to it. It is safe for concurrent use, and has no goroutine and
// no process-wide state: inside a testing/synctest bubble, a Store made
// there reads the bubble's clock and waits on the bubble's timers.
type Store struct {
	Faults Faults
	*data
}

// data is a database's collections, clock and change history, shared by
// the Stores that Client returns.
type data struct {
	db     string
	now    func() time.Time
	mu     sync.Mutex
	colls  map[string]*Table
	ops    int64  // operations applied, under mu
	events Events // its tables' form of events, under mu
	hist   *history
}

// NewStore returns an empty database named db, whose $$NOW is now() (nil:
// time.Now), with opts.
func NewStore(db string, now func() time.Time, opts ...StoreOption) *Store {
	if now == nil {
		now = time.Now
	}
	d := &data{db: db, now: now, colls: map[string]*Table{}}
	d.hist = newHistory(now, &d.mu)
	for _, o := range opts {
		o(d.hist)
	}
	return &Store{data: d}
}

// A StoreOption sets how a Store's database keeps its change history.
type StoreOption func(*history)

// WithHistory sets how many change events the database keeps, of all its
// collections together, as MongoDB's oplog is one for the replica set and
// capped: a change stream that has fallen further behind fails on its
// next read with ChangeStreamHistoryLost. DefaultHistory if not given; n
// must be at least 1.
func WithHistory(n int) StoreOption {
	if n < 1 {
		panic("memdb: WithHistory needs at least one event")
	}
	return func(h *history) { h.size = n }
}

// WithCursorTimeout sets how long a change stream may go without a read
// before the database kills its cursor: its next read then fails with
// CursorNotFound. DefaultCursorTimeout if not given; d must be positive.
func WithCursorTimeout(d time.Duration) StoreOption {
	if d <= 0 {
		panic("memdb: WithCursorTimeout needs a positive duration")
	}
	return func(h *history) { h.timeout = d }
}

// Cursors returns the number of change streams open on the database:
// opened, and neither closed, failed nor timed out, as serverStatus's
// metrics.cursor.open counts them.
func (s *Store) Cursors() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.open()
}

// Collections returns the names of the database's collections, those
// written or read so far, in no order.
func (s *Store) Collections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.colls))
}

// Position returns the position in the database's change history that its
// next change event will take: each write's events take the next ones.
func (s *Store) Position() uint64 {
	s.hist.mu.Lock()
	defer s.hist.mu.Unlock()
	return s.hist.next
}

// SetVisible makes the database's change streams deliver only the events
// before position pos (Position), until it is called again, as a change
// stream delivers only majority-committed events: pos is the commit
// point's. A Store's streams deliver every event until it is called.
func (s *Store) SetVisible(pos uint64) { s.hist.setVisible(pos) }

// EndStreams ends every change stream open on the database: the next
// read of each returns err, and those after CursorNotFound, as a member
// that steps down or goes down ends its cursors.
func (s *Store) EndStreams(err error) { s.hist.endAll(err) }

// SetEvents sets the form of the change events of the database's updates,
// in every collection, from now on: MongoDB 8.0's (Events8, a new Store's)
// or 4.4's (Events44).
func (s *Store) SetEvents(e Events) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = e
	for _, c := range s.colls {
		c.Events = e
	}
}

// Client returns another client's way to s's database: the same
// collections and clock, through a network of its own (Faults, zero at
// first), as two processes reach one server, each over its own
// connections.
func (s *Store) Client() *Store { return &Store{data: s.data} }

// Do runs op on the collection named coll (created empty if new), alone
// and at the store's clock, through the faults: as a client would see it,
// the operation may be refused, unreachable, dropped, or applied and its
// reply delayed or lost. A Stream op opens (Table.Watch) is read outside
// Do: each read is an operation of the database, alone as op is.
func (s *Store) Do(ctx context.Context, coll string, op func(c *Table, now time.Time) error) error {
	return s.Faults.Send(ctx, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.colls[coll] == nil {
			s.colls[coll] = &Table{DB: s.db, Name: coll, Events: s.events, hist: s.hist}
		}
		s.ops++
		return op(s.colls[coll], s.now())
	})
}

// A Conn is a client's way to a database as the library's engine uses it:
// a Store's, or a replica set's (internal/replset), which routes each
// operation to a member as the driver does.
type Conn interface {
	// Write runs op, a statement that may write, as Store.Do does, and
	// returns once the write concern acknowledged it.
	Write(ctx context.Context, coll string, op func(c *Table, now time.Time) error) error
	// Read runs op, which does not write, at read concern "local".
	Read(ctx context.Context, coll string, op func(c *Table, now time.Time) error) error
	// Watch opens a change stream of coll, in one operation.
	Watch(ctx context.Context, coll string, pipeline any) (Cursor, error)
}

// A Cursor is a change stream as a client reads it: a Stream, or one a
// replica set's member serves at "majority".
type Cursor interface {
	Next() (event bson.Raw, err error)
	Wait(ctx context.Context) error
	Close()
}

// Write is Do: one server acknowledges its own writes.
func (s *Store) Write(ctx context.Context, coll string, op func(c *Table, now time.Time) error) error {
	return s.Do(ctx, coll, op)
}

// Read is Do.
func (s *Store) Read(ctx context.Context, coll string, op func(c *Table, now time.Time) error) error {
	return s.Do(ctx, coll, op)
}

// Watch opens a change stream of coll (Table.Watch) in one Do.
func (s *Store) Watch(ctx context.Context, coll string, pipeline any) (Cursor, error) {
	var st *Stream
	err := s.Do(ctx, coll, func(c *Table, _ time.Time) (err error) {
		st, err = c.Watch(pipeline)
		return err
	})
	if err != nil {
		return nil, err // not a Cursor holding a nil *Stream
	}
	return st, nil
}

// Send runs apply through the faults, as Store.Do runs its operation: it
// may be refused or unreachable (apply does not run), dropped (it does not
// either, and Send returns when ctx ends), or applied and its reply
// delayed or lost.
func (f *Faults) Send(ctx context.Context, apply func() error) error {
	lose, hole, err := f.before()
	switch {
	case err != nil:
		return err
	case hole:
		<-ctx.Done()
		return lostReply(ctx.Err())
	}
	err = apply()
	var d time.Duration
	f.set(func() { d = f.delay })
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return lostReply(ctx.Err())
		}
	}
	if lose {
		return lostReply(io.ErrUnexpectedEOF)
	}
	return err
}

// Ops returns the number of operations applied to the database so far,
// through every client.
func (s *Store) Ops() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops
}

// Faults are a network's faults between a client and a Store, set by
// explicit calls, so that a test says which operation meets which. The
// zero value is a network without faults; safe for concurrent use.
type Faults struct {
	mu           sync.Mutex
	delay        time.Duration
	lose         int
	refuse       int
	refuseWith   error // the refusals' error; nil: ShutdownInProgress
	partitioned  bool
	blackholed   bool
	disconnected bool
	sent         int64 // operations that met the faults so far
}

// Sent returns how many operations the client has sent through the
// network so far, whatever became of them: refused, dropped, unreachable
// or applied.
func (f *Faults) Sent() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// Delay delays every reply from now on by d (0: none). The operation is
// applied first: a context that ends meanwhile loses its reply.
func (f *Faults) Delay(d time.Duration) { f.set(func() { f.delay = d }) }

// LoseReplies applies the next n operations and loses their replies: each
// returns a network error, as the driver does when the connection breaks
// after the request was sent. The caller cannot tell it was applied.
func (f *Faults) LoseReplies(n int) { f.set(func() { f.lose = n }) }

// Refuse refuses the next n operations, unapplied, with the transient
// server error ShutdownInProgress (91), as a stepping-down server does.
func (f *Faults) Refuse(n int) { f.RefuseWith(n, nil) }

// RefuseWith refuses the next n operations, unapplied, with err (nil:
// Refuse's): a refusal the caller must not retry as it is, such as a
// statement too large for the server.
func (f *Faults) RefuseWith(n int, err error) { f.set(func() { f.refuse, f.refuseWith = n, err }) }

// Partition makes every operation fail, unapplied, until Heal, as the
// driver's server selection fails when no server is reachable (it does
// after its timeout; here at once).
func (f *Faults) Partition() { f.set(func() { f.partitioned = true }) }

// Blackhole drops every operation from now on until Heal, as a network
// that drops the bytes of a connection it keeps open: the request never
// reaches the server, no reply comes, and the operation fails with a
// network error when its context ends (never, without a deadline). An
// operation dropped stays dropped after Heal.
func (f *Faults) Blackhole() { f.set(func() { f.blackholed = true }) }

// Heal ends a partition or a blackhole.
func (f *Faults) Heal() { f.set(func() { f.partitioned, f.blackholed = false, false }) }

// Disconnect closes the client for good, as Client.Disconnect does: every
// operation from now on fails at once, unsent, with
// mongo.ErrClientDisconnected. Heal does not undo it.
func (f *Faults) Disconnect() { f.set(func() { f.disconnected = true }) }

func (f *Faults) set(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

// before is the fate of an operation about to run: refused or
// unreachable (err), dropped (hole), or to be applied and its reply lost.
func (f *Faults) before() (lose, hole bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	switch {
	case f.disconnected:
		return false, false, mongo.ErrClientDisconnected
	case f.partitioned:
		return false, false, topology.ServerSelectionError{Wrapped: ErrPartitioned}
	case f.blackholed:
		return false, true, nil
	case f.refuse > 0:
		f.refuse--
		if f.refuseWith != nil {
			return false, false, f.refuseWith
		}
		return false, false, mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Message: "memdb: the server is shutting down"}
	case f.lose > 0:
		f.lose--
		return true, false, nil
	}
	return false, false, nil
}

// ErrPartitioned is wrapped by the server selection error of an operation
// in a partition.
var ErrPartitioned = errors.New("memdb: partitioned from the server")

func lostReply(cause error) error {
	return mongo.CommandError{Labels: []string{"NetworkError"}, Name: "NetworkError", Message: "memdb: reply lost: " + cause.Error(), Wrapped: cause}
}
