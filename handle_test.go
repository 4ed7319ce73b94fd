package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Tests of the Handle: the extension loop, loss (guarantee 5 in
// PROTOCOL.md), Release, Do, and orphaned acquisitions (guarantee 6).

func TestHeldLockStaysHeldPastSeveralExpiries(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	h, err := e.p.Lock("held").TryAcquire(ctx)
	require.NoError(t, err)
	first := rawLockDoc(t, e.coll, "held")

	rival := e.other.Lock("held")
	start := time.Now()
	attempts := 0
	for time.Since(start) < 3*shortExpiry+shortExpiry/2 {
		_, err := rival.TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "attempt %d, %v after acquiring", attempts, time.Since(start))
		require.False(t, closedNow(h.Lost()), "Lost closed %v after acquiring", time.Since(start))
		require.NoError(t, h.Context().Err(), "Context done %v after acquiring", time.Since(start))
		attempts++
		time.Sleep(20 * time.Millisecond) // pacing of the polls, not synchronisation
	}

	// The lease was pushed forward, by the same acquisition.
	now := rawLockDoc(t, e.coll, "held")
	require.Equal(t, first.Lookup("lockId"), now.Lookup("lockId"))
	require.Equal(t, first.Lookup("fencingToken"), now.Lookup("fencingToken"))
	require.True(t, now.Lookup("expiresAt").Time().After(first.Lookup("expiresAt").Time().Add(2*shortExpiry)),
		"expiresAt went from %v to %v", first.Lookup("expiresAt").Time(), now.Lookup("expiresAt").Time())
	t.Logf("%d rival attempts over %v, all refused", attempts, time.Since(start))

	require.NoError(t, h.Release(ctx))
}

func TestLostClosesWhenDocumentIsDeleted(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	h, err := e.p.Lock("deleted").TryAcquire(ctx)
	require.NoError(t, err)

	res, err := e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "deleted"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.DeletedCount)
	deleted := time.Now()

	lost := awaitClosed(t, h.Lost(), lossDetectionBound, "Lost after the document was deleted")
	t.Logf("loss signalled %v after the deletion", lost.Sub(deleted))

	hctx := h.Context()
	awaitClosed(t, hctx.Done(), time.Second, "Context after loss")
	require.ErrorIs(t, context.Cause(hctx), mongolock.ErrLockLost)
	require.ErrorIs(t, hctx.Err(), context.Canceled)
	awaitClosed(t, mongolock.LeaseUnkept(h), time.Second, "the extension goroutine after loss")

	err = h.Release(ctx)
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	var lerr *mongolock.Error
	require.ErrorAs(t, err, &lerr)
	require.Equal(t, "release", lerr.Op)
	require.Equal(t, "deleted", lerr.Name)
	require.NoError(t, h.Release(ctx), "a second Release")

	// Release after loss must not have written anything: nobody re-created
	// the document.
	n, err := e.coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: "deleted"}})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestLostClosesWhenSomeoneElseTakesOver(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	h, err := e.p.Lock("taken").TryAcquire(ctx)
	require.NoError(t, err)

	// Someone else (another library, a person) now holds the lock: its
	// lockId is in the document, with a lease of a minute.
	const intruder = "0123456789abcdef0123456789abcdef"
	res, err := e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "taken"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "lockId", Value: intruder},
		{Key: "expiresAt", Value: time.Now().Add(time.Minute)},
	}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.ModifiedCount)
	taken := time.Now()

	lost := awaitClosed(t, h.Lost(), lossDetectionBound, "Lost after a takeover")
	t.Logf("loss signalled %v after the takeover", lost.Sub(taken))
	awaitClosed(t, h.Context().Done(), time.Second, "Context after loss")
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	awaitClosed(t, mongolock.LeaseUnkept(h), time.Second, "the extension goroutine after loss")

	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	require.NoError(t, h.Release(ctx))

	// The stale holder neither extended nor released the intruder's lock.
	doc := rawLockDoc(t, e.coll, "taken")
	require.Equal(t, intruder, doc.Lookup("lockId").StringValue())
	_, err = e.other.Lock("taken").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
}

// Whoever sees Lost closed must find Context done, with the cause
// ErrLockLost: code that wakes on Lost and then asks Context why must not
// be told "not done".
func TestContextIsDoneWithErrLockLostOnceLostIsClosed(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	l := e.p.Lock("ordered")
	const trials = 100
	notDone := 0
	for trial := range trials {
		h, err := l.TryAcquire(ctx)
		require.NoError(t, err)
		_, err = e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "ordered"}})
		require.NoError(t, err)
		seen := make(chan error, 1)
		go func() {
			select {
			case <-h.Lost():
				seen <- context.Cause(h.Context())
			case <-ctx.Done(): // the test failed before the loss
			}
		}()
		// Release finds the document gone and signals the loss (the
		// extension loop would too, a cadence later).
		require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
		if cause := <-seen; !errors.Is(cause, mongolock.ErrLockLost) {
			notDone++
			t.Logf("trial %d: Lost was closed, but Context's cause was %v", trial, cause)
		}
	}
	require.Zero(t, notDone, "in %d of %d losses, Lost was closed before Context was cancelled", notDone, trials)
}

func TestReleaseNeverClosesLost(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	h, err := e.p.Lock("released").TryAcquire(ctx)
	require.NoError(t, err)
	hctx := h.Context()
	require.NoError(t, hctx.Err())

	require.NoError(t, h.Release(ctx))
	require.True(t, closedNow(mongolock.LeaseUnkept(h)), "the extension goroutine still runs after Release returned")
	require.True(t, closedNow(hctx.Done()), "Context not done after Release returned")
	require.ErrorIs(t, context.Cause(hctx), context.Canceled)
	require.NotErrorIs(t, context.Cause(hctx), mongolock.ErrLockLost)
	require.False(t, closedNow(h.Lost()))
	require.NoError(t, h.Release(ctx), "a second Release")

	// Nor later, when extensions would have been due and would have found
	// the lock released.
	staysOpen(t, h.Lost(), 2*shortExpiry/3+100*time.Millisecond, "Lost after a normal Release")

	// Another client can take it at once.
	h2, err := e.other.Lock("released").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h2.Release(ctx))
}

func TestReleaseOfALostHandleDoesNotFreeTheNextHolder(t *testing.T) {
	// The first holder's lease is set to the past by hand (as if it had
	// stalled); the next holder takes the lock; the first one's Release
	// must report the loss and leave the next holder's lock alone
	// (guarantee 7).
	e := newLockEnv(t, mongolock.WithExpiry(30*time.Second))
	ctx := boundedCtx(t, 30*time.Second)
	h1, err := e.p.Lock("stale").TryAcquire(ctx)
	require.NoError(t, err)
	_, err = e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "stale"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: time.Unix(0, 0)}}}})
	require.NoError(t, err)
	h2, err := e.other.Lock("stale").TryAcquire(ctx)
	require.NoError(t, err)

	require.ErrorIs(t, h1.Release(ctx), mongolock.ErrLockLost)
	require.True(t, closedNow(h1.Lost()), "a Release that found the lock taken over should signal the loss")
	require.False(t, closedNow(h2.Lost()))
	_, err = e.p.Lock("stale").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the stale Release freed the next holder's lock")
	require.NoError(t, h2.Release(ctx))
}

// The holder's client is disconnected, so its next extension fails. It
// must signal the loss before the server lets another client in: the instant
// Lost closes comes before the instant a successful rival attempt was sent
// (raceLoss, faults_test.go, which also runs the partitioned holder).
func TestLostIsSignalledBeforeAnotherClientCanAcquireWhenDisconnected(t *testing.T) {
	db := testdb.Database(t)
	coll := db.Collection(mongolock.DefaultCollection)
	rival := newProvider(t, db, mongolock.WithExpiry(faultExpiry))
	ctx := boundedCtx(t, time.Minute)
	for run := range 5 {
		c := testdb.NewClient(t)
		holder := newProvider(t, c.Database(db.Name()), mongolock.WithExpiry(faultExpiry))
		phase := time.Duration(rand.Int64N(int64(2 * faultExpiry / 3)))
		r, err := raceLoss(ctx, coll, holder, rival, fmt.Sprint("disconnected-", run), phase, func() {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			require.NoError(t, c.Disconnect(dctx))
		})
		require.NoError(t, err)
		require.Empty(t, r.violation)
		mongolock.WaitBackground(holder)
		t.Logf("run %d: loss signalled %v after the disconnect, %v before the rival's winning attempt was sent (safety margin %v)",
			run, r.cutToLost, r.margin, mongolock.SafetyMargin(holder))
	}
}

func TestReleaseAfterTheClientIsDisconnectedReturnsPromptly(t *testing.T) {
	db := testdb.Database(t)
	c := testdb.NewClient(t)
	p := newProvider(t, c.Database(db.Name()))
	ctx := boundedCtx(t, 30*time.Second)
	h, err := p.Lock("disconnected").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))

	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = h.Release(rctx)
	require.Less(t, time.Since(start), time.Second, "Release on a disconnected client took too long")
	require.Error(t, err, "Release cannot have reached the server")
	require.NotErrorIs(t, err, mongolock.ErrLockLost, "the lock was not lost; the release failed")
	require.True(t, closedNow(mongolock.LeaseUnkept(h)))
	require.True(t, closedNow(h.Context().Done()))
	require.False(t, closedNow(h.Lost()))
	require.NoError(t, h.Release(rctx), "a second Release")
}

func TestDoRunsFnWithTheLockHeldAndReleasesAfterwards(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	errFn := errors.New("fn failed")
	rival := e.other.Lock("do")
	ran := false
	err := e.p.Lock("do").Do(ctx, func(fctx context.Context) error {
		ran = true
		require.NoError(t, fctx.Err())
		_, err := rival.TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the lock is not held while fn runs")
		return errFn
	})
	require.True(t, ran)
	require.ErrorIs(t, err, errFn)
	require.NotErrorIs(t, err, mongolock.ErrLockLost)

	h, err := rival.TryAcquire(ctx)
	require.NoError(t, err, "Do did not release the lock")
	require.NoError(t, h.Release(ctx))

	// And a nil error from fn is a nil error from Do.
	require.NoError(t, e.p.Lock("do").Do(ctx, func(context.Context) error { return nil }))
}

func TestDoReportsLossToFnAndInItsError(t *testing.T) {
	errFn := errors.New("fn failed")
	for _, tc := range []struct {
		name    string
		returns func(fctx context.Context) error
		want    []error
	}{
		{"fn returns nil", func(context.Context) error { return nil }, nil},
		{"fn returns its own error", func(context.Context) error { return errFn }, []error{errFn}},
		{"fn returns ctx.Err", func(fctx context.Context) error { return fctx.Err() }, []error{context.Canceled}},
		{"fn returns the cause", func(fctx context.Context) error { return context.Cause(fctx) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
			ctx := boundedCtx(t, 30*time.Second)
			err := e.p.Lock("do-lost").Do(ctx, func(fctx context.Context) error {
				_, err := e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "do-lost"}})
				require.NoError(t, err)
				awaitClosed(t, fctx.Done(), lossDetectionBound, "fn's ctx after the document was deleted")
				require.ErrorIs(t, context.Cause(fctx), mongolock.ErrLockLost)
				return tc.returns(fctx)
			})
			require.ErrorIs(t, err, mongolock.ErrLockLost)
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
			// Do did not re-create or hold anything: the lock is free.
			h, err := e.other.Lock("do-lost").TryAcquire(ctx)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
		})
	}
}

func TestDoEndsFnsContextWhenCtxIsCancelled(t *testing.T) {
	e := newLockEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := e.p.Lock("do-cancel").Do(ctx, func(fctx context.Context) error {
		cancel()
		awaitClosed(t, fctx.Done(), time.Second, "fn's ctx after ctx was cancelled")
		require.ErrorIs(t, context.Cause(fctx), context.Canceled)
		require.NotErrorIs(t, context.Cause(fctx), mongolock.ErrLockLost)
		return fctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, mongolock.ErrLockLost)

	// Released although ctx was over: the next holder need not wait for the
	// 30s lease.
	tctx := boundedCtx(t, 5*time.Second)
	h, err := e.other.Lock("do-cancel").TryAcquire(tctx)
	require.NoError(t, err, "Do did not release the lock after ctx was cancelled")
	require.NoError(t, h.Release(tctx))
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	recovered := func() (r any) {
		defer func() { r = recover() }()
		_ = e.p.Lock("do-panic").Do(ctx, func(context.Context) error { panic("boom") })
		return nil
	}()
	require.Equal(t, "boom", recovered)
	h, err := e.other.Lock("do-panic").TryAcquire(ctx)
	require.NoError(t, err, "Do did not release the lock after fn panicked")
	require.NoError(t, h.Release(ctx))
}

func TestDoDoesNotRunFnWhenTheLockCannotBeAcquired(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	h, err := e.other.Lock("do-busy").TryAcquire(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = e.p.Lock("do-busy").Do(wctx, func(context.Context) error {
		t.Error("fn ran without the lock")
		return nil
	})
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, h.Release(ctx))
}

func TestNilContextIsAnErrorNotAPanic(t *testing.T) {
	e := newLockEnv(t)
	l := e.p.Lock("nil-ctx")
	var nilCtx context.Context // a variable: staticcheck (SA1012) rejects a literal nil

	h, err := l.Acquire(nilCtx)
	require.Error(t, err)
	require.Nil(t, h)
	h, err = l.TryAcquire(nilCtx)
	require.Error(t, err)
	require.Nil(t, h)
	require.Error(t, l.Do(nilCtx, func(context.Context) error {
		t.Error("fn ran with a nil ctx")
		return nil
	}))

	ctx := boundedCtx(t, 30*time.Second)
	h, err = l.TryAcquire(ctx)
	require.NoError(t, err, "a nil-ctx call left the lock held")
	require.Error(t, h.Release(nilCtx))
	require.False(t, closedNow(mongolock.LeaseUnkept(h)), "Release(nil) stopped the handle")
	// Release(nil) did nothing: the real Release is still the first.
	require.NoError(t, h.Release(ctx))
	h, err = e.other.Lock("nil-ctx").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

// An attempt cut short by its ctx after the request was sent may still
// have taken the lock on the server; nobody gets a handle for it, so the
// library must free it in the background (guarantee 6). With a 30s lease, a
// missed cleanup shows as a lock that another client cannot take for 30s;
// the test allows the cleanup a few seconds.
//
// The cleanup must not be overtaken by the attempt it cleans up after: the
// driver closes the connection of a cut-short request, but the server still
// executes the request it has read, possibly after a cleanup sent on
// another connection has found nothing to release.
func TestCancelledAttemptsLeaveNoOrphanedAcquisition(t *testing.T) {
	const (
		trials       = 500
		cleanupBound = 3 * time.Second // far below the 30s lease
	)
	opts := []mongolock.Option{mongolock.WithExpiry(30 * time.Second), mongolock.WithBusyWaitSleep(time.Millisecond, 2*time.Millisecond)}
	e := newLockEnv(t, opts...)
	ctx := boundedCtx(t, time.Minute)
	// The attempts use a client of their own, whose round-trip statistics
	// (which decide whether the driver sends a request at all) no other
	// test has touched.
	p := newProvider(t, ownClient(t, e.db, nil), opts...)
	l := p.Lock("orphan")
	rival := e.other.Lock("orphan")

	// Create the document, so that every trial below is a plain update.
	h, err := l.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	token := func() int64 { return rawLockDoc(t, e.coll, "orphan").Lookup("fencingToken").Int64() }

	// The deadlines hunt for the moment the server acts: shorter after an
	// attempt that got a handle, longer after one that changed nothing on
	// the server, with jitter. Around that moment some attempts are not
	// sent at all, some succeed, and some are cut short after the server
	// has acted: the ones this test is about.
	var handles, failed, orphaned, heldWhenLooked int
	var longestHeld time.Duration
	shortest, longest := time.Hour, time.Duration(0)
	mid := time.Millisecond
	start := time.Now()
	for trial := range trials {
		before := token()
		d := time.Duration(float64(mid) * (0.7 + 0.6*rand.Float64()))
		shortest, longest = min(shortest, d), max(longest, d)
		actx, cancel := context.WithTimeout(ctx, d)
		var h *mongolock.Handle
		if trial%2 == 0 {
			h, err = l.TryAcquire(actx)
		} else {
			h, err = l.Acquire(actx)
		}
		cancel()
		switch {
		case err == nil:
			handles++
			mid = max(mid*9/10, 10*time.Microsecond)
			require.NoError(t, h.Release(ctx))
		case token() != before:
			// The server granted an acquisition nobody got. (One granted
			// after this read goes uncounted, but not unchecked.)
			failed++
			orphaned++
		default:
			failed++
			mid = min(mid*11/10, 20*time.Millisecond)
		}
		if err != nil {
			// ErrNotAcquired: an earlier trial's cut-short attempt landed
			// late and holds the lock until its cleanup frees it, which
			// the check below and the next trials still see to.
			require.True(t, errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err) || errors.Is(err, mongolock.ErrNotAcquired),
				"trial %d (deadline %v): unexpected error %v", trial, d, err)
		}

		// Nobody holds the lock now, except an orphan waiting for its
		// cleanup: another client gets it at once, or soon.
		first := time.Now()
		for tries := 0; ; tries++ {
			h2, rerr := rival.TryAcquire(ctx)
			if rerr == nil {
				require.NoError(t, h2.Release(ctx))
				if tries > 0 {
					heldWhenLooked++
					longestHeld = max(longestHeld, time.Since(first))
				}
				break
			}
			require.ErrorIs(t, rerr, mongolock.ErrNotAcquired)
			if time.Since(first) > cleanupBound {
				require.FailNowf(t, "orphaned acquisition",
					"trial %d (deadline %v): the attempt returned %v, and %v later the lock is still held; the document: %v",
					trial, d, err, cleanupBound, rawLockDoc(t, e.coll, "orphan"))
			}
			time.Sleep(5 * time.Millisecond) // polling interval
		}
	}
	mongolock.WaitBackground(p)
	t.Logf("%d trials (deadlines %v to %v) in %v: %d got a handle, %d failed, of which %d had acquired on the server; "+
		"%d orphans were still held when another client first tried, for up to %v",
		trials, shortest, longest, time.Since(start), handles, failed, orphaned, heldWhenLooked, longestHeld)
	require.NotZero(t, orphaned, "no attempt was cut short after the server acted: the test did not test guarantee 6")
}
