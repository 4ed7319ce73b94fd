package mongolock_test

// The guarantee suite: each guarantee that every kind keeps
// (docs/guarantees.md; their numbers are given with each test), tested on
// every kind and mode. A row is a kind and mode: a lock, a semaphore of
// two, an RWLock's reader, its writer, its upgradeable reader, an election.
// Each guarantee is a test that runs every row, in parallel, each in a
// database of its own. Providers on clients of their own stand for
// processes.
//
// Sleeps keep their documented bounds for every kind in the waiting
// schedule itself too: TestSleepsKeepTheirDocumentedBounds feeds it random
// replies of every kind's turn rule.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// modeLock is how a row acquires: Acquire (waiting) and TryAcquire (one
// attempt). Every handle is given up with Release (a leadership's too).
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
	// refused, if not nil, is this mode with a call that a held name
	// refuses at once (a semaphore's with another n).
	refused func(p *mongolock.Provider, name string) modeLock
}

var kindRows = []kindRow{
	{kind: "lock", n: 1, this: lockMode, other: lockMode},
	{kind: "semaphore", n: 2, slots: true, this: semaphoreOf(2), other: semaphoreOf(2), refused: semaphoreOf(3)},
	{kind: "semaphore-units", n: 2, slots: true, this: unitsOf(5, 2), other: unitsOf(5, 2), refused: unitsOf(6, 2)},
	{kind: "read", otherN: 1, slots: true, rw: true, this: readerMode, other: writerMode},
	{kind: "write", n: 1, slots: true, rw: true, this: writerMode, other: readerMode},
	{kind: "upgradeable", n: 1, otherN: 1, slots: true, rw: true, this: upgradeableMode, other: writerMode},
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

func upgradeableMode(p *mongolock.Provider, name string) modeLock {
	u := p.RWLock(name).Upgradeable()
	return modeLock{
		func(ctx context.Context) (*mongolock.Handle, error) {
			h, err := u.Acquire(ctx)
			return handleOf(h), err
		},
		func(ctx context.Context) (*mongolock.Handle, error) {
			h, err := u.TryAcquire(ctx)
			return handleOf(h), err
		},
	}
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

// waiting is how many Acquire calls of p's process wait for name.
func (r kindRow) waiting(p *mongolock.Provider, name string) int {
	if r.slots {
		return mongolock.SlotQueueLen(p, name)
	}
	return mongolock.QueueLen(p, name)
}

// awaitWaiting waits until n Acquire calls of p's process wait for name.
func (r kindRow) awaitWaiting(t *testing.T, p *mongolock.Provider, name string, n int) {
	t.Helper()
	pollUntil(t, 10*time.Second, fmt.Sprintf("%d in line for %q", n, name), func() bool { return r.waiting(p, name) == n })
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

// rowOf is the row of kind.
func rowOf(kind string) kindRow {
	return kindRows[slices.IndexFunc(kindRows, func(r kindRow) bool { return r.kind == kind })]
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

// outcome is what an Acquire returned.
type outcome struct {
	h   *mongolock.Handle
	err error
}

// startAcquire starts m's Acquire and returns where its outcome arrives.
func startAcquire(ctx context.Context, m modeLock) <-chan outcome {
	got := make(chan outcome, 1)
	go func() {
		h, err := m.acquire(ctx)
		got <- outcome{h, err}
	}()
	return got
}

// awaitAcquired waits up to d for an Acquire started by startAcquire to
// acquire, and returns its handle, released when the test ends.
func awaitAcquired(t *testing.T, got <-chan outcome, d time.Duration, what string) *mongolock.Handle {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case o := <-got:
		require.NoError(t, o.err, what)
		return releaseAtCleanup(t, o.h)
	case <-timer.C:
		require.FailNowf(t, "not acquired in time", "%s: not acquired within %v", what, d)
		return nil
	}
}

// claimIn reports whether name's document in coll holds a process's claim
// on the next turn or slot.
func claimIn(t *testing.T, coll *mongo.Collection, name string) bool {
	t.Helper()
	_, ok := rawLockDoc(t, coll, name).Lookup("waitingProcess").StringValueOK()
	return ok
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
// Over both stores.
func TestGuaranteeAtMostNHoldAtOnce(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) { conformance.Over(t, func(e *conformance.Env) { atMostNHold(e, r) }) })
}

func atMostNHold(e *conformance.Env, r kindRow) {
	const procs, callers, rounds, name = 3, 2, 6, "contended"
	t, ctx := e.T, e.Ctx
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
	// A lease that a stall of the loaded machine does not lose: a
	// holder counted in whose lease ran out would be a false overlap.
	opts := append([]mongolock.Option{fastPolls}, stallProof...)
	for range procs {
		p, _ := e.Process(opts...)
		for range callers {
			wg.Go(func() { contend(r.this(p, name), &inThis, &inOther, r.n, r.kind) })
		}
	}
	if r.rw {
		p, _ := e.Process(opts...)
		wg.Go(func() { contend(r.other(p, name), &inOther, &inThis, r.otherN, "the other mode") })
	}
	wg.Wait()
	t.Logf("%s: at most %d held at once", r.kind, most.Load())
}

// Lost before expired (5): a holder whose client is disconnected, or
// partitioned from the database, closes Lost a safety margin before
// another process gets in, over the model (raceLossInMemory), cut off just
// after its acquisition and on either side of its first extension's send.
// For a semaphore, the rival holds the other slot. (A lock's holder at
// every phase of lossPhases: TestAPartitionedHolderIsToldBeforeARivalAcquires.)
func TestGuaranteeLostBeforeExpired(t *testing.T) {
	for _, r := range kindRows {
		t.Run(r.kind, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				name string
				cut  func(*memdb.Faults)
			}{
				{"disconnected", (*memdb.Faults).Disconnect},
				{"partitioned", (*memdb.Faults).Blackhole},
			} {
				for _, phase := range []time.Duration{0, memExpiry/3 - time.Millisecond, memExpiry/3 + time.Millisecond} {
					t.Run(fmt.Sprint(c.name, " at ", phase), func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							d := newMemDB(t)
							holder, net, rival := d.holderAndRival(mongolock.WithExpiry(memExpiry))
							holdOut(t, d.Ctx, r, rival, c.name, r.keptOutBy()-1)
							race := raceLossInMemory(t, d, c.name, r.this(holder, c.name).try, r.other(rival, c.name).try, phase,
								func() { c.cut(net) })
							lostAMarginBeforeTheRival(t, race)
						})
					})
				}
			}
		})
	}
}

// On the wire, a holder whose client is disconnected hears so from the
// driver at its next extension, and closes Lost before a rival on a
// client of its own gets in. The lease is stallProof: what the wire shows
// is the driver's word taken as a loss; how close to the lease's end a
// loss may come is the model's test above. (A partition on the wire is
// TestFaultPartitionedHolderIsToldBeforeARivalAcquires's.)
func TestGuaranteeLostBeforeExpiredWhenDisconnectedOnTheWire(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 20*time.Second)
	const name = "disconnected"
	rival := newProvider(t, ownClient(t, db, nil), stallProof...)
	// A cleanup still selecting a server when the client is disconnected
	// ends only at the selection's timeout, or its own.
	client := testdb.NewClient(t, options.Client().SetServerSelectionTimeout(time.Second))
	holder := newProvider(t, client.Database(db.Name()), stallProof...)
	phase := time.Duration(rand.Int64N(int64(250 * time.Millisecond))) // within an extension cycle
	race, err := raceLoss(ctx, lockColl(db), name, holder.Lock(name).TryAcquire, rival.Lock(name).TryAcquire, phase,
		func() { _ = client.Disconnect(ctx) })
	require.NoError(t, err)
	require.Empty(t, race.violation)
	t.Logf("Lost closed %v after the cut, %v before the rival's winning attempt was sent", race.cutToLost, race.margin)
}

// slowClaims makes a process's claims long (ClaimLifetime: four of its
// sleeps and a quarter second, 20.25 s): a claim it leaves behind would
// keep others out for far longer than promptly.
var slowClaims = mongolock.WithBusyWaitSleep(5*time.Second, 5*time.Second)

// promptly bounds how soon a free lock is got once nothing holds it back:
// a round trip and a sleep of fastPolls (20 ms at most), with room for a
// loaded machine.
const promptly = 2 * time.Second

// Nothing outlives a failed, refused or cancelled call beyond one round
// trip (9). Process a holds what keeps the row's mode out, having taken it
// a whole turn in a row (a lock's process then steps aside while another
// process's claim is live); the calls of process b (slowClaims) fail; a
// gives up its last holder and asks again, and must get it promptly: a
// claim b left behind would hold a back for seconds.
func TestGuaranteeNothingOutlivesAFailedCall(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		db := testdb.Database(t)
		coll := r.coll(db)
		a := newProvider(t, ownClient(t, db, nil), fastPolls)
		type failing struct {
			name  string
			calls func(t *testing.T, ctx context.Context, b *mongolock.Provider, name string)
		}
		waiters := func(n int, closing bool) func(t *testing.T, ctx context.Context, b *mongolock.Provider, name string) {
			return func(t *testing.T, ctx context.Context, b *mongolock.Provider, name string) {
				waitAndEnd(t, ctx, r, coll, b, name, n, closing)
			}
		}
		cases := []failing{
			{"ctx ended while waiting", waiters(1, false)},
			{"all waiters of a process cancelled together", waiters(3, false)},
			{"all waiters of a process closed together", waiters(3, true)},
		}
		if r.refused != nil {
			cases = append(cases, failing{"refused at once", func(t *testing.T, ctx context.Context, b *mongolock.Provider, name string) {
				start := time.Now()
				_, err := r.refused(b, name).acquire(ctx)
				require.Error(t, err)
				require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
				require.Less(t, time.Since(start), promptly, "refused, but not at once: %v", err)
			}})
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := boundedCtx(t, 30*time.Second)
				name := c.name
				b := newProvider(t, ownClient(t, db, nil), slowClaims)
				require.Greater(t, mongolock.ClaimLifetime(b), 4*promptly)
				for range mongolock.TurnLength {
					h, err := r.other(a, name).try(ctx)
					require.NoError(t, err)
					require.NoError(t, h.Release(ctx))
				}
				held := holdOut(t, ctx, r, a, name, r.keptOutBy())
				c.calls(t, ctx, b, name)
				require.Zero(t, r.waiting(b, name), "calls of the failed process still wait")
				require.NoError(t, held[len(held)-1].Release(ctx))
				actx, cancel := context.WithTimeout(ctx, promptly)
				defer cancel()
				h, err := r.other(a, name).acquire(actx)
				require.NoError(t, err, "what the failed calls left kept another process from a free %s", r.kind)
				require.NoError(t, h.Release(ctx))
			})
		}
	})

	// A writer whose ctx ends while a reader of its process waits behind it:
	// the writer's claim goes with it, so that reader, and readers of other
	// processes, get the free lock promptly.
	t.Run("writer ended before a reader of its process", func(t *testing.T) {
		t.Parallel()
		const name = "catalog"
		db := testdb.Database(t)
		ctx := boundedCtx(t, 30*time.Second)
		a := newProvider(t, ownClient(t, db, nil), fastPolls)
		b := newProvider(t, ownClient(t, db, nil), slowClaims)
		c := newProvider(t, ownClient(t, db, nil), fastPolls)
		reading, err := readerMode(a, name).try(ctx)
		require.NoError(t, err)
		wctx, cancelWriter := context.WithCancel(ctx)
		defer cancelWriter()
		wrote := startAcquire(wctx, writerMode(b, name))
		pollUntil(t, 10*time.Second, "the writer's claim", func() bool {
			info, err := c.RWLock(name).Inspect(ctx)
			return err == nil && info.WriterWaiting
		})
		read := startAcquire(ctx, readerMode(b, name))
		awaitSlotQueueLen(t, b, name, 2)
		cancelWriter()
		require.ErrorIs(t, (<-wrote).err, context.Canceled)
		require.NoError(t, reading.Release(ctx))
		awaitAcquired(t, read, promptly, "the reader behind the writer that gave up")
		cctx, cancel := context.WithTimeout(ctx, promptly)
		defer cancel()
		h, err := readerMode(c, name).acquire(cctx)
		require.NoError(t, err, "a reader of another process, after the writer gave up")
		releaseAtCleanup(t, h)
		info, err := c.RWLock(name).Inspect(ctx)
		require.NoError(t, err)
		require.False(t, info.WriterWaiting, "a writer that gave up still waits")
	})
}

// waitAndEnd starts waiters Acquire calls of r's mode of name in b's
// process: the first until its claim is in the document, then the others
// in line behind it. Then it ends them all together, by their shared ctx
// or by closing b, and checks that each failed so.
func waitAndEnd(t *testing.T, ctx context.Context, r kindRow, coll *mongo.Collection, b *mongolock.Provider, name string, waiters int, closing bool) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan error, waiters)
	start := func() {
		go func() {
			h, err := r.this(b, name).acquire(wctx)
			if err == nil {
				err = errors.Join(errors.New("acquired"), h.Release(ctx))
			}
			failed <- err
		}()
	}
	start()
	pollUntil(t, 10*time.Second, "the waiter's claim", func() bool { return claimIn(t, coll, name) })
	for range waiters - 1 {
		start()
	}
	r.awaitWaiting(t, b, name, waiters)
	want := context.Canceled
	if closing {
		want = mongolock.ErrClosed
		require.NoError(t, b.Close(ctx))
	} else {
		cancel()
	}
	for range waiters {
		require.ErrorIs(t, <-failed, want)
	}
}

// Nor does a claim outlive an Acquire that a release of its own process
// handed the lock (9): its own attempt, on its way as the hand-over was
// made, was refused after it and claimed again; the call returns the
// handle, and the holder releases at once. Another process asking for the
// free lock or slot (an RWLock's other mode: the claim of this one keeps
// it out) then gets it. The race is narrow: many rounds.
func TestGuaranteeNoClaimOutlivesAHandedOverAcquire(t *testing.T) {
	const rounds = 40
	forEachKind(t, func(t *testing.T, r kindRow) {
		db := testdb.Database(t)
		ctx := boundedCtx(t, time.Minute)
		name := "handed over"
		a := newProvider(t, ownClient(t, db, nil), fastPolls)
		c := newProvider(t, ownClient(t, db, nil), fastPolls)
		asks := r.this
		if r.rw {
			asks = r.other
		}
		if r.n > 1 { // all slots but the one handed over held by a third process
			holdOut(t, ctx, r, newProvider(t, ownClient(t, db, nil)), name, r.n-1)
		}
		refused := 0
		for range rounds {
			held, err := r.other(a, name).try(ctx)
			require.NoError(t, err)
			got := startAcquire(ctx, r.this(a, name))
			r.awaitWaiting(t, a, name, 1)
			require.NoError(t, held.Release(ctx)) // hands it to the waiter
			o := <-got
			require.NoError(t, o.err)
			require.NoError(t, o.h.Release(ctx))
			h, err := asks(c, name).try(ctx)
			if err != nil {
				refused++
				pollUntil(t, 5*time.Second, "the claim lapses", func() bool { h, err = asks(c, name).try(ctx); return err == nil })
			}
			require.NoError(t, h.Release(ctx))
		}
		require.Zero(t, refused, "rounds of %d in which another process was refused once the handed-over holder released", rounds)
	})
}

// The document's TTL field (expiresAt) is never before a live holder's
// lease (10), whatever expiry each process uses: a holder with a 10 minute
// expiry, and a process with a 1 s expiry that holds beside it, extending
// its lease every third of a second (a semaphore's slot, a reader), or
// waits for it, refused again and again (the others).
func TestGuaranteeTheTTLFieldOutlivesEveryLiveLease(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		const name = "mixed-expiries"
		db := testdb.Database(t)
		ctx := boundedCtx(t, 30*time.Second)
		coll := r.coll(db)
		long := newProvider(t, ownClient(t, db, nil), mongolock.WithExpiry(10*time.Minute))
		count := &commandCounter{}
		short := newProvider(t, ownClient(t, db, count), mongolock.WithExpiry(time.Second), fastPolls)
		h, err := r.this(long, name).try(ctx)
		require.NoError(t, err)
		releaseAtCleanup(t, h)
		longLease := leaseOf(t, ctx, coll, name, h)
		require.Greater(t, time.Until(longLease), 9*time.Minute)
		check := func(when string) {
			ttl := ttlField(t, ctx, coll, name)
			require.False(t, ttl.Before(longLease), "%s: the document's expiresAt %v is before the live lease %v", when, ttl, longLease)
		}
		if r.n != 1 {
			hs, err := r.this(short, name).try(ctx)
			require.NoError(t, err)
			releaseAtCleanup(t, hs)
			first := leaseOf(t, ctx, coll, name, hs)
			pollUntil(t, 10*time.Second, "three extensions of the short lease", func() bool {
				check("while the short lease is extended")
				return leaseOf(t, ctx, coll, name, hs).Sub(first) >= 900*time.Millisecond
			})
		} else {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			waited := startAcquire(wctx, r.this(short, name))
			pollUntil(t, 10*time.Second, "ten refusals of the short process", func() bool {
				check("while the short process waits")
				return count.named("findAndModify") >= 10
			})
			cancel()
			require.ErrorIs(t, (<-waited).err, context.Canceled)
		}
		check("at the end")
	})
}

// leaseOf is the end of h's lease as name's document in coll records it.
func leaseOf(t *testing.T, ctx context.Context, coll *mongo.Collection, name string, h *mongolock.Handle) time.Time {
	t.Helper()
	for _, l := range readLeases(ctx, t, coll, name) {
		if l.Token == h.FencingToken() {
			return l.ExpiresAt
		}
	}
	require.FailNowf(t, "no lease", "the document of %q has no lease of token %d", name, h.FencingToken())
	return time.Time{}
}

// ttlField is the expiresAt of name's document in coll: what the TTL index
// reads.
func ttlField(t *testing.T, ctx context.Context, coll *mongo.Collection, name string) time.Time {
	t.Helper()
	var doc struct {
		ExpiresAt time.Time `bson:"expiresAt"`
	}
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc))
	return doc.ExpiresAt
}

// Fencing tokens strictly increase per name (4), for every kind and mode
// (a semaphore's and an RWLock's acquisitions take the next token of the
// name, whatever slot or mode): after a release, a hand-over within a
// process, a hand-over to another process, an expiry takeover, and the
// deletion of the document.
func TestGuaranteeFencingTokensIncrease(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		const name = "fenced"
		db := testdb.Database(t)
		ctx := boundedCtx(t, time.Minute)
		coll := r.coll(db)
		a := newProvider(t, ownClient(t, db, nil), fastPolls)
		b := newProvider(t, ownClient(t, db, nil), fastPolls)
		tokens := &tokenLog{t: t}
		// hold takes what keeps the row's mode out through p, waiting
		// (Acquire, not TryAcquire) until the last step's acquisitions have
		// left the name free for it, and logs its tokens.
		hold := func(p *mongolock.Provider, how string) []*mongolock.Handle {
			hs := make([]*mongolock.Handle, r.keptOutBy())
			for i := range hs {
				h, err := r.other(p, name).acquire(ctx)
				require.NoError(t, err, "holder %d of what keeps %q out", i+1, name)
				tokens.add(h.FencingToken(), how)
				hs[i] = releaseAtCleanup(t, h)
			}
			return hs
		}
		release := func(hs ...*mongolock.Handle) {
			for _, h := range hs {
				require.NoError(t, h.Release(ctx))
			}
		}

		h, err := r.this(a, name).try(ctx)
		require.NoError(t, err)
		tokens.add(h.FencingToken(), "the first acquisition")
		release(h)

		held := hold(a, "a release")
		got := startAcquire(ctx, r.this(a, name))
		r.awaitWaiting(t, a, name, 1)
		release(held...)
		h = awaitAcquired(t, got, 10*time.Second, "the waiter of the holders' process")
		tokens.add(h.FencingToken(), "a hand-over within a process")
		release(h)

		held = hold(a, "a hand-over within a process")
		got = startAcquire(ctx, r.this(b, name))
		pollUntil(t, 10*time.Second, "the other process's claim", func() bool { return claimIn(t, coll, name) })
		release(held...)
		h = awaitAcquired(t, got, 10*time.Second, "the waiter of another process")
		tokens.add(h.FencingToken(), "a hand-over to another process")
		release(h)

		client := testdb.NewClient(t)
		gone := newProvider(t, client.Database(db.Name()), mongolock.WithExpiry(shortExpiry))
		hold(gone, "a hand-over to another process")
		got = startAcquire(ctx, r.this(b, name))
		require.NoError(t, client.Disconnect(ctx)) // the holders' process is gone: its leases run out
		h = awaitAcquired(t, got, 10*time.Second, "the waiter, after the holders' leases ran out")
		tokens.add(h.FencingToken(), "an expiry takeover")
		acquired := time.Now()
		release(h)

		afterTheMillisecondOf(acquired)
		res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: name}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.DeletedCount)
		h, err = r.this(a, name).try(ctx)
		require.NoError(t, err)
		tokens.add(h.FencingToken(), "the deletion of the document")
		release(h)
	})
}

// busyProcesses keep taking a row's other mode while another process, the
// asker, keeps asking for the row's mode.
type busyProcesses struct {
	procs, callers int
	hold           time.Duration // each acquisition's work
	// sleeps are the busy processes' and the asker's WithBusyWaitSleep
	// (nil: fastPolls). An asker that looks less often than the others
	// must still get in.
	sleeps, askerSleeps mongolock.Option
	// most is how many acquisitions the busy processes may make while the
	// asker waits, each time it asks.
	most int64
	// run, if not nil, replaces the callers' Acquire and Release loop: it
	// calls held with each acquisition, while holding it, until ctx ends.
	run func(ctx context.Context, p *mongolock.Provider, name string, held func(ctx context.Context, h *mongolock.Handle)) error
}

// Sleeps of busy processes, which look again within a few milliseconds,
// and of askers, which look every 100 ms.
var (
	eagerSleeps = mongolock.WithBusyWaitSleep(time.Millisecond, 2*time.Millisecond)
	lazySleeps  = mongolock.WithBusyWaitSleep(100*time.Millisecond, 100*time.Millisecond)
)

// orFastPolls is sleeps, or fastPolls if nil.
func orFastPolls(sleeps mongolock.Option) mongolock.Option {
	if sleeps == nil {
		return fastPolls
	}
	return sleeps
}

// busyProcessesOf are the busy processes of each row's kind.
var busyProcessesOf = map[string]busyProcesses{
	// Two processes with steady streams of waiters, which hand the lock on,
	// against an asker that looks rarely: each takes a turn of at most 8 in
	// a row, then steps aside, and the asker is next after a claim in place.
	"lock": {procs: 2, callers: 2, hold: time.Millisecond, sleeps: eagerSleeps, askerSleeps: lazySleeps, most: 2 * mongolock.TurnLength},
	// One process with a steady stream of waiters, which hands its slot
	// on, beside a steady holder of the other slot.
	"semaphore":       {procs: 1, callers: 3, hold: 50 * time.Millisecond, sleeps: eagerSleeps, askerSleeps: lazySleeps, most: 12},
	"semaphore-units": {procs: 1, callers: 3, hold: 50 * time.Millisecond, sleeps: eagerSleeps, askerSleeps: lazySleeps, most: 12},
	// Three writer processes, alternating short holds.
	"read": {procs: 3, callers: 1, hold: 50 * time.Millisecond, sleeps: eagerSleeps, askerSleeps: lazySleeps, most: 12},
	// Three writer processes, alternating short holds, as a reader's.
	"upgradeable": {procs: 3, callers: 1, hold: 50 * time.Millisecond, sleeps: eagerSleeps, askerSleeps: lazySleeps, most: 12},
	// Three reader processes whose holds overlap: never free of readers
	// unless new ones are kept out.
	"write": {procs: 3, callers: 2, hold: 5 * time.Millisecond, most: 32},
	// A Run whose fn returns at once: a term is a turn.
	"election": {procs: 1, callers: 1, askerSleeps: lazySleeps, most: 2, run: runAtOnce},
}

// runAtOnce leads the election in a Run whose fn returns at once.
func runAtOnce(ctx context.Context, p *mongolock.Provider, name string, held func(ctx context.Context, h *mongolock.Handle)) error {
	return p.Election(name).Run(ctx, "busy", func(ctx context.Context, l *mongolock.Leadership) { held(ctx, l.Handle) })
}

// No process is starved (11): a process that keeps asking gets in within a
// bounded number of hand-overs, whatever the others do. The busy processes
// of the row (and, for a semaphore, a steady holder of the other slot)
// keep taking what keeps the row's mode out; the asker asks three times in
// a row. Each time, they pause holding it until the asker has been refused
// once, then go on: they may make at most most acquisitions
// (busyProcessesOf) before the asker gets in.
func TestGuaranteeNoProcessIsStarved(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		const name, asks = "busy", 3
		db := testdb.Database(t)
		ctx := boundedCtx(t, time.Minute)
		s := busyProcessesOf[r.kind]
		holdOut(t, ctx, r, newProvider(t, ownClient(t, db, nil)), name, r.keptOutBy()-1)
		b := startBusy(t, ctx, r, s, db, name)
		count := &commandCounter{}
		asker := newProvider(t, ownClient(t, db, count), orFastPolls(s.askerSleeps))
		var counts []int64
		for ask := range asks {
			b.pause()
			pollUntil(t, 10*time.Second, "the busy processes hold", func() bool { return b.paused.Load() >= 1 })
			from, refusals := b.taken.Load(), count.replies.Load()
			got := startAcquire(ctx, r.this(asker, name))
			pollUntil(t, 10*time.Second, "the asker refused", func() bool { return count.replies.Load() > refusals })
			b.resume()
			h := b.awaitIn(t, got, from, fmt.Sprintf("ask %d", ask+1))
			counts = append(counts, b.taken.Load()-from)
			b.pause()
			require.NoError(t, h.Release(ctx))
		}
		t.Logf("%s: in after %v acquisitions of the others", r.kind, counts)
	})

	// A writer whose own process holds the lock for reading claims it too:
	// other processes' readers are kept out, and it gets the lock once its
	// process's reader leaves.
	t.Run("a writer whose process reads", func(t *testing.T) {
		t.Parallel()
		const name = "busy"
		r, s := rowOf("write"), busyProcessesOf["write"]
		db := testdb.Database(t)
		ctx := boundedCtx(t, time.Minute)
		b := startBusy(t, ctx, r, s, db, name)
		b.resume()
		asker := newProvider(t, ownClient(t, db, nil), fastPolls)
		pollUntil(t, 10*time.Second, "the busy readers read", func() bool { return b.taken.Load() >= 1 })
		reading, err := readerMode(asker, name).try(ctx)
		require.NoError(t, err)
		from := b.taken.Load()
		got := startAcquire(ctx, writerMode(asker, name))
		pollUntil(t, 10*time.Second, "only the asker's reader left", func() bool {
			require.LessOrEqual(t, b.taken.Load()-from, s.most, "acquisitions of the others while the writer waited behind its process's reader")
			readers, _ := liveModes(t, semColl(db), name)
			return readers == 1
		})
		require.NoError(t, reading.Release(ctx))
		b.awaitIn(t, got, from, "the writer, once its process's reader left")
		t.Logf("in after %d acquisitions of the others", b.taken.Load()-from)
	})
}

// busy is the busy processes of a row: they keep taking its other
// mode and count their acquisitions, except while paused, when they hold
// what they took until resumed.
type busy struct {
	most          int64 // busyProcesses.most
	mu            sync.Mutex
	gate          chan struct{} // not nil: paused
	taken, paused atomic.Int64  // acquisitions counted; holders paused
}

// startBusy starts the busy processes s of row r on name, paused; they
// stop when the test ends.
func startBusy(t *testing.T, ctx context.Context, r kindRow, s busyProcesses, db *mongo.Database, name string) *busy {
	t.Helper()
	b := &busy{most: s.most}
	b.pause()
	held := func(ctx context.Context, h *mongolock.Handle) {
		b.mu.Lock()
		gate := b.gate
		b.mu.Unlock()
		if gate == nil {
			b.taken.Add(1)
		} else {
			b.paused.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		time.Sleep(s.hold) // the work done holding
	}
	ps := make([]*mongolock.Provider, s.procs)
	for i := range ps {
		ps[i] = newProvider(t, ownClient(t, db, nil), orFastPolls(s.sleeps))
	}
	// Registered after the providers, so that it runs before their
	// cleanups: nothing of theirs runs once they are waited for.
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stop()
		b.resume()
		wg.Wait()
	})
	for _, p := range ps {
		for range s.callers {
			wg.Go(func() {
				if s.run != nil {
					_ = s.run(ctx, p, name, held)
					return
				}
				m := r.other(p, name)
				for {
					h, err := m.acquire(ctx)
					if err != nil {
						return
					}
					held(ctx, h)
					_ = h.Release(context.WithoutCancel(ctx))
				}
			})
		}
	}
	return b
}

func (b *busy) pause() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gate == nil {
		b.gate = make(chan struct{})
		b.paused.Store(0)
	}
}

func (b *busy) resume() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gate != nil {
		close(b.gate)
		b.gate = nil
	}
}

// awaitIn waits for an Acquire started by startAcquire to acquire while
// the busy processes make at most most acquisitions from from on, and
// returns its handle, released when the test ends.
func (b *busy) awaitIn(t *testing.T, got <-chan outcome, from int64, who string) *mongolock.Handle {
	t.Helper()
	var o outcome
	pollUntil(t, 30*time.Second, who+" gets in", func() bool {
		select {
		case o = <-got:
			return true
		default:
		}
		require.LessOrEqual(t, b.taken.Load()-from, b.most, "%s: acquisitions of the others while it waited", who)
		return false
	})
	require.NoError(t, o.err, who)
	require.LessOrEqual(t, b.taken.Load()-from, b.most, "%s: acquisitions of the others before it got in", who)
	return releaseAtCleanup(t, o.h)
}

// Sleeps keep their documented bounds (12): the next in line looks again
// within its busy-wait max and before its claim lapses, also where release
// events arrive (here none comes, as none comes for a lease that ran out),
// and finds a freed lock within the busy-wait max. Over the model, its
// looks are its acquisition round trips, on the bubble's clock.
func TestGuaranteeSleepsKeepTheirBounds(t *testing.T) {
	for _, r := range kindRows {
		t.Run(r.kind, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const name, sleepMax = "idle", time.Second
				d := newMemDB(t)
				ctx := t.Context()
				a, _ := d.process()
				var mu sync.Mutex
				var looks []time.Time
				b, _ := d.process(mongolock.WithBusyWaitSleep(10*time.Millisecond, sleepMax), mongolock.WithTrace(&mongolock.Trace{
					AcquireAttempt: func(context.Context, mongolock.AttemptInfo) {
						mu.Lock()
						defer mu.Unlock()
						looks = append(looks, time.Now())
					},
				}))
				channelReleaseSource(b)
				held := holdOut(t, ctx, r, a, name, r.keptOutBy())
				got := startAcquire(ctx, r.this(b, name))
				time.Sleep(20 * sleepMax)
				synctest.Wait()
				require.True(t, mongolock.Notifying(b), "release events arrive while the waiter waits")
				mu.Lock()
				seen := slices.Clone(looks)
				mu.Unlock()
				require.GreaterOrEqual(t, len(seen), 20, "looks of the waiter in %v", 20*sleepMax)
				lifetime := mongolock.ClaimLifetime(b)
				for i := 1; i < len(seen); i++ {
					gap := seen[i].Sub(seen[i-1])
					require.Less(t, gap, min(lifetime, sleepMax), "look %d came %v after the one before (claim lifetime %v, busy-wait max %v)",
						i+1, gap, lifetime, sleepMax)
				}
				for _, h := range held {
					require.NoError(t, h.Release(ctx))
				}
				freed := time.Now()
				awaitAcquired(t, got, 2*sleepMax, "the next in line, once the lock was freed")
				require.LessOrEqual(t, time.Since(freed), sleepMax, "the next in line found the freed lock late")
				t.Logf("%s: %d looks in %v; found the freed lock after %v", r.kind, len(seen), 20*sleepMax, time.Since(freed))
				pollUntil(t, 10*time.Second, "the release source stopped without waiters", func() bool { return !mongolock.Notifying(b) })
			})
		})
	}
}
