package simulate

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/replset"
	"github.com/mongolock/mongolock/internal/soakcheck"
)

var (
	flagMembers  = flag.String("simulate.members", "1,3", "each world's database: 1, one server; n, a replica set of n members; comma-separated: world i has the (i mod count)-th")
	flagFailover = flag.Duration("simulate.failover", 10*time.Second, "about how often a replica set's primary steps down or is cut off, a member is cut off, or one restarts (0: never)")
	flagSkew     = flag.Duration("simulate.skew", 250*time.Millisecond, "a replica set's member clocks are each ahead of the first's by up to this much, which its processes give as WithMaxClockSkew")
)

// The replica sets' settings besides: MongoDB's election timeout, and
// replication lags within one region.
const (
	electionTimeout = replset.DefaultElectionTimeout
	maxLag          = 30 * time.Millisecond
)

// A database is what a world's processes connect to: one server, or a
// replica set.
type database interface {
	// connect returns a new client, and its network's faults.
	connect() (memdb.Conn, *memdb.Faults)
	// ops is the number of operations applied so far.
	ops() int64
	// docs is coll's documents as the primary has them.
	docs(coll string) []bson.Raw
	// failovers is how many elections and rollbacks there were.
	failovers() (elections, rollbacks int64)
}

type oneServer struct{ *memdb.Store }

func (d oneServer) connect() (memdb.Conn, *memdb.Faults) {
	c := d.Client()
	return c, &c.Faults
}

func (d oneServer) ops() int64                { return d.Ops() }
func (d oneServer) failovers() (int64, int64) { return 0, 0 }

func (d oneServer) docs(coll string) (docs []bson.Raw) {
	_ = d.Do(context.Background(), coll, func(c *memdb.Table, _ time.Time) error {
		docs = c.Docs()
		return nil
	})
	return docs
}

// A replicaSet's clients write at w: "majority", as the library asks,
// unless w1 stands for a library that asked for w: 1.
type replicaSet struct {
	*replset.Set
	w1 bool
}

func (d replicaSet) connect() (memdb.Conn, *memdb.Faults) {
	c := d.Client()
	if d.w1 {
		c.WriteAt(replset.W1)
	}
	return c, &c.Faults
}

func (d replicaSet) ops() int64                  { return d.Ops() }
func (d replicaSet) docs(coll string) []bson.Raw { return d.Docs(coll) }
func (d replicaSet) failovers() (int64, int64)   { return d.Stats() }

// newDatabase returns the database of cfg, a world's: its members' clocks
// ahead of the first's by up to cfg.skew (or each by cfg.ahead more than
// the one before), their lags up to maxLag, by its seed.
func newDatabase(cfg config) database {
	const name = "mongolock_simulate"
	history := memdb.WithHistory(cfg.history[0])
	if cfg.members[0] <= 1 {
		st := memdb.NewStore(name, nil, history)
		st.SetEvents(cfg.events[0])
		return oneServer{st}
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 2<<32))
	n := cfg.members[0]
	cc := replset.Config{DB: name, Clocks: make([]replset.Clock, n), Lags: make([]time.Duration, n),
		ElectionTimeout: electionTimeout, Store: []memdb.StoreOption{history}, Rand: rand.New(rand.NewPCG(cfg.seed, 3<<32))}
	for i := 1; i < n; i++ {
		cc.Clocks[i].Offset = time.Duration(rng.Int64N(int64(cfg.skew)+1)) + time.Duration(i)*cfg.ahead
		cc.Lags[i] = time.Duration(1 + rng.Int64N(int64(maxLag)))
	}
	set := replset.New(cc)
	set.SetEvents(cfg.events[0])
	return replicaSet{set, cfg.w1}
}

// failover makes the replica set fail over, or come near it: its primary
// steps down (replSetStepDown), or is cut off from the others for one to
// two election timeouts (it steps down at its timeout, the others elect,
// and it rolls back what no majority applied when it rejoins), or a
// secondary is cut off for as long (it falls behind, then catches up), or
// a member restarts after being down for up to the election timeout (a
// primary's restart is a failover without a step-down). While a cut lasts
// no other begins, so that each runs its course.
func (s *sim) failover(rng *rand.Rand) {
	set := s.db.(replicaSet).Set
	p, ok := set.Primary()
	if !ok {
		return
	}
	kind := rng.IntN(4)
	if s.cfg.cutPrimaries {
		kind = 1
	}
	cut := func(member int) {
		if !s.cutting.CompareAndSwap(false, true) {
			return
		}
		set.Partition(member)
		s.later(electionTimeout+dur(rng, electionTimeout), func() {
			set.Heal()
			s.cutting.Store(false)
		})
	}
	switch kind {
	case 0:
		set.StepDown()
	case 1:
		cut(p.ID())
	case 2:
		cut((p.ID() + 1 + rng.IntN(set.Size()-1)) % set.Size())
	case 3:
		set.Restart(rng.IntN(set.Size()), dur(rng, electionTimeout))
	}
}

func parseMembers(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n%2 == 0 && n > 1 {
		return 0, fmt.Errorf("%q: want 1 (one server) or an odd number of members", s)
	}
	return n, nil
}

// mustFind is a small world over a replica set that fails over every few
// seconds, and stops at its first violation.
func mustFind(t *testing.T, seed uint64, change func(*config)) *result {
	cfg := defaultConfig(t)
	cfg.seed, cfg.worlds, cfg.n = seed, 1, 20000
	cfg.members, cfg.failoverEvery, cfg.untilViolation = []int{3}, 2*time.Second, true
	cfg.procs, cfg.goroutines = 3, 2
	change(&cfg)
	return run(t, cfg, soakcheck.NewBoard(cfg.slots))
}

// With w: 1, a failover rolls back acquisitions and extensions the old
// primary acknowledged: the simulation must find two holders at once. Its
// failovers cut the primary off, the failover whose rollbacks show it.
func TestSimulateFindsTwoHoldersWhenTheLibraryWritesAtW1(t *testing.T) {
	for seed := range uint64(mustFindSeeds) {
		t.Run(fmt.Sprint("seed ", seed+1), func(t *testing.T) {
			t.Parallel()
			r := mustFind(t, seed+1, func(c *config) { c.w1, c.cutPrimaries = true, true })
			if r.violations() == 0 {
				t.Fatalf("no violation found in %d critical sections over %d failovers and %d rollbacks", r.entries, r.failovers, r.rollbacks)
			}
			t.Logf("found after %d critical sections, %d failovers, %d rollbacks: %s", r.entries, r.failovers, r.rollbacks, r.reports[0])
		})
	}
}

// A member whose clock is further ahead than the library's bound ends the
// leases written before a failover to it that much early: the simulation
// must find two holders at once.
func TestSimulateFindsTwoHoldersPastTheClockSkewBound(t *testing.T) {
	for seed := range uint64(mustFindSeeds) {
		t.Run(fmt.Sprint("seed ", seed+1), func(t *testing.T) {
			t.Parallel()
			r := mustFind(t, seed+1, func(c *config) { c.ahead = 2 * time.Second })
			if r.violations() == 0 {
				t.Fatalf("no violation found in %d critical sections over %d failovers", r.entries, r.failovers)
			}
			t.Logf("found after %d critical sections, %d failovers: %s", r.entries, r.failovers, r.reports[0])
		})
	}
}
