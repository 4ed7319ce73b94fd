package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// fleetOpts are the fleet tests' leases: 3 s, extended every second.
var fleetOpts = []mongolock.Option{mongolock.WithExpiry(3 * time.Second), fastPolls}

// A fleetLedger records which worker runs which shard, as a resource
// that the shards guard would see it: a shard run by two workers at once
// is a twin, a shard's token not above its last is out of order.
type fleetLedger struct {
	mu      sync.Mutex
	running map[int]string // shard: the worker running it
	tokens  map[int]int64  // shard: the last token it ran with
	starts  int
	twins   int
	stale   int
}

func newFleetLedger() *fleetLedger {
	return &fleetLedger{running: map[int]string{}, tokens: map[int]int64{}}
}

// work is a shard's fn for worker: it runs the shard until ctx ends, then
// takes linger to stop.
func (l *fleetLedger) work(worker string, linger time.Duration) func(ctx context.Context, s mongolock.Shard) error {
	return func(ctx context.Context, s mongolock.Shard) error {
		l.mu.Lock()
		l.starts++
		if _, twin := l.running[s.Index]; twin {
			l.twins++
		}
		if tok := s.Handle.FencingToken(); tok <= l.tokens[s.Index] {
			l.stale++
		} else {
			l.tokens[s.Index] = tok
		}
		l.running[s.Index] = worker
		l.mu.Unlock()
		<-ctx.Done()
		time.Sleep(linger) // the shard's work winding down
		l.mu.Lock()
		if l.running[s.Index] == worker {
			delete(l.running, s.Index)
		}
		l.mu.Unlock()
		return nil
	}
}

// counts returns how many shards each worker runs, and how many run.
func (l *fleetLedger) counts() (map[string]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := map[string]int{}
	for _, w := range l.running {
		c[w]++
	}
	return c, len(l.running)
}

func (l *fleetLedger) startCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts
}

// balanced reports whether all n shards run, each of workers running n/W
// or one more.
func (l *fleetLedger) balanced(n int, workers ...string) bool {
	c, total := l.counts()
	if total != n {
		return false
	}
	for _, w := range workers {
		if c[w] != n/len(workers) && c[w] != n/len(workers)+1 {
			return false
		}
	}
	return true
}

// checkNoTwins fails the test if a shard ran twice at once or with a
// token not above its last.
func (l *fleetLedger) checkNoTwins(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Zero(t, l.twins, "shards run by two workers at once")
	require.Zero(t, l.stale, "shards run with a fencing token not above their last")
}

// fleetWorker runs f as worker until the test ends or the returned cancel
// is called; Run's error arrives on the channel.
func fleetWorker(t *testing.T, f *mongolock.Fleet, l *fleetLedger, worker string, linger time.Duration) (context.CancelFunc, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done, ended := make(chan error, 1), make(chan struct{})
	go func() { defer close(ended); done <- f.Run(ctx, l.work(worker, linger)) }()
	t.Cleanup(func() { cancel(); <-ended })
	return cancel, done
}

func TestFleetSpreadsEveryShardEvenlyOverItsWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := newFleetLedger()
		for _, w := range []string{"a", "b", "c"} {
			p, _ := d.process(fleetOpts...)
			fleetWorker(t, p.Fleet("orders", 10), l, w, 0)
		}
		// Each worker joins before its first listing, and may list before
		// the others joined: balance takes a pass or two more.
		pollUntil(t, 2*time.Second, "10 shards over 3 workers, 3 or 4 each", func() bool { return l.balanced(10, "a", "b", "c") })
		starts := l.startCount()
		time.Sleep(time.Minute)
		require.Equal(t, starts, l.startCount(), "a stable fleet moves nothing")
		require.True(t, l.balanced(10, "a", "b", "c"))
		l.checkNoTwins(t)
	})
}

func TestFleetJoinMovesOnlyWhatTheBalanceNeeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := newFleetLedger()
		for _, w := range []string{"a", "b"} {
			p, _ := d.process(fleetOpts...)
			fleetWorker(t, p.Fleet("orders", 10), l, w, 0)
		}
		pollUntil(t, 2*time.Second, "5 shards each", func() bool { return l.balanced(10, "a", "b") })
		before := l.startCount()

		p, _ := d.process(fleetOpts...)
		joined := time.Now()
		fleetWorker(t, p.Fleet("orders", 10), l, "c", 100*time.Millisecond)
		pollUntil(t, 10*time.Second, "10 shards over 3 workers", func() bool { return l.balanced(10, "a", "b", "c") })
		require.LessOrEqual(t, time.Since(joined), 2*time.Second+200*time.Millisecond, "balanced within two cadences of the join")
		time.Sleep(time.Minute)
		c, _ := l.counts()
		require.Equal(t, 3, c["c"])
		require.Equal(t, before+3, l.startCount(), "the joiner's 3 shards moved, nothing else")
		l.checkNoTwins(t)
	})
}

func TestFleetWorkerThatLeavesHandsItsShardsOnAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := newFleetLedger()
		var leave context.CancelFunc
		var left <-chan error
		for _, w := range []string{"a", "b", "c"} {
			p, _ := d.process(fleetOpts...)
			leave, left = fleetWorker(t, p.Fleet("orders", 12), l, w, 50*time.Millisecond)
		}
		pollUntil(t, 2*time.Second, "4 shards each", func() bool { return l.balanced(12, "a", "b", "c") })

		leave() // c
		start := time.Now()
		err := <-left
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, `run "orders"`)
		pollUntil(t, 3*time.Second, "12 shards over the 2 left", func() bool { return l.balanced(12, "a", "b") })
		require.LessOrEqual(t, time.Since(start), time.Second+100*time.Millisecond, "taken at the others' next pass, long before the leaver's leases would have ended")
		l.checkNoTwins(t)
	})
}

func TestFleetShardsOfACutOffWorkerMoveAtItsLeasesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := newFleetLedger()
		var net = map[string]func(){}
		for _, w := range []string{"a", "b", "c"} {
			p, faults := d.process(fleetOpts...)
			net[w] = faults.Partition
			fleetWorker(t, p.Fleet("orders", 12), l, w, 0)
		}
		pollUntil(t, 2*time.Second, "4 shards each", func() bool { return l.balanced(12, "a", "b", "c") })

		net["c"]()
		cut := time.Now()
		pollUntil(t, 10*time.Second, "12 shards over the 2 reachable", func() bool { return l.balanced(12, "a", "b") })
		require.Less(t, time.Since(cut), 3*time.Second+2*time.Second, "held again within the lease and a cadence or so")
		l.checkNoTwins(t)
	})
}

func TestFleetShardMovesOnlyAfterItsFunctionReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := newFleetLedger()
		p, _ := d.process(fleetOpts...)
		fleetWorker(t, p.Fleet("orders", 8).DrainTimeout(time.Minute), l, "slow", 5*time.Second) // drains for 5 s, longer than a lease
		pollUntil(t, 2*time.Second, "8 shards", func() bool { return l.balanced(8, "slow") })

		q, _ := d.process(fleetOpts...)
		joined := time.Now()
		fleetWorker(t, q.Fleet("orders", 8), l, "new", 0)
		pollUntil(t, 10*time.Second, "4 shards each", func() bool { return l.balanced(8, "slow", "new") })
		require.GreaterOrEqual(t, time.Since(joined), 5*time.Second, "the moved shards waited for their function")
		l.checkNoTwins(t)
	})
}

func TestFleetDrainTimeoutBoundsTheWaitForAFunction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		l := newFleetLedger()
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
		fleetWorker(t, q.Fleet("orders", 2), l, "taker", 0)
		synctest.Wait()
		_, running := l.counts()
		require.Zero(t, running, "the first worker holds both")

		cancel()
		start := time.Now()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Equal(t, time.Second, time.Since(start), "Run returned at the drain timeout")
		pollUntil(t, 2*time.Second, "the taker holds both", func() bool { return l.balanced(2, "taker") })
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
		l := newFleetLedger()
		fleetWorker(t, p.Fleet("orders", 3), l, "a", 0)
		pollUntil(t, 2*time.Second, "3 shards", func() bool { return l.balanced(3, "a") })
		var shards, workers []mongolock.LockInfo
		for info, err := range p.Locks(t.Context(), "orders/") {
			require.NoError(t, err)
			if info.Kind == mongolock.KindElection {
				shards = append(shards, info)
			} else {
				workers = append(workers, info)
			}
		}
		require.Len(t, shards, 3)
		require.Len(t, workers, 1)
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
		l := newFleetLedger()
		_, done := fleetWorker(t, p.Fleet("orders", 4), l, "a", 0)
		pollUntil(t, 2*time.Second, "4 shards", func() bool { return l.balanced(4, "a") })
		require.NoError(t, p.Close(t.Context()))
		require.ErrorIs(t, <-done, mongolock.ErrClosed)
		_, running := l.counts()
		require.Zero(t, running, "every shard's fn returned")
	})
}
