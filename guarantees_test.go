package mongolock_test

// The guarantee suite: each guarantee that every kind keeps (the README's
// Guarantees; their numbers are given with each test), tested on every
// kind and mode. A row is a kind and mode: a lock, a semaphore of two, an
// RWLock's reader, its writer, an election. Each guarantee is a test that
// runs every row, in parallel, each in a database of its own. Providers on
// clients of their own stand for processes.
//
// Sleeps keep their documented bounds for every kind in the waiting
// schedule itself too: TestSleepsKeepTheirDocumentedBounds feeds it random
// replies of every kind's turn rule.

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/faultproxy"
	"github.com/mongolock/mongolock/internal/testdb"
)

// modeLock is how a row acquires: Acquire (waiting) and TryAcquire (one
// attempt). Every handle is given up with Release (an election's Resign is
// Release).
type modeLock struct {
	acquire, try func(ctx context.Context) (*mongolock.Handle, error)
}

// kindRow is one kind and mode of the suite.
type kindRow struct {
	kind string
	// n is how many may hold in this mode at once (0: any number, an
	// RWLock's readers); otherN is the same of the other mode.
	n, otherN int
	slots     bool // its document is in the semaphores' collection
	rw        bool // other is an RWLock's other mode; else it is this one
	// this is the row's mode of name through p; other is the mode that
	// keeps it out, and that it keeps out (keptOutBy holders of it do).
	this, other func(p *mongolock.Provider, name string) modeLock
}

var kindRows = []kindRow{
	{kind: "lock", n: 1, this: lockMode, other: lockMode},
	{kind: "semaphore", n: 2, slots: true, this: semaphoreOf(2), other: semaphoreOf(2)},
	{kind: "read", otherN: 1, slots: true, rw: true, this: readerMode, other: writerMode},
	{kind: "write", n: 1, slots: true, rw: true, this: writerMode, other: readerMode},
	{kind: "election", n: 1, this: campaignMode, other: campaignMode},
}

func lockMode(p *mongolock.Provider, name string) modeLock {
	l := p.Lock(name)
	return modeLock{l.Acquire, l.TryAcquire}
}

func semaphoreOf(n int) func(p *mongolock.Provider, name string) modeLock {
	return func(p *mongolock.Provider, name string) modeLock {
		s := p.Semaphore(name, n)
		return modeLock{s.Acquire, s.TryAcquire}
	}
}

func readerMode(p *mongolock.Provider, name string) modeLock {
	r := p.RWLock(name).Reader()
	return modeLock{r.Acquire, r.TryAcquire}
}

func writerMode(p *mongolock.Provider, name string) modeLock {
	w := p.RWLock(name).Writer()
	return modeLock{w.Acquire, w.TryAcquire}
}

// campaignMode campaigns with the value "leader"; its one attempt is the
// election's lock held with that value.
func campaignMode(p *mongolock.Provider, name string) modeLock {
	return modeLock{campaign(p.Election(name), "leader"), mongolock.LockWithValue(p, name, "leader").TryAcquire}
}

func (r kindRow) coll(db *mongo.Database) *mongo.Collection {
	if r.slots {
		return semColl(db)
	}
	return lockColl(db)
}

// keptOutBy is how many holders of the other mode keep this mode out.
func (r kindRow) keptOutBy() int {
	if r.rw {
		return 1
	}
	return r.n
}

// forEachKind runs test for every row, in parallel.
func forEachKind(t *testing.T, test func(t *testing.T, r kindRow)) {
	for _, r := range kindRows {
		t.Run(r.kind, func(t *testing.T) {
			t.Parallel()
			test(t, r)
		})
	}
}

// holdOut takes k holders of r's other mode of name through p, each in one
// attempt; they are released when the test ends, if not before.
func holdOut(t *testing.T, ctx context.Context, r kindRow, p *mongolock.Provider, name string, k int) []*mongolock.Handle {
	t.Helper()
	hs := make([]*mongolock.Handle, k)
	for i := range hs {
		h, err := r.other(p, name).try(ctx)
		require.NoError(t, err, "holder %d of what keeps %q out", i+1, name)
		hs[i] = releaseAtCleanup(t, h)
	}
	return hs
}

// raise makes most at least v.
func raise(most *atomic.Int64, v int64) {
	for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
	}
}

// At most n hold at once (1): a lock, an election and an RWLock's writer
// one, a semaphore n, an RWLock's readers any number but never beside a
// writer. Callers of three processes contend (and, for an RWLock, a caller
// of a fourth in the other mode); each counts itself in while it holds.
func TestGuaranteeAtMostNHoldAtOnce(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		const procs, callers, rounds, name = 3, 2, 6, "contended"
		db := testdb.Database(t)
		ctx := boundedCtx(t, time.Minute)
		var inThis, inOther, most atomic.Int64
		var wg sync.WaitGroup
		contend := func(m modeLock, in, out *atomic.Int64, n int, mode string) {
			for range rounds {
				h, err := m.acquire(ctx)
				if !assert(t, err == nil, "%s: %v", mode, err) {
					return
				}
				v := in.Add(1)
				if in == &inThis {
					raise(&most, v)
				}
				assert(t, (n == 0 || v <= int64(n)) && out.Load() == 0,
					"%d holders of %s at once (at most %d; 0: any), %d of the other mode", v, mode, n, out.Load())
				time.Sleep(time.Millisecond) // the work done holding
				in.Add(-1)                   // before the release: the next holder counts after it
				if !assert(t, h.Release(ctx) == nil, "%s: release", mode) {
					return
				}
			}
		}
		opts := []mongolock.Option{fastPolls, mongolock.WithExpiry(time.Second)}
		for range procs {
			p := newProvider(t, ownClient(t, db, nil), opts...)
			for range callers {
				wg.Go(func() { contend(r.this(p, name), &inThis, &inOther, r.n, r.kind) })
			}
		}
		if r.rw {
			p := newProvider(t, ownClient(t, db, nil), opts...)
			wg.Go(func() { contend(r.other(p, name), &inOther, &inThis, r.otherN, "the other mode") })
		}
		wg.Wait()
		t.Logf("%s: at most %d held at once", r.kind, most.Load())
	})
}

// Lost before expired (5): a holder whose client is disconnected, or
// partitioned from the server, closes Lost before another process gets in
// (raceLoss). For a semaphore, the rival holds the other slot.
func TestGuaranteeLostBeforeExpired(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		db := testdb.Database(t)
		ctx := boundedCtx(t, time.Minute)
		rival := newProvider(t, ownClient(t, db, nil), mongolock.WithExpiry(faultExpiry))
		for _, c := range []struct {
			name string
			cut  func(px *faultproxy.Proxy, client *mongo.Client)
		}{
			{"disconnected", func(_ *faultproxy.Proxy, client *mongo.Client) { _ = client.Disconnect(ctx) }},
			{"partitioned", func(px *faultproxy.Proxy, _ *mongo.Client) { px.Blackhole() }},
		} {
			holdOut(t, ctx, r, rival, c.name, r.keptOutBy()-1)
			px, client, closeAll, err := dialProxied(testdb.Info(t).URI)
			require.NoError(t, err)
			holder, err := mongolock.NewProvider(client.Database(db.Name()), mongolock.WithExpiry(faultExpiry))
			if err != nil {
				closeAll()
				require.NoError(t, err)
			}
			phase := time.Duration(rand.Int64N(int64(2 * faultExpiry / 3)))
			race, err := raceLoss(ctx, r.coll(db), c.name, r.this(holder, c.name).try, r.other(rival, c.name).try, phase,
				func() { c.cut(px, client) })
			closeAll()
			mongolock.WaitBackground(holder)
			require.NoError(t, err, c.name)
			require.Empty(t, race.violation, c.name)
			t.Logf("%s %s: Lost closed %v after the cut, %v before the rival's winning attempt was sent",
				r.kind, c.name, race.cutToLost, race.margin)
		}
	})
}
