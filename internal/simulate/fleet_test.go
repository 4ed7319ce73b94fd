package simulate

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
)

var flagFleetMoves = flag.Int("simulate.fleet.moves", defaultFleetMoves,
	"stop the fleet worlds once their shards have moved this many times, in all worlds together")

// A fleet world's shape: its shards, how many workers it has at most, and
// their leases. fleetSettle is the bound the world holds the fleet to:
// after the last change, every shard runs, evenly over the live workers,
// within a lease (a crashed worker's shards wait for it), four cadences
// (a pass to see the change, one to give up, one to take, one to spare)
// and the longest drain of a shard's function.
const (
	fleetShards     = 32
	fleetMaxWorkers = 6
	fleetExpiry     = 3 * time.Second
	fleetLinger     = 300 * time.Millisecond // a shard's function takes up to this to stop
	fleetSettle     = fleetExpiry + 4*fleetExpiry/3 + fleetLinger
)

// TestSimulateFleet runs worlds in which workers of one fleet join, leave,
// crash, are cut off for a while and stall, in simulated time, in bursts
// of one to three changes. Throughout, a ledger of who runs which shard
// checks that no shard runs in two workers at once and that each start's
// fencing token is above the shard's last; after each burst, that every
// shard runs, evenly over the live workers, within fleetSettle.
func TestSimulateFleet(t *testing.T) {
	seed, worlds := *flagSeed, max(1, *flagWorlds)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	share := (*flagFleetMoves + worlds - 1) / worlds
	replay := fmt.Sprintf("go test -run 'TestSimulateFleet$' ./internal/simulate -v -simulate.seed=%d -simulate.worlds=%d -simulate.fleet.moves=%d", seed, worlds, *flagFleetMoves)
	fmt.Printf("simulate fleet: seed %d (%d worlds side by side): %s\n", seed, worlds, replay)
	var moves, bursts, late atomic.Int64
	t.Run("worlds", func(t *testing.T) {
		for i := range worlds {
			t.Run(fmt.Sprint(seed+uint64(i)), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					w := newFleetWorld(t, seed+uint64(i))
					w.run(share)
					moves.Add(int64(w.ledger.Starts() - fleetShards))
					bursts.Add(w.bursts)
					late.Add(w.late)
					w.ledger.CheckNoTwins(t)
				})
			})
		}
	})
	fmt.Printf("simulate fleet: %d shard moves in %d bursts of changes, %d bursts not settled within %v\n", moves.Load(), bursts.Load(), late.Load(), fleetSettle)
	if t.Failed() {
		t.Errorf("seed %d; replay: %s", seed, replay)
	}
}

// A fleetWorld is one store, its workers and their ledger.
type fleetWorld struct {
	t       *testing.T
	rng     *rand.Rand
	store   *memdb.Store
	ledger  *conformance.FleetLedger
	live    []*fleetWorker // in the fleet, reachable after each burst
	gone    []*fleetWorker // crashed: cut off for good
	named   int
	bursts  int64
	late    int64 // bursts after which the fleet did not settle in time
	running sync.WaitGroup
}

// A fleetWorker is one worker process: a client of its own, with its
// faults, and a provider that runs the fleet.
type fleetWorker struct {
	name    string
	client  *memdb.Store
	p       *mongolock.Provider
	stop    context.CancelFunc
	done    chan struct{}
	crashed bool
}

func newFleetWorld(t *testing.T, seed uint64) *fleetWorld {
	w := &fleetWorld{t: t, rng: rand.New(rand.NewPCG(seed, seed)), store: memdb.NewStore("mongolock_simulate", nil),
		ledger: conformance.NewFleetLedger()}
	t.Cleanup(func() {
		for _, k := range slices.Concat(w.live, w.gone) {
			k.stop()
		}
		w.running.Wait()
		for _, k := range slices.Concat(w.live, w.gone) {
			_ = k.p.Close(context.Background()) // a crashed one's releases fail
		}
		time.Sleep(time.Minute) // the closed providers' idle senders end
	})
	return w
}

// run makes bursts of changes until the fleet's shards moved moves times.
func (w *fleetWorld) run(moves int) {
	for range 3 {
		w.join()
	}
	w.settled()
	for w.ledger.Starts()-fleetShards < moves && !w.t.Failed() {
		w.bursts++
		var heal []func()
		for range 1 + w.rng.IntN(3) {
			heal = append(heal, w.change())
			time.Sleep(time.Duration(w.rng.Int64N(int64(2 * time.Second))))
		}
		for _, h := range heal {
			h()
		}
		w.settled()
		w.sweep()
	}
}

// sweep deletes the memberships that ended a lease ago, as a server's TTL
// monitor would: the model has none, and every worker that ever joined
// would otherwise stay in each listing.
func (w *fleetWorld) sweep() {
	ended := bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: "fleet/workers/"}, {Key: "$lt", Value: "fleet/workers0"}}},
		{Key: "expiresAt", Value: bson.D{{Key: "$lt", Value: time.Now().Add(-fleetExpiry)}}}}
	err := w.store.Do(context.Background(), "distributed_locks", func(c *memdb.Table, now time.Time) error {
		for {
			if deleted, err := c.DeleteOne(now, ended); !deleted || err != nil {
				return err
			}
		}
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// change makes one change to the fleet, and returns what undoes a passing
// one (a partition, a stall) once the burst is over.
func (w *fleetWorld) change() (heal func()) {
	nothing := func() {}
	switch r := w.rng.IntN(10); {
	case r < 3 && len(w.live) < fleetMaxWorkers || len(w.live) < 2:
		w.join()
	case r < 5:
		k := w.pick()
		k.stop() // leaves: Run gives its shards up
		<-k.done
		_ = k.p.Close(context.Background())
	case r < 6:
		k := w.pick()
		k.client.Faults.Partition() // crashes, for good: its leases run out in the store
		k.crashed = true
		k.stop() // and the process's work stops, with nothing it sends arriving
		w.gone = append(w.gone, k)
	case r < 8:
		k := w.live[w.rng.IntN(len(w.live))]
		k.client.Faults.Partition() // cut off for a while
		return func() {
			if !k.crashed { // meanwhile
				k.client.Faults.Heal()
			}
		}
	default:
		k := w.live[w.rng.IntN(len(w.live))]
		k.client.Faults.Delay(time.Duration(w.rng.Int64N(int64(fleetExpiry)))) // stalls
		return func() { k.client.Faults.Delay(0) }
	}
	return nothing
}

// pick takes a worker out of the live ones, at random.
func (w *fleetWorld) pick() *fleetWorker {
	i := w.rng.IntN(len(w.live))
	k := w.live[i]
	w.live = slices.Delete(w.live, i, i+1)
	return k
}

// join starts a worker.
func (w *fleetWorld) join() {
	w.named++
	k := &fleetWorker{name: fmt.Sprint("w", w.named), client: w.store.Client(), done: make(chan struct{})}
	p, err := backend.NewProvider(k.client, "mongolock_simulate", []mongolock.Option{
		mongolock.WithExpiry(fleetExpiry), mongolock.WithBusyWaitSleep(10*time.Millisecond, 200*time.Millisecond)})
	if err != nil {
		w.t.Fatal(err)
	}
	k.p = p.(*mongolock.Provider)
	ctx, stop := context.WithCancel(context.Background())
	k.stop = stop
	linger := time.Duration(w.rng.Int64N(int64(fleetLinger)))
	w.running.Go(func() {
		defer close(k.done)
		_ = k.p.Fleet("fleet", fleetShards).Run(ctx, w.ledger.Work(k.name, linger))
	})
	w.live = append(w.live, k)
}

// settled waits fleetSettle, and counts the burst late if the shards do
// not then run evenly over the live workers.
func (w *fleetWorld) settled() {
	time.Sleep(fleetSettle)
	names := make([]string, len(w.live))
	for i, k := range w.live {
		names[i] = k.name
	}
	if !w.ledger.Balanced(fleetShards, names...) {
		w.late++
		counts, total := w.ledger.Counts()
		w.t.Errorf("not settled %v after a burst: %d shards run, by worker %v; live %v", fleetSettle, total, counts, names)
	}
}
