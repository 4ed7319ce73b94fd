package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/faultproxy"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// fleetOpts are the fleet tests' leases: 3 s, extended every second.
var fleetOpts = []mongolock.Option{mongolock.WithExpiry(3 * time.Second), fastPolls}

func TestFleetSpreadsEveryShardEvenlyOverItsWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		for _, w := range []string{"a", "b", "c"} {
			p, _ := d.process(fleetOpts...)
			conformance.RunWorker(t, p.Fleet("orders", 10), l, w, 0)
		}
		// Each worker joins before its first listing, and may list before
		// the others joined: balance takes a pass or two more.
		pollUntil(t, 2*time.Second, "10 shards over 3 workers, 3 or 4 each", func() bool { return l.Balanced(10, "a", "b", "c") })
		starts := l.Starts()
		time.Sleep(time.Minute)
		require.Equal(t, starts, l.Starts(), "a stable fleet moves nothing")
		require.True(t, l.Balanced(10, "a", "b", "c"))
		l.CheckNoTwins(t)
	})
}

func TestFleetJoinMovesOnlyWhatTheBalanceNeeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		for _, w := range []string{"a", "b"} {
			p, _ := d.process(fleetOpts...)
			conformance.RunWorker(t, p.Fleet("orders", 10), l, w, 0)
		}
		pollUntil(t, 2*time.Second, "5 shards each", func() bool { return l.Balanced(10, "a", "b") })
		before := l.Starts()

		p, _ := d.process(fleetOpts...)
		joined := time.Now()
		conformance.RunWorker(t, p.Fleet("orders", 10), l, "c", 100*time.Millisecond)
		pollUntil(t, 10*time.Second, "10 shards over 3 workers", func() bool { return l.Balanced(10, "a", "b", "c") })
		require.LessOrEqual(t, time.Since(joined), 2*time.Second+200*time.Millisecond, "balanced within two cadences of the join")
		time.Sleep(time.Minute)
		c, _ := l.Counts()
		require.Equal(t, 3, c["c"])
		require.Equal(t, before+3, l.Starts(), "the joiner's 3 shards moved, nothing else")
		l.CheckNoTwins(t)
	})
}

func TestFleetWorkerThatLeavesHandsItsShardsOnAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		var leave context.CancelFunc
		var left <-chan error
		for _, w := range []string{"a", "b", "c"} {
			p, _ := d.process(fleetOpts...)
			leave, left = conformance.RunWorker(t, p.Fleet("orders", 12), l, w, 50*time.Millisecond)
		}
		pollUntil(t, 2*time.Second, "4 shards each", func() bool { return l.Balanced(12, "a", "b", "c") })

		leave() // c
		start := time.Now()
		err := <-left
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, `run "orders"`)
		pollUntil(t, 3*time.Second, "12 shards over the 2 left", func() bool { return l.Balanced(12, "a", "b") })
		// The leaver's functions take 50 ms to return; its releases wake the
		// others at once, where the store has change streams, as the model does.
		require.LessOrEqual(t, time.Since(start), 100*time.Millisecond, "taken within moments of their release, long before the next pass")
		l.CheckNoTwins(t)
	})
}

func TestFleetShardsOfACutOffWorkerMoveAtItsLeasesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		net := map[string]*memdb.Faults{}
		for _, w := range []string{"a", "b", "c"} {
			p, faults := d.process(fleetOpts...)
			net[w] = faults
			conformance.RunWorker(t, p.Fleet("orders", 12), l, w, 0)
		}
		pollUntil(t, 2*time.Second, "4 shards each", func() bool { return l.Balanced(12, "a", "b", "c") })

		net["c"].Partition()
		cut, sent := time.Now(), net["a"].Sent()
		pollUntil(t, 10*time.Second, "12 shards over the 2 reachable", func() bool { return l.Balanced(12, "a", "b") })
		require.Less(t, time.Since(cut), 3*time.Second+2*time.Second, "held again within the lease and a cadence or so")
		// The gone worker's membership and shards end together, extended in
		// one batch: a survivor sees both at one pass, and polls no sooner.
		// Both survivors may try the same freed shards, which adds a few
		// tries; a survivor polling at the busy-wait sleep would send hundreds.
		require.Less(t, net["a"].Sent()-sent, int64(30), "a few passes, the takes, their extensions")
		l.CheckNoTwins(t)
	})
}

// Workers that read the fleet at different moments may each count a freed
// shard as another's: the one whose target it is, once all have taken
// theirs, must take it within moments, not at its next cadence.
func TestFleetShardsOfACutOffWorkerAreHeldWithinACadenceOfItsLeasesEnd(t *testing.T) {
	for _, apart := range []time.Duration{7 * time.Millisecond, 333 * time.Millisecond} {
		t.Run(fmt.Sprint("started ", apart, " apart"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newMemDB(t)
				l := conformance.NewFleetLedger()
				net := map[string]*memdb.Faults{}
				workers := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
				var p *mongolock.Provider
				for _, w := range workers {
					p, net[w] = d.process(fleetOpts...)
					conformance.RunWorker(t, p.Fleet("orders", 64), l, w, 0)
					time.Sleep(apart) // passes out of step, as of processes started apart
				}
				pollUntil(t, 10*time.Second, "8 shards each", func() bool { return l.Balanced(64, workers...) })
				time.Sleep(2 * time.Second)

				net["1"].Partition()
				reachable := slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return w == "1" })
				pollUntil(t, 10*time.Second, "every shard held by the 7 reachable", func() bool {
					c, _ := l.Counts()
					held := 0
					for _, w := range reachable {
						held += c[w]
					}
					return held == 64
				})
				var leaseEnd time.Time // the cut worker's membership's, its shards' too
				for info, err := range p.Locks(t.Context(), "orders/workers/") {
					require.NoError(t, err)
					if !info.Held {
						leaseEnd = info.ExpiresAt
					}
				}
				require.LessOrEqual(t, time.Since(leaseEnd), time.Second+100*time.Millisecond,
					"a cadence to find the shards free, and a few passes at the busy-wait sleep")
				l.CheckNoTwins(t)
			})
		})
	}
}

func TestFleetShardMovesOnlyAfterItsFunctionReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		p, _ := d.process(fleetOpts...)
		conformance.RunWorker(t, p.Fleet("orders", 8).DrainTimeout(time.Minute), l, "slow", 5*time.Second) // drains for 5 s, longer than a lease
		pollUntil(t, 2*time.Second, "8 shards", func() bool { return l.Balanced(8, "slow") })

		q, _ := d.process(fleetOpts...)
		joined := time.Now()
		conformance.RunWorker(t, q.Fleet("orders", 8), l, "new", 0)
		pollUntil(t, 10*time.Second, "4 shards each", func() bool { return l.Balanced(8, "slow", "new") })
		require.GreaterOrEqual(t, time.Since(joined), 5*time.Second, "the moved shards waited for their function")
		l.CheckNoTwins(t)
	})
}

func TestFleetDrainTimeoutBoundsTheWaitForAFunction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		p, _ := d.process(fleetOpts...)
		stuck := make(chan struct{})
		t.Cleanup(func() { close(stuck) })
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- p.Fleet("orders", 2).DrainTimeout(time.Second).Run(ctx, func(context.Context, mongolock.Shard) error {
				<-stuck // ignores its ctx
				return nil
			})
		}()
		synctest.Wait() // it holds both
		q, _ := d.process(fleetOpts...)
		conformance.RunWorker(t, q.Fleet("orders", 2), l, "taker", 0)
		synctest.Wait()
		_, running := l.Counts()
		require.Zero(t, running, "the first worker holds both")

		cancel()
		start := time.Now()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Equal(t, time.Second, time.Since(start), "Run returned at the drain timeout")
		pollUntil(t, 2*time.Second, "the taker holds both", func() bool { return l.Balanced(2, "taker") })
	})
}

func TestFleetFunctionsErrorEndsRunAndFreesItsShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		p, _ := d.process(fleetOpts...)
		boom := errors.New("boom")
		err := p.Fleet("orders", 4).Run(t.Context(), func(_ context.Context, s mongolock.Shard) error {
			if s.Index == 2 {
				return boom
			}
			return nil
		})
		require.ErrorIs(t, err, boom)
		for info, err := range p.Locks(t.Context(), "orders/") {
			require.NoError(t, err)
			require.False(t, info.Held, "%s is held after Run", info.Name)
		}
	})
}

func TestFleetShardsShowTheirWorkerInTheListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		p, _ := d.process(fleetOpts...)
		l := conformance.NewFleetLedger()
		conformance.RunWorker(t, p.Fleet("orders", 3), l, "a", 0)
		pollUntil(t, 2*time.Second, "3 shards", func() bool { return l.Balanced(3, "a") })
		var shards, workers []mongolock.LockInfo
		for info, err := range p.Locks(t.Context(), "orders/") {
			require.NoError(t, err)
			if strings.HasPrefix(info.Name, "orders/workers/") {
				workers = append(workers, info)
			} else {
				shards = append(shards, info)
			}
		}
		require.Len(t, shards, 3)
		require.Len(t, workers, 1)
		require.Equal(t, "3", workers[0].Value, "a worker's value is how many shards it holds")
		for i, s := range shards {
			require.Equal(t, fmt.Sprintf("orders/%d", i), s.Name)
			require.True(t, s.Held)
			require.Equal(t, "orders/workers/"+s.Value, workers[0].Name, "a shard's value is its worker's id")
		}
	})
}

func TestFleetRefusesANameThatIsNotUTF8Unsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		p, net := d.process()
		err := p.Fleet("\xff", 1).Run(t.Context(), func(context.Context, mongolock.Shard) error { return nil })
		require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
		require.Zero(t, net.Sent())
	})
}

func TestFleetRunEndsWithErrClosedWhenItsProviderCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		p, _ := d.process(fleetOpts...)
		l := conformance.NewFleetLedger()
		_, done := conformance.RunWorker(t, p.Fleet("orders", 4), l, "a", 0)
		pollUntil(t, 2*time.Second, "4 shards", func() bool { return l.Balanced(4, "a") })
		require.NoError(t, p.Close(t.Context()))
		require.ErrorIs(t, <-done, mongolock.ErrClosed)
		_, running := l.Counts()
		require.Zero(t, running, "every shard's fn returned")
	})
}

// A steady worker sends one extension of all its leases and one listing
// per cadence, however many shards it holds (under 500, one batch).
func TestFleetSteadyWorkerSendsAnExtensionAndAListingPerCadence(t *testing.T) {
	perCadence := func(n int) float64 {
		var sent float64
		synctest.Test(t, func(t *testing.T) {
			d := newMemDB(t)
			l := conformance.NewFleetLedger()
			p, net := d.process(fleetOpts...)
			conformance.RunWorker(t, p.Fleet("orders", n), l, "a", 0)
			q, _ := d.process(fleetOpts...)
			conformance.RunWorker(t, q.Fleet("orders", n), l, "b", 0)
			pollUntil(t, 10*time.Second, "balanced", func() bool { return l.Balanced(n, "a", "b") })
			time.Sleep(10 * time.Second)
			before := net.Sent()
			time.Sleep(80 * time.Second) // 80 cadences
			sent = float64(net.Sent()-before) / 80
		})
		return sent
	}
	few, many := perCadence(4), perCadence(200)
	t.Logf("round trips per cadence of a worker: %.3f with 2 shards, %.3f with 100", few, many)
	require.LessOrEqual(t, few, 2.125, "an extension and a listing of the memberships; every 8th a listing of all")
	require.LessOrEqual(t, many, few*1.2, "round trips flat in the shards")
}

// BenchmarkFleetSteadyWorker: the commands per second that one worker of
// a steady fleet of 8 sends, at 16, 256 and 4,096 shards, on the server;
// and "by-hand", 8 workers that try each of 256 Locks once per cadence, as
// a fleet built by hand from N Locks does. It also reports how long the
// fleet took to hold every shard, evenly, from its start. Run it with
// -benchtime 1x: each run is a fixed window of 5 cadences.
func BenchmarkFleetSteadyWorker(b *testing.B) {
	const workers, cadence, window = 8, time.Second, 5 * time.Second
	opts := []mongolock.Option{mongolock.WithExpiry(3 * cadence), fastPolls}
	db := testdb.Database(b)
	measure := func(b *testing.B, run func(p *mongolock.Provider, worker string), ready func()) {
		counts := make([]*commandCounter, workers)
		for i := range counts {
			counts[i] = &commandCounter{}
			run(newProvider(b, ownClient(b, db, counts[i]), opts...), fmt.Sprint(i))
		}
		ready()
		time.Sleep(2 * cadence) // past the first passes' takes
		var before int64
		for _, c := range counts {
			before += c.commands.Load()
		}
		time.Sleep(window)
		var after int64
		for _, c := range counts {
			after += c.commands.Load()
		}
		b.ReportMetric(float64(after-before)/workers/window.Seconds(), "commands/s/worker")
	}
	for _, n := range []int{16, 256, 4096} {
		b.Run(fmt.Sprint("fleet-", n), func(b *testing.B) {
			for b.Loop() {
				l := conformance.NewFleetLedger()
				start := time.Now()
				var names []string
				measure(b, func(p *mongolock.Provider, worker string) {
					names = append(names, worker)
					conformance.RunWorker(b, p.Fleet(fmt.Sprint("bench-", n), n), l, worker, 0)
				}, func() {
					pollUntil(b, time.Minute, "balanced", func() bool { return l.Balanced(n, names...) })
					b.ReportMetric(time.Since(start).Seconds(), "s-to-balance")
				})
			}
		})
	}
	b.Run("by-hand-256", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			measure(b, func(p *mongolock.Provider, _ string) {
				go func() {
					held := map[int]*mongolock.Handle{}
					for ctx.Err() == nil {
						for i := range 256 {
							if held[i] == nil {
								if h, err := p.Lock(fmt.Sprint("by-hand-", i)).TryAcquire(ctx); err == nil {
									held[i] = h
								}
							}
						}
						select {
						case <-ctx.Done():
						case <-time.After(cadence):
						}
					}
				}()
			}, func() {})
			cancel()
		}
	})
}

// BenchmarkFleetChanges: how soon a fleet of 256 shards and 8 workers on
// the server holds its shards after each change: from its start (every
// shard held, then evenly); after a ninth worker joins (evenly again);
// after a worker leaves (from each of its shards' release to its next
// start); after a worker is cut off (from the cut to every shard held by
// the others). "by-hand" is 8 workers that try each of 256 Locks once per
// cadence, through the same changes but the join, which nothing balances.
// Run it with -benchtime 1x: its figures are seconds, the cadence 1 s.
func BenchmarkFleetChanges(b *testing.B) {
	const n, cadence = 256, time.Second
	eight := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	b.Run("fleet-256", func(b *testing.B) {
		for b.Loop() {
			workers := slices.Clone(eight)
			clock := &releaseClock{released: map[int]time.Time{}}
			trace := &mongolock.Trace{
				ShardStopped: func(s mongolock.ShardInfo) {
					if s.Reason == "left" {
						clock.release(s.Index)
					}
				},
				ShardStarted: func(s mongolock.ShardInfo) { clock.take(s.Index) },
			}
			db := testdb.Database(b)
			l := conformance.NewFleetLedger()
			cuts, leaves := map[string]*faultproxy.Proxy{}, map[string]context.CancelFunc{}
			join := func(w string) {
				px, pdb := proxiedDB(b, db)
				cuts[w] = px
				p := newProvider(b, pdb, mongolock.WithExpiry(3*cadence), fastPolls, mongolock.WithTrace(trace))
				leaves[w], _ = conformance.RunWorker(b, p.Fleet("changes", n), l, w, 0)
				b.Cleanup(func() { px.Reset(); _ = px.Restore() }) // before the worker's end, for a cut one
			}
			heldBy := func(ws []string) func() bool {
				return func() bool {
					c, _ := l.Counts()
					sum := 0
					for _, w := range ws {
						sum += c[w]
					}
					return sum == n
				}
			}

			start := time.Now()
			for _, w := range workers {
				join(w)
			}
			pollUntil(b, time.Minute, "every shard held", heldBy(workers))
			b.ReportMetric(time.Since(start).Seconds(), "s-start-held")
			pollUntil(b, time.Minute, "balanced", func() bool { return l.Balanced(n, workers...) })
			b.ReportMetric(time.Since(start).Seconds(), "s-start-balanced")

			joined := time.Now()
			join("8")
			workers = append(workers, "8")
			pollUntil(b, time.Minute, "balanced over 9", func() bool { return l.Balanced(n, workers...) })
			b.ReportMetric(time.Since(joined).Seconds(), "s-join-balanced")

			leaves["0"]()
			workers = workers[1:]
			pollUntil(b, time.Minute, "balanced over the 8 left", func() bool { return l.Balanced(n, workers...) })
			b.ReportMetric(clock.longest().Seconds(), "s-leave-release-to-held")

			cut := time.Now()
			cuts["1"].Blackhole()
			workers = workers[1:]
			pollUntil(b, time.Minute, "every shard held by the 7 reachable", heldBy(workers))
			b.ReportMetric(time.Since(cut).Seconds(), "s-kill-held")
			held := time.Now()
			// The cut worker's membership ended with its shards' leases, in
			// one batch; the leaver's ended at its release, before the cut.
			var leaseEnd time.Time
			for info, err := range newProvider(b, db).Locks(context.Background(), "changes/workers/") {
				require.NoError(b, err)
				if !info.Held && info.ExpiresAt.After(leaseEnd) {
					leaseEnd = info.ExpiresAt
				}
			}
			b.ReportMetric(held.Sub(leaseEnd).Seconds(), "s-kill-held-after-lease-end")
		}
	})
	b.Run("by-hand-256", func(b *testing.B) {
		for b.Loop() {
			workers := slices.Clone(eight)
			db := testdb.Database(b)
			hand := &byHand{n: n, cadence: cadence, clock: releaseClock{released: map[int]time.Time{}}, holder: map[int]string{}}
			cuts, stops := map[string]*faultproxy.Proxy{}, map[string]func(release bool){}
			start := time.Now()
			for _, w := range workers {
				px, pdb := proxiedDB(b, db)
				cuts[w] = px
				stops[w] = hand.run(b, newProvider(b, pdb, mongolock.WithExpiry(3*cadence)), w)
			}
			pollUntil(b, time.Minute, "every lock held", func() bool { return hand.heldBy(workers) == n })
			b.ReportMetric(time.Since(start).Seconds(), "s-start-held")

			stops["0"](true)
			workers = workers[1:]
			pollUntil(b, time.Minute, "every lock held by the 7 left", func() bool { return hand.heldBy(workers) == n })
			b.ReportMetric(hand.clock.longest().Seconds(), "s-leave-release-to-held")

			one := hand.heldOne("1")
			cut := time.Now()
			cuts["1"].Blackhole()
			stops["1"](false)
			workers = workers[1:]
			leaseEnd := leaseEndOf(b, newProvider(b, db), one)
			pollUntil(b, time.Minute, "every lock held by the 6 reachable", func() bool { return hand.heldBy(workers) == n })
			b.ReportMetric(time.Since(cut).Seconds(), "s-kill-held")
			b.ReportMetric(time.Since(leaseEnd).Seconds(), "s-kill-held-after-lease-end")
		}
	})
}

// leaseEndOf returns when the lease of name's holder ends, in server
// time, once it has ended: it reads name until another holds it or none.
func leaseEndOf(b *testing.B, p *mongolock.Provider, name string) time.Time {
	var end time.Time
	var token int64
	pollUntil(b, time.Minute, name+"'s holder's lease over", func() bool {
		info, err := p.Inspect(context.Background(), name)
		require.NoError(b, err)
		if token == 0 {
			token = info.FencingToken
		}
		if !info.Held || info.FencingToken != token {
			return true
		}
		end = info.ExpiresAt // an extension sent before the cut may land after it
		return false
	})
	return end
}

// proxiedDB returns db on a client of its own behind a fault proxy, both
// closed when the benchmark ends.
func proxiedDB(b *testing.B, db *mongo.Database) (*faultproxy.Proxy, *mongo.Database) {
	b.Helper()
	px, c, closeAll, err := dialProxied(testdb.Info(b).URI)
	require.NoError(b, err)
	b.Cleanup(closeAll)
	return px, c.Database(db.Name())
}

// A releaseClock times each released shard or lock from its release to its
// next acquisition.
type releaseClock struct {
	mu       sync.Mutex
	released map[int]time.Time
	gaps     []time.Duration
}

func (c *releaseClock) release(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released[i] = time.Now()
}

func (c *releaseClock) take(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.released[i]; ok {
		c.gaps = append(c.gaps, time.Since(at))
		delete(c.released, i)
	}
}

// longest is the longest time from a release to the next acquisition.
func (c *releaseClock) longest() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Max(append(c.gaps, 0))
}

// byHand is a fleet built by hand from n Locks: each worker tries every
// Lock it does not hold once per cadence.
type byHand struct {
	n       int
	cadence time.Duration
	clock   releaseClock

	mu     sync.Mutex
	holder map[int]string // lock: the worker that holds it
}

// run starts worker on p, and returns stop, which ends it: it releases
// what it holds if release, and leaves it held (a dead process) if not.
func (h *byHand) run(b *testing.B, p *mongolock.Provider, worker string) (stop func(release bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var release atomic.Bool
	held := map[int]*mongolock.Handle{}
	wg.Go(func() {
		for ctx.Err() == nil {
			for i := range h.n {
				if held[i] != nil && held[i].Context().Err() == nil {
					continue
				}
				if hd, err := p.Lock(fmt.Sprint("by-hand-", i)).TryAcquire(ctx); err == nil {
					held[i] = hd
					h.mu.Lock()
					h.holder[i] = worker
					h.mu.Unlock()
					h.clock.take(i)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(h.cadence):
			}
		}
		if release.Load() {
			for i, hd := range held {
				if hd.Release(context.Background()) == nil {
					h.clock.release(i)
				}
			}
		}
	})
	stop = func(r bool) {
		release.Store(r)
		cancel()
		wg.Wait()
	}
	b.Cleanup(func() { cancel(); wg.Wait() })
	return stop
}

// heldOne is the name of a Lock that worker holds.
func (h *byHand) heldOne(worker string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, w := range h.holder {
		if w == worker {
			return fmt.Sprint("by-hand-", i)
		}
	}
	return ""
}

// heldBy is how many of the Locks workers hold, as their last acquisitions
// say.
func (h *byHand) heldBy(workers []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	sum := 0
	for _, w := range h.holder {
		if slices.Contains(workers, w) {
			sum++
		}
	}
	return sum
}

func TestFleetTellsTheTraceHooksOfShardsStartedAndStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		running, reasons := map[int]bool{}, map[string]int{}
		var drained []time.Duration
		trace := &mongolock.Trace{
			ShardStarted: func(i mongolock.ShardInfo) {
				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, "orders", i.Fleet)
				require.Positive(t, i.FencingToken)
				running[i.Index] = true
			},
			ShardStopped: func(i mongolock.ShardInfo) {
				mu.Lock()
				defer mu.Unlock()
				delete(running, i.Index)
				reasons[i.Reason]++
				drained = append(drained, i.Drained)
			},
		}
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		p, _ := d.process(append(fleetOpts, mongolock.WithTrace(trace))...)
		leave, left := conformance.RunWorker(t, p.Fleet("orders", 4), l, "a", 100*time.Millisecond)
		pollUntil(t, 2*time.Second, "4 shards", func() bool { return l.Balanced(4, "a") })
		q, _ := d.process(fleetOpts...)
		conformance.RunWorker(t, q.Fleet("orders", 4), l, "b", 0)
		pollUntil(t, 10*time.Second, "2 shards each", func() bool { return l.Balanced(4, "a", "b") })
		leave()
		<-left
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, running, "every shard started was stopped")
		require.Equal(t, map[string]int{"moved": 2, "left": 2}, reasons)
		for _, d := range drained {
			require.Equal(t, 100*time.Millisecond, d, "the functions' time to return, the release in no time")
		}
	})
}

func TestFleetShardLostToAForceReleaseRunsAgainWithAGreaterToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := conformance.NewFleetLedger()
		p, _ := d.process(fleetOpts...)
		conformance.RunWorker(t, p.Fleet("orders", 4), l, "a", 0)
		q, _ := d.process(fleetOpts...)
		conformance.RunWorker(t, q.Fleet("orders", 4), l, "b", 0)
		pollUntil(t, 2*time.Second, "2 shards each", func() bool { return l.Balanced(4, "a", "b") })
		before := l.Starts()

		forced, err := q.ForceRelease(t.Context(), "orders/1")
		require.NoError(t, err)
		require.True(t, forced)
		pollUntil(t, 2*time.Second, "shard 1 runs again", func() bool { return l.Starts() == before+1 && l.Balanced(4, "a", "b") })
		time.Sleep(time.Minute)
		require.Equal(t, before+1, l.Starts(), "only the lost shard moved")
		l.CheckNoTwins(t) // its start's token was above the lost one's
	})
}
