package conformance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// A FleetLedger records which worker runs which shard of a fleet, as a
// resource the shards guard would see it: a shard run by two workers at
// once is a twin, one run with a token not above its last is stale.
type FleetLedger struct {
	mu      sync.Mutex
	running map[int]string // shard: the worker running it
	tokens  map[int]int64  // shard: the last token it ran with
	starts  int
	twins   int
	stale   int
}

// NewFleetLedger returns a ledger of no shards run yet.
func NewFleetLedger() *FleetLedger {
	return &FleetLedger{running: map[int]string{}, tokens: map[int]int64{}}
}

// Work is a shard's fn for worker: it runs the shard until ctx ends, then
// takes linger to stop.
func (l *FleetLedger) Work(worker string, linger time.Duration) func(ctx context.Context, s mongolock.Shard) error {
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

// Counts returns how many shards each worker runs, and how many run.
func (l *FleetLedger) Counts() (map[string]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := map[string]int{}
	for _, w := range l.running {
		c[w]++
	}
	return c, len(l.running)
}

// Starts is how many times a shard's fn began.
func (l *FleetLedger) Starts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts
}

// Balanced reports whether all n shards run, each of workers running n/W
// or one more.
func (l *FleetLedger) Balanced(n int, workers ...string) bool {
	c, total := l.Counts()
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

// CheckNoTwins fails the test if a shard ran twice at once, or with a
// token not above its last.
func (l *FleetLedger) CheckNoTwins(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Zero(t, l.twins, "shards run by two workers at once")
	require.Zero(t, l.stale, "shards run with a fencing token not above their last")
}

// RunWorker runs f as worker, its fn l's Work, until the test ends or the
// returned cancel is called; Run's error arrives on the channel.
func RunWorker(t testing.TB, f *mongolock.Fleet, l *FleetLedger, worker string, linger time.Duration) (context.CancelFunc, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done, ended := make(chan error, 1), make(chan struct{})
	go func() { defer close(ended); done <- f.Run(ctx, l.Work(worker, linger)) }()
	t.Cleanup(func() { cancel(); <-ended })
	return cancel, done
}

// fleetSpreadsAndHandsOn: two workers of two processes share a fleet's
// shards evenly, the listing shows each shard's worker, and a worker that
// leaves hands its shards to the other, never two at once and each with a
// greater token.
func fleetSpreadsAndHandsOn(e *Env) {
	const n = 6
	l := NewFleetLedger()
	a, b := e.provider(), e.provider()
	RunWorker(e.T, a.Fleet("fleet", n), l, "a", 0)
	leave, left := RunWorker(e.T, b.Fleet("fleet", n), l, "b", 0)
	e.pollUntil("3 shards each", func() bool { return l.Balanced(n, "a", "b") })

	workers, held := map[string]bool{}, map[string]int{} // a worker's id: whether live, how many shards
	for info, err := range a.Locks(e.Ctx, "fleet/") {
		require.NoError(e.T, err)
		if id, ok := strings.CutPrefix(info.Name, "fleet/workers/"); ok {
			workers[id] = info.Held
			continue
		}
		require.Equal(e.T, mongolock.KindElection, info.Kind, info.Name)
		require.True(e.T, info.Held, info.Name)
		held[info.Value]++ // a shard's value is its worker's id
	}
	require.Len(e.T, workers, 2)
	for id, live := range workers {
		require.True(e.T, live, "worker %s", id)
		require.Equal(e.T, n/2, held[id], "the shards of worker %s", id)
	}

	leave()
	require.ErrorIs(e.T, <-left, context.Canceled)
	e.pollUntil("a runs all 6", func() bool { return l.Balanced(n, "a") })
	l.CheckNoTwins(e.T)
}
