package mongolock_test

// The behaviour of Lock, Handle and Provider against the real server, as
// one process sees it, with a second client where a test needs a rival.
// Several tests are ported from DistributedLock.MongoDB's own test suite.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
	"weak"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Acquiring and releasing.

// statements records, for each acquisition round trip a provider sends,
// whether it is the statement for a lock nobody waits for.
type statements struct {
	mu        sync.Mutex
	unclaimed []bool
}

// watchedProcess is a process of d whose acquisition statements are
// recorded.
func watchedProcess(d *memDB) (*mongolock.Provider, *statements) {
	p, _ := d.process()
	f := &statements{}
	mongolock.SetStatementHook(p, func(unclaimed bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.unclaimed = append(f.unclaimed, unclaimed)
	})
	return p, f
}

func (f *statements) sent() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.unclaimed)
}

// An Acquire whose process was not refused the lock in CalmWaits waits in
// a row sends the statement for a lock nobody waits for first, which
// acquires as the full one does: with the campaign's value, counting the
// process's streak, with a higher fencing token each time.
func TestUncontendedAcquisitionsSendTheStatementForALockNobodyWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "calm"
		ctx := t.Context()
		d := newMemDB(t)
		p, f := watchedProcess(d)
		e := p.Election(name)
		var last int64
		n := mongolock.CalmWaits + 2
		for i := range n {
			l, err := e.Campaign(ctx, fmt.Sprint("v", i))
			require.NoError(t, err)
			require.Greater(t, l.FencingToken(), last, "campaign %d", i)
			last = l.FencingToken()
			leader, err := e.Leader(ctx)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint("v", i), leader.Value, "campaign %d", i)
			require.NoError(t, l.Resign(ctx))
		}
		want := make([]bool, n)
		want[n-2], want[n-1] = true, true
		require.Equal(t, want, f.sent()[len(f.sent())-n:], "which campaigns sent the statement for a lock nobody waits for")
		turn := d.turn(name)
		require.Equal(t, mongolock.Process(p), turn.LastProcess)
		require.Equal(t, n, turn.ProcessStreak, "both statements count the streak")

		// A lock of the election's name: the small statement leaves the
		// document with a value to the full one, which removes it.
		before := len(f.sent())
		h, err := p.Lock(name).Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, []bool{true, false}, f.sent()[before:], "the small statement, then the full one")
		doc := d.doc(mongolock.DefaultCollection, name)
		require.Equal(t, mongolock.LockID(h), doc.Lookup("lockId").StringValue())
		_, err = doc.LookupErr("value")
		require.Error(t, err, "a lock's acquisition carries no value: %v", doc)
		require.NoError(t, h.Release(ctx))
	})
}

// Where the lock is held when an Acquire sends the statement for a lock
// nobody waits for, it writes nothing, and the Acquire sends the full one
// at once, which claims the next turn.
func TestAnAcquireThatFindsTheLockHeldAfterCalmWaitsClaimsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "calm-then-held"
		ctx := t.Context()
		d := newMemDB(t)
		p, f := watchedProcess(d)
		l := p.Lock(name)
		for range mongolock.CalmWaits {
			h, err := l.Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
		}
		other, _ := d.process()
		held, err := other.Lock(name).TryAcquire(ctx)
		require.NoError(t, err)
		before := len(f.sent())
		got := startAcquire(ctx, lockMode(p, name))
		synctest.Wait()
		require.Equal(t, []bool{true, false}, f.sent()[before:], "the small statement, then the full one")
		require.Equal(t, mongolock.Process(p), d.turn(name).WaitingProcess, "the full statement did not claim the next turn")
		require.NoError(t, held.Release(ctx))
		require.NoError(t, awaitAcquired(t, got, time.Minute, "the claimant").Release(ctx))
	})
}

func TestTryAcquireOnHeldLockReturnsErrNotAcquiredAndReleaseFreesIt(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, db)
	l := p.Lock("basic")

	h := releaseAtCleanup(t, mustTryAcquire(t, ctx, l))
	require.Equal(t, "basic", h.Name())
	require.Positive(t, h.FencingToken())

	// The same Lock, another Lock of the same name, and another provider on
	// another client all see it held.
	other := newProvider(t, ownClient(t, db, nil))
	for _, contender := range []*mongolock.Lock{l, p.Lock("basic"), other.Lock("basic")} {
		h2, err := contender.TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.Nil(t, h2)
	}
	select {
	case <-h.Context().Done():
		t.Fatal("the handle's context ended while the lock was held")
	default:
	}

	require.NoError(t, h.Release(ctx))
	require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
	select {
	case <-h.Lost():
		t.Fatal("Lost was closed by a normal release")
	default:
	}

	h2 := releaseAtCleanup(t, mustTryAcquire(t, ctx, other.Lock("basic")))
	require.Greater(t, h2.FencingToken(), h.FencingToken())
	require.NoError(t, h2.Release(ctx))

	h3 := releaseAtCleanup(t, mustAcquire(t, ctx, l))
	require.Greater(t, h3.FencingToken(), h2.FencingToken())
	require.NoError(t, h3.Release(ctx))
}

func TestLockNamesAreCaseSensitive(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	p := newProvider(t, testdb.Database(t))

	upper := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("Name")))
	lower := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("name")))
	all := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("NAME")))
	for _, n := range []string{"Name", "name", "NAME"} {
		_, err := p.Lock(n).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, n)
	}
	require.NoError(t, upper.Release(ctx))
	// Releasing "Name" freed only "Name".
	_, err := p.Lock("name").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	again := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("Name")))
	for _, h := range []*mongolock.Handle{again, lower, all} {
		require.NoError(t, h.Release(ctx))
	}
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

func TestAcquireTimesOutOnHeldLockWithDeadlineExceededAndErrNotAcquired(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	holder := releaseAtCleanup(t, mustAcquire(t, ctx, newProvider(t, db).Lock("timeout")))

	// Sleeps between attempts longer than the timeout: Acquire must cut its
	// sleep short at the deadline rather than finish it.
	p := newProvider(t, db, mongolock.WithBusyWaitSleep(800*time.Millisecond, 1500*time.Millisecond))
	const timeout = time.Second
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	start := time.Now()
	h, err := p.Lock("timeout").Acquire(wctx)
	elapsed := time.Since(start)
	releaseAtCleanup(t, h)

	require.Nil(t, h)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.GreaterOrEqual(t, elapsed, timeout-10*time.Millisecond, "returned before its deadline")
	require.Less(t, elapsed, timeout+time.Second, "returned long after its deadline")
	require.NoError(t, holder.Release(ctx))
}

// An Acquire of a lock held the whole time returns ErrNotAcquired with
// DeadlineExceeded wherever in its attempts the deadline falls, once a
// reply has shown the lock held: during a round trip, or in a sleep
// between two. The deadlines step through a quarter of a round trip at a
// time.
func TestAnAcquireOfAHeldLockEndedByItsDeadlineAnywhereIsErrNotAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const trip = 4 * time.Millisecond
		ctx := t.Context()
		db := newMemDB(t)
		holder, _ := db.process()
		h := mustTryAcquire(t, ctx, holder.Lock("held"))
		p, network := db.process(mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
		network.Delay(trip)
		// The provider's first call reads the collection's collation first.
		_, err := p.Lock("held").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		for wait := trip + time.Millisecond; wait < 20*trip; wait += trip / 4 {
			actx, cancel := context.WithTimeout(ctx, wait)
			got, err := p.Lock("held").Acquire(actx)
			cancel()
			require.Nil(t, got)
			require.ErrorIs(t, err, context.DeadlineExceeded, "deadline %v", wait)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "deadline %v", wait)
		}
		require.NoError(t, h.Release(ctx))
	})
}

func TestAcquireReturnsPromptlyWhenCancelledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		holderP, _ := d.process()
		holder := releaseAtCleanup(t, mustTryAcquire(t, ctx, holderP.Lock("cancel")))
		// Every sleep between attempts is at least 2s: returning sooner
		// than that after the cancel means the sleep was interrupted.
		p, net := d.process(mongolock.WithBusyWaitSleep(2*time.Second, 3*time.Second))

		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		type result struct {
			h   *mongolock.Handle
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			h, err := p.Lock("cancel").Acquire(wctx)
			done <- result{h, err, time.Now()}
		}()
		// Its second attempt refused, it is in the sleep after it.
		for net.Sent() < 2 {
			time.Sleep(time.Second)
		}
		synctest.Wait()
		sent := net.Sent()

		cancelled := time.Now()
		wcancel()
		r := <-done
		releaseAtCleanup(t, r.h)
		require.Nil(t, r.h)
		require.ErrorIs(t, r.err, context.Canceled)
		require.ErrorIs(t, r.err, mongolock.ErrNotAcquired)
		require.Equal(t, cancelled, r.at, "Acquire returned after its sleep, not as it was cancelled")
		require.LessOrEqual(t, net.Sent()-sent, int64(1), "more than the claim's withdrawal was sent after the cancel")
		require.NoError(t, holder.Release(ctx))
	})
}

func TestAcquireWaitsUntilTheHolderReleases(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	holder := releaseAtCleanup(t, mustAcquire(t, ctx, newProvider(t, db).Lock("wait")))

	var count commandCounter
	p := newProvider(t, ownClient(t, db, &count), mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond))

	type result struct {
		h   *mongolock.Handle
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := p.Lock("wait").Acquire(ctx)
		done <- result{h, err}
	}()
	// Several attempts have found the lock held, and the waiter still waits.
	pollUntil(t, 10*time.Second, "the waiter's attempts", func() bool { return count.replies.Load() >= 3 })
	select {
	case r := <-done:
		releaseAtCleanup(t, r.h)
		t.Fatalf("Acquire returned while the lock was held: %v", r.err)
	default:
	}

	require.NoError(t, holder.Release(ctx))
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not get the lock after the holder released it")
	}
	releaseAtCleanup(t, r.h)
	require.NoError(t, r.err)
	require.Greater(t, r.h.FencingToken(), holder.FencingToken())
	require.NoError(t, r.h.Release(ctx))
}

// An Acquire whose ctx ends during an outage must not report contention:
// ErrNotAcquired means "held by someone else", and callers use it to tell
// contention from an outage. No server answers at this address; nobody holds
// the lock.
func TestAcquireDuringAnOutageIsNotReportedAsContention(t *testing.T) {
	for _, tc := range []struct {
		label             string
		selection, within time.Duration
	}{
		// Each attempt fails (server selection) before ctx ends: the
		// failures are retried, and the last one is reported.
		{"attempts fail before the deadline", 100 * time.Millisecond, time.Second},
		// The one attempt is still selecting a server when ctx ends.
		{"the deadline cuts the first attempt", time.Second, 300 * time.Millisecond},
	} {
		t.Run(tc.label, func(t *testing.T) {
			db := offlineDatabase(t, options.Client().SetServerSelectionTimeout(tc.selection))
			p := newProvider(t, db, mongolock.WithBusyWaitSleep(10*time.Millisecond, 50*time.Millisecond))

			ctx := boundedCtx(t, tc.within)
			h, err := p.Lock("outage").Acquire(ctx)
			releaseAtCleanup(t, h)
			t.Logf("Acquire: %v", err)
			require.Nil(t, h)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.False(t, errors.Is(err, mongolock.ErrNotAcquired),
				"no attempt ever found the lock held, yet the error says it was: %v", err)
		})
	}
}

// Names: any string is a lock of its own, matching no other, or a clear
// error at once.

func TestLockNameIsReturnedExactly(t *testing.T) {
	db := offlineDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	names := []string{"reports", "Reports", "a/b.c$d", "\xff\xfe not UTF-8"}
	for _, n := range unusualNames {
		names = append(names, n.name)
	}
	for _, n := range names {
		require.Equal(t, n, p.Lock(n).Name())
		l, err := mongolock.New(db, n)
		require.NoError(t, err)
		require.Equal(t, n, l.Name())
	}
}

func TestUnusualNamesWorkAndDoNotCollide(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, db)
	other := newProvider(t, ownClient(t, db, nil))

	// Hold every name at once: each is a lock of its own.
	handles := map[string]*mongolock.Handle{}
	for _, n := range unusualNames {
		t.Run(n.label, func(t *testing.T) {
			h, err := p.Lock(n.name).TryAcquire(ctx)
			require.NoError(t, err)
			releaseAtCleanup(t, h) // in case the parent test fails first
			handles[n.name] = h
			require.Equal(t, n.name, h.Name())

			_, err = other.Lock(n.name).TryAcquire(ctx)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a second holder")

			// The document's _id is the name, byte for byte.
			raw, err := db.Collection(mongolock.DefaultCollection).FindOne(ctx, bson.D{{Key: "_id", Value: n.name}}).Raw()
			require.NoError(t, err)
			require.Equal(t, n.name, raw.Lookup("_id").StringValue())
		})
	}
	count, err := db.Collection(mongolock.DefaultCollection).CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, len(unusualNames), count, "one document per name")

	for _, n := range unusualNames {
		h := handles[n.name]
		if h == nil {
			continue // its subtest failed
		}
		require.NoError(t, h.Release(ctx), n.label)
		// Released: another holder can take it, and only it.
		h2 := releaseAtCleanup(t, mustTryAcquire(t, ctx, other.Lock(n.name)))
		require.Greater(t, h2.FencingToken(), h.FencingToken(), n.label)
		require.NoError(t, h2.Release(ctx), n.label)
	}
}

func TestHostileNamesAreLocksOfTheirOwnOrAClearError(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	// A short lease: the locks are held past several expiries below, so
	// extensions (batched by $in over the names) must match each name. Not
	// shorter: under -race on a loaded machine, one batch of these names
	// has taken longer than 300 ms to extend.
	const expiry = time.Second
	e := newLockEnv(t, mongolock.WithExpiry(expiry), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))

	handles := map[string]*mongolock.Handle{}
	var refused []string
	for _, n := range hostileNames {
		h, err := e.p.Lock(n.name).TryAcquire(ctx)
		if err != nil {
			// Allowed only as a clear error of its own, at once: never as
			// contention (which would mean it matched another lock).
			require.NotErrorIs(t, err, mongolock.ErrNotAcquired, "%s: taken for another lock", n.label)
			var le *mongolock.Error
			require.ErrorAs(t, err, &le, n.label)
			require.Less(t, len(err.Error()), 2000, "%s: the error repeats the name", n.label)
			t.Logf("%s: refused: %v", n.label, err)
			refused = append(refused, n.label)
			continue
		}
		releaseAtCleanup(t, h)
		handles[n.name] = h
		require.Equal(t, n.name, h.Name(), n.label)
	}
	t.Logf("%d of %d hostile names work on %s; refused: %q", len(handles), len(hostileNames), testdb.Info(t).Name(), refused)

	// All held at once, each by its own document, _id byte for byte.
	count, err := e.coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, len(handles), count, "one document per name")
	for _, n := range hostileNames {
		if handles[n.name] == nil {
			continue
		}
		raw := rawLockDoc(t, e.coll, n.name)
		require.Equal(t, n.name, raw.Lookup("_id").StringValue(), "%s: _id as stored", n.label)
	}

	// Extended twice: the extensions matched every name, each time.
	for range 2 {
		since := map[string]time.Time{}
		for name := range handles {
			since[name] = rawLockDoc(t, e.coll, name).Lookup("expiresAt").Time()
		}
		pollUntil(t, 10*expiry, "an extension of every name", func() bool {
			for name, at := range since {
				if !rawLockDoc(t, e.coll, name).Lookup("expiresAt").Time().After(at) {
					return false
				}
			}
			return true
		})
	}
	for _, n := range hostileNames {
		if h := handles[n.name]; h != nil {
			require.False(t, closedNow(h.Lost()), "%s: lost while held: an extension did not match it", n.label)
		}
	}

	// Nobody else gets any of them: not with one attempt, and not by
	// waiting (which writes the name into the line of waiting processes),
	// all names waited for at once.
	waited := map[string]<-chan error{}
	for _, n := range hostileNames {
		if handles[n.name] == nil {
			continue
		}
		_, err := e.other.Lock(n.name).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "%s: a second holder", n.label)
		wctx, cancel := context.WithTimeout(ctx, time.Second) // room for a round trip of each on a loaded machine
		defer cancel()
		waited[n.name] = acquireInBackground(wctx, e.other.Lock(n.name))
	}
	for _, n := range hostileNames {
		if w := waited[n.name]; w != nil {
			err := <-w
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "%s: a second holder, waiting", n.label)
			require.ErrorIs(t, err, context.DeadlineExceeded, n.label)
		}
	}

	// Released, each is free for the next holder, and only it: the next
	// token outranks the last.
	for _, n := range hostileNames {
		h := handles[n.name]
		if h == nil {
			continue
		}
		require.NoError(t, h.Release(ctx), n.label)
		var next int64
		require.NoError(t, e.other.Lock(n.name).Do(ctx, func(context.Context) error {
			// Do's handle is not exposed; read the token the server gave it.
			next = rawLockDoc(t, e.coll, n.name).Lookup("fencingToken").Int64()
			return nil
		}), n.label)
		require.Greater(t, next, h.FencingToken(), n.label)
	}
}

// A name the server cannot store (larger than a BSON document on its own)
// fails TryAcquire, Acquire and Do at once with a clear error, without
// running Do's fn, and leaves nothing behind.
func TestNameTooLargeForTheServerReturnsAClearErrorAtOnce(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	// Larger than the 16 MB BSON document limit on its own.
	l := e.p.Lock(strings.Repeat("x", 17<<20))

	for _, op := range []struct {
		label string
		fn    func(context.Context) (*mongolock.Handle, error)
	}{
		{"TryAcquire", l.TryAcquire},
		{"Acquire", l.Acquire},
		{"Do", func(ctx context.Context) (*mongolock.Handle, error) {
			return nil, l.Do(ctx, func(context.Context) error {
				t.Error("fn ran for a name the server refused")
				return nil
			})
		}},
	} {
		start := time.Now()
		h, err := op.fn(ctx)
		elapsed := time.Since(start)
		releaseAtCleanup(t, h)
		require.Error(t, err, op.label)
		t.Logf("%s: %v after %v (error is %d bytes)", op.label, err, elapsed, len(err.Error()))
		require.Nil(t, h, op.label)
		require.NotErrorIs(t, err, mongolock.ErrNotAcquired, op.label)
		require.NoError(t, ctx.Err(), "%s: returned only when ctx ended", op.label)
		require.Less(t, elapsed, 10*time.Second, "%s: returned late: retried?", op.label)
		require.Less(t, len(err.Error()), 2000, "%s: the error repeats the name", op.label)
		var le *mongolock.Error
		require.ErrorAs(t, err, &le, op.label)
		require.Equal(t, strings.Repeat("x", 61)+"...", le.Name, op.label)
	}
	require.NotPanics(t, func() { mongolock.WaitBackground(e.p) })
	n, err := e.coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "a refused name left a document")
}

// Errors shorten long names to 64 bytes; a name of multi-byte characters
// must be cut between characters, not inside one.
func TestErrorShortensLongNamesWithoutSplittingCharacters(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	p := newProvider(t, testdb.Database(t))
	name := strings.Repeat("锁", 30) // 90 bytes, 3 per character
	h := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock(name)))

	_, err := p.Lock(name).TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	var le *mongolock.Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, "try acquire", le.Op)
	require.LessOrEqual(t, len(le.Name), 64)
	require.True(t, strings.HasPrefix(name, strings.TrimSuffix(le.Name, "...")), "Name %q is not a prefix of the name", le.Name)
	require.True(t, utf8.ValidString(le.Name), "Name %q is not valid UTF-8", le.Name)
	require.NotContains(t, err.Error(), `\x`, "the message shows a split character")
	require.NoError(t, h.Release(ctx))
}

// Options: New and NewProvider validate them without I/O, so these tests
// use a client of an address where no server answers.

// optionConstructors are New and NewProvider, which validate the same way.
// build reports the error and whether a lock or provider came back with it.
var optionConstructors = []struct {
	label, op string
	build     func(*mongo.Database, ...mongolock.Option) (bool, error)
}{
	{"New", "new", func(db *mongo.Database, opts ...mongolock.Option) (bool, error) {
		l, err := mongolock.New(db, "x", opts...)
		return l != nil, err
	}},
	{"NewProvider", "new provider", func(db *mongo.Database, opts ...mongolock.Option) (bool, error) {
		p, err := mongolock.NewProvider(db, opts...)
		return p != nil, err
	}},
}

func TestNilDatabaseIsAnError(t *testing.T) {
	for _, c := range optionConstructors {
		var (
			got bool
			err error
		)
		require.NotPanics(t, func() { got, err = c.build(nil) }, c.label)
		require.Error(t, err, c.label)
		require.False(t, got, c.label)
		require.Contains(t, err.Error(), "nil *mongo.Database", c.label)
		requireInvalid(t, err, c.op)
	}
}

// requireInvalid asserts that err is an *Error of op that a caller can tell
// from every other failure with ErrInvalidArgument.
func requireInvalid(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
	var me *mongolock.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, op, me.Op)
	for _, other := range []error{mongolock.ErrNotAcquired, mongolock.ErrLockLost, mongolock.ErrMismatch, mongolock.ErrClosed} {
		require.NotErrorIs(t, err, other)
	}
}

func TestInvalidOptionsAreRefusedNamingTheOptionAndValue(t *testing.T) {
	db := offlineDatabase(t)
	for _, tc := range []struct {
		label string
		opts  []mongolock.Option
		want  []string // each must appear in the error message
	}{
		{"empty collection", []mongolock.Option{mongolock.WithCollection("")}, []string{`WithCollection("")`}},
		{"expiry zero", []mongolock.Option{mongolock.WithExpiry(0)}, []string{"WithExpiry(0s)", "100ms"}},
		{"expiry negative", []mongolock.Option{mongolock.WithExpiry(-time.Second)}, []string{"WithExpiry(-1s)"}},
		{"expiry just under 100ms", []mongolock.Option{mongolock.WithExpiry(99 * time.Millisecond)}, []string{"WithExpiry(99ms)", "100ms"}},
		{"cadence zero", []mongolock.Option{mongolock.WithExtensionCadence(0)}, []string{"WithExtensionCadence(0s)"}},
		{"cadence negative", []mongolock.Option{mongolock.WithExtensionCadence(-5 * time.Millisecond)}, []string{"WithExtensionCadence(-5ms)"}},
		{"cadence equal to expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(time.Second)},
			[]string{"WithExtensionCadence(1s)", "expiry (1s)"}},
		{"cadence above the default expiry", []mongolock.Option{mongolock.WithExtensionCadence(31 * time.Second)},
			[]string{"WithExtensionCadence(31s)", "expiry (30s)"}},
		{"cadence set before a shorter expiry", []mongolock.Option{mongolock.WithExtensionCadence(200 * time.Millisecond), mongolock.WithExpiry(150 * time.Millisecond)},
			[]string{"WithExtensionCadence(200ms)", "expiry (150ms)"}},
		{"cadence of 1ns", []mongolock.Option{mongolock.WithExtensionCadence(time.Nanosecond)},
			[]string{"WithExtensionCadence(1ns)", "at least 300ms", "expiry (30s)"}},
		{"cadence just under a hundredth of the expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(10*time.Millisecond - 1)},
			[]string{"WithExtensionCadence(9.999999ms)", "at least 10ms"}},
		{"cadence just under the expiry", []mongolock.Option{mongolock.WithExtensionCadence(29990 * time.Millisecond)},
			[]string{"WithExtensionCadence(29.99s)", "at most 14.5s", "expiry (30s)"}},
		{"cadence half the expiry", []mongolock.Option{mongolock.WithExtensionCadence(15 * time.Second)},
			[]string{"WithExtensionCadence(15s)", "at most 14.5s"}},
		{"cadence 0.6 of the expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(600 * time.Millisecond)},
			[]string{"WithExtensionCadence(600ms)", "at most 450ms", "expiry (1s)"}},
		{"cadence just over the longest", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(450*time.Millisecond + 1)},
			[]string{"WithExtensionCadence(450.000001ms)", "at most 450ms"}},
		{"cadence just over the longest at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond), mongolock.WithExtensionCadence(45*time.Millisecond + 1)},
			[]string{"WithExtensionCadence(45.000001ms)", "at most 45ms", "expiry (100ms)"}},
		{"busy-wait min zero", []mongolock.Option{mongolock.WithBusyWaitSleep(0, time.Second)}, []string{"WithBusyWaitSleep(0s, 1s)"}},
		{"busy-wait min negative", []mongolock.Option{mongolock.WithBusyWaitSleep(-time.Millisecond, time.Second)}, []string{"WithBusyWaitSleep(-1ms, 1s)"}},
		{"busy-wait both zero", []mongolock.Option{mongolock.WithBusyWaitSleep(0, 0)}, []string{"WithBusyWaitSleep(0s, 0s)"}},
		{"busy-wait min above max", []mongolock.Option{mongolock.WithBusyWaitSleep(2*time.Second, time.Second)}, []string{"WithBusyWaitSleep(2s, 1s)"}},
		{"standby under the busy-wait max", []mongolock.Option{mongolock.WithStandbySleep(799 * time.Millisecond)}, []string{"WithStandbySleep(799ms)", "800ms"}},
		{"standby negative", []mongolock.Option{mongolock.WithStandbySleep(-time.Second)}, []string{"WithStandbySleep(-1s)"}},
		{"nil option", []mongolock.Option{mongolock.WithExpiry(time.Second), nil}, []string{"nil Option"}},
		{"empty owner", []mongolock.Option{mongolock.WithOwner("")}, []string{`WithOwner("")`, "1 to 256 bytes"}},
		{"owner too long", []mongolock.Option{mongolock.WithOwner(strings.Repeat("o", mongolock.MaxOwnerLen+1))},
			[]string{`WithOwner("ooo`, "...", "1 to 256 bytes"}},
		{"hold at least negative", []mongolock.Option{mongolock.WithHoldAtLeast(-time.Second)}, []string{"WithHoldAtLeast(-1s)", "negative"}},
		{"hold at most zero", []mongolock.Option{mongolock.WithHoldAtMost(0)}, []string{"WithHoldAtMost(0s)", "expiry (30s)"}},
		{"hold at most negative", []mongolock.Option{mongolock.WithHoldAtMost(-time.Minute)}, []string{"WithHoldAtMost(-1m0s)"}},
		{"hold at most under the expiry", []mongolock.Option{mongolock.WithExpiry(time.Minute), mongolock.WithHoldAtMost(59 * time.Second)},
			[]string{"WithHoldAtMost(59s)", "expiry (1m0s)"}},
		{"hold at most under the hold at least", []mongolock.Option{mongolock.WithHoldAtLeast(2 * time.Minute), mongolock.WithHoldAtMost(time.Minute)},
			[]string{"WithHoldAtMost(1m0s)", "WithHoldAtLeast's (2m0s)"}},
	} {
		for _, c := range optionConstructors {
			t.Run(tc.label+"/"+c.label, func(t *testing.T) {
				got, err := c.build(db, tc.opts...)
				require.Error(t, err)
				require.False(t, got, "a value returned with the error")
				for _, w := range tc.want {
					require.Contains(t, err.Error(), w)
				}
				require.True(t, strings.HasPrefix(err.Error(), "mongolock: "+c.op), "error %q lacks the package prefix and operation", err)
				requireInvalid(t, err, c.op)
			})
		}
	}
}

func TestValidEdgeOptionsAreAccepted(t *testing.T) {
	db := offlineDatabase(t)
	for _, tc := range []struct {
		label string
		opts  []mongolock.Option
	}{
		{"no options", nil},
		{"expiry exactly 100ms", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond)}},
		{"the default cadence at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond)}},
		{"the shortest cadence", []mongolock.Option{mongolock.WithExtensionCadence(300 * time.Millisecond)}},
		{"the longest cadence", []mongolock.Option{mongolock.WithExtensionCadence(14500 * time.Millisecond)}},
		{"the shortest cadence at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond), mongolock.WithExtensionCadence(time.Millisecond)}},
		{"the longest cadence at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond), mongolock.WithExtensionCadence(45 * time.Millisecond)}},
		{"the longest cadence of a 1s expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(450 * time.Millisecond)}},
		{"an expiry with a fraction of a millisecond", []mongolock.Option{mongolock.WithExpiry(1500700 * time.Microsecond)}},
		{"busy-wait min equal to max", []mongolock.Option{mongolock.WithBusyWaitSleep(5*time.Millisecond, 5*time.Millisecond)}},
		{"standby equal to the busy-wait max", []mongolock.Option{mongolock.WithStandbySleep(mongolock.DefaultBusyWaitMax)}},
		{"busy-wait of 1ns", []mongolock.Option{mongolock.WithBusyWaitSleep(time.Nanosecond, time.Nanosecond)}},
		{"a later option overrides an earlier one", []mongolock.Option{mongolock.WithExpiry(time.Millisecond), mongolock.WithExpiry(time.Second)}},
		{"hold at least alone", []mongolock.Option{mongolock.WithHoldAtLeast(time.Hour)}},
		{"hold at least zero", []mongolock.Option{mongolock.WithHoldAtLeast(0)}},
		{"hold at most equal to the expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithHoldAtMost(time.Second)}},
		{"holds at least and at most equal", []mongolock.Option{mongolock.WithHoldAtLeast(time.Minute), mongolock.WithHoldAtMost(time.Minute)}},
		{"everything", []mongolock.Option{
			mongolock.WithCollection("locks"),
			mongolock.WithExpiry(2 * time.Second),
			mongolock.WithExtensionCadence(500 * time.Millisecond),
			mongolock.WithBusyWaitSleep(time.Millisecond, time.Second),
			mongolock.WithAdaptiveBackoff(true),
		}},
	} {
		for _, c := range optionConstructors {
			t.Run(tc.label+"/"+c.label, func(t *testing.T) {
				got, err := c.build(db, tc.opts...)
				require.NoError(t, err)
				require.True(t, got)
			})
		}
	}
}

// The server adds the expiry to $$NOW in whole milliseconds: the client's
// lease is counted from those, less the safety margin.
func TestTheClientsLeaseIsCountedInTheServersWholeMilliseconds(t *testing.T) {
	p := newProvider(t, offlineDatabase(t), mongolock.WithExpiry(1500700*time.Microsecond))
	require.Equal(t, 150070*time.Microsecond, mongolock.SafetyMargin(p))
	sent := time.Now()
	deadline := mongolock.KeptDeadline(p.Lock("ms"), sent)
	require.Equal(t, 1500*time.Millisecond-mongolock.SafetyMargin(p), deadline.Sub(sent), "the client's lease")
}

func TestWithCollectionSetsTheProvidersCollection(t *testing.T) {
	db := offlineDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	require.Equal(t, mongolock.DefaultCollection, mongolock.CollectionName(p))
	p, err = mongolock.NewProvider(db, mongolock.WithCollection("my locks"))
	require.NoError(t, err)
	require.Equal(t, "my locks", mongolock.CollectionName(p))
}

// The lock document, its collection, and the TTL index.

var lockIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestLockDocumentHasTheProtocolFields(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	// A long expiry (and so a long extension cadence): no extension changes
	// expiresAt while the test reads it.
	const expiry = 20 * time.Second
	p := newProvider(t, db, mongolock.WithExpiry(expiry))
	coll := db.Collection(mongolock.DefaultCollection)
	require.Equal(t, mongolock.DefaultCollection, mongolock.CollectionName(p))
	require.Equal(t, "distributed_locks", mongolock.DefaultCollection)

	h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("doc")))
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Raw()
	require.NoError(t, err)
	t.Logf("held: %s", raw)

	require.Equal(t, bson.TypeString, raw.Lookup("_id").Type)
	require.Equal(t, "doc", raw.Lookup("_id").StringValue())
	lockID, ok := raw.Lookup("lockId").StringValueOK()
	require.True(t, ok, "lockId is a string: %s", raw.Lookup("lockId"))
	require.Regexp(t, lockIDPattern, lockID)
	acquired, ok := raw.Lookup("acquiredAt").DateTimeOK()
	require.True(t, ok, "acquiredAt is a date: %s", raw.Lookup("acquiredAt"))
	expires, ok := raw.Lookup("expiresAt").DateTimeOK()
	require.True(t, ok, "expiresAt is a date: %s", raw.Lookup("expiresAt"))
	require.Equal(t, expiry.Milliseconds(), expires-acquired, "expiresAt - acquiredAt in ms")
	token, ok := raw.Lookup("fencingToken").Int64OK()
	require.True(t, ok, "fencingToken is an int64: %s", raw.Lookup("fencingToken"))
	require.Equal(t, h.FencingToken(), token)

	require.NoError(t, h.Release(ctx))
	raw, err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Raw()
	require.NoError(t, err, "the document is kept on release")
	t.Logf("released: %s", raw)
	_, err = raw.LookupErr("lockId")
	require.Error(t, err, "lockId is removed on release")
	require.Equal(t, token, raw.Lookup("fencingToken").Int64(), "the token is kept on release")
	// Judge "expired" with the server's clock, as the library does. (An
	// aggregation: FerretDB refuses $$NOW in a find filter's $expr.)
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id", Value: "doc"}}}},
		{{Key: "$project", Value: bson.D{
			{Key: "now", Value: "$$NOW"},
			{Key: "expired", Value: bson.D{{Key: "$lte", Value: bson.A{"$expiresAt", "$$NOW"}}}},
		}}},
	})
	require.NoError(t, err)
	var judged []struct {
		Now     time.Time `bson:"now"`
		Expired bool      `bson:"expired"`
	}
	require.NoError(t, cur.All(ctx, &judged))
	require.Len(t, judged, 1)
	require.True(t, judged[0].Expired, "expiresAt %v <= server $$NOW %v after release",
		raw.Lookup("expiresAt").Time(), judged[0].Now)

	// A second acquisition: a fresh lockId, and the next token.
	h2 := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("doc")))
	raw, err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Raw()
	require.NoError(t, err)
	require.Regexp(t, lockIDPattern, raw.Lookup("lockId").StringValue())
	require.NotEqual(t, lockID, raw.Lookup("lockId").StringValue())
	require.Equal(t, h2.FencingToken(), raw.Lookup("fencingToken").Int64())
	require.Greater(t, h2.FencingToken(), token)
	require.NoError(t, h2.Release(ctx))
}

// indexInfo is one entry of listIndexes.
type indexInfo struct {
	Name               string        `bson:"name"`
	Key                bson.Raw      `bson:"key"`
	ExpireAfterSeconds bson.RawValue `bson:"expireAfterSeconds"`
}

func listIndexes(ctx context.Context, t *testing.T, coll *mongo.Collection) []indexInfo {
	t.Helper()
	cur, err := coll.Indexes().List(ctx)
	require.NoError(t, err)
	var all []indexInfo
	require.NoError(t, cur.All(ctx, &all))
	return all
}

func TestFirstAcquisitionCreatesTheTTLIndex(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, db)
	coll := db.Collection(mongolock.DefaultCollection)
	require.Equal(t, "expiresAt_ttl", mongolock.TTLIndexName)

	h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("ttl")))
	require.NoError(t, h.Release(ctx))

	var ttl *indexInfo
	pollUntil(t, 20*time.Second, "index "+mongolock.TTLIndexName, func() bool {
		for _, ix := range listIndexes(ctx, t, coll) {
			if ix.Name == mongolock.TTLIndexName {
				ttl = &ix
				return true
			}
		}
		return false
	})
	t.Logf("index: key %s, expireAfterSeconds %s", ttl.Key, ttl.ExpireAfterSeconds)
	elems, err := ttl.Key.Elements()
	require.NoError(t, err)
	require.Len(t, elems, 1, "key %s", ttl.Key)
	require.Equal(t, "expiresAt", elems[0].Key())
	dir, ok := elems[0].Value().AsInt64OK()
	require.True(t, ok, "key direction %s", elems[0].Value())
	require.EqualValues(t, 1, dir)
	secs, ok := ttl.ExpireAfterSeconds.AsInt64OK()
	require.True(t, ok, "expireAfterSeconds %s", ttl.ExpireAfterSeconds)
	require.EqualValues(t, mongolock.TTLGraceSeconds, secs, "expireAfterSeconds: the grace period")
}

func TestTTLIndexIsCreatedOncePerCollection(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	var count commandCounter
	db := testdb.DatabaseOf(t, testdb.NewClient(t, options.Client().SetMonitor(count.monitor())))

	// Two providers of one client, database and collection, several locks.
	p1, p2 := newProvider(t, db), newProvider(t, db)
	for i := range 3 {
		for _, p := range []*mongolock.Provider{p1, p2} {
			h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock(fmt.Sprint("once-", i))))
			require.NoError(t, h.Release(ctx))
		}
	}
	mongolock.WaitBackground(p1)
	mongolock.WaitBackground(p2)
	require.EqualValues(t, 1, count.named("createIndexes"), "createIndexes commands for one collection")

	// Another collection gets its own index.
	p3 := newProvider(t, db, mongolock.WithCollection("other"))
	h := releaseAtCleanup(t, mustAcquire(t, ctx, p3.Lock("once")))
	require.NoError(t, h.Release(ctx))
	mongolock.WaitBackground(p3)
	require.EqualValues(t, 2, count.named("createIndexes"), "createIndexes commands for two collections")
}

// An expiresAt_ttl index that exists already with a shorter TTL
// (DistributedLock.MongoDB's, expireAfterSeconds 0) is raised to the grace
// period; a longer one, or one without a TTL, is left as it is.
func TestExistingTTLIndexIsRaisedToTheGraceNeverLowered(t *testing.T) {
	const grace = mongolock.TTLGraceSeconds
	for _, tc := range []struct {
		label    string
		existing *options.IndexOptionsBuilder
		want     int64 // -1: no expireAfterSeconds
	}{
		{"DistributedLock.MongoDB's, 0", options.Index().SetExpireAfterSeconds(0), int64(grace)},
		{"longer than the grace", options.Index().SetExpireAfterSeconds(2 * grace), 2 * int64(grace)},
		{"no TTL", options.Index(), -1},
	} {
		t.Run(tc.label, func(t *testing.T) {
			ctx := boundedCtx(t, 30*time.Second)
			e := newLockEnv(t)
			_, err := e.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
				Keys:    bson.D{{Key: "expiresAt", Value: 1}},
				Options: tc.existing.SetName(mongolock.TTLIndexName),
			})
			require.NoError(t, err)
			ttl := func() int64 {
				for _, ix := range listIndexes(ctx, t, e.coll) {
					if secs, ok := ix.ExpireAfterSeconds.AsInt64OK(); ok && ix.Name == mongolock.TTLIndexName {
						return secs
					}
				}
				return -1
			}

			h := releaseAtCleanup(t, mustAcquire(t, ctx, e.p.Lock("grace")))
			require.NoError(t, h.Release(ctx))
			if tc.want == int64(grace) {
				pollUntil(t, 20*time.Second, "expireAfterSeconds raised to the grace", func() bool { return ttl() == tc.want })
			} else {
				mongolock.WaitBackground(e.p)
				require.Equal(t, tc.want, ttl(), "expireAfterSeconds (-1: none)")
				require.Zero(t, e.count.named("collMod"), "collMod commands")
			}
			mongolock.WaitBackground(e.p)
			t.Logf("%s: createIndexes %d, listIndexes %d, collMod %d; expireAfterSeconds now %d",
				testdb.Info(t).Name(), e.count.named("createIndexes"), e.count.named("listIndexes"), e.count.named("collMod"), ttl())
		})
	}
}

func TestAcquireWorksWhenAnExpiresAtIndexExistsWithOtherOptions(t *testing.T) {
	for _, tc := range []struct {
		label, name string
		index       mongo.IndexModel
	}{
		{"another name, no TTL", "my_expiresAt", mongo.IndexModel{
			Keys:    bson.D{{Key: "expiresAt", Value: 1}},
			Options: options.Index().SetName("my_expiresAt"),
		}},
		{"same name, another TTL", mongolock.TTLIndexName, mongo.IndexModel{
			Keys:    bson.D{{Key: "expiresAt", Value: 1}},
			Options: options.Index().SetName(mongolock.TTLIndexName).SetExpireAfterSeconds(60),
		}},
		{"another name, another TTL", "my_ttl", mongo.IndexModel{
			Keys:    bson.D{{Key: "expiresAt", Value: 1}},
			Options: options.Index().SetName("my_ttl").SetExpireAfterSeconds(60),
		}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			ctx := boundedCtx(t, 20*time.Second)
			db := testdb.Database(t)
			coll := db.Collection(mongolock.DefaultCollection)
			_, err := coll.Indexes().CreateOne(ctx, tc.index)
			require.NoError(t, err)

			p := newProvider(t, db)
			for range 2 {
				h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("indexed")))
				require.NoError(t, h.Release(ctx))
			}
			mongolock.WaitBackground(p)
			// The user's index is still there.
			var names []string
			for _, ix := range listIndexes(ctx, t, coll) {
				names = append(names, ix.Name)
			}
			require.Contains(t, names, tc.name)
		})
	}
}

func TestWithCollectionPutsDocumentsInThatCollection(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, db, mongolock.WithCollection("custom"))
	require.Equal(t, "custom", mongolock.CollectionName(p))

	h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("elsewhere")))
	raw, err := db.Collection("custom").FindOne(ctx, bson.D{{Key: "_id", Value: "elsewhere"}}).Raw()
	require.NoError(t, err)
	require.Equal(t, h.FencingToken(), raw.Lookup("fencingToken").Int64())
	n, err := db.Collection(mongolock.DefaultCollection).CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "documents in the default collection")

	// The default collection's lock of the same name is another lock.
	def := releaseAtCleanup(t, mustTryAcquire(t, ctx, newProvider(t, db).Lock("elsewhere")))
	require.NoError(t, def.Release(ctx))
	require.NoError(t, h.Release(ctx))
}

// On a database that does not acknowledge writes (w: 0), an acquisition
// still gets the document back: the lock is held by the handle's lockId,
// and Release frees it.
func TestLockingWorksOnADatabaseWithUnacknowledgedWrites(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db := testdb.Database(t)
	coll := db.Collection(mongolock.DefaultCollection)
	w0 := ownClient(t, db, nil).Client().Database(db.Name(), options.Database().SetWriteConcern(writeconcern.Unacknowledged()))
	p := newProvider(t, w0)

	h, err := p.Lock("w0").TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire on a database with w: 0")
	releaseAtCleanup(t, h)
	raw := rawLockDoc(t, coll, "w0")
	require.Equal(t, mongolock.LockID(h), raw.Lookup("lockId").StringValue(), "the holder in %s", raw)
	require.Equal(t, h.FencingToken(), raw.Lookup("fencingToken").Int64())

	require.NoError(t, h.Release(ctx))
	_, err = rawLockDoc(t, coll, "w0").LookupErr("lockId")
	require.Error(t, err, "lockId is removed on release")
	other := releaseAtCleanup(t, mustTryAcquire(t, ctx, newProvider(t, db).Lock("w0")))
	require.NoError(t, other.Release(ctx))
}

// Every command on the lock collection, of every kind the library sends,
// carries the library's concerns, whatever the database's are (w: 1 or
// w: 0, secondaryPreferred, readConcern available): writes {w: "majority"}, the read after a partial
// batch of extensions readConcern local, the change stream (refused where
// the server has none) readConcern majority, and reads no read preference
// but the primary.
func TestEveryCommandOnTheLockCollectionCarriesTheLibrarysConcerns(t *testing.T) {
	for _, tc := range []struct {
		label string
		wc    *writeconcern.WriteConcern
	}{{"w:1", writeconcern.W1()}, {"w:0", writeconcern.Unacknowledged()}} {
		t.Run(tc.label, func(t *testing.T) {
			ctx := boundedCtx(t, time.Minute)
			db := testdb.Database(t)
			coll := db.Collection(mongolock.DefaultCollection)
			log := &commandLog{coll: mongolock.DefaultCollection}
			pdb := testdb.NewClient(t, options.Client().SetMonitor(log.monitor())).Database(db.Name(),
				options.Database().SetWriteConcern(tc.wc).SetReadPreference(readpref.SecondaryPreferred()).
					SetReadConcern(readconcern.Available()))
			p := newProvider(t, pdb, mongolock.WithExpiry(2*time.Second), mongolock.WithExtensionCadence(200*time.Millisecond))
			rival := newProvider(t, db)

			// insert and findAndModify (the first acquisitions), createIndexes.
			a := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("a")))
			b := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("b")))
			// update: someone else takes b over, so the next batch of
			// extensions matches only a, and find reads the holders.
			_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "lockId", Value: "someone else"}}}})
			require.NoError(t, err)
			awaitClosed(t, b.Lost(), 5*time.Second, "Lost of the handle taken over")
			// aggregate: a waiter for a lock of another process opens the
			// release events' change stream.
			c := releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock("c")))
			_, err = p.Lock("c").Acquire(boundedCtx(t, 300*time.Millisecond))
			require.ErrorIs(t, err, mongolock.ErrNotAcquired)
			require.NoError(t, c.Release(ctx))
			require.NoError(t, a.Release(ctx))
			mongolock.WaitBackground(p)

			sent := log.commands()
			for _, name := range []string{"insert", "findAndModify", "createIndexes", "update", "find", "aggregate"} {
				require.NotEmpty(t, sent[name], "no %s sent", name)
			}
			for name, cmds := range sent {
				for _, cmd := range cmds {
					switch name {
					case "find", "aggregate":
						if mode, ok := cmd.Lookup("$readPreference", "mode").StringValueOK(); ok {
							require.Equal(t, "primary", mode, "%s", cmd)
						}
						level := map[string]string{"find": "local", "aggregate": "majority"}[name]
						require.Equal(t, level, cmd.Lookup("readConcern", "level").StringValue(), "readConcern of %s", cmd)
					case "killCursors": // closing the change stream, where it opened
					default:
						wc, err := cmd.LookupErr("writeConcern")
						require.NoError(t, err, "no writeConcern in %s", cmd)
						require.Equal(t, `{"w": "majority"}`, wc.String(), "writeConcern of %s", name)
					}
				}
			}
		})
	}
}

// The handle: its lease is extended while it is held; a loss closes Lost
// and ends Context; Release ends both, and never frees another holder.

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

	rctx := boundedCtx(t, 2*time.Second)
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

// Misuse: a nil ctx, a disconnected client.

func TestNilContextIsAnErrorNotAPanic(t *testing.T) {
	e := newLockEnv(t)
	l := e.p.Lock("nil-ctx")
	var nilCtx context.Context // a variable: staticcheck (SA1012) rejects a literal nil

	h, err := l.Acquire(nilCtx)
	requireInvalid(t, err, "acquire")
	require.Nil(t, h)
	h, err = l.TryAcquire(nilCtx)
	requireInvalid(t, err, "try acquire")
	require.Nil(t, h)
	requireInvalid(t, l.Do(nilCtx, func(context.Context) error {
		t.Error("fn ran with a nil ctx")
		return nil
	}), "do")
	requireInvalid(t, newProvider(t, e.db).Close(nilCtx), "close")

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

// A ctx that is already done: TryAcquire, Acquire and Do send nothing (not
// even the TTL index of a provider's first call) and return ctx's error.
// Release returns ctx's error too and ends the handle (released, not lost),
// and the lock is freed in the background with one update, or handed to a
// waiter of this process soon.
func TestADoneContextSendsNothingAndReleaseStillFreesTheLock(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	done, cancel := context.WithCancel(ctx)
	cancel()
	l := e.p.Lock("done")
	h, err := l.TryAcquire(done)
	require.ErrorIs(t, err, context.Canceled, "TryAcquire")
	require.Nil(t, h)
	h, err = l.Acquire(done)
	require.ErrorIs(t, err, context.Canceled, "Acquire")
	require.Nil(t, h)
	require.ErrorIs(t, l.Do(done, func(context.Context) error {
		t.Error("fn ran with a done ctx")
		return nil
	}), context.Canceled, "Do")
	mongolock.WaitBackground(e.p)
	require.Zero(t, e.count.commands.Load(), "commands sent with a done ctx")

	h = mustTryAcquire(t, ctx, l)
	mongolock.WaitBackground(e.p)
	before := e.count.named("update")
	err = h.Release(done)
	require.ErrorIs(t, err, context.Canceled, "Release")
	require.NotErrorIs(t, err, mongolock.ErrLockLost)
	require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
	require.False(t, closedNow(h.Lost()))
	require.True(t, closedNow(mongolock.LeaseUnkept(h)))
	mongolock.WaitBackground(e.p)
	require.Equal(t, int64(1), e.count.named("update")-before, "updates sent to free the lock")
	require.NoError(t, mustTryAcquire(t, ctx, e.other.Lock("done")).Release(ctx))
	require.NoError(t, h.Release(ctx), "a second Release")

	// With a waiter of this process: it gets the lock soon.
	h = mustTryAcquire(t, ctx, l)
	next := acquireInBackground(boundedCtx(t, 5*time.Second), l)
	awaitQueueLen(t, e.p, "done", 1)
	require.ErrorIs(t, h.Release(done), context.Canceled)
	require.NoError(t, <-next, "the waiter")
}

// Every operation on a client that was disconnected fails at once with an
// error that says so: it is not retried as an outage until ctx ends, not
// reported as contention, and fn never runs.
func TestOperationsOnADisconnectedClientFailAtOnceSayingSo(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c := testdb.NewClient(t)
	db := c.Database(testdb.Database(t).Name())
	// A short lease: the handle held when the client goes away is lost at
	// its next extension, which finds the client disconnected.
	p := newProvider(t, db, mongolock.WithExpiry(time.Second))
	h, err := p.Lock("before").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))

	after := newProvider(t, db) // does no I/O: fine
	// Acquire of "before" first waits, in this process's line, for the
	// handle that holds it here: until its next extension (1/3 s).
	for _, l := range []*mongolock.Lock{p.Lock("x"), after.Lock("x"), after.Lock("before")} {
		start := time.Now()
		_, errTry := l.TryAcquire(ctx)
		_, errAcq := l.Acquire(ctx)
		errDo := l.Do(ctx, func(context.Context) error {
			t.Error("fn ran on a disconnected client")
			return nil
		})
		for label, err := range map[string]error{"TryAcquire": errTry, "Acquire": errAcq, "Do": errDo} {
			require.ErrorIs(t, err, mongo.ErrClientDisconnected, label)
			require.NotErrorIs(t, err, mongolock.ErrNotAcquired, label)
			var le *mongolock.Error
			require.ErrorAs(t, err, &le, label)
			require.Equal(t, l.Name(), le.Name, label)
		}
		require.NoError(t, ctx.Err())
		require.Less(t, time.Since(start), 5*time.Second, "retried a closed client")
	}
	// The handle held when the client went away reports the loss, then
	// Release says so: the lock will expire on the server.
	select {
	case <-h.Lost():
	case <-ctx.Done():
		t.Fatal("a handle of a disconnected client was never reported lost")
	}
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	err = h.Release(ctx)
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	require.ErrorIs(t, err, mongo.ErrClientDisconnected, "the loss does not say why")
	require.NoError(t, h.Release(ctx))
}

// Many held locks.

func TestADeletedLockAmongManyLosesOnlyItsOwnHandle(t *testing.T) {
	const n = 50
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	p := newProvider(t, ownClient(t, db, nil),
		mongolock.WithExpiry(2*time.Second), mongolock.WithExtensionCadence(200*time.Millisecond))
	handles := make([]*mongolock.Handle, n)
	var err error
	for i := range handles {
		handles[i], err = p.Lock(fmt.Sprintf("one-of-many-%d", i)).TryAcquire(ctx)
		require.NoError(t, err)
	}
	_, err = db.Collection(mongolock.DefaultCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: "one-of-many-7"}})
	require.NoError(t, err)
	awaitClosed(t, handles[7].Lost(), 5*time.Second, "Lost of the handle whose document was deleted")
	// Two more cadences: the others stay held.
	deadline := time.Now().Add(400 * time.Millisecond)
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

// Do: fn runs with the lock held, and the lock is released afterwards.

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

// Do with a nil function is an error, before anything is acquired.
func TestDoWithANilFunctionIsAnError(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 20*time.Second)
	l := e.p.Lock("nil-fn")
	err := l.Do(ctx, nil)
	require.ErrorContains(t, err, "nil function")
	requireInvalid(t, err, "do")
	h, err := l.TryAcquire(ctx) // nothing was left held
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

// Orphaned acquisitions.

// An attempt cut short by its ctx after the request was sent may still have
// taken the lock on the server; nobody gets a handle for it, so the library
// must free it in the background. With a 30s lease, a missed cleanup shows as a
// lock that another client cannot take for 30s; the test allows the cleanup a
// few seconds.
//
// The cleanup must not be overtaken by the attempt it cleans up after: the
// driver closes the connection of a cut-short request, but the server still
// executes the request it has read, possibly after a cleanup sent on another
// connection has found nothing to release.
func TestCancelledAttemptsLeaveNoOrphanedAcquisition(t *testing.T) {
	const (
		trials       = 100
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
	require.NotZero(t, orphaned, "no attempt was cut short after the server acted: the test did not test the cleanup of orphaned acquisitions")
}

// An attempt applied on the server whose caller stopped waiting for it (its
// ctx ended) is released by the library: once its late reply is in, or,
// where no reply ever comes, once the library stops waiting for one. The
// lock is free long before its lease would end. (The request overtaken on
// the wire by its cleanup: TestCancelledAttemptsLeaveNoOrphanedAcquisition.)
func TestAnAttemptAppliedAfterItsCallerGaveUpIsReleased(t *testing.T) {
	for _, c := range []struct {
		what  string
		reply time.Duration // how long its reply takes
	}{
		{"reply late", 100 * time.Millisecond},
		{"reply never", time.Hour},
	} {
		for _, try := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/try=%v", c.what, try), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const expiry = 30 * time.Second
					ctx := t.Context()
					db := newMemDB(t)
					p, network := db.process(mongolock.WithExpiry(expiry))
					rival, _ := db.process()
					h := mustTryAcquire(t, ctx, p.Lock("orphan")) // the document exists: one statement per attempt
					require.NoError(t, h.Release(ctx))
					token := func() int64 { return db.doc(mongolock.DefaultCollection, "orphan").Lookup("fencingToken").Int64() }
					before := token()

					network.Delay(c.reply)
					actx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
					defer cancel()
					var err error
					if try {
						_, err = p.Lock("orphan").TryAcquire(actx)
					} else {
						_, err = p.Lock("orphan").Acquire(actx)
					}
					require.ErrorIs(t, err, context.DeadlineExceeded)
					require.Greater(t, token(), before, "the attempt was applied")
					gaveUp := time.Now()
					network.Delay(0)

					var got *mongolock.Handle
					pollUntil(t, expiry/2, "the orphaned acquisition released", func() bool {
						got, err = rival.Lock("orphan").TryAcquire(ctx)
						if err != nil {
							require.ErrorIs(t, err, mongolock.ErrNotAcquired)
						}
						return err == nil
					})
					t.Logf("released %v after the caller gave up", time.Since(gaveUp))
					require.NoError(t, got.Release(ctx))
				})
			})
		}
	}
}

// Fencing tokens: per name, every acquisition's token is greater than every
// earlier one, whatever happened in between.

// tokenLog records the tokens of successive acquisitions of one name and
// checks that each one outranks all before it.
type tokenLog struct {
	t      *testing.T
	tokens []int64
}

func (l *tokenLog) add(token int64, how string) {
	l.t.Helper()
	if n := len(l.tokens); n > 0 {
		require.Greater(l.t, token, l.tokens[n-1], "the token after %s does not outrank the one before (all so far: %v)", how, l.tokens)
	}
	l.tokens = append(l.tokens, token)
}

// requireTokenInDocument checks that the document holds h's acquisition with
// h's token, stored as an int64.
func requireTokenInDocument(t *testing.T, e *lockEnv, h *mongolock.Handle) {
	t.Helper()
	doc := rawLockDoc(t, e.coll, h.Name())
	v := doc.Lookup("fencingToken")
	require.Equal(t, bson.TypeInt64, v.Type, "fencingToken is stored as %v", v.Type)
	require.Equal(t, h.FencingToken(), v.Int64())
}

func TestFencingTokenIncreasesAfterReleaseAndReacquire(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	log := &tokenLog{t: t}
	for i := range 5 {
		p := e.p
		if i%2 == 1 {
			p = e.other
		}
		h, err := p.Lock("reacquired").TryAcquire(ctx)
		require.NoError(t, err)
		requireTokenInDocument(t, e, h)
		log.add(h.FencingToken(), "a release")
		require.NoError(t, h.Release(ctx))

		// Release keeps the document and its token; it only ends the lease.
		doc := rawLockDoc(t, e.coll, "reacquired")
		require.Equal(t, h.FencingToken(), doc.Lookup("fencingToken").Int64())
		_, hasHolder := doc.Lookup("lockId").StringValueOK()
		require.False(t, hasHolder, "the released document still names a holder: %v", doc)
	}
}

func TestFencingTokenIncreasesAfterAnExpiryTakeover(t *testing.T) {
	t.Run("lease set to the past", func(t *testing.T) {
		e := newLockEnv(t, mongolock.WithExpiry(30*time.Second))
		ctx := boundedCtx(t, 30*time.Second)
		log := &tokenLog{t: t}
		h1, err := e.p.Lock("expired").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h1.FencingToken(), "the first acquisition")

		// As if h1 had stalled past its lease: expiresAt is in the past.
		_, err = e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "expired"}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: time.Now().Add(-time.Hour)}}}})
		require.NoError(t, err)
		h2, err := e.other.Lock("expired").TryAcquire(ctx)
		require.NoError(t, err, "an expired lease was not taken over")
		log.add(h2.FencingToken(), "an expiry takeover")
		requireTokenInDocument(t, e, h2)

		require.ErrorIs(t, h1.Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, h2.Release(ctx))
	})

	t.Run("holder stopped extending", func(t *testing.T) {
		e := newLockEnv(t, mongolock.WithExpiry(shortExpiry), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
		ctx := boundedCtx(t, 30*time.Second)
		log := &tokenLog{t: t}
		c := testdb.NewClient(t)
		holder := newProvider(t, c.Database(e.db.Name()), mongolock.WithExpiry(shortExpiry))
		h1, err := holder.Lock("abandoned").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h1.FencingToken(), "the first acquisition")

		// The holder's process goes away: it cannot extend any more.
		require.NoError(t, c.Disconnect(ctx))
		h2, err := e.other.Lock("abandoned").Acquire(ctx)
		require.NoError(t, err)
		log.add(h2.FencingToken(), "an expiry takeover")
		requireTokenInDocument(t, e, h2)

		require.ErrorIs(t, h1.Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, h2.Release(ctx))
	})
}

// The floor toLong($$NOW) * 1024 is what makes a re-created document outrank
// the deleted one. $$NOW has millisecond resolution, so the floor can only
// outrank acquisitions made in an earlier millisecond: a document deleted
// and re-created within the millisecond of its last acquisition can give
// the same token again (seen here: about 1 in 20 tight acquire, delete,
// acquire sequences without -race). Every deletion that happens outside a
// test is at least that late (the TTL monitor deletes only documents whose
// lease of at least 100ms has ended), so the tests below let a millisecond
// pass, on the client's clock, between an acquisition and the deletion of
// its document.
func afterTheMillisecondOf(acquired time.Time) {
	time.Sleep(time.Until(acquired.Add(2 * time.Millisecond)))
}

func TestFencingTokenIncreasesAfterTheDocumentIsDeleted(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	log := &tokenLog{t: t}
	deleteDoc := func() {
		t.Helper()
		res, err := e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "deleted"}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.DeletedCount)
	}

	// Build up a few tokens by +1 steps first, so that a reset to a floor
	// that is merely close to the old tokens would show.
	for range 10 {
		h, err := e.p.Lock("deleted").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h.FencingToken(), "a release")
		require.NoError(t, h.Release(ctx))
	}

	for i := range 20 {
		p := e.p
		if i%2 == 1 {
			p = e.other
		}
		h, err := p.Lock("deleted").TryAcquire(ctx)
		require.NoError(t, err)
		acquired := time.Now()
		log.add(h.FencingToken(), "a deletion of the free document")
		requireTokenInDocument(t, e, h)
		if i%4 == 0 {
			// Deleted while held: the holder loses it.
			afterTheMillisecondOf(acquired)
			deleteDoc()
			awaitClosed(t, h.Lost(), lossDetectionBound, "Lost after the document was deleted")
			require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
			continue
		}
		require.NoError(t, h.Release(ctx))
		afterTheMillisecondOf(acquired)
		deleteDoc()
	}
}

// The line: Acquire calls of one process wait in line, only the first asks
// the server, and a release hands the lock to the next in one round trip.

// Acquire is not reentrant: asking again for a lock this process holds
// waits behind its own handle, until ctx ends, and then reports the lock as
// held by someone else; once the handle is released, it is free again.
func TestAcquireOfALockThisProcessHoldsWaitsBehindItsOwnHandle(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	l := e.p.Lock("again")
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.p.Lock("again").Acquire(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "it waited behind the process's own handle")
	require.NoError(t, h.Release(ctx))
	h, err = l.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

func TestLocalWaitersAcquireInArrivalOrder(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	l := e.p.Lock("fifo")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	const n = 8
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := l.Acquire(ctx)
			if !assert(t, err == nil, "waiter %d: %v", i, err) {
				return
			}
			order <- i
			_ = h.Release(ctx)
		}()
		awaitQueueLen(t, e.p, "fifo", i+1) // i+1 in line: the next arrives after
	}
	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, got)
	require.Zero(t, mongolock.QueueNames(e.p), "no queue is kept once nobody waits or holds")
}

func TestLocalWaitersSendNothingWhileAHandleOfTheirProcessHolds(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Short sleeps: a waiter that polled would poll often.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 2*time.Millisecond))
	l := e.p.Lock("quiet")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	waitAll := acquireAllInBackground(t, ctx, l, 5)
	awaitQueueLen(t, e.p, "quiet", 5)
	before := e.count.started.Load()
	// However long the holder holds, its own process's waiters stay silent.
	// Give them time in which polling would have sent dozens of attempts.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.Equal(t, before, e.count.started.Load(), "a waiter polled the database while the lock was held here")
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, holder.Release(ctx))
	waitAll()
}

func TestOnlyTheHeadOfTheLinePollsWhileAnotherProcessHolds(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 3*time.Millisecond))
	holder, err := e.other.Lock("remote").TryAcquire(ctx)
	require.NoError(t, err)

	waitAll := acquireAllInBackground(t, ctx, e.p.Lock("remote"), 10)
	awaitQueueLen(t, e.p, "remote", 10)
	// Let the head poll a good number of times.
	start := e.count.started.Load()
	pollUntil(t, 20*time.Second, "50 attempts of the head of the line",
		func() bool { return e.count.started.Load() >= start+50 })
	require.NoError(t, holder.Release(ctx))
	waitAll()
	require.EqualValues(t, 1, e.count.maxInFlight.Load(), "more than one waiter of this process talked to the database at once")
}

func TestLocalReleaseWakesTheNextWaiterAtOnce(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Sleeps far longer than the test's deadline: only a wake-up can let
	// the waiter in in time.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("handoff")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		h, err := l.Acquire(actx)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	awaitQueueLen(t, e.p, "handoff", 1)
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
}

func TestLossWakesTheNextLocalWaiter(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour),
		mongolock.WithExpiry(time.Second))
	l := e.p.Lock("lossy")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)
	got := acquireInBackground(ctx, l)
	awaitQueueLen(t, e.p, "lossy", 1)
	// Someone deletes the document: the holder loses the lock at its next
	// extension, and its loss must let the waiter try (and succeed).
	_, err = e.coll.DeleteOne(ctx, map[string]string{"_id": "lossy"})
	require.NoError(t, err)
	awaitClosed(t, holder.Lost(), 10*time.Second, "Lost after the document was deleted")
	require.NoError(t, <-got)
	require.Error(t, holder.Release(ctx))
}

func TestAWaiterWhoseContextEndsLeavesTheLineWithoutDisturbingOthers(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("leave")
	holder, err := l.TryAcquire(ctx)
	require.NoError(t, err)

	results := make([]chan error, 3)
	cancels := make([]context.CancelFunc, 3)
	for i := range results {
		results[i] = make(chan error, 1)
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		go func() {
			h, err := l.Acquire(wctx)
			if err == nil {
				err = h.Release(ctx)
			}
			results[i] <- err
		}()
		awaitQueueLen(t, e.p, "leave", i+1)
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	cancels[1]() // the middle one gives up
	err = <-results[1]
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "it waited behind a holder the whole time")
	awaitQueueLen(t, e.p, "leave", 2)

	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-results[0])
	require.NoError(t, <-results[2])
	require.Zero(t, mongolock.QueueNames(e.p))
}

// Release with a goroutine of the same process waiting: one round trip
// releases the lock and acquires it for the waiter, with a higher token.
func TestReleaseHandsTheLockToTheNextLocalWaiterInOneRoundTrip(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("handover")
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	next := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := l.Acquire(ctx)
		if assert(t, err == nil, "waiter: %v", err) {
			next <- h
		}
	}()
	awaitQueueLen(t, e.p, "handover", 1)
	mongolock.WaitBackground(e.p) // the TTL index is in place
	before := e.count.commands.Load()

	require.NoError(t, h.Release(ctx))
	var n *mongolock.Handle
	select {
	case n = <-next:
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lock")
	}
	require.Equal(t, int64(1), e.count.commands.Load()-before, "commands for release + next acquisition")
	require.Greater(t, n.FencingToken(), h.FencingToken())
	require.ErrorIs(t, h.Context().Err(), context.Canceled)

	// The waiter holds it on the server, not just locally.
	_, err = e.other.Lock("handover").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, n.Release(ctx))
	r, err := e.other.Lock("handover").TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, r.FencingToken(), n.FencingToken())
	require.NoError(t, r.Release(ctx))
}

// A waiter whose ctx ends while the lock is being handed to it leaves no
// lock held behind: whatever was handed over is released.
func TestAHandOverToAWaiterThatGaveUpIsReleased(t *testing.T) {
	ctx := boundedCtx(t, 2*time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	l := e.p.Lock("abandoned")
	const trials = 50
	var handed, gaveUp int
	for i := range trials {
		h, err := l.Acquire(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			h, err := l.Acquire(wctx)
			if err == nil {
				err = h.Release(ctx)
			}
			got <- err
		}()
		awaitQueueLen(t, e.p, "abandoned", 1)
		// Races with the hand-over, ending at varied points of it.
		stop := time.AfterFunc(time.Duration(i%10)*200*time.Microsecond, cancel)
		require.NoError(t, h.Release(ctx))
		switch err := <-got; {
		case err == nil:
			handed++
		case errors.Is(err, context.Canceled):
			gaveUp++
		default:
			t.Fatalf("waiter: %v", err)
		}
		stop.Stop()
		cancel()
		// Free again soon, far sooner than the 30 s lease of an orphan.
		pollUntil(t, 5*time.Second, "the lock free after the waiter gave up", func() bool {
			r, err := e.other.Lock("abandoned").TryAcquire(ctx)
			return err == nil && r.Release(ctx) == nil
		})
	}
	t.Logf("%d trials: waiter took the lock %d times, gave up %d times", trials, handed, gaveUp)
}

// Hand-overs within a process stop when another process's turn has come:
// after at most maxStreak acquisitions in a row by one process, a release
// with local waiters frees the lock instead, and the waiting process gets it.
func TestHandOversGiveWayToAWaitingProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxStreak = mongolock.TurnLength
		// Hand-overs that never gave way would go on until this ends.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		d := newMemDB(t)
		p, _, other := d.holderAndRival(mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
		l := p.Lock("turns")
		first, err := l.Acquire(ctx)
		require.NoError(t, err)
		// The other process waits, and is in the document's line.
		rivalGot := make(chan *mongolock.Handle, 1)
		go func() {
			h, err := other.Lock("turns").Acquire(ctx)
			if assert(t, err == nil, "rival: %v", err) {
				rivalGot <- h
			}
		}()
		d.awaitClaim(other, "turns")

		// Local goroutines keep the lock busy, handing it over each release.
		var local atomic.Int32
		local.Add(1) // first
		busy, stop := context.WithCancel(ctx)
		defer stop()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for {
					h, err := l.Acquire(busy)
					if err != nil {
						return
					}
					local.Add(1)
					time.Sleep(time.Millisecond) // held a while, in the bubble's time
					if err := h.Release(ctx); !assert(t, err == nil, "release: %v", err) {
						return
					}
				}
			})
		}
		awaitQueueLen(t, p, "turns", 3)
		require.NoError(t, first.Release(ctx))
		var r *mongolock.Handle
		select {
		case r = <-rivalGot:
		case <-ctx.Done():
			t.Fatal("the waiting process never got its turn")
		}
		n := local.Load()
		stop()
		wg.Wait()
		require.NoError(t, r.Release(ctx))
		require.LessOrEqual(t, n, int32(maxStreak), "acquisitions by one process while another waited first in line")
		require.GreaterOrEqual(t, n, int32(2), "no hand-over happened")
	})
}

// Release notifications: a release event wakes the waiters of a lock held
// by another process.

func TestAReleaseEventWakesAWaiterAtOnce(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	// Sleeps far longer than the test: only the event can let the waiter in.
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	events := channelReleaseSource(e.p)
	holder, err := e.other.Lock("evented").TryAcquire(ctx)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := acquireInBackground(wctx, e.p.Lock("evented"))
	// Its first attempt was refused; now it sleeps.
	pollUntil(t, 10*time.Second, "the waiter's first attempt", e.count.idle)
	pollUntil(t, 10*time.Second, "a release source running while a waiter waits",
		func() bool { return mongolock.Notifying(e.p) })

	require.NoError(t, holder.Release(ctx))
	events <- "some-other-lock" // not its lock: must not matter
	events <- "evented"
	require.NoError(t, <-got, "the waiter did not acquire after the release event")
	pollUntil(t, 10*time.Second, "the release source stopped without waiters",
		func() bool { return !mongolock.Notifying(e.p) })
}

func TestWaitersPollWhenReleaseEventsAreUnavailable(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	mongolock.SetReleaseSource(e.p, func(context.Context, func(string)) error {
		return errors.New("no change streams here")
	})
	holder, err := e.other.Lock("polled").TryAcquire(ctx)
	require.NoError(t, err)
	got := acquireInBackground(ctx, e.p.Lock("polled"))
	pollUntil(t, 10*time.Second, "the waiter's second attempt", func() bool { return e.count.started.Load() >= 2 })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
	require.False(t, mongolock.Notifying(e.p))
}

// The real thing: a change stream wakes a waiter whose sleeps are far
// longer than the test.
func TestChangeStreamWakesAWaiterInAnotherProcess(t *testing.T) {
	testdb.Require(t, testdb.ChangeStreams)
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Hour, time.Hour))
	holder, err := e.other.Lock("streamed").TryAcquire(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := acquireInBackground(wctx, e.p.Lock("streamed"))
	pollUntil(t, 10*time.Second, "the waiter's first attempt", e.count.idle)
	pollUntil(t, 10*time.Second, "the change stream open", func() bool { return mongolock.Notifying(e.p) })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got, "the change stream did not wake the waiter")
}

// The source runs only while some waiter has found the lock held by another
// process: a free lock, or one held in this process, needs no events.
func TestReleaseSourceStartsOnlyForWaitersOfAnotherProcess(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t, mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	var starts atomic.Int32
	mongolock.SetReleaseSource(e.p, func(ctx context.Context, _ func(string)) error {
		starts.Add(1)
		<-ctx.Done()
		return nil
	})
	l := e.p.Lock("lazy")
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	got := acquireInBackground(ctx, l) // waits behind a handle of this process
	awaitQueueLen(t, e.p, "lazy", 1)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-got)
	require.Zero(t, starts.Load(), "the source started with no foreign holder")

	holder, err := e.other.Lock("lazy").TryAcquire(ctx)
	require.NoError(t, err)
	a, b := acquireInBackground(ctx, l), acquireInBackground(ctx, l)
	pollUntil(t, 10*time.Second, "the release source running", func() bool { return mongolock.Notifying(e.p) })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-a)
	require.NoError(t, <-b)
	require.Equal(t, int32(1), starts.Load(), "one source per collection, however many waiters")
	pollUntil(t, 10*time.Second, "the release source stopped without waiters",
		func() bool { return !mongolock.Notifying(e.p) })
}

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
// behind: the state kept per collection of a client goes with the client,
// and a provider holds no memory once its handles are released. On the
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
	heap := func(gone []weak.Pointer[mongolock.Provider]) uint64 {
		pollUntil(t, 30*time.Second, "the providers made per call collected", func() bool {
			runtime.GC()
			return !slices.ContainsFunc(gone, func(w weak.Pointer[mongolock.Provider]) bool { return w.Value() != nil })
		})
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// A leak grows the heap in every round; what the rest of the process
	// allocates meanwhile does not: one round of three under the bound
	// passes.
	before := heap(perCall(100))
	const calls = 300
	var perCallGrowth []int64
	for range 3 {
		after := heap(perCall(calls))
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
		prev := slog.Default()
		slog.SetDefault(slog.New(slog.NewTextHandler(&defaults, nil)))
		t.Cleanup(func() { slog.SetDefault(prev) })
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

// Every acquisition records its owner (WithOwner, by default host/pid) and
// the value it carries; a plain acquisition carries none, and a refused
// attempt changes neither.
func TestAcquisitionsRecordTheirOwnerAndValue(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	svc := newProvider(t, e.db, mongolock.WithOwner("billing-7f9c"))
	host, err := os.Hostname()
	require.NoError(t, err)
	defaultOwner := fmt.Sprintf("%s/%d", host, os.Getpid())
	field := func(key string) (string, bool) {
		return rawLockDoc(t, e.coll, "owned").Lookup(key).StringValueOK()
	}

	h := mustTryAcquire(t, ctx, svc.Lock("owned"))
	owner, _ := field("owner")
	require.Equal(t, "billing-7f9c", owner)
	_, hasValue := field("value")
	require.False(t, hasValue, "a plain lock carries no value")
	require.NoError(t, h.Release(ctx))

	h = mustTryAcquire(t, ctx, mongolock.LockWithValue(e.p, "owned", "http://10.0.0.7:8080"))
	owner, _ = field("owner")
	value, _ := field("value")
	require.Equal(t, defaultOwner, owner)
	require.Equal(t, "http://10.0.0.7:8080", value)
	_, err = svc.Lock("owned").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	owner, _ = field("owner")
	value, _ = field("value")
	require.Equal(t, defaultOwner, owner, "a refused attempt changed the owner")
	require.Equal(t, "http://10.0.0.7:8080", value, "a refused attempt changed the value")
	require.NoError(t, h.Release(ctx))

	h = mustTryAcquire(t, ctx, svc.Lock("owned"))
	_, hasValue = field("value")
	require.False(t, hasValue, "the previous holder's value outlived its acquisition")
	require.NoError(t, h.Release(ctx))
}

// Inspect reports a lock's state by the server's clock: held with its owner
// and value, free after release (the token kept), and ErrNoLock for a name
// never used.
func TestInspectReportsALocksState(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	svc := newProvider(t, e.db, mongolock.WithOwner("billing-7f9c"))
	_, err := e.p.Inspect(ctx, "inspected")
	require.ErrorIs(t, err, mongolock.ErrNoLock)

	h := mustTryAcquire(t, ctx, mongolock.LockWithValue(svc, "inspected", "leader-a"))
	info, err := e.p.Inspect(ctx, "inspected")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, "inspected", info.Name)
	require.Equal(t, "billing-7f9c", info.Owner)
	require.Equal(t, "leader-a", info.Value)
	require.Equal(t, h.FencingToken(), info.FencingToken)
	require.True(t, info.ExpiresAt.After(info.ServerTime), "a held lease ends after the server's now")
	require.False(t, info.AcquiredAt.After(info.ServerTime))

	require.NoError(t, h.Release(ctx))
	info, err = e.p.Inspect(ctx, "inspected")
	require.NoError(t, err)
	require.False(t, info.Held)
	require.Empty(t, info.Owner, "a free lock has no owner")
	require.Equal(t, h.FencingToken(), info.FencingToken, "the token is kept for the next holder")
}

// Owners and values are stored as given, also when they look like field
// paths or variables to the server's expressions.
func TestOwnersAndValuesThatLookLikeExpressionsAreStoredAsGiven(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	e := newLockEnv(t)
	for _, s := range []string{"$weird", "$$NOW", "$_attempt.lockId", "{$gt: 1}"} {
		p := newProvider(t, e.db, mongolock.WithOwner(s))
		h := mustTryAcquire(t, ctx, mongolock.LockWithValue(p, "literal", s))
		doc := rawLockDoc(t, e.coll, "literal")
		owner, _ := doc.Lookup("owner").StringValueOK()
		value, _ := doc.Lookup("value").StringValueOK()
		require.Equal(t, s, owner, "owner")
		require.Equal(t, s, value, "value")
		require.NoError(t, h.Release(ctx))
	}
}

// A Handle of every kind tells when it was acquired by the server's clock
// (as inspection shows it), with which owner, and until when its lease is
// known to last, which each extension moves on.
func TestHandlesTellTheirAcquisitionOwnerAndLeaseEnd(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		const name = "meta"
		ctx := boundedCtx(t, time.Minute)
		db := testdb.Database(t)
		p := newProvider(t, ownClient(t, db, nil), mongolock.WithOwner("meta-owner"), mongolock.WithExpiry(time.Second))
		sent := time.Now()
		h, err := r.this(p, name).acquire(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, h.Release(ctx)) }()
		require.Equal(t, "meta-owner", h.Owner())
		var inspected time.Time
		switch {
		case r.kind == "semaphore":
			info, err := p.Semaphore(name, 2).Inspect(ctx)
			require.NoError(t, err)
			inspected = info.Holders[0].AcquiredAt
		case r.slots:
			info, err := p.RWLock(name).Inspect(ctx)
			require.NoError(t, err)
			inspected = info.Holders[0].AcquiredAt
		default:
			info, err := p.Inspect(ctx, name)
			require.NoError(t, err)
			inspected = info.AcquiredAt
		}
		require.True(t, h.AcquiredAt().Equal(inspected), "acquired at %v; inspection shows %v", h.AcquiredAt(), inspected)
		first := h.LeaseEnd()
		require.False(t, first.Before(sent.Add(time.Second)), "lease end %v, before the acquisition's sending %v + the expiry", first, sent)
		require.False(t, first.After(time.Now().Add(time.Second)), "lease end %v, after now + the expiry", first)
		pollUntil(t, 10*time.Second, "an extension moving the lease's end on", func() bool { return h.LeaseEnd().After(first) })
	})
}
