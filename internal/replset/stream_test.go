package replset

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// event waits for st's next event and returns its document's _id, or the
// stream's error.
func event(ctx context.Context, st *Stream) (string, error) {
	for {
		ev, err := st.Next()
		if err != nil {
			return "", err
		}
		if ev != nil {
			return ev.Lookup("documentKey", "_id").StringValue(), nil
		}
		if err := st.Wait(ctx); err != nil {
			return "", err
		}
	}
}

func TestStreamDeliversAWriteOnceAMajorityAppliedIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		st, err := s.Member(0).Watch("locks", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		start := time.Now()
		if err := insert(t.Context(), s.Member(0), W1, "a"); err != nil {
			t.Fatal(err)
		}
		if ev, err := st.Next(); ev != nil || err != nil {
			t.Fatalf("before a majority applied it: got %v, %v; want nothing", ev, err)
		}
		id, err := event(t.Context(), st)
		if id != "a" || err != nil || time.Since(start) != lag {
			t.Fatalf("got %q, %v after %v; want a after the lag %v", id, err, time.Since(start), lag)
		}
	})
}

func TestStreamNeverDeliversARolledBackWriteAndEndsAtStepDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		old := s.Member(0)
		st, err := old.Watch("locks", nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Partition(0)
		if err := insert(t.Context(), old, W1, "lost"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		id, err := event(t.Context(), st)
		if code(err) != 11602 || time.Since(start) != DefaultElectionTimeout {
			t.Fatalf("got %q, %v after %v; want InterruptedDueToReplStateChange (11602) at the step-down, %v",
				id, err, time.Since(start), DefaultElectionTimeout)
		}
		p, _ := s.Primary()
		if _, err := old.Watch("locks", nil); code(err) != 13435 {
			t.Fatalf("watch on a secondary: got %v, want NotPrimaryNoSecondaryOk (13435)", err)
		}
		st, err = p.Watch("locks", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		s.Heal()
		if err := insert(t.Context(), p, Majority, "kept"); err != nil {
			t.Fatal(err)
		}
		if id, err := event(t.Context(), st); id != "kept" || err != nil {
			t.Fatalf("on the new primary: got %q, %v; want kept", id, err)
		}
	})
}

func TestStreamEndsWithANetworkErrorWhenItsMemberGoesDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		st, err := s.Member(0).Watch("locks", nil)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error)
		go func() { _, err := event(t.Context(), st); errs <- err }()
		synctest.Wait()
		s.Restart(0, time.Minute)
		if err := <-errs; !isNetworkError(err) {
			t.Fatalf("got %v, want a network error", err)
		}
		if _, err := s.Member(0).Watch("locks", nil); !isNetworkError(err) {
			t.Fatalf("watch on a member that is down: got %v, want a network error", err)
		}
	})
}
