package replset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/memdb"
)

const lag = 100 * time.Millisecond

// three returns a set of three members, each secondary lag behind.
func three() *Set {
	return New(Config{DB: "test", Clocks: make([]Clock, 3), Lags: []time.Duration{0, lag, lag}})
}

func insert(ctx context.Context, m *Member, w Concern, id string) error {
	return m.Write(ctx, w, "locks", func(c *memdb.Table, now time.Time) error {
		return c.InsertOne(now, bson.D{{Key: "_id", Value: id}})
	})
}

// has reports whether m holds the document id, read at rc.
func has(t *testing.T, m *Member, rc ReadConcern, id string) bool {
	t.Helper()
	var n int
	err := m.Read(t.Context(), rc, "locks", func(c *memdb.Table, now time.Time) error {
		docs, err := c.Find(now, bson.D{{Key: "_id", Value: id}}, nil)
		n = len(docs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func code(err error) int {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return int(ce.Code)
	}
	return 0
}

func TestMajorityWriteWaitsForAMajorityAndW1DoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		p := s.Member(0)
		start := time.Now()
		if err := insert(t.Context(), p, W1, "a"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("w:1 took %v, want 0", d)
		}
		if !has(t, p, Local, "a") || has(t, p, MajorityRead, "a") || has(t, s.Member(1), Local, "a") {
			t.Fatal("before replication: want a on the primary at local only")
		}
		if err := insert(t.Context(), p, Majority, "b"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != lag {
			t.Fatalf("w:majority took %v, want the lag %v", d, lag)
		}
		for _, id := range []string{"a", "b"} {
			if !has(t, p, MajorityRead, id) || !has(t, s.Member(1), Local, id) {
				t.Fatalf("after w:majority: %s not majority-committed", id)
			}
		}
	})
}

func TestSecondaryRefusesWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		if err := insert(t.Context(), s.Member(1), W1, "a"); code(err) != 10107 {
			t.Fatalf("write to a secondary: got %v, want NotWritablePrimary (10107)", err)
		}
	})
}

func TestCutOffPrimaryAnswersUntilItsElectionTimeoutThenStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		old := s.Member(0)
		s.Partition(0)
		time.Sleep(DefaultElectionTimeout - time.Millisecond)
		if err := insert(t.Context(), old, W1, "a"); err != nil {
			t.Fatalf("cut-off primary before its timeout: %v", err)
		}
		time.Sleep(time.Millisecond)
		if err := insert(t.Context(), old, W1, "b"); code(err) != 10107 {
			t.Fatalf("cut-off primary at its timeout: got %v, want NotWritablePrimary (10107)", err)
		}
		p, ok := s.Primary()
		if !ok || p == old {
			t.Fatalf("no new primary on the majority side: %v", p)
		}
	})
}

func TestMajorityWriteOnACutOffPrimaryFailsWhenItStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		s.Partition(0)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := insert(ctx, s.Member(0), Majority, "a")
		if code(err) != 189 || time.Since(start) != DefaultElectionTimeout {
			t.Fatalf("got %v after %v, want PrimarySteppedDown (189) after %v", err, time.Since(start), DefaultElectionTimeout)
		}
		s.Heal()
		if has(t, s.Member(0), Local, "a") {
			t.Fatal("the unacknowledged write was not rolled back")
		}
	})
}

func TestW1WriteOfACutOffPrimaryIsRolledBackAfterAFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		old := s.Member(0)
		s.Partition(0)
		if err := insert(t.Context(), old, W1, "lost"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultElectionTimeout)
		p, _ := s.Primary()
		if err := insert(t.Context(), p, Majority, "kept"); err != nil {
			t.Fatal(err)
		}
		s.Heal()
		if has(t, old, Local, "lost") {
			t.Fatal("the old primary still has its w:1 write after rejoining")
		}
		time.Sleep(lag)
		if !has(t, old, Local, "kept") {
			t.Fatal("the old primary did not sync from the new one")
		}
		if old.LastOpTime() != p.LastOpTime() {
			t.Fatalf("oplogs differ: %v, %v", old.LastOpTime(), p.LastOpTime())
		}
	})
}

func TestMajorityWritesSurviveEveryFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{DB: "test", Clocks: make([]Clock, 5), Lags: []time.Duration{0, lag, 2 * lag, 3 * lag, 4 * lag}})
		var acked []string
		for round := range 10 {
			p, ok := s.Primary()
			if !ok {
				t.Fatalf("round %d: no primary", round)
			}
			for i := range 3 {
				id := string(rune('a'+round)) + string(rune('0'+i))
				if err := insert(t.Context(), p, Majority, id); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, id)
				_ = insert(t.Context(), p, W1, id+"-w1")
			}
			// Cut the primary off with one other member, or step it down.
			if round%2 == 0 {
				s.Partition(p.ID(), (p.ID()+1+round)%5)
				time.Sleep(DefaultElectionTimeout)
				s.Heal()
			} else {
				s.StepDown()
			}
			time.Sleep(5 * lag)
		}
		for _, m := range s.members {
			for _, id := range acked {
				if !has(t, m, Local, id) || !has(t, m, MajorityRead, id) {
					t.Fatalf("member %d lacks the w:majority write %s", m.ID(), id)
				}
			}
		}
	})
}

func TestElectionNeverPicksAMemberLackingAMajorityCommittedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Member 2 is so far behind that the write is committed without it;
		// member 1 holds it.
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), Lags: []time.Duration{0, lag, time.Hour}})
		if err := insert(t.Context(), s.Member(0), Majority, "a"); err != nil {
			t.Fatal(err)
		}
		s.Partition(0)
		time.Sleep(DefaultElectionTimeout)
		p, ok := s.Primary()
		if !ok || p.ID() != 1 {
			t.Fatalf("elected %v, want member 1, the one holding the committed write", p)
		}
		if !has(t, p, Local, "a") {
			t.Fatal("the new primary lacks the committed write")
		}
	})
}

func TestMemberClockAheadMakesItsNowAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		s := New(Config{DB: "test", Clocks: []Clock{{}, {Offset: d}, {Drift: 0.001}}})
		time.Sleep(time.Minute)
		var now time.Time
		err := s.Member(1).Read(t.Context(), Local, "locks", func(_ *memdb.Table, n time.Time) error { now = n; return nil })
		if err != nil || time.Until(now) != d {
			t.Fatalf("member 1's $$NOW is %v ahead (%v), want %v", time.Until(now), err, d)
		}
		if got := time.Until(s.Member(2).Now()); got != 60*time.Millisecond {
			t.Fatalf("member 2 drifted %v in a minute at 0.001, want 60ms", got)
		}
	})
}

func TestCutOffPrimaryHealedBeforeItsTimeoutKeepsItsWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		old := s.Member(0)
		s.Partition(0)
		if err := insert(t.Context(), old, W1, "a"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultElectionTimeout / 2)
		s.Heal()
		start := time.Now()
		if err := insert(t.Context(), old, Majority, "b"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != lag {
			t.Fatalf("w:majority after the heal took %v, want the lag %v", d, lag)
		}
		if p, _ := s.Primary(); p != old || !has(t, s.Member(2), MajorityRead, "a") {
			t.Fatal("the primary changed, or its write made while cut off was lost")
		}
	})
}

func TestMajorityReadSeesOnlyWhatAMajorityApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Member 1 applies a write before the primary learns a majority has.
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), Lags: []time.Duration{0, lag, time.Hour}})
		if err := insert(t.Context(), s.Member(0), W1, "a"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lag)
		sec := s.Member(1)
		if !has(t, sec, Local, "a") || !has(t, sec, MajorityRead, "a") {
			t.Fatal("after the lag: want a on member 1 at local and majority")
		}
		s.Partition(1)
		if err := insert(t.Context(), s.Member(0), W1, "b"); err != nil {
			t.Fatal(err)
		}
		if has(t, s.Member(0), MajorityRead, "b") || !has(t, s.Member(0), Local, "b") {
			t.Fatal("a write only the primary applied is majority-committed")
		}
	})
}

func isNetworkError(err error) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && ce.HasErrorLabel("NetworkError")
}

func TestMemberThatIsDownAnswersNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		s.Restart(1, time.Minute)
		if err := insert(t.Context(), s.Member(1), W1, "a"); !isNetworkError(err) {
			t.Fatalf("write to a member that is down: got %v, want a network error", err)
		}
		err := s.Member(1).Read(t.Context(), Local, "locks", func(*memdb.Table, time.Time) error { return nil })
		if !isNetworkError(err) {
			t.Fatalf("read from a member that is down: got %v, want a network error", err)
		}
	})
}

func TestPrimaryThatGoesDownIsReplacedAndRollsBackWhenItComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		old := s.Member(0)
		if err := insert(t.Context(), old, Majority, "kept"); err != nil {
			t.Fatal(err)
		}
		if err := insert(t.Context(), old, W1, "lost"); err != nil {
			t.Fatal(err)
		}
		s.Restart(0, time.Minute)
		if _, ok := s.Primary(); ok {
			t.Fatal("a primary at once after the primary went down")
		}
		time.Sleep(DefaultElectionTimeout)
		p, ok := s.Primary()
		if !ok || p == old {
			t.Fatalf("no new primary an election timeout after the primary went down: %v", p)
		}
		if err := insert(t.Context(), p, Majority, "new"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute - DefaultElectionTimeout)
		if old.IsPrimary() || has(t, old, Local, "lost") {
			t.Fatal("back up: still primary, or its write no majority applied is still there")
		}
		time.Sleep(lag)
		if !has(t, old, Local, "kept") || !has(t, old, Local, "new") || old.LastOpTime() != p.LastOpTime() {
			t.Fatal("back up: it lost a committed write, or did not catch up")
		}
	})
}

func TestMajorityWriteWaitsForAMemberThatIsDownAndFailsIfItsPrimaryGoesDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := three()
		s.Restart(1, time.Minute)
		// One secondary up: a majority with the primary.
		if err := insert(t.Context(), s.Member(0), Majority, "a"); err != nil {
			t.Fatal(err)
		}
		s.Restart(2, 5*time.Second)
		start := time.Now()
		if err := insert(t.Context(), s.Member(0), Majority, "b"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("w:majority with two members down took %v, want until one is back, 5s", d)
		}
		errs := make(chan error)
		go func() { errs <- insert(t.Context(), s.Member(0), Majority, "c") }()
		synctest.Wait()
		s.Restart(0, time.Minute)
		if err := <-errs; !isNetworkError(err) {
			t.Fatalf("w:majority on a primary that went down: got %v, want a network error", err)
		}
	})
}

// BenchmarkWrite is the cost of one w:majority write to a set of three
// members (without lag, so that none waits), an update of one document
// of a collection of docs documents, the oplog kept as the set keeps it.
func BenchmarkWrite(b *testing.B) {
	for _, docs := range []int{10, 1000} {
		b.Run(fmt.Sprintf("docs=%d", docs), func(b *testing.B) {
			s := New(Config{DB: "test", Clocks: make([]Clock, 3)})
			p := s.Member(0)
			for i := range docs {
				if err := insert(b.Context(), p, Majority, fmt.Sprint(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				err := p.Write(b.Context(), Majority, "locks", func(c *memdb.Table, now time.Time) error {
					_, _, err := c.UpdateOne(now, bson.D{{Key: "_id", Value: fmt.Sprint(i % docs)}},
						bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: i}}}})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestOplogStaysBoundedWhileEveryMemberIsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), Lags: []time.Duration{0, lag, 2 * lag}})
		p := s.Member(0)
		const writes, bound = 10_000, 2 * dropAtLeast
		most := 0
		for i := range writes {
			w := W1
			if i%10 == 9 {
				w = Majority
			}
			err := p.Write(t.Context(), w, "locks", func(c *memdb.Table, now time.Time) error {
				_, err := c.DeleteOne(now, bson.D{{Key: "_id", Value: i - 5}})
				if err == nil {
					err = c.InsertOne(now, bson.D{{Key: "_id", Value: i}})
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range s.members {
				most = max(most, len(m.oplog.entries))
			}
		}
		if most > bound {
			t.Fatalf("an oplog held %d entries over %d writes, want at most %d", most, writes, bound)
		}
		time.Sleep(2 * lag)
		for _, m := range s.members {
			var docs []bson.Raw
			err := m.Read(t.Context(), MajorityRead, "locks", func(c *memdb.Table, _ time.Time) error { docs = c.Docs(); return nil })
			if err != nil || len(docs) != 5 || m.LastOpTime() != p.LastOpTime() {
				t.Fatalf("member %d: %d documents at majority (%v), optime %v, want the primary's 5 and %v",
					m.ID(), len(docs), err, m.LastOpTime(), p.LastOpTime())
			}
		}
	})
}

// Members 0, 2 and 0 again are primary in turn, 0 of terms 1 and 3, each
// writing at w:1 while cut off; then 0 goes down and the set heals. Term
// 2's primary holds the newest history (its last optime is of the highest
// term but 0's), so it wins the election, and the write term 1 made on two
// members is rolled back rather than overriding term 2's; every write
// acknowledged at w:majority survives.
func TestANewerTermsHistoryOverridesAnOlderTermsWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{DB: "test", Clocks: make([]Clock, 5), Lags: []time.Duration{lag, lag, lag, lag, lag}})
		if err := insert(t.Context(), s.Member(0), Majority, "kept"); err != nil {
			t.Fatal(err)
		}
		s.Partition(0, 1)
		acked := make(chan error)
		go func() { acked <- insert(t.Context(), s.Member(0), Majority, "a") }() // term 1: member 1 applies it
		time.Sleep(DefaultElectionTimeout)
		if err := <-acked; code(err) != 189 {
			t.Fatalf("w:majority on a primary cut off with a minority: got %v, want PrimarySteppedDown", err)
		}
		if p, _ := s.Primary(); p.ID() != 2 {
			t.Fatalf("term 2's primary is %d, want 2", p.ID())
		}
		s.Partition(2) // before its first entry of term 2 replicates
		if err := insert(t.Context(), s.Member(2), W1, "b"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultElectionTimeout)
		if p, _ := s.Primary(); p.ID() != 0 || p.term != 3 {
			t.Fatalf("the primary is %d of term %d, want 0 of term 3", p.ID(), p.term)
		}
		if !has(t, s.Member(1), Local, "a") || has(t, s.Member(0), MajorityRead, "a") {
			t.Fatal("term 1's write: want it on member 1, and not committed")
		}
		s.Restart(0, time.Hour)
		s.Heal()
		time.Sleep(DefaultElectionTimeout + lag)
		if p, _ := s.Primary(); p.ID() != 2 || p.term != 4 {
			t.Fatalf("the primary is %d of term %d, want 2 of term 4", p.ID(), p.term)
		}
		for _, i := range []int{1, 2, 3, 4} {
			m := s.Member(i)
			if has(t, m, Local, "a") || !has(t, m, Local, "b") || !has(t, m, MajorityRead, "kept") {
				t.Fatalf("member %d: want b and kept, and not a", i)
			}
		}
	})
}

// electionDelay returns how long after its primary was cut off a set whose
// elections draw from seed elects another, to the millisecond.
func electionDelay(t *testing.T, seed uint64) (d time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), Rand: rand.New(rand.NewPCG(seed, 0))})
		start := time.Now()
		s.Partition(0)
		for {
			if p, _ := s.Primary(); p != nil && p.ID() != 0 {
				d = time.Since(start)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	return d
}

func TestElectionComesUpTo15PercentOfItsTimeoutLateAsItsSeedSays(t *testing.T) {
	delays := map[time.Duration]bool{}
	for seed := range uint64(10) {
		d := electionDelay(t, seed)
		if d < DefaultElectionTimeout || d > DefaultElectionTimeout*115/100 {
			t.Fatalf("seed %d: elected after %v, want within 15%% past %v", seed, d, DefaultElectionTimeout)
		}
		if again := electionDelay(t, seed); again != d {
			t.Fatalf("seed %d: elected after %v, then after %v", seed, d, again)
		}
		delays[d] = true
	}
	if len(delays) < 5 {
		t.Fatalf("10 seeds gave %d delays, want them random", len(delays))
	}
}

// writeMany writes n documents at w:majority to the primary of s, with
// ids prefix0, prefix1, …
func writeMany(t *testing.T, s *Set, prefix string, n int) {
	t.Helper()
	p, _ := s.Primary()
	for i := range n {
		if err := insert(t.Context(), p, Majority, fmt.Sprint(prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMemberThatFellOffTheOplogResyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 100
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), Lags: []time.Duration{0, lag, lag}, OplogSize: size})
		s.Restart(2, time.Hour)
		writeMany(t, s, "w", 10*size)
		if n := len(s.Member(0).oplog.entries); n > 2*size {
			t.Fatalf("the primary's oplog holds %d entries while a member is down, want at most %d", n, 2*size)
		}
		time.Sleep(time.Hour + lag)
		back := s.Member(2)
		for _, id := range []string{"w0", fmt.Sprint("w", 10*size-1)} {
			if !has(t, back, Local, id) {
				t.Fatalf("back up, the member lacks %s", id)
			}
		}
		if back.LastOpTime() != s.Member(0).LastOpTime() {
			t.Fatalf("back up, the member is at %v, the primary at %v", back.LastOpTime(), s.Member(0).LastOpTime())
		}
	})
}

func TestCutOffPrimaryThatFellOffTheOplogResyncsWithoutItsWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 100
		s := New(Config{DB: "test", Clocks: make([]Clock, 3), Lags: []time.Duration{lag, lag, lag}, OplogSize: size})
		old := s.Member(0)
		s.Partition(0)
		if err := insert(t.Context(), old, W1, "lost"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultElectionTimeout)
		writeMany(t, s, "w", 10*size)
		s.Heal()
		time.Sleep(lag)
		if has(t, old, Local, "lost") || !has(t, old, Local, "w0") || !has(t, old, MajorityRead, "w0") {
			t.Fatal("the old primary kept its write no majority applied, or lacks the new primary's")
		}
		p, _ := s.Primary()
		if old.LastOpTime() != p.LastOpTime() {
			t.Fatalf("the old primary is at %v, the primary at %v", old.LastOpTime(), p.LastOpTime())
		}
	})
}
