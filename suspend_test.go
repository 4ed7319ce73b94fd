package mongolock_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A machine suspended past a lease (a laptop asleep, a paused VM): on
// resume the holder's monotonic clock says the lease has most of its time
// left, but the database's ended long ago. The first thing the holder asks
// tells it the truth: its Context is done with ErrLockLost, Lost is closed,
// a fenced write is refused without being sent, and a rival gets the lock.
func TestASuspensionPastTheLeaseLosesTheHandleAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "suspended"
		ctx := t.Context()
		holder, _, rival := newMemDB(t).holderAndRival(mongolock.WithExpiry(memExpiry))
		clocks := mongolock.FakeClocks(holder, true)
		coll, replies, sent := scriptedColl(t)

		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock(name)))
		replies.AddResponses(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 1}, {Key: "nModified", Value: 1}})
		_, err := mongolock.FencedUpdateOne(ctx, coll, h, byID(name), setWriter("holder"))
		require.NoError(t, err)
		require.Equal(t, int64(1), sent.Load(), "the holder's fenced write was sent")
		require.NoError(t, h.Context().Err())

		clocks.Suspend(memExpiry + memExpiry/2)
		require.ErrorIs(t, h.Context().Err(), context.Canceled, "the resumed holder's Context is not done")
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
		require.True(t, closedNow(h.Lost()), "the resumed holder's Lost is open")
		_, err = mongolock.FencedUpdateOne(ctx, coll, h, byID(name), setWriter("resumed holder"))
		require.ErrorIs(t, err, mongolock.ErrLockLost)
		require.ErrorIs(t, mongolock.FencedFindOneAndUpdate(ctx, coll, h, byID(name), setWriter("resumed holder")).Err(), mongolock.ErrLockLost)
		require.Equal(t, int64(1), sent.Load(), "the resumed holder's fenced write was sent")
		require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)

		// The database's clock did not jump: the rival waits for the
		// lease to end there.
		next := releaseAtCleanup(t, mustAcquire(t, ctx, rival.Lock(name)))
		require.Greater(t, next.FencingToken(), h.FencingToken())
	})
}

// Nobody has to ask: a provider that keeps leases looks for a suspension
// on its own, within its watch's period (a quarter of a second), long
// before the monotonic clock would end the lease.
func TestASuspensionIsNoticedWithoutTheOwnerAsking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemDB(t).process(mongolock.WithExpiry(10 * time.Second))
		clocks := mongolock.FakeClocks(p, true)
		h := releaseAtCleanup(t, mustTryAcquire(t, t.Context(), p.Lock("unasked")))
		lost, done := h.Lost(), h.Context().Done()

		clocks.Suspend(time.Minute)
		time.Sleep(250 * time.Millisecond) // the lease has 10 s left by the monotonic clock
		synctest.Wait()
		require.True(t, closedNow(lost), "Lost is open a watch period after the suspension")
		require.True(t, closedNow(done), "the Context is not done a watch period after the suspension")
	})
}

// A suspension shorter than what is left of the lease shortens it by the
// suspension, and the lease is extended as before.
func TestASuspensionShorterThanTheLeaseShortensIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const expiry = 10 * time.Second // extended every 3.3 s
		p, _ := newMemDB(t).process(mongolock.WithExpiry(expiry))
		clocks := mongolock.FakeClocks(p, true)
		h := releaseAtCleanup(t, mustTryAcquire(t, t.Context(), p.Lock("napped")))
		before, ok := mongolock.LeaseDeadline(h)
		require.True(t, ok)

		clocks.Suspend(3 * time.Second)
		require.NoError(t, h.Context().Err())
		after, ok := mongolock.LeaseDeadline(h)
		require.True(t, ok)
		require.Equal(t, 3*time.Second, before.Sub(after), "the deadline moved by %v", before.Sub(after))

		end := h.LeaseEnd()
		time.Sleep(expiry/3 + time.Millisecond)
		synctest.Wait()
		require.True(t, h.LeaseEnd().After(end), "not extended after the suspension")
		require.False(t, closedNow(h.Lost()))
	})
}

// An acquisition whose round trip spans a suspension past its lease gives
// a handle lost from the start. The suspension comes as the one round
// trip that made the handle is sent; one that came before an earlier
// round trip of the same attempt (a document found missing, then created)
// would rightly not count.
func TestAnAcquisitionSpanningASuspensionIsLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		p, net := newMemDB(t).process(mongolock.WithExpiry(memExpiry))
		clocks := mongolock.FakeClocks(p, true)
		require.NoError(t, mustTryAcquire(t, ctx, p.Lock("spanned")).Release(ctx)) // the document exists: one round trip
		var once sync.Once
		mongolock.SetSendHook(p, func() { once.Do(func() { clocks.Suspend(memExpiry + memExpiry/2) }) })

		sent := net.Sent()
		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("spanned")))
		require.Equal(t, sent+1, net.Sent(), "the acquisition was not one round trip")
		require.True(t, closedNow(h.Lost()), "the handle of an acquisition sent before the suspension is held")
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	})
}

// Where the machine has a boot clock, the wall clock stepped forward (by
// NTP, say) is no suspension: both must agree.
func TestAWallClockStepAloneEndsNoLease(t *testing.T) {
	if _, _, ok := mongolock.BootClock(); !ok {
		t.Skip("this platform has no boot clock: the wall clock alone witnesses suspended time")
	}
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	p := newProvider(t, db)
	clocks := mongolock.FakeClocks(p, true)
	h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("stepped")))
	before, _ := mongolock.LeaseDeadline(h)

	clocks.StepWall(time.Hour)
	require.NoError(t, h.Context().Err())
	after, _ := mongolock.LeaseDeadline(h)
	require.Equal(t, before, after)
}

// Without a boot clock (macOS, Windows), the wall clock alone witnesses a
// suspension.
func TestWithoutABootClockTheWallClockWitnessesASuspension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemDB(t).process(mongolock.WithExpiry(memExpiry))
		clocks := mongolock.FakeClocks(p, false)
		h := releaseAtCleanup(t, mustTryAcquire(t, t.Context(), p.Lock("walled")))

		clocks.Suspend(time.Minute)
		require.True(t, closedNow(h.Lost()), "the resumed holder's Lost is open")
	})
}

// The real boot clock, where the test can show it without suspending the
// machine (which needs root): it reads, it is the time since boot
// (/proc/uptime), and while nothing is suspended it moves with the
// monotonic clock, so a provider finds no suspension.
func TestTheBootClockMovesWithTheMonotonicClockWhileNothingIsSuspended(t *testing.T) {
	b0, t0, ok := mongolock.BootClock()
	if !ok {
		t.Skip("this platform has no boot clock (CLOCK_BOOTTIME is Linux's)")
	}
	if up, err := os.ReadFile("/proc/uptime"); err == nil {
		secs, err := strconv.ParseFloat(strings.Fields(string(up))[0], 64)
		require.NoError(t, err)
		require.InDelta(t, secs, b0.Seconds(), 0.5, "CLOCK_BOOTTIME is not the time since boot")
	}
	interval := time.NewTimer(100 * time.Millisecond) // the interval measured, not synchronisation
	<-interval.C
	b1, t1, _ := mongolock.BootClock()
	require.InDelta(t, float64(t1.Sub(t0)), float64(b1-b0), float64(time.Millisecond),
		"monotonic %v, boot %v", t1.Sub(t0), b1-b0)

	ctx := boundedCtx(t, time.Minute)
	p := newProvider(t, testdb.Database(t))
	h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("awake")))
	before, _ := mongolock.LeaseDeadline(h)
	require.NoError(t, h.Context().Err())
	after, _ := mongolock.LeaseDeadline(h)
	require.Equal(t, before, after)
}

// In a testing/synctest bubble (mongolocktest's simulated time), real time
// passes while the bubble's clock stands: that is no suspension, since the
// bubble's wall clock stands with it.
func TestRealTimePassingInASynctestBubbleIsNoSuspension(t *testing.T) {
	if _, _, ok := mongolock.BootClock(); !ok {
		t.Skip("this platform has no boot clock to tell real time in a bubble by")
	}
	synctest.Test(t, func(t *testing.T) {
		p, err := mongolocktest.NewStore().NewProvider(mongolock.WithExpiry(time.Second))
		require.NoError(t, err)
		h, err := p.Lock("bubbled").Acquire(t.Context())
		require.NoError(t, err)
		before, _ := mongolock.LeaseDeadline(h)
		for b0, _, _ := mongolock.BootClock(); ; { // 20 ms of real time, none of the bubble's
			if b, _, _ := mongolock.BootClock(); b-b0 > 20*time.Millisecond {
				break
			}
		}
		require.NoError(t, h.Context().Err())
		after, _ := mongolock.LeaseDeadline(h)
		require.Equal(t, before, after)
		require.NoError(t, h.Release(t.Context()))
		require.NoError(t, p.Close(t.Context()))
		time.Sleep(time.Second) // simulated: the idle senders end, as the bubble requires
	})
}
