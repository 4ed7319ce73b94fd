package replset

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mongolock/mongolock/internal/memdb"
)

// Driver settings the client models, at the driver's defaults.
const (
	// HeartbeatFrequency is how often the driver checks each member
	// (heartbeatFrequencyMS): a client learns of a new primary no later.
	HeartbeatFrequency = 10 * time.Second
	// ServerSelectionTimeout is how long an operation waits for a primary
	// (serverSelectionTimeoutMS) before it fails.
	ServerSelectionTimeout = 30 * time.Second
)

// errNoPrimary is server selection's failure when no member is primary.
var errNoPrimary = errors.New("replset: no primary")

// Client is a driver's client of a set, a memdb.Conn: it sends each
// operation to the member it takes for the primary, through a network of
// its own (Faults). As the driver's monitoring does, it learns of a new
// primary at its next heartbeat, or at once when the member it sent to
// replied that it is not primary; until then a cut-off primary that has
// not stepped down keeps answering it. A write refused unapplied
// (NotWritablePrimary) is retried once on the new primary, as retryable
// writes are; one whose primary stepped down while it waited for the
// majority (PrimarySteppedDown) is not, since it may have been applied.
// Reads are at "local" from the primary, writes at the client's write
// concern (Majority, as the library asks for it), change streams are
// opened on the primary.
type Client struct {
	Faults memdb.Faults
	set    *Set
	w      Concern

	mu       sync.Mutex
	primary  *Member   // where operations go; nil: to be selected
	selected time.Time // when, by the base clock
}

// Client returns a new client of s, writing at w: "majority".
func (s *Set) Client() *Client { return &Client{set: s, w: Majority} }

// WriteAt makes c write at w from now on. W1 stands for a library that
// asked for w: 1, which mongolock never does: the simulation's switch
// that shows what its "majority" prevents.
func (c *Client) WriteAt(w Concern) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w = w
}

// Write runs op on the primary at the client's write concern.
func (c *Client) Write(ctx context.Context, coll string, op func(t *memdb.Table, now time.Time) error) error {
	c.mu.Lock()
	w := c.w
	c.mu.Unlock()
	return c.onPrimary(ctx, func(m *Member) error {
		err := m.Write(ctx, w, coll, op)
		if hasCode(err, errSteppedDown.Code) {
			c.deselect(m)
		}
		return err
	})
}

// Read runs op on the primary at read concern "local".
func (c *Client) Read(ctx context.Context, coll string, op func(t *memdb.Table, now time.Time) error) error {
	return c.onPrimary(ctx, func(m *Member) error { return m.asPrimary(ctx, coll, op) })
}

// Watch opens a change stream at "majority" of coll on the primary
// (Member.Watch).
func (c *Client) Watch(ctx context.Context, coll string, pipeline any) (st memdb.Cursor, err error) {
	err = c.onPrimary(ctx, func(m *Member) (err error) {
		st, err = m.Watch(coll, pipeline)
		return err
	})
	return st, err
}

// onPrimary sends do through c's network to the primary c selected, and
// once more to the next if that one refused it unapplied (not primary),
// as retryable writes and reads do.
func (c *Client) onPrimary(ctx context.Context, do func(m *Member) error) error {
	return c.Faults.Send(ctx, func() error {
		c.set.ops.Add(1)
		var err error
		for range 2 {
			var m *Member
			if m, err = c.selectPrimary(ctx); err != nil {
				return err
			}
			if err = do(m); !isNotPrimary(err) {
				return err
			}
			c.deselect(m)
		}
		return err
	})
}

// selectPrimary returns the member c sends to: the one it selected,
// unless a heartbeat is due, else the primary of the highest term,
// waiting for one as server selection does.
func (c *Client) selectPrimary(ctx context.Context) (*Member, error) {
	c.mu.Lock()
	m, at := c.primary, c.selected
	c.mu.Unlock()
	s := c.set
	if m != nil && s.base().Sub(at) < HeartbeatFrequency {
		return m, nil
	}
	timeout := time.NewTimer(ServerSelectionTimeout)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		s.advance()
		p, changed, next := s.primaryOfAll(), s.changed, s.nextDue()
		s.mu.Unlock()
		if p != nil {
			c.mu.Lock()
			c.primary, c.selected = p, s.base()
			c.mu.Unlock()
			return p, nil
		}
		if err := awaitChange(ctx, timeout.C, changed, next); err != nil {
			return nil, topology.ServerSelectionError{Wrapped: err}
		}
	}
}

// awaitChange waits until the set's topology changes (changed is closed)
// or its next change by itself is due (next; zero: none), or fails when
// ctx ends or timeout (nil: never) fires.
func awaitChange(ctx context.Context, timeout <-chan time.Time, changed <-chan struct{}, next time.Time) error {
	var due <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return errNoPrimary
	case <-changed:
	case <-due:
	}
	return nil
}

// deselect makes c select a primary anew at its next operation, unless it
// has moved on from m already: as the driver marks a server that replied
// "not primary" unknown and checks the set at once.
func (c *Client) deselect(m *Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.primary == m {
		c.primary = nil
	}
}

// primaryOfAll is the primary of the highest term, or nil: the one a
// driver that sees every member selects.
func (s *Set) primaryOfAll() *Member {
	var best *Member
	for _, m := range s.members {
		if m.primary && (best == nil || m.term > best.term) {
			best = m
		}
	}
	return best
}

func isNotPrimary(err error) bool {
	return hasCode(err, errNotWritablePrimary.Code) || hasCode(err, errNotPrimaryNoSecondaryOk.Code)
}

func hasCode(err error, code int32) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && ce.Code == code
}

// Ops returns how many operations the set's clients sent that reached it.
func (s *Set) Ops() int64 { return s.ops.Load() }

// Docs returns the documents of coll as the primary of the highest term
// has them (nil if there is none).
func (s *Set) Docs(coll string) (docs []bson.Raw) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if p := s.primaryOfAll(); p != nil {
		_ = p.store.Do(context.Background(), coll, func(t *memdb.Table, _ time.Time) error {
			docs = t.Docs()
			return nil
		})
	}
	return docs
}
