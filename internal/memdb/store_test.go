package memdb

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

func insert(ctx context.Context, s *Store, id string) error {
	return s.Do(ctx, "locks", func(c *Table, now time.Time) error {
		return c.InsertOne(now, bson.D{{Key: "_id", Value: id}})
	})
}

func ids(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	if err := s.Do(t.Context(), "locks", func(c *Table, _ time.Time) error {
		for _, d := range c.Docs() {
			out = append(out, d.Lookup("_id").StringValue())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLostReplyIsANetworkErrorOfAnAppliedWrite(t *testing.T) {
	s := NewStore("db", nil)
	s.Faults.LoseReplies(1)
	err := insert(t.Context(), s, "a")
	if !mongo.IsNetworkError(err) {
		t.Fatalf("lost reply: got %v, want a network error", err)
	}
	if err := insert(t.Context(), s, "b"); err != nil {
		t.Fatalf("the next reply: %v", err)
	}
	if got := ids(t, s); len(got) != 2 {
		t.Fatalf("documents %v, want a and b: the lost write was applied", got)
	}
}

func TestRefusedOperationIsATransientErrorAndNotApplied(t *testing.T) {
	s := NewStore("db", nil)
	s.Faults.Refuse(1)
	var ce mongo.CommandError
	if err := insert(t.Context(), s, "a"); !errors.As(err, &ce) || ce.Code != 91 || mongo.IsNetworkError(err) {
		t.Fatalf("refused: got %v, want ShutdownInProgress (91)", err)
	}
	if got := ids(t, s); len(got) != 0 {
		t.Fatalf("documents %v after a refusal, want none", got)
	}
}

func TestPartitionFailsEveryOperationUntilHealed(t *testing.T) {
	s := NewStore("db", nil)
	s.Faults.Partition()
	for _, id := range []string{"a", "b"} {
		if err := insert(t.Context(), s, id); !errors.As(err, &topology.ServerSelectionError{}) || !errors.Is(err, ErrPartitioned) {
			t.Fatalf("partitioned: got %v, want a server selection error", err)
		}
	}
	s.Faults.Heal()
	if got := ids(t, s); len(got) != 0 {
		t.Fatalf("documents %v after a partition, want none", got)
	}
	if err := insert(t.Context(), s, "c"); err != nil {
		t.Fatalf("healed: %v", err)
	}
}

func TestDelayedReplyArrivesAfterTheDelayAndIsLostWhenTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore("db", nil)
		s.Faults.Delay(5 * time.Second)
		start := time.Now()
		if err := insert(t.Context(), s, "a"); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("the reply came after %v on the bubble's clock, want 5s", waited)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := insert(ctx, s, "b"); !mongo.IsNetworkError(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("deadline during the delay: got %v, want a network error of the deadline", err)
		}
		s.Faults.Delay(0)
		if got := ids(t, s); len(got) != 2 {
			t.Fatalf("documents %v, want a and b: the write whose reply was lost was applied", got)
		}
	})
}

func TestStoreClockIsTheBubblesAndEventsCarryIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore("db", nil)
		var st *Stream
		if err := s.Do(t.Context(), "locks", func(c *Table, _ time.Time) (err error) {
			st, err = c.Watch(nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultCursorTimeout / 2) // unread for less than the cursor timeout
		want := time.Now()
		if err := insert(t.Context(), s, "a"); err != nil {
			t.Fatal(err)
		}
		_ = st.Wait(t.Context())
		ev, err := st.Next()
		if err != nil || ev == nil {
			t.Fatalf("event: %v, %v", ev, err)
		}
		if got := ev.Lookup("wallTime").Time(); !got.Equal(want.Truncate(time.Millisecond)) {
			t.Fatalf("wallTime %v, want the bubble's %v", got, want)
		}
		if ns := ev.Lookup("ns").Document(); ns.Lookup("db").StringValue() != "db" || ns.Lookup("coll").StringValue() != "locks" {
			t.Fatalf("ns %v", ns)
		}
		st.Close()
		if err := insert(t.Context(), s, "b"); err != nil {
			t.Fatal(err)
		}
		if ev, _ := st.Next(); ev != nil {
			t.Fatalf("a closed stream gave %v", ev)
		}
	})
}

func TestStoreIsSafeForConcurrentUse(t *testing.T) {
	s := NewStore("db", nil)
	s.Faults.LoseReplies(3)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			_ = insert(t.Context(), s, string(rune('a'+i)))
			s.Faults.Refuse(0)
		})
	}
	wg.Wait()
	if got := ids(t, s); len(got) != 16 {
		t.Fatalf("%d documents, want 16: lost replies are applied", len(got))
	}
}

func TestUnmodelledStatementIsRefusedByName(t *testing.T) {
	var c Table
	if err := c.InsertOne(time.Now(), bson.D{{Key: "_id", Value: "a"}, {Key: "x", Value: "abc"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Find(time.Now(), bson.D{{Key: "x", Value: bson.D{{Key: "$regex", Value: "^a"}}}}, nil)
	if !errors.Is(err, ErrNotModelled) {
		t.Fatalf("got %v, want ErrNotModelled", err)
	}
}

func TestClientsShareTheDatabaseButNotTheirNetwork(t *testing.T) {
	s := NewStore("db", nil)
	other := s.Client()
	if err := insert(t.Context(), s, "a"); err != nil {
		t.Fatal(err)
	}
	other.Faults.Partition()
	if err := insert(t.Context(), other, "b"); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("insert through the partitioned client: got %v, want ErrPartitioned", err)
	}
	if err := insert(t.Context(), s, "c"); err != nil {
		t.Fatalf("insert through the other client, not partitioned: %v", err)
	}
	other.Faults.Heal()
	if got := ids(t, other); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("documents through the other client %v, want [a c]", got)
	}
}

// norm's copy of a statement is what the driver's encoding and decoding
// make of it, value for value and type for type.
func TestNormIsTheDriversRoundTrip(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)
	for _, v := range []any{
		nil, "s", true, int32(-3), int64(1 << 40), 1.5, bson.DateTime(12), now, 7, -7, 1 << 31, -(1 << 31), -(1 << 31) - 1,
		bson.D{}, bson.A{}, bson.D(nil), bson.A(nil), mongo.Pipeline(nil), mongo.Pipeline{},
		bson.D{{Key: "a", Value: bson.A{1, "x", bson.D{{Key: "b", Value: now}}, nil, bson.A{}}}, {Key: "c", Value: []string{"y"}}},
		mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "n", Value: bson.D{{Key: "$add", Value: bson.A{"$n", 1}}}}}}}},
		bson.M{"m": 1}, time.Second, []bson.D{{{Key: "k", Value: uint32(3)}}}, bson.Raw(encode(bson.D{{Key: "r", Value: 1}})),
		bson.Raw(encode(bson.D{{Key: "r", Value: bson.A{int64(1), 2.5, "s", false, nil, bson.DateTime(3), bson.D{}, bson.A{}, bson.D{{Key: "x", Value: bson.A{bson.D{}}}}}}})),
		bson.Raw(encode(bson.D{{Key: "o", Value: bson.NewObjectID()}, {Key: "u", Value: bson.Undefined{}}})), bson.Raw(encode(bson.D{})),
	} {
		got, want := norm(v), encoded(v)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("norm(%#v) = %#v, want %#v", v, got, want)
		}
	}
}
