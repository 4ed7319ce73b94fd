package mongolock_test

// A Handle's end (release.go) and the background releases of acquisitions
// nobody holds a handle for, over a database in process memory, in
// simulated time (memDB in a testing/synctest bubble): each fault is set
// on the releasing process's own network for the operation it must meet.
// The same on the wire, a few trials each, is in faults_test.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// freeWithin checks that rival gets name within bound, trying every
// millisecond from once what was started at this instant has run,
// releases it, and returns how long that took.
func freeWithin(t *testing.T, rival *mongolock.Provider, name string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	synctest.Wait() // what was started at this instant has run
	for {
		h, err := rival.Lock(name).TryAcquire(t.Context())
		if err == nil {
			require.NoError(t, h.Release(t.Context()))
			return time.Since(start)
		}
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.Less(t, time.Since(start), bound, "%s still held %v later", name, bound)
		time.Sleep(time.Millisecond)
	}
}

// A Release stuck behind a partition (its request dropped, no reply
// coming) keeps the loss signal armed: the handle's Context ends with
// ErrLockLost, and Lost closes, a safety margin before another client can
// take the lock. When the stuck round trip ends, Release says so.
func TestAReleaseStuckBehindAPartitionSignalsTheLossInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "stuck-release"
		ctx := t.Context()
		d := newMemDB(t)
		holder, net, rival := d.holderAndRival(mongolock.WithExpiry(memExpiry))
		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock(name)))
		lostAt := make(chan time.Time, 1)
		go func() {
			select {
			case <-h.Lost():
				lostAt <- time.Now()
			case <-ctx.Done():
			}
		}()

		time.Sleep(memExpiry / 6) // inside the first cadence: the lease confirmed at the acquisition
		net.Blackhole()
		cutAt := time.Now()
		released := make(chan error, 1)
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			released <- h.Release(rctx)
		}()
		var sentAt time.Time
		for sentAt.IsZero() {
			sent := time.Now()
			h2, err := rival.Lock(name).TryAcquire(ctx)
			switch {
			case err == nil:
				sentAt = sent
				require.NoError(t, h2.Release(ctx))
			case errors.Is(err, mongolock.ErrNotAcquired):
				time.Sleep(time.Millisecond)
			default:
				require.NoError(t, err, "the rival")
			}
		}
		require.True(t, closedNow(h.Lost()), "the rival got in %v after the cut while the holder's Lost was still open", sentAt.Sub(cutAt))
		at := <-lostAt
		require.GreaterOrEqual(t, sentAt.Sub(at), memExpiry/10-time.Millisecond,
			"Lost closed %v after the cut, the rival's winning attempt was sent %v after it", at.Sub(cutAt), sentAt.Sub(cutAt))
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
		select {
		case err := <-released:
			require.FailNow(t, "Release returned before its round trip ended", "%v", err)
		default:
		}
		net.Heal()
		err := <-released // at its deadline: the dropped request gets no reply
		require.ErrorIs(t, err, mongolock.ErrLockLost, "the lease ran out during the release")
		require.ErrorIs(t, err, context.DeadlineExceeded, "the release's own failure")
	})
}

// A Release whose ctx ends in the middle of a hand-over to a local waiter
// leaves the lock neither held by an acquisition nobody has a handle for
// nor lost: the waiter gets it, and holds it, and once it releases it the
// lock is free at once. The replies take 60ms; the cut comes before the
// request is sent, while the reply is on its way, or after it arrived.
func TestAReleaseCutShortDuringAHandOverLeavesNoOrphan(t *testing.T) {
	const rt = 60 * time.Millisecond
	for _, cut := range []time.Duration{0, time.Millisecond, rt / 2, rt - time.Millisecond, rt + time.Millisecond} {
		t.Run(fmt.Sprint("cut after ", cut), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const name = "cut-hand-over"
				ctx := t.Context()
				d := newMemDB(t)
				p, net := d.process(mongolock.WithExpiry(30*time.Second), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
				rival, _ := d.process(mongolock.WithExpiry(30 * time.Second))
				l := p.Lock(name)
				h := releaseAtCleanup(t, mustAcquire(t, ctx, l))
				got := make(chan *mongolock.Handle, 1)
				go func() {
					// Far below the expiry: an orphan would keep it out.
					wctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					w, err := l.Acquire(wctx)
					assert(t, err == nil, "the waiter: %v", err)
					got <- w
				}()
				synctest.Wait()
				require.Equal(t, 1, mongolock.QueueLen(p, name), "the waiter is in line")
				net.Delay(rt)

				rctx, cancel := context.WithTimeout(ctx, cut)
				rerr := h.Release(rctx)
				cancel()
				if cut > rt {
					require.NoError(t, rerr, "a release whose reply came in time")
				} else {
					require.ErrorIs(t, rerr, context.DeadlineExceeded)
				}
				require.True(t, closedNow(h.Context().Done()), "the released handle's Context")
				require.False(t, closedNow(h.Lost()), "the released handle was lost")
				w := <-got
				require.NotNil(t, w)
				releaseAtCleanup(t, w)
				net.Delay(0)
				require.False(t, closedNow(w.Lost()), "the waiter's handle was lost")
				_, err := rival.Lock(name).TryAcquire(ctx)
				require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the waiter's handle does not hold the lock")
				require.Greater(t, w.FencingToken(), h.FencingToken())
				require.NoError(t, w.Release(ctx))
				require.Zero(t, freeWithin(t, rival, name, time.Second), "the lock is not free at once after the waiter's release")
			})
		})
	}
}

// replyErrorOnce arms p so that its next acquisition round trip, once the
// real one is over (whatever it did in the database), runs then and
// returns err.
func replyErrorOnce(p *mongolock.Provider) (arm func(then func(), err error)) {
	type armed struct {
		then func()
		err  error
	}
	next := make(chan armed, 1)
	mongolock.SetReplyError(p, func(err error) error {
		select {
		case a := <-next:
			a.then()
			return a.err
		default:
			return err
		}
	})
	return func(then func(), err error) { next <- armed{then, err} }
}

// A background release that meets transient errors (here the database
// refuses its first tries) tries again until it gets through, well before
// the orphan's lease would have ended, and then stops. After a reply, a
// try that matches nothing is the last.
func TestOrphanReleaseRetriesTransientErrorsAndStopsOnAReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			name   = "orphan"
			expiry = 30 * time.Second
			refuse = 3
		)
		ctx := t.Context()
		d := newMemDB(t)
		p, net := d.process(mongolock.WithExpiry(expiry))
		rival, _ := d.process(mongolock.WithExpiry(expiry))
		arm := replyErrorOnce(p)
		// The document exists, and p has checked its collection: what p
		// sends next is the acquisition and its release.
		require.NoError(t, mustTryAcquire(t, ctx, p.Lock(name)).Release(ctx))

		// The acquisition is applied, its caller sees a write concern
		// error, and the first tries of its release are refused.
		sent := net.Sent()
		arm(func() { net.Refuse(refuse) }, wce(64))
		h, err := p.Lock(name).TryAcquire(ctx)
		releaseAtCleanup(t, h)
		require.Error(t, err)
		took := freeWithin(t, rival, name, time.Second)
		time.Sleep(expiry)
		require.Equal(t, int64(1+refuse+1), net.Sent()-sent, "sent: the acquisition, %d refused releases, the release that got through", refuse)
		t.Logf("the orphan was released %v after its acquisition, after %d refusals", took, refuse)

		// Refused (the rival holds the lock) and told of a write concern
		// error: one release is sent, matches nothing, and is the last.
		held := releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock(name)))
		sent = net.Sent()
		arm(func() {}, wce(64))
		_, err = p.Lock(name).TryAcquire(ctx)
		require.Error(t, err)
		time.Sleep(expiry / 3)
		require.Equal(t, int64(2), net.Sent()-sent, "sent: the attempt, and one release")
		require.NoError(t, held.Release(ctx), "the cleanup freed someone else's lock")
	})
}

// Lost replies (applied, the caller cannot tell) and refusals (not
// applied) while acquiring and while releasing. Whatever the operation
// returns, no acquisition is left held for a whole expiry (an attempt
// that may have succeeded is released in the background), a lock released
// without error is free at once, and there are never two holders: the
// rival is refused while the holder has a handle, and fencing tokens
// strictly increase.
func TestLostRepliesAndRefusalsDuringAcquireAndReleaseLeaveNoOrphansAndNeverTwoHolders(t *testing.T) {
	type op int
	const (
		acquire op = iota
		tryAcquire
		release
	)
	for _, c := range []struct {
		label  string
		during op
		fault  func(*memdb.Faults)
		fails  bool // the operation returns an error
	}{
		{"Acquire, its reply lost", acquire, func(f *memdb.Faults) { f.LoseReplies(1) }, false},
		{"Acquire, its first replies lost", acquire, func(f *memdb.Faults) { f.LoseReplies(3) }, false},
		{"Acquire, refused", acquire, func(f *memdb.Faults) { f.Refuse(3) }, false},
		{"TryAcquire, its reply lost", tryAcquire, func(f *memdb.Faults) { f.LoseReplies(1) }, true},
		{"TryAcquire, refused", tryAcquire, func(f *memdb.Faults) { f.Refuse(1) }, true},
		{"Release, its reply lost", release, func(f *memdb.Faults) { f.LoseReplies(1) }, true},
		{"Release and the first tries of its cleanup, their replies lost", release, func(f *memdb.Faults) { f.LoseReplies(3) }, true},
		{"Release, refused", release, func(f *memdb.Faults) { f.Refuse(1) }, true},
		{"Release and the first tries of its cleanup, refused", release, func(f *memdb.Faults) { f.Refuse(3) }, true},
	} {
		t.Run(c.label, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const (
					name   = "faulty"
					expiry = 15 * time.Second
					bound  = time.Second // far below the expiry
				)
				ctx := t.Context()
				d := newMemDB(t)
				holder, net := d.process(mongolock.WithExpiry(expiry), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
				rival, _ := d.process(mongolock.WithExpiry(expiry))
				first := releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock(name)))
				require.NoError(t, first.Release(ctx))
				last := first.FencingToken()
				heldAlone := func(h *mongolock.Handle) {
					t.Helper()
					require.Greater(t, h.FencingToken(), last, "fencing token")
					last = h.FencingToken()
					_, err := rival.Lock(name).TryAcquire(ctx)
					require.ErrorIs(t, err, mongolock.ErrNotAcquired, "two holders: the rival's attempt while the holder has a handle")
				}

				var err error
				switch c.during {
				case acquire, tryAcquire:
					c.fault(net)
					var h *mongolock.Handle
					if c.during == acquire {
						actx, cancel := context.WithTimeout(ctx, 10*time.Second)
						h, err = holder.Lock(name).Acquire(actx)
						cancel()
					} else {
						h, err = holder.Lock(name).TryAcquire(ctx)
					}
					if err == nil {
						releaseAtCleanup(t, h)
						heldAlone(h)
						require.NoError(t, h.Release(ctx))
					}
				case release:
					h := releaseAtCleanup(t, mustAcquire(t, ctx, holder.Lock(name)))
					heldAlone(h)
					c.fault(net)
					err = h.Release(ctx)
				}
				if c.fails {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
				}
				took := freeWithin(t, rival, name, bound)
				if err == nil {
					require.Zero(t, took, "released without error, and not free at once")
				}
				h := releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock(name)))
				heldAlone(h)
				require.NoError(t, h.Release(ctx))
				t.Logf("returned %v; free again %v later", err, took)
			})
		})
	}
}

// An acquisition applied in the database whose caller sees a write
// concern error (the write reached the primary, not the requested
// replicas) is released in the background at once: the lock does not stay
// held, for a whole expiry, by an acquisition nobody has a handle for. A
// waiting Acquire retries and gets the lock; a hand-over that failed this
// way leaves the lock to the waiter soon.
func TestWriteConcernErrorsOnAppliedAcquisitionsLeaveNoOrphan(t *testing.T) {
	const (
		expiry = 30 * time.Second
		bound  = 3 * time.Second // far below the expiry
	)
	for _, c := range []struct {
		label     string
		err       error
		transient bool // Acquire retries it
	}{
		{"write concern error 64", wce(64), true},
		{"write concern error 100", wce(100), false},
		{"CommandError 79", mongo.CommandError{Code: 79, Name: "UnknownReplWriteConcern"}, false},
		// MongoDB's InternalError is returned, not waited out; FerretDB's
		// while its PostgreSQL starts is retried.
		{"CommandError 1 from MongoDB", mongo.CommandError{Code: 1, Name: "InternalError", Message: "an internal error of the server"}, false},
		{"CommandError 1 from FerretDB while PostgreSQL starts", mongo.CommandError{Code: 1, Name: "InternalError", Message: "the database system is starting up"}, true},
	} {
		// run runs body over a holder p, whose replies the test replaces,
		// and other, a process of its own.
		run := func(t *testing.T, body func(t *testing.T, d *memDB, p, other *mongolock.Provider, arm func())) {
			synctest.Test(t, func(t *testing.T) {
				d := newMemDB(t)
				p, _ := d.process(mongolock.WithExpiry(expiry), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
				other, _ := d.process(mongolock.WithExpiry(expiry))
				arm := replyErrorOnce(p)
				body(t, d, p, other, func() { arm(func() {}, c.err) })
			})
		}
		token := func(t *testing.T, d *memDB, name string) int64 {
			return d.doc(mongolock.DefaultCollection, name).Lookup("fencingToken").Int64()
		}
		// heldBy checks that h holds its lock in the database, and releases it.
		heldBy := func(t *testing.T, other *mongolock.Provider, h *mongolock.Handle) {
			t.Helper()
			_, err := other.Lock(h.Name()).TryAcquire(t.Context())
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a handle that does not hold its lock")
			require.NoError(t, h.Release(t.Context()))
		}
		// TryAcquire returns the error; the acquisition it made is freed.
		t.Run(c.label+"/TryAcquire", func(t *testing.T) {
			run(t, func(t *testing.T, d *memDB, p, other *mongolock.Provider, arm func()) {
				const name = "try"
				ctx := t.Context()
				require.NoError(t, mustTryAcquire(t, ctx, p.Lock(name)).Release(ctx)) // the document exists
				before := token(t, d, name)
				arm()
				h, err := p.Lock(name).TryAcquire(ctx)
				releaseAtCleanup(t, h)
				require.Error(t, err)
				require.Greater(t, token(t, d, name), before, "the acquisition was not applied: the test tests nothing")
				require.Zero(t, freeWithin(t, other, name, bound), "not free at once")
			})
		})
		// Acquire retries a transient error and returns a handle that
		// holds the lock, or returns the error; either way the lock is
		// free once released.
		t.Run(c.label+"/Acquire", func(t *testing.T) {
			run(t, func(t *testing.T, d *memDB, p, other *mongolock.Provider, arm func()) {
				const name = "acquire"
				ctx := t.Context()
				require.NoError(t, mustTryAcquire(t, ctx, p.Lock(name)).Release(ctx))
				before := token(t, d, name)
				arm()
				actx, cancel := context.WithTimeout(ctx, bound)
				h, err := p.Lock(name).Acquire(actx)
				cancel()
				releaseAtCleanup(t, h)
				require.Greater(t, token(t, d, name), before)
				if c.transient {
					require.NoError(t, err, "a transient error")
					heldBy(t, other, h)
				} else {
					require.Error(t, err)
					require.NotErrorIs(t, err, context.DeadlineExceeded, "returned only when ctx ended")
				}
				require.Zero(t, freeWithin(t, other, name, bound), "not free at once")
			})
		})
		// A hand-over to a local waiter: Release returns the error, and
		// the waiter gets the lock soon.
		t.Run(c.label+"/hand-over", func(t *testing.T) {
			run(t, func(t *testing.T, d *memDB, p, other *mongolock.Provider, arm func()) {
				const name = "hand-over"
				ctx := t.Context()
				h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock(name)))
				got := make(chan *mongolock.Handle, 1)
				go func() {
					actx, cancel := context.WithTimeout(ctx, bound)
					defer cancel()
					w, err := p.Lock(name).Acquire(actx)
					assert(t, err == nil, "the waiter: %v", err)
					got <- w
				}()
				synctest.Wait()
				require.Equal(t, 1, mongolock.QueueLen(p, name), "the waiter is in line")
				before := token(t, d, name)
				arm()
				require.Error(t, h.Release(ctx))
				require.Greater(t, token(t, d, name), before, "the hand-over was not applied: the test tests nothing")
				w := <-got
				require.NotNil(t, w, "the waiter did not get the lock")
				releaseAtCleanup(t, w)
				heldBy(t, other, w)
				require.Zero(t, freeWithin(t, other, name, bound), "not free at once")
			})
		})
	}
}

// A lost handle that a test in a synctest bubble leaves unreleased is
// collected after the bubble has ended, by the garbage collector's
// cleanup, which runs outside every bubble: it must touch nothing of the
// bubble's (a channel made there is fatal to use from outside).
func TestAnAbandonedLostHandleIsCollectedOutsideItsBubbleWithoutHarm(t *testing.T) {
	var h *mongolock.Handle
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		p, _ := d.process()
		h = mustTryAcquire(t, t.Context(), p.Lock("abandoned"))
		mongolocktest.Lose(h)
	})
	mongolock.Abandon(h)
}

// A holder force released, whose lock another process took before any
// extension told it, learns at its Release that it had lost: the error
// wraps ErrLockLost, Lost closes, the Context's cause says so, and the new
// holder keeps the lock; a second Release returns nil.
func TestAReleaseOfAHolderTakenOverUnawaresIsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, _ := d.process()
		rival, _ := d.process()
		h := mustTryAcquire(t, ctx, p.Lock("taken"))
		forced, err := rival.ForceRelease(ctx, "taken")
		require.NoError(t, err)
		require.True(t, forced)
		next := releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock("taken")))
		require.False(t, closedNow(h.Lost()), "no extension has told it yet")

		err = h.Release(ctx)
		require.ErrorIs(t, err, mongolock.ErrLockLost)
		require.ErrorContains(t, err, "at release")
		require.True(t, closedNow(h.Lost()))
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
		require.NoError(t, h.Release(ctx), "a second Release")
		info, err := rival.Inspect(ctx, "taken")
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Equal(t, next.FencingToken(), info.FencingToken, "the new holder keeps it")
	})
}

func TestReleaseIsIdempotent(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	p := newProvider(t, testdb.Database(t))
	l := p.Lock("idempotent")

	h := releaseAtCleanup(t, mustAcquire(t, ctx, l))
	require.NoError(t, h.Release(ctx))
	require.NoError(t, h.Release(ctx))

	// A later Release of the old handle must not free the next holder's
	// acquisition.
	next := releaseAtCleanup(t, mustTryAcquire(t, ctx, l))
	require.NoError(t, h.Release(ctx))
	_, err := l.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "an old handle's repeated Release freed the next holder")
	require.NoError(t, next.Release(ctx))
	require.NoError(t, next.Release(ctx))
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
	// must report the loss and leave the next holder's lock alone.
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

func TestReleaseAfterTheClientIsDisconnectedReturnsPromptly(t *testing.T) {
	db := testdb.Database(t)
	c := testdb.NewClient(t)
	p := newProvider(t, c.Database(db.Name()))
	ctx := boundedCtx(t, 30*time.Second)
	h, err := p.Lock("disconnected").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))

	rctx := boundedCtx(t, 30*time.Second)
	start := time.Now()
	err = h.Release(rctx)
	require.Less(t, time.Since(start), 10*time.Second, "Release on a disconnected client waited for its ctx")
	require.Error(t, err, "Release cannot have reached the server")
	require.NotErrorIs(t, err, mongolock.ErrLockLost, "the lock was not lost; the release failed")
	require.True(t, closedNow(mongolock.LeaseUnkept(h)))
	require.True(t, closedNow(h.Context().Done()))
	require.False(t, closedNow(h.Lost()))
	require.NoError(t, h.Release(rctx), "a second Release")
}

// A handle after Release: its accessors still answer, its Context is done
// as released (not lost), Lost stays open, and every later Release, with
// a nil ctx too, is an error or nil, never a panic and never a round trip
// that could free the next holder.
func TestAHandleAfterReleaseStaysReleased(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 20*time.Second)
	h, err := e.p.Lock("released").TryAcquire(ctx)
	require.NoError(t, err)
	token := h.FencingToken()
	require.NoError(t, h.Release(ctx))

	next, err := e.other.Lock("released").TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, next)

	var nilCtx context.Context
	requireInvalid(t, h.Release(nilCtx), "release")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, h.Release(cancelled))
	require.Equal(t, "released", h.Name())
	require.Equal(t, token, h.FencingToken())
	require.True(t, closedNow(h.Context().Done()))
	require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
	require.False(t, closedNow(h.Lost()))
	require.True(t, closedNow(mongolock.LeaseUnkept(h)))

	_, err = e.p.Lock("released").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the old handle freed the next holder")
	require.NoError(t, next.Release(ctx))
}

// A Handle dropped while it holds its lock is released once the garbage
// collector finds it unreachable (at its provider's next extension tick),
// with a warning to WithLogger's logger (without it, nothing is logged,
// not even through slog.Default): the lock is not kept (extended for ever)
// for nobody. In a testing/synctest bubble too, though the collector's
// cleanups run outside it.
func TestAnAbandonedHandleIsReleasedWithAWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var logs, defaults syncbuf.Buffer
		defaultSlogTo(t, &defaults, nil)
		db := newMemDB(t)
		logged, _ := db.process(mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		quiet, _ := db.process()
		other, _ := db.process()

		kept := mustTryAcquire(t, ctx, logged.Lock("kept"))
		for _, p := range []*mongolock.Provider{logged, quiet} {
			func() {
				h, err := p.Lock("dropped").TryAcquire(ctx)
				require.NoError(t, err)
				require.NotZero(t, h.FencingToken())
			}()
			// The collector's cleanup runs when it runs, outside the
			// bubble: collect, and let simulated time pass, until the
			// lock is free.
			for start := time.Now(); ; {
				runtime.GC()
				time.Sleep(time.Second)
				h, err := other.Lock("dropped").TryAcquire(ctx)
				if err == nil {
					require.NoError(t, h.Release(ctx))
					break
				}
				require.ErrorIs(t, err, mongolock.ErrNotAcquired)
				require.Less(t, time.Since(start), 10*time.Minute, "the dropped handle's lock is still held")
			}
		}
		require.Equal(t, 1, strings.Count(logs.String(), "a Handle became unreachable while holding its lock"))
		require.Contains(t, logs.String(), "lock=dropped")
		require.Empty(t, defaults.String())

		// A handle still referenced is not touched by the collector.
		runtime.GC()
		time.Sleep(time.Minute)
		_, err := other.Lock("kept").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.NoError(t, kept.Release(ctx))
		require.NotContains(t, logs.String(), "lock=kept")
	})
}
