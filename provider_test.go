package mongolock_test

// A provider's life (provider.go).

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Lifecycle: Close.

// Close frees every lock its handles hold at once (another process gets
// them without waiting for an expiry), ends the Acquire calls in flight
// with ErrClosed, and later calls fail with ErrClosed.
func TestCloseReleasesHeldLocksAndEndsCalls(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t, mongolock.WithExpiry(30*time.Second))
	a := mustTryAcquire(t, ctx, e.p.Lock("a"))
	b := mustTryAcquire(t, ctx, e.p.Lock("b"))
	held := mustTryAcquire(t, ctx, e.other.Lock("busy"))
	defer func() { require.NoError(t, held.Release(ctx)) }()
	waiting := acquireInBackground(ctx, e.p.Lock("busy"))
	pollUntil(t, 10*time.Second, "the waiter's first attempt", func() bool { return e.count.named("findAndModify") >= 3 })

	require.NoError(t, e.p.Close(ctx))
	require.ErrorIs(t, <-waiting, mongolock.ErrClosed, "an Acquire in flight")
	require.ErrorIs(t, context.Cause(a.Context()), context.Canceled)
	require.False(t, closedNow(a.Lost()), "released by Close, not lost")
	require.NoError(t, a.Release(ctx), "a handle Close released")
	require.NoError(t, b.Release(ctx))
	for _, name := range []string{"a", "b"} {
		h, err := e.other.Lock(name).TryAcquire(ctx)
		require.NoError(t, err, "%s: still held after Close", name)
		require.NoError(t, h.Release(ctx))
	}

	_, err := e.p.Lock("a").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrClosed)
	_, err = e.p.Lock("a").Acquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrClosed)
	err = e.p.Lock("a").Do(ctx, func(context.Context) error { return nil })
	require.ErrorIs(t, err, mongolock.ErrClosed)
	require.NoError(t, e.p.Close(ctx), "a second Close")
}

// A Close whose ctx ends returns ctx's error; what is held is released all
// the same (in the background, past a failed round trip), and a later Close
// reports the first one's outcome.
func TestCloseBoundedByItsContext(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	h := mustTryAcquire(t, ctx, e.p.Lock("bounded"))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, e.p.Close(done), context.Canceled)
	awaitClosed(t, h.Context().Done(), 10*time.Second, "the handle released all the same")
	require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
	pollUntil(t, 10*time.Second, "the lock freed in the background", func() bool {
		o, err := e.other.Lock("bounded").TryAcquire(ctx)
		if err == nil {
			require.NoError(t, o.Release(ctx))
		}
		return err == nil
	})
	require.ErrorIs(t, e.p.Close(ctx), context.Canceled, "the release under the first Close's ctx failed")
}

// Providers made per request and clients made per tenant leave nothing
// behind: a provider in process memory keeps its state of its own, which
// goes with it, and holds no memory once its handles are released. On the
// real clock: what is measured is memory, and real time lets the
// providers' idle senders end.
func TestProvidersAndClientsLeaveNothingBehind(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// A change history of a few events, filled by the warm-up: the
	// model's own memory, which a longer one would grow by a round's
	// worth.
	store := memdb.NewStore(memDBName, nil, memdb.WithHistory(16))
	newProvider := func(client *memdb.Store) *mongolock.Provider {
		p, err := backend.NewProvider(client, memDBName, []mongolock.Option(nil))
		require.NoError(t, err)
		return p.(*mongolock.Provider)
	}
	leader := newProvider(store.Client())
	held := mustTryAcquire(t, ctx, leader.Lock("leader"))
	client := store.Client()

	// A provider per call, as New makes one, while the leader's lock of
	// the same collection stays held. Each provider, and each handle
	// (whose cleanup refers to it until it has run), is collected.
	perCall := func(n int) []weak.Pointer[mongolock.Provider] {
		var gone []weak.Pointer[mongolock.Provider]
		for range n {
			p := newProvider(client)
			h, err := p.Lock("per-request").Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
			gone = append(gone, weak.Make(p))
		}
		return gone
	}
	// A leak grows the heap in every round; what the rest of the process
	// allocates meanwhile does not: one round of three under the bound
	// passes.
	before := heapOnceCollected(t, perCall(100))
	const calls = 300
	var perCallGrowth []int64
	for range 3 {
		after := heapOnceCollected(t, perCall(calls))
		grown := int64(after) - int64(before)
		t.Logf("heap grew by %d bytes over %d calls (%d per call)", grown, calls, grown/calls)
		if perCallGrowth = append(perCallGrowth, grown/calls); grown/calls < 256 {
			break
		}
		before = after
	}
	require.Less(t, slices.Min(perCallGrowth), int64(256), "bytes kept per provider+Acquire+Release, in each of three rounds")

	// Clients that come and go.
	forgetClients(t, func(int) (*mongolock.Provider, func()) { return newProvider(store.Client()), func() {} })
	require.NoError(t, held.Release(ctx))
	require.NoError(t, leader.Close(ctx))
}

// heapOnceCollected is the heap in use once every provider of gone has
// been collected.
func heapOnceCollected(t *testing.T, gone []weak.Pointer[mongolock.Provider]) uint64 {
	pollUntil(t, 30*time.Second, "the providers made per call collected", func() bool {
		runtime.GC()
		return !slices.ContainsFunc(gone, func(w weak.Pointer[mongolock.Provider]) bool { return w.Value() != nil })
	})
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// forgetClients makes 20 providers on clients of their own with
// provider(i), each of which takes and releases a lock of its own and
// closes, then disconnects its client: the state kept per collection of
// those clients is forgotten once they are collected, and their
// goroutines end.
func forgetClients(t *testing.T, provider func(i int) (p *mongolock.Provider, disconnect func())) {
	t.Helper()
	ctx := boundedCtx(t, time.Minute)
	baseline, goroutines := mongolock.Locals(), runtime.NumGoroutine()
	for i := range 20 {
		p, disconnect := provider(i)
		h, err := p.Lock(fmt.Sprint("tenant-", i)).TryAcquire(ctx)
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
		require.NoError(t, p.Close(ctx))
		disconnect()
	}
	pollUntil(t, 30*time.Second, "the state of gone clients forgotten", func() bool {
		runtime.GC()
		return mongolock.Locals() <= baseline
	})
	pollUntil(t, 30*time.Second, "goroutines back to where they were", func() bool { return runtime.NumGoroutine() <= goroutines })
}

// The state kept per collection of a driver's client goes with the
// client, once it is disconnected.
func TestTheStateOfGoneDriverClientsIsForgotten(t *testing.T) {
	db := testdb.Database(t)
	forgetClients(t, func(int) (*mongolock.Provider, func()) {
		c, err := mongo.Connect(options.Client().ApplyURI(testdb.Info(t).URI))
		require.NoError(t, err)
		p, err := mongolock.NewProvider(c.Database(db.Name()))
		require.NoError(t, err)
		return p, func() { require.NoError(t, c.Disconnect(t.Context())) }
	})
}
