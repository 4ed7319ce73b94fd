package memdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// watch opens a change stream of every event of coll.
func watch(t *testing.T, s *Store, coll string) *Stream {
	t.Helper()
	var st *Stream
	if err := s.Do(t.Context(), coll, func(c *Table, _ time.Time) (err error) {
		st, err = c.Watch(nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// insertN inserts n documents into coll in one operation: no read of a
// stream comes between them.
func insertN(t *testing.T, s *Store, coll string, n int) {
	t.Helper()
	if err := s.Do(t.Context(), coll, func(c *Table, now time.Time) error {
		for i := range n {
			if err := c.InsertOne(now, bson.D{{Key: "_id", Value: fmt.Sprintf("%d.%d", s.ops, i)}}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// read takes every event st has now, and the error that ended the reading.
func read(st *Stream) (n int, err error) {
	for {
		ev, err := st.Next()
		if ev == nil || err != nil {
			return n, err
		}
		n++
	}
}

// serverError requires err to be the server error code name, as the
// driver returns it.
func serverError(t *testing.T, err error, code int32, name string, labels ...string) {
	t.Helper()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != code || ce.Name != name || !slices.Equal(ce.Labels, labels) {
		t.Fatalf("error %#v, want the server's %d %s with labels %v", err, code, name, labels)
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(int(code)) {
		t.Fatalf("error %v is not a mongo.ServerError with code %d", err, code)
	}
}

// A change stream reads the database's capped history by position: one
// that kept within it reads every event, and one that fell behind it,
// by the writes of any collection (the oplog is one per replica set),
// fails on its next read with ChangeStreamHistoryLost, as MongoDB's does,
// and its cursor is gone after that.
func TestStreamThatFellBehindTheHistoryFailsWithChangeStreamHistoryLost(t *testing.T) {
	s := NewStore("db", nil, WithHistory(4))
	kept, behind := watch(t, s, "locks"), watch(t, s, "locks")
	insertN(t, s, "locks", 4)
	if n, err := read(kept); n != 4 || err != nil {
		t.Fatalf("a stream within the history read %d events and %v, want 4 and no error", n, err)
	}
	insertN(t, s, "other", 1) // the fifth event pushes behind's first out
	if n, err := read(kept); n != 0 || err != nil {
		t.Fatalf("a stream within the history read %d events and %v of another collection's write, want none", n, err)
	}
	n, err := read(behind)
	if n != 0 {
		t.Fatalf("a stream behind the history read %d events first", n)
	}
	serverError(t, err, 286, "ChangeStreamHistoryLost", "NonResumableChangeStreamError")
	_, err = behind.Next()
	serverError(t, err, 43, "CursorNotFound")
	if got := s.Cursors(); got != 1 {
		t.Fatalf("%d cursors open, want 1: the one that kept up", got)
	}
}

// A stream whose reader keeps reading does not fall behind the history
// for its collection's being quiet while others are busy: as a getMore
// scans the whole oplog, its reader is woken to pass other collections'
// events before they push it out.
func TestStreamOfAQuietCollectionKeepsUpWhileItsReaderReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore("db", nil, WithHistory(4))
		st := watch(t, s, "locks")
		defer st.Close()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			for {
				if _, err := read(st); err != nil {
					done <- err
					return
				}
				if st.Wait(ctx) != nil {
					done <- nil
					return
				}
			}
		}()
		for range 100 {
			insertN(t, s, "other", 1)
			synctest.Wait()
		}
		insertN(t, s, "locks", 1)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("a stream read throughout, of a quiet collection: %v", err)
		}
	})
}

// A change stream's cursor left unread for the cursor timeout is killed,
// as MongoDB kills an idle cursor (with the Go driver, whose change
// streams run in an implicit session: when that session expires): its
// next read fails with CursorNotFound, and it holds nothing from then on.
// A stream whose reader waits for events (a getMore with awaitData, which
// the driver keeps issuing) is never idle, however long nothing comes.
func TestUnreadCursorIsKilledAfterTheCursorTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore("db", nil)
		// Opened by an aggregate whose reply was lost: nobody has it.
		s.Faults.LoseReplies(1)
		var abandoned *Stream
		_ = s.Do(t.Context(), "locks", func(c *Table, _ time.Time) (err error) {
			abandoned, err = c.Watch(nil)
			return err
		})
		polled := watch(t, s, "locks")  // read now and then
		waiting := watch(t, s, "locks") // its reader waits for events
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		waited := make(chan error, 1)
		go func() { waited <- waiting.Wait(ctx) }()

		time.Sleep(DefaultCursorTimeout - time.Second)
		if _, err := polled.Next(); err != nil {
			t.Fatalf("a stream read within the cursor timeout: %v", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := s.Cursors(); got != 2 {
			t.Fatalf("%d cursors open at the cursor timeout, want 2: the unread one killed", got)
		}
		_, err := abandoned.Next()
		serverError(t, err, 43, "CursorNotFound")

		time.Sleep(DefaultCursorTimeout)
		synctest.Wait()
		if got := s.Cursors(); got != 1 {
			t.Fatalf("%d cursors open, want 1: the waiting one", got)
		}
		_, err = polled.Next()
		serverError(t, err, 43, "CursorNotFound")

		insertN(t, s, "locks", 1)
		if err := <-waited; err != nil {
			t.Fatalf("wait: %v", err)
		}
		if n, err := read(waiting); n != 1 || err != nil {
			t.Fatalf("the waiting stream read %d events and %v after %v, want 1 and no error", n, err, 2*DefaultCursorTimeout)
		}
		waiting.Close()
		if got := s.Cursors(); got != 0 {
			t.Fatalf("%d cursors open after the last was closed", got)
		}
	})
}

func TestStreamDeliversOnlyVisibleEventsAndEndsWithTheErrorItWasEndedWith(t *testing.T) {
	s := NewStore("test", nil)
	st := watch(t, s, "c")
	insertN(t, s, "c", 1)
	pos := s.Position()
	s.SetVisible(pos)
	insertN(t, s, "c", 2)
	if n, err := read(st); n != 1 || err != nil {
		t.Fatalf("read %d events (%v), want the 1 before the visible position", n, err)
	}
	s.SetVisible(s.Position())
	if n, err := read(st); n != 2 || err != nil {
		t.Fatalf("read %d events (%v), want the 2 made visible", n, err)
	}
	ended := errors.New("stepped down")
	s.EndStreams(ended)
	if _, err := st.Next(); !errors.Is(err, ended) {
		t.Fatalf("first read after EndStreams: %v, want its error", err)
	}
	var ce mongo.CommandError
	if _, err := st.Next(); !errors.As(err, &ce) || ce.Code != 43 {
		t.Fatalf("second read after EndStreams: %v, want CursorNotFound", err)
	}
}

func TestRecordReportsTheDocumentsAWriteChanged(t *testing.T) {
	c := &Table{}
	now := time.Now()
	_ = c.InsertOne(now, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}})
	changes, err := c.Record(func() error {
		if _, _, err := c.UpdateOne(now, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 2}}}}); err != nil {
			return err
		}
		if err := c.InsertOne(now, bson.D{{Key: "_id", Value: "b"}}); err != nil {
			return err
		}
		_, err := c.DeleteOne(now, bson.D{{Key: "_id", Value: "b"}})
		return err
	})
	if err != nil || len(changes) != 3 {
		t.Fatalf("%d changes (%v), want 3", len(changes), err)
	}
	a, b := changes[0], changes[2]
	if a.ID.StringValue() != "a" || a.Before.Lookup("n").Int32() != 1 || a.After.Lookup("n").Int32() != 2 ||
		b.ID.StringValue() != "b" || b.Before == nil || b.After != nil {
		t.Fatalf("changes: %v", changes)
	}
	if err := c.Put(now, a.ID, a.Before); err != nil || c.docs[0][1].Value != int32(1) {
		t.Fatalf("Put of the document before: %v, %v", err, c.docs)
	}
}
