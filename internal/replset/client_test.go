package replset

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mongolock/mongolock/internal/memdb"
)

var _ memdb.Conn = (*Client)(nil)

func clientInsert(ctx context.Context, c *Client, id string) error {
	return c.Write(ctx, "locks", func(t *memdb.Table, now time.Time) error {
		return t.InsertOne(now, bson.D{{Key: "_id", Value: id}})
	})
}

// sees reports whether c reads the document id.
func sees(t *testing.T, c *Client, id string) bool {
	t.Helper()
	var n int
	err := c.Read(t.Context(), "locks", func(tb *memdb.Table, now time.Time) error {
		docs, err := tb.Find(now, bson.D{{Key: "_id", Value: id}}, nil)
		n = len(docs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestClientRetriesAWriteTheOldPrimaryRefusedOnTheNewOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		c := s.Client()
		if err := clientInsert(t.Context(), c, "a"); err != nil {
			t.Fatal(err)
		}
		s.StepDown()
		if err := clientInsert(t.Context(), c, "b"); err != nil {
			t.Fatalf("after a step-down: %v, want the write retried on the new primary", err)
		}
		if p, _ := s.Primary(); p.ID() == 0 || !has(t, p, MajorityRead, "b") {
			t.Fatal("b is not majority-committed on the new primary")
		}
	})
}

func TestClientsMajorityWriteToACutOffPrimaryFailsAtItsStepDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		c := s.Client()
		if err := clientInsert(t.Context(), c, "a"); err != nil {
			t.Fatal(err)
		}
		s.Partition(0)
		start := time.Now()
		err := clientInsert(t.Context(), c, "b")
		if code(err) != 189 {
			t.Fatalf("got %v, want PrimarySteppedDown", err)
		}
		if d := time.Since(start); d != DefaultElectionTimeout {
			t.Fatalf("failed after %v, want the election timeout", d)
		}
		if err := clientInsert(t.Context(), c, "c"); err != nil {
			t.Fatalf("the next write: %v, want it on the new primary", err)
		}
		s.Heal()
		if sees(t, c, "b") || !sees(t, c, "a") || !sees(t, c, "c") {
			t.Fatal("after healing: want a and c, and b rolled back")
		}
	})
}

// The failure that "majority" prevents: at w:1 a cut-off primary
// acknowledges a write that the failover then rolls back.
func TestClientAtW1HasAnAcknowledgedWriteRolledBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		c, other := s.Client(), s.Client()
		c.WriteAt(W1)
		if err := clientInsert(t.Context(), c, "a"); err != nil {
			t.Fatal(err)
		}
		s.Partition(0)
		if err := clientInsert(t.Context(), c, "b"); err != nil {
			t.Fatalf("w:1 on the cut-off primary: %v, want it acknowledged", err)
		}
		time.Sleep(HeartbeatFrequency) // other selects the new primary
		if sees(t, other, "b") {
			t.Fatal("b seen on the new primary")
		}
		s.Heal()
		if sees(t, c, "b") {
			t.Fatal("the acknowledged b survived the failover")
		}
	})
}

// A client keeps sending to a cut-off primary that still answers, until
// its next heartbeat finds the new one.
func TestClientFindsTheNewPrimaryAtItsHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), ElectionTimeout: 2 * time.Second})
		c := s.Client()
		sees(t, c, "none") // selects member 0
		s.Partition(0)
		time.Sleep(time.Second)
		if err := insert(t.Context(), s.Member(0), W1, "stale"); err != nil {
			t.Fatal(err)
		}
		if !sees(t, c, "stale") {
			t.Fatal("before the election the client should read from the old primary")
		}
		time.Sleep(HeartbeatFrequency - time.Second)
		if sees(t, c, "stale") {
			t.Fatal("at the heartbeat the client should read from the new primary")
		}
	})
}

// Server selection waits for a primary, at most ServerSelectionTimeout.
func TestClientWaitsForAPrimaryThenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{DB: "test", Clocks: make([]Clock, 2)})
		c := s.Client()
		s.Partition(0) // neither side has a majority of 2
		time.Sleep(DefaultElectionTimeout)
		if _, ok := s.Primary(); ok {
			t.Fatal("a primary without a majority")
		}
		start := time.Now()
		err := clientInsert(t.Context(), c, "a")
		var sse topology.ServerSelectionError
		if !errors.As(err, &sse) || time.Since(start) != ServerSelectionTimeout {
			t.Fatalf("got %v after %v, want a server selection error after %v", err, time.Since(start), ServerSelectionTimeout)
		}
		done := make(chan error)
		go func() { done <- clientInsert(t.Context(), c, "b") }()
		time.Sleep(time.Second)
		s.Heal() // an election in DefaultElectionTimeout
		if err := <-done; err != nil {
			t.Fatalf("a write during the election: %v, want it to wait for the new primary", err)
		}
		if d := time.Since(start) - ServerSelectionTimeout; d != time.Second+DefaultElectionTimeout {
			t.Fatalf("took %v, want until the election", d)
		}
		c.Faults.Partition()
		if err := clientInsert(t.Context(), c, "c"); !errors.As(err, &sse) {
			t.Fatalf("through a partitioned network: %v, want a server selection error", err)
		}
	})
}
