package mongolocktest_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A crashed Provider's locks stay held until their leases run out, and
// Heal does not bring it back.
func TestACrashedProvidersLocksRunOutAndHealLeavesItCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := mongolocktest.NewStore()
		dead, err := store.NewProvider(mongolock.WithExpiry(3 * time.Second))
		require.NoError(t, err)
		live, err := store.NewProvider()
		require.NoError(t, err)
		h, err := dead.Lock("job").Acquire(ctx)
		require.NoError(t, err)

		store.Crash(dead)
		start := time.Now()
		next, err := live.Lock("job").Acquire(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "held until the crashed holder's lease ran out")
		require.Greater(t, next.FencingToken(), h.FencingToken())
		store.Partition()
		store.Heal()
		_, err = dead.Lock("other").TryAcquire(ctx)
		require.Error(t, err, "still cut off")
		require.NoError(t, next.Release(ctx))
		require.Panics(t, func() { mongolocktest.NewStore().Crash(live) })
		require.NoError(t, live.Close(ctx))
		_ = dead.Close(ctx) // releases nothing: the store is out of its reach
	})
}

// A test of a fleet's worker: two workers share 8 shards; one crashes,
// and its shards move to the other at its leases' end, in simulated time.
func TestAFleetsCrashedWorkersShardsMoveToTheOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		running := map[int]string{}
		work := func(worker string) func(context.Context, mongolock.Shard) error {
			return func(ctx context.Context, s mongolock.Shard) error {
				mu.Lock()
				running[s.Index] = worker
				mu.Unlock()
				<-ctx.Done()
				return nil
			}
		}
		count := func(worker string) (n int) {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range running {
				if w == worker {
					n++
				}
			}
			return n
		}
		store := mongolocktest.NewStore()
		ctx, stop := context.WithCancel(t.Context())
		var runs sync.WaitGroup
		defer runs.Wait()
		defer stop()
		var workers []*mongolock.Provider
		for _, name := range []string{"a", "b"} {
			p, err := store.NewProvider(mongolock.WithExpiry(30 * time.Second))
			require.NoError(t, err)
			workers = append(workers, p)
			runs.Go(func() { _ = p.Fleet("orders", 8).Run(ctx, work(name)) })
		}
		time.Sleep(20 * time.Second) // a few passes
		require.Equal(t, []int{4, 4}, []int{count("a"), count("b")})

		store.Crash(workers[0])
		time.Sleep(45 * time.Second) // past the crashed worker's leases, and a pass
		require.Equal(t, 8, count("b"))
		stop()
		runs.Wait()
		for _, p := range workers {
			_ = p.Close(t.Context())
		}
	})
}
