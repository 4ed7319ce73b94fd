package mongolock_test

// Lease keeping (lease.go) over a database in process memory, in simulated
// time (memDB in a testing/synctest bubble): each fault is set on the
// holder's own network at a chosen point of its extension cycle, and a
// rival on a network without faults tries to get in, every millisecond
// of the bubble's clock around the loss. The same faults on the wire, a
// few trials each, are in faults_test.go.

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// memExpiry is the lease of the loss scenarios over the model: the
// default cadence is a third of it and the safety margin a tenth (100ms).
const memExpiry = time.Second

// memLoss is one loss race over the model: a holder was cut off at cut,
// and a rival tried until it got the lock.
type memLoss struct {
	h, next        *mongolock.Handle
	cut, lost, won time.Time     // the fault; Lost closed; the rival's winning attempt was sent
	expiresAt      time.Time     // the lease the database held when Lost closed
	margin         time.Duration // from Lost to the rival's winning attempt
	released       error         // the holder's Release after the loss
}

// raceLossInMemory takes name through take, waits phase, calls cut (which
// keeps the holder from extending), then has rivalTake, which the holder
// keeps out, try until it gets in: every millisecond from the loss until
// twice the safety margin after it, every 20 otherwise (a lock that is
// free stays free until the rival takes it, so a try missed before the
// loss shows as a margin too short). It checks what every loss must show:
// Lost closed first, with ErrLockLost as the Context's cause; nothing
// keeps the lease any more; and Release reports the loss at once, sending
// nothing in the foreground.
func raceLossInMemory(t *testing.T, d *memDB, name string, take, rivalTake func(context.Context) (*mongolock.Handle, error),
	phase time.Duration, cut func(),
) memLoss {
	t.Helper()
	ctx := t.Context()
	h, err := take(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, h)
	time.Sleep(phase)
	require.False(t, closedNow(h.Lost()), "lost %v after acquiring, before any fault: %v", phase, context.Cause(h.Context()))
	r := memLoss{h: h, cut: time.Now()}
	cut()
	lost := make(chan struct{})
	go func() {
		select {
		case <-h.Lost():
			r.lost = time.Now()
			if doc := d.doc(mongolock.DefaultCollection, name); doc != nil {
				r.expiresAt, _ = doc.Lookup("expiresAt").TimeOK()
			}
			close(lost)
		case <-ctx.Done():
		}
	}()
	for r.next == nil {
		require.Less(t, time.Since(r.cut), 10*memExpiry, "the rival did not get in")
		sent := time.Now()
		h2, err := rivalTake(ctx)
		switch {
		case err == nil:
			r.won, r.next = sent, releaseAtCleanup(t, h2)
		default:
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the rival")
			pace := 20 * time.Millisecond
			if closedNow(lost) && time.Since(r.lost) <= 2*memExpiry/10 {
				pace = time.Millisecond
			}
			time.Sleep(pace)
		}
	}
	require.True(t, closedNow(h.Lost()), "the rival got in %v after the cut while the holder's Lost was still open", r.won.Sub(r.cut))
	<-lost
	r.margin = r.won.Sub(r.lost)
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	require.Greater(t, r.next.FencingToken(), h.FencingToken())
	require.True(t, closedNow(mongolock.LeaseUnkept(h)), "the lease is still kept after the loss")
	start := time.Now()
	r.released = h.Release(ctx)
	require.ErrorIs(t, r.released, mongolock.ErrLockLost)
	require.Zero(t, time.Since(start), "Release after the loss waited for a round trip")
	require.NoError(t, r.next.Release(ctx))
	return r
}

// lossPhases are points of the holder's extension cycle (cadence c, a
// third of memExpiry) at which the fault comes: just after the
// acquisition, inside the first cadence, just before and just after an
// extension is sent, and later on.
var lossPhases = []time.Duration{0, time.Millisecond, memExpiry / 6, memExpiry/3 - time.Millisecond,
	memExpiry/3 + time.Millisecond, memExpiry/2 + memExpiry/3}

// lossAtEveryPhase runs raceLossInMemory for each of lossPhases, each in a
// bubble of its own, with cut applied to the holder's network, and check
// on its outcome. The holder takes what take(holder) takes (nil: the lock
// "cut"), the rival what rivalTake(rival) does; before is applied to the
// holder's network from the start (nil: nothing).
func lossAtEveryPhase(t *testing.T, before, cut func(*memdb.Faults),
	take, rivalTake func(*mongolock.Provider) func(context.Context) (*mongolock.Handle, error), check func(t *testing.T, r memLoss),
) {
	const name = "cut"
	if take == nil {
		take = func(p *mongolock.Provider) func(context.Context) (*mongolock.Handle, error) {
			return p.Lock(name).TryAcquire
		}
		rivalTake = take
	}
	for _, phase := range lossPhases {
		t.Run(fmt.Sprint("at ", phase), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newMemDB(t)
				holder, net, rival := d.holderAndRival(mongolock.WithExpiry(memExpiry))
				if before != nil {
					before(net)
				}
				r := raceLossInMemory(t, d, name, take(holder), rivalTake(rival), phase, func() { cut(net) })
				check(t, r)
				t.Logf("Lost closed %v after the cut, %v before the rival's winning attempt was sent", r.lost.Sub(r.cut), r.margin)
			})
		})
	}
}

// lostAMarginBeforeTheRival checks that the rival's winning attempt came
// a safety margin after Lost closed (less the millisecond by which the
// database's $$NOW may precede a request).
func lostAMarginBeforeTheRival(t *testing.T, r memLoss) {
	t.Helper()
	margin := memExpiry / 10
	require.GreaterOrEqual(t, r.margin, margin-time.Millisecond, "Lost closed only %v before the rival's winning attempt", r.margin)
}

// lostAMarginBefore checks lostAMarginBeforeTheRival, and that the rival
// got in no earlier than the lease the database held when Lost closed.
func lostAMarginBefore(t *testing.T, r memLoss) {
	t.Helper()
	lostAMarginBeforeTheRival(t, r)
	require.False(t, r.next.AcquiredAt().Before(r.expiresAt), "the rival got in at %v, before the lease the database held ended (%v)",
		r.next.AcquiredAt(), r.expiresAt)
}

// The holder's client is disconnected: its next extension fails, and tells
// it so; it must signal the loss then, long before the database lets
// another client in (the lease runs out there: nothing can release it).
func TestLostIsSignalledBeforeAnotherClientCanAcquireWhenDisconnected(t *testing.T) {
	lossAtEveryPhase(t, nil, (*memdb.Faults).Disconnect, nil, nil, func(t *testing.T, r memLoss) {
		lostAMarginBefore(t, r)
		require.LessOrEqual(t, r.lost.Sub(r.cut), memExpiry/3, "the loss was not seen at the next extension")
		require.ErrorIs(t, r.released, mongo.ErrClientDisconnected, "the loss does not say why")
		require.NoError(t, r.h.Release(t.Context()), "a second Release")
	})
}

// A holder partitioned from the database, whether its requests fail at
// once (no server to select) or are dropped on a connection kept open
// (they fail only when their contexts end), signals the loss a safety
// margin before the lease it last confirmed ends there.
func TestAPartitionedHolderIsToldBeforeARivalAcquires(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		lossAtEveryPhase(t, nil, (*memdb.Faults).Partition, nil, nil, lostAMarginBefore)
	})
	t.Run("blackholed", func(t *testing.T) {
		lossAtEveryPhase(t, nil, (*memdb.Faults).Blackhole, nil, nil, lostAMarginBefore)
	})
	// Replies already slow when the partition comes: an extension may be
	// on its way back.
	t.Run("blackholed behind slow replies", func(t *testing.T) {
		lossAtEveryPhase(t, func(f *memdb.Faults) { f.Delay(50 * time.Millisecond) }, (*memdb.Faults).Blackhole, nil, nil, lostAMarginBefore)
	})
}

// Extensions whose replies come too late for the lease (applied on the
// server, confirmed after the client's deadline) end in a loss signalled
// before a rival can acquire: from just past the bound at which a round
// trip keeps the lease, (expiry - margin) / 2, to round trips longer than
// the whole lease. The lease such an extension gave on the server is
// ended by the lost holder's release once the lease it confirmed is over.
func TestExtensionsSlowerThanTheLeaseSignalLossInTime(t *testing.T) {
	for _, rt := range []time.Duration{460 * time.Millisecond, 2 * memExpiry} {
		t.Run(fmt.Sprint("round trips of ", rt), func(t *testing.T) {
			lossAtEveryPhase(t, nil, func(f *memdb.Faults) { f.Delay(rt) }, nil, nil, func(t *testing.T, r memLoss) {
				lostAMarginBeforeTheRival(t, r)
				require.False(t, r.won.Before(r.h.LeaseEnd()), "the rival got in at %v, before the lease the holder confirmed ended (%v)",
					r.won, r.h.LeaseEnd())
			})
		})
	}
}

// No false loss: extensions slower than the cadence yet fast enough for
// the lease keep the lock, extended, and refused to a rival, for as long
// as the holder holds it. A lease is kept when an extension's round trip
// (sent every cadence, one at a time, or at once after a slow one)
// returns before the client's deadline, the last successful send plus
// expiry minus the safety margin: round trips below (expiry - margin) / 2
// (450ms here) keep it indefinitely; longer ones end in a loss, signalled
// in time (TestExtensionsSlowerThanTheLeaseSignalLossInTime). The replies
// are slow from the acquisition on, or only from later: the first
// extension of a lease counts from its acquisition's send.
func TestSlowExtensionsBelowTheLeaseKeepTheLock(t *testing.T) {
	const hold = 30 * memExpiry
	for _, rt := range []time.Duration{90 * time.Millisecond, 360 * time.Millisecond, 440 * time.Millisecond} {
		for _, from := range []string{"the acquisition", "later"} {
			t.Run(fmt.Sprintf("round trips of %v from %s", rt, from), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := t.Context()
					d := newMemDB(t)
					holder, net, rival := d.holderAndRival(mongolock.WithExpiry(memExpiry))
					const name = "slow"
					if from == "the acquisition" {
						net.Delay(rt)
					}
					h, err := holder.Lock(name).TryAcquire(ctx)
					require.NoError(t, err)
					releaseAtCleanup(t, h)
					net.Delay(rt)
					extensions, last := 0, d.expiresAt(name)
					for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
						require.False(t, closedNow(h.Lost()), "lost after %d extensions: %v", extensions, context.Cause(h.Context()))
						_, err := rival.Lock(name).TryAcquire(ctx)
						require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the rival's attempt while the lock is held")
						if exp := d.expiresAt(name); exp.After(last) {
							extensions, last = extensions+1, exp
						}
					}
					// Every cadence, or every round trip where that is longer.
					require.GreaterOrEqual(t, extensions, int(hold/max(memExpiry/3, rt))-2, "extended too rarely")
					net.Delay(0)
					require.NoError(t, h.Release(ctx))
					t.Logf("%d extensions in %v", extensions, hold)
				})
			})
		}
	}
}

// A holder whose extension never reaches the database is lost at its
// local deadline, a safety margin before the lease the database confirmed
// ends. Its connection works again by then, so the release that covers a
// late extension could reach the database at once; it must not come
// before that lease's end: nobody else gets in before the database's
// expiresAt, while the lost holder's work may still run.
func TestALossByFailingExtensionsKeepsTheLockUntilTheConfirmedLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "failing-extensions"
		ctx := t.Context()
		d := newMemDB(t)
		holder, net, rival := d.holderAndRival(mongolock.WithExpiry(memExpiry))
		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock(name)))

		net.Blackhole()
		sent := net.Sent()
		time.Sleep(memExpiry/3 + time.Millisecond) // the first extension is sent, and dropped
		synctest.Wait()
		require.Equal(t, sent+1, net.Sent(), "the extension was not sent")
		net.Heal() // later requests go through
		expiresAt := d.expiresAt(name)
		require.False(t, closedNow(h.Lost()), "lost before the lease ran out")

		var next *mongolock.Handle
		for next == nil {
			h2, err := rival.Lock(name).TryAcquire(ctx)
			if err == nil {
				next = releaseAtCleanup(t, h2)
				break
			}
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the rival")
			time.Sleep(time.Millisecond)
		}
		require.True(t, closedNow(h.Lost()), "the rival got in before the holder was lost")
		require.False(t, next.AcquiredAt().Before(expiresAt), "the rival got in at %v, %v before the lease the database confirmed ended (%v)",
			next.AcquiredAt(), expiresAt.Sub(next.AcquiredAt()), expiresAt)
		require.Greater(t, next.FencingToken(), h.FencingToken())
		require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, next.Release(ctx))
	})
}

// Many held locks are extended together: one updateMany per 1,000 handles
// per cadence, not one goroutine and one round trip per handle.
func TestManyHeldLocksAreExtendedInBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, cadence = 1200, time.Second
		d := newMemDB(t)
		p, net := d.process(mongolock.WithExpiry(6*time.Second), mongolock.WithExtensionCadence(cadence))
		before := runtime.NumGoroutine()
		handles := d.tryAcquireMany(p, "many", n)
		during := runtime.NumGoroutine()
		require.Less(t, during-before, 20, "goroutines grew with the number of held locks: %d before, %d with %d held", before, during, n)

		// Acquired at one instant of the bubble's clock: every tick
		// extends them all, in ceil(n/1000) round trips.
		start := net.Sent()
		time.Sleep(3*cadence + cadence/2)
		synctest.Wait()
		require.Equal(t, int64(3*((n+999)/1000)), net.Sent()-start, "extension round trips in three cadences")
		extendedAndReleased(t, handles, 3*cadence, 6*time.Second)
	})
}

// extendedAndReleased checks that each of handles is held, with the lease
// (of expiry) that an extension sent the given time after its acquisition
// confirmed, and releases it.
func extendedAndReleased(t *testing.T, handles []*mongolock.Handle, after, expiry time.Duration) {
	t.Helper()
	for _, h := range handles {
		require.False(t, closedNow(h.Lost()), "%s was lost while kept", h.Name())
		require.WithinDuration(t, h.AcquiredAt().Add(after+expiry), h.LeaseEnd(), time.Millisecond,
			"%s: not the lease an extension %v after its acquisition confirmed", h.Name(), after)
	}
	for _, h := range handles {
		require.NoError(t, h.Release(t.Context()))
	}
}

// An extension refused for its size (names that together are past the
// driver's message or the server's document) does not fail the whole
// batch: its halves are extended on their own, down to the size that
// passes, and no handle is lost. The next test meets the real limits.
func TestABatchRefusedAsTooLargeIsExtendedInParts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, cadence = 64, time.Second
		d := newMemDB(t)
		p, net := d.process(mongolock.WithExpiry(6*time.Second), mongolock.WithExtensionCadence(cadence))
		handles := d.tryAcquireMany(p, "large", n)
		// The whole batch and both its halves are refused; its quarters
		// pass.
		tooLarge := mongo.CommandError{Code: 10334, Name: "BSONObjectTooLarge", Message: "injected: BSONObj size is invalid"}
		net.RefuseWith(3, tooLarge)
		start := net.Sent()
		time.Sleep(cadence)
		synctest.Wait()
		require.Equal(t, int64(1+2+4), net.Sent()-start, "round trips of the first extension: the batch, its halves, its quarters")
		extendedAndReleased(t, handles, cadence, 6*time.Second)
	})
}

// Names that together are too large for one extension do not fail the
// whole batch: its parts are extended on their own, and no handle is lost.
// On the wire: the driver refuses a command past the server's message
// limit, and the parts pass. The server says its limit is 1 MiB here
// (smallMessages), not 48 MB: the refusal and the error are the driver's
// own, without 50 MB of names to store.
func TestABatchTooLargeForOneExtensionIsExtendedInParts(t *testing.T) {
	const (
		limit   = 1 << 20
		n, size = 64, 24 << 10 // 1.5 MiB of names in one batch, half of it in each half
		expiry  = time.Minute
	)
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	rounds := make(chan mongolock.ExtendDoneInfo, n)
	client := testdb.NewClient(t, options.Client().SetDialer(smallMessages{max: limit}))
	// No tick comes while the handles are acquired: the test ticks once
	// they all are.
	p := newProvider(t, client.Database(db.Name()), mongolock.WithExpiry(expiry), mongolock.WithExtensionCadence(expiry/3),
		mongolock.WithTrace(&mongolock.Trace{ExtendDone: func(_ context.Context, info mongolock.ExtendDoneInfo) { rounds <- info }}))
	handles := make([]*mongolock.Handle, n)
	for i := range handles {
		name := fmt.Sprintf("%03d-", i) + strings.Repeat("x", size-4)
		handles[i] = releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock(name)))
	}
	mongolock.Tick(p)
	var refused []error
	for extended := 0; extended < n; {
		select {
		case r := <-rounds:
			if r.Err != nil {
				require.Greater(t, r.Handles, 1, "a single handle's extension failed: %v", r.Err)
				refused = append(refused, r.Err)
				continue
			}
			require.Zero(t, r.Lost, "handles found lost")
			extended += r.Matched
		case <-ctx.Done():
			t.Fatalf("not every lease was extended: refused %d times (%v)", len(refused), refused)
		}
	}
	require.NotEmpty(t, refused, "the batch of %d handles was not refused", n)
	t.Logf("the batch of %d handles with %d KiB names refused: %v", n, size>>10, refused)
	for i, h := range handles {
		require.False(t, closedNow(h.Lost()), "handle %d lost", i)
		require.NoError(t, h.Release(ctx), "Release %d", i)
	}
}

func TestHeldLockStaysHeldPastSeveralExpiries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _, other := d.holderAndRival(mongolock.WithExpiry(memExpiry))
		h := mustTryAcquire(t, ctx, p.Lock("held"))
		first := d.doc(mongolock.DefaultCollection, "held")

		rival := other.Lock("held")
		start := time.Now()
		for attempt := 0; time.Since(start) < 3*memExpiry+memExpiry/2; attempt++ {
			_, err := rival.TryAcquire(ctx)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "attempt %d, %v after acquiring", attempt, time.Since(start))
			require.False(t, closedNow(h.Lost()), "Lost closed %v after acquiring", time.Since(start))
			require.NoError(t, h.Context().Err(), "Context done %v after acquiring", time.Since(start))
			time.Sleep(memExpiry / 20)
		}

		// The lease was pushed forward, by the same acquisition.
		now := d.doc(mongolock.DefaultCollection, "held")
		require.Equal(t, first.Lookup("lockId"), now.Lookup("lockId"))
		require.Equal(t, first.Lookup("fencingToken"), now.Lookup("fencingToken"))
		require.True(t, now.Lookup("expiresAt").Time().After(first.Lookup("expiresAt").Time().Add(2*memExpiry)),
			"expiresAt went from %v to %v", first.Lookup("expiresAt").Time(), now.Lookup("expiresAt").Time())
		require.NoError(t, h.Release(ctx))
	})
}

// Many held locks.

// Over both stores: the extension of many locks in one statement, whose
// result tells which of them it kept. The lease is stallProof, so that a
// loaded machine's stall loses none of the others on the server.
func TestADeletedLockAmongManyLosesOnlyItsOwnHandle(t *testing.T) {
	conformance.Over(t, deletedAmongManyLosesOnlyItsOwn)
}

func deletedAmongManyLosesOnlyItsOwn(e *conformance.Env) {
	const n = 50
	t, ctx := e.T, e.Ctx
	p, _ := e.Process(stallProof...)
	handles := make([]*mongolock.Handle, n)
	var err error
	for i := range handles {
		handles[i], err = p.Lock(fmt.Sprintf("one-of-many-%d", i)).TryAcquire(ctx)
		require.NoError(t, err)
	}
	e.Remove(mongolock.DefaultCollection, "one-of-many-7")
	awaitClosed(t, handles[7].Lost(), 10*time.Second, "Lost of the handle whose document was deleted")
	// Two more cadences: the others stay held.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for i, h := range handles {
			if i == 7 {
				continue
			}
			select {
			case <-h.Lost():
				t.Fatalf("%s was lost with another lock's document", h.Name())
			default:
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, h := range handles {
		if i == 7 {
			require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
		} else {
			require.NoError(t, h.Release(ctx))
		}
	}
}

// Clock skew between a replica set's members (WithMaxClockSkew).

// WithMaxClockSkew moves every local deadline earlier by the skew: a
// holder whose extensions all fail is lost exactly at its acquisition's
// send plus the expiry, less the safety margin and the skew; one held to
// WithHoldAtMost's bound, at the bound less both.
func TestMaxClockSkewSignalsTheLossThatMuchEarlier(t *testing.T) {
	const margin, most = memExpiry / 10, 2 * memExpiry
	for _, skew := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond} {
		for _, c := range []struct {
			label     string
			opts      []mongolock.Option
			cut       bool
			lostAfter time.Duration
		}{
			{"extensions failing", nil, true, memExpiry - margin - skew},
			{"held to WithHoldAtMost's bound", []mongolock.Option{mongolock.WithHoldAtMost(most)}, false, most - margin - skew},
		} {
			t.Run(fmt.Sprintf("skew %v, %s", skew, c.label), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					d := newMemDB(t)
					p, net := d.process(append(c.opts, mongolock.WithExpiry(memExpiry), mongolock.WithMaxClockSkew(skew))...)
					sent := time.Now()
					h := releaseAtCleanup(t, mustTryAcquire(t, t.Context(), p.Lock("skew")))
					if c.cut {
						net.Partition()
					}
					<-h.Lost()
					require.Equal(t, c.lostAfter, time.Since(sent), "Lost closed at the wrong time after the acquisition was sent")
					require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
				})
			})
		}
	}
}

// skewedModel is a model database whose $$NOW runs ahead of the bubble's
// clock by what the returned value holds, as a new primary's clock may
// after a failover. process returns a provider with opts on a client of its
// own, closed when the test ends, and that client's network.
func skewedModel(t *testing.T) (process func(opts ...mongolock.Option) (*mongolock.Provider, *memdb.Faults), ahead *atomic.Int64) {
	// The bubble ends once every goroutine has: a closed provider's idle
	// senders end within this of its clock.
	t.Cleanup(func() { time.Sleep(time.Minute) })
	ahead = new(atomic.Int64)
	store := memdb.NewStore(memDBName, func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) })
	return func(opts ...mongolock.Option) (*mongolock.Provider, *memdb.Faults) {
		t.Helper()
		client := store.Client()
		p, err := backend.NewProvider(client, memDBName, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.(*mongolock.Provider).Close(context.Background()) })
		return p.(*mongolock.Provider), &client.Faults
	}, ahead
}

// rivalPoll is how often the rival tries: a tenth of the closest case's
// gap (50 ms), and few enough tries to be cheap under -race.
const rivalPoll = 5 * time.Millisecond

// A holder cut off just as the database's clock jumps ahead by δ (a
// failover to a member whose clock is ahead, while no extension gets
// through) keeps its lease δ less on the server. Up to the skew the
// holder was given plus half the safety margin, a rival trying every
// millisecond gets in no earlier than the holder is told, by at least the
// margin and the skew less δ. Past the skew plus the margin, the rival
// gets in while the holder's Lost is still open: the overlap that the
// skew is there to prevent, which the same jump shows without it.
func TestAFailoverToAMemberAheadWithinTheSkewLosesTheHolderBeforeAnotherGetsIn(t *testing.T) {
	const margin = memExpiry / 10
	for _, c := range []struct {
		skew, ahead time.Duration
		overlap     bool
	}{
		{0, 0, false},
		{0, margin / 2, false},
		{0, 250 * time.Millisecond, true},
		{200 * time.Millisecond, 250 * time.Millisecond, false},
		{200 * time.Millisecond, 400 * time.Millisecond, true},
	} {
		// Just after the acquisition, and just after the first extension.
		for _, phase := range []time.Duration{0, memExpiry/3 + time.Millisecond} {
			t.Run(fmt.Sprintf("skew %v, ahead %v, at %v", c.skew, c.ahead, phase), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := t.Context()
					process, ahead := skewedModel(t)
					opts := []mongolock.Option{mongolock.WithExpiry(memExpiry), mongolock.WithMaxClockSkew(c.skew)}
					holder, net := process(opts...)
					rival, _ := process(opts...)
					h := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock("failover")))
					time.Sleep(phase)
					synctest.Wait()
					require.False(t, closedNow(h.Lost()), "lost before the failover")

					var lost time.Time
					lostCh := make(chan struct{})
					go func() {
						select {
						case <-h.Lost():
							lost = time.Now()
							close(lostCh)
						case <-ctx.Done():
						}
					}()
					ahead.Store(int64(c.ahead))
					net.Partition()
					var next *mongolock.Handle
					var won time.Time
					for next == nil {
						require.Less(t, time.Since(h.AcquiredAt()), 3*memExpiry, "the rival did not get in")
						won = time.Now()
						h2, err := rival.Lock("failover").TryAcquire(ctx)
						if err == nil {
							next = releaseAtCleanup(t, h2)
							break
						}
						require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the rival")
						time.Sleep(rivalPoll)
					}
					toldFirst := closedNow(lostCh)
					<-lostCh
					require.Greater(t, next.FencingToken(), h.FencingToken())
					if c.overlap {
						require.False(t, toldFirst, "the holder was told at %v, before the rival got in at %v", lost, won)
						require.GreaterOrEqual(t, lost.Sub(won), c.ahead-margin-c.skew-rivalPoll, "the overlap")
						return
					}
					require.True(t, toldFirst, "the rival got in at %v while the holder's Lost was still open", won)
					require.GreaterOrEqual(t, won.Sub(lost), margin+c.skew-c.ahead-time.Millisecond, "Lost closed only %v before the rival got in", won.Sub(lost))
				})
			})
		}
	}
}
