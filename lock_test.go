package mongolock_test

// The behaviour of Lock and its Handle (lock.go, acquire.go, handle.go,
// mutex.go): the acquire path, names, the lock document, loss, Do, misuse
// and orphaned attempts, as one process sees it, with a second client where
// a test needs a rival. Every other area's tests are beside its source, in the
// file named after it.
// Several tests are ported from DistributedLock.MongoDB's own test suite.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
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
			require.NoError(t, l.Release(ctx))
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

// An Acquire of a held lock whose sleeps between attempts are longer than
// its timeout cuts its sleep short at the deadline rather than finish it,
// and returns ErrNotAcquired with DeadlineExceeded. Over the model, in
// simulated time: it returns at its deadline exactly.
func TestAcquireTimesOutOnHeldLockWithDeadlineExceededAndErrNotAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		holderP, _ := d.process()
		holder := releaseAtCleanup(t, mustAcquire(t, ctx, holderP.Lock("timeout")))
		p, net := d.process(mongolock.WithBusyWaitSleep(800*time.Millisecond, 1500*time.Millisecond))
		net.Delay(time.Millisecond) // a round trip takes time, as a server's does

		const timeout = time.Second
		wctx, wcancel := context.WithTimeout(ctx, timeout)
		defer wcancel()
		start := time.Now()
		h, err := p.Lock("timeout").Acquire(wctx)
		releaseAtCleanup(t, h)
		require.Nil(t, h)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.Equal(t, timeout, time.Since(start), "returned other than at its deadline")
		require.NoError(t, holder.Release(ctx))
	})
}

// An Acquire's first attempt, the statement for a lock nobody waits for, is
// refused by a held lock: that reply shows the lock held, so an Acquire
// whose deadline falls in the claiming attempt right after it returns
// ErrNotAcquired with DeadlineExceeded.
func TestAnAcquireEndedAfterOnlyItsFirstRefusalIsErrNotAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db := newMemDB(t)
		holder, _ := db.process()
		p, network := db.process()
		for range mongolock.CalmWaits { // waits nobody refused: the next sends the unclaimed statement first
			require.NoError(t, mustAcquire(t, ctx, p.Lock("held")).Release(ctx))
		}
		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock("held")))
		var unclaimedSent atomic.Bool
		mongolock.SetStatementHook(p, func(unclaimed bool) {
			if unclaimed {
				unclaimedSent.Store(true)
			} else {
				network.Delay(time.Hour) // the claiming attempt's reply comes after the deadline
			}
		})
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := p.Lock("held").Acquire(wctx)
		network.Delay(0)
		require.True(t, unclaimedSent.Load(), "the first attempt was not the unclaimed statement")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a reply had shown the lock held")
		require.NoError(t, h.Release(ctx))
	})
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
		if !utf8.ValidString(n) { // refused at once, as New can
			require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
			require.Nil(t, l)
			continue
		}
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
	// Frequent extensions (batched by $in over the names), each of which
	// must match every name; a lease long enough that a machine loaded
	// with other test runs, stalling a batch for seconds, loses nothing.
	const expiry = conformance.StallProofExpiry
	e := newLockEnv(t, append(slices.Clone(stallProof), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))...)

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
			require.Equal(t, !utf8.ValidString(n.name), errors.Is(err, mongolock.ErrInvalidArgument), "%s: refused as not UTF-8", n.label)
			t.Logf("%s: refused: %v", n.label, err)
			refused = append(refused, n.label)
			continue
		}
		releaseAtCleanup(t, h)
		handles[n.name] = h
		require.Equal(t, n.name, h.Name(), n.label)
		require.True(t, utf8.ValidString(n.name), "%s: a name that is not UTF-8 was acquired", n.label)
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
	// waiting (which writes the name into the line of waiting processes:
	// each document shows the claim), all names waited for at once. The
	// waits end once every claim has been renewed, so that each waiter has
	// had the reply to the attempt that made it: a deadline could end one
	// before its first reply on a loaded machine, when nothing is known.
	waited := map[string]<-chan error{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, n := range hostileNames {
		if handles[n.name] == nil {
			continue
		}
		_, err := e.other.Lock(n.name).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "%s: a second holder", n.label)
		waited[n.name] = acquireInBackground(wctx, e.other.Lock(n.name))
	}
	claimed := map[string]time.Time{}
	pollUntil(t, 20*time.Second, "every waiter's claim, renewed", func() bool {
		renewed := 0
		for name := range waited {
			until, ok := rawLockDoc(t, e.coll, name).Lookup("waitingUntil").TimeOK()
			switch first, seen := claimed[name]; {
			case !ok:
			case !seen:
				claimed[name] = until
			case !until.Equal(first):
				renewed++
			}
		}
		return renewed == len(waited)
	})
	cancel()
	for _, n := range hostileNames {
		if w := waited[n.name]; w != nil {
			err := <-w
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "%s: a second holder, waiting", n.label)
			require.ErrorIs(t, err, context.Canceled, n.label)
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

// The lock document.

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

// The handle: a loss closes Lost and ends Context.

func TestHandleLostClosesWhenDocumentIsDeleted(t *testing.T) {
	conformance.Over(t, handleLostWhenDeleted)
}

func handleLostWhenDeleted(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, _, within := lossWatch(e)
	h, err := p.Lock("deleted").TryAcquire(ctx)
	require.NoError(t, err)

	e.Remove(mongolock.DefaultCollection, "deleted")
	deleted := time.Now()

	lost := awaitClosed(t, h.Lost(), within, "Lost after the document was deleted")
	t.Logf("loss signalled %v after the deletion", lost.Sub(deleted))

	hctx := h.Context()
	awaitClosed(t, hctx.Done(), within, "Context after loss")
	require.ErrorIs(t, context.Cause(hctx), mongolock.ErrLockLost)
	require.ErrorIs(t, hctx.Err(), context.Canceled)
	awaitClosed(t, mongolock.LeaseUnkept(h), within, "the extension goroutine after loss")

	err = h.Release(ctx)
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	var lerr *mongolock.Error
	require.ErrorAs(t, err, &lerr)
	require.Equal(t, "release", lerr.Op)
	require.Equal(t, "deleted", lerr.Name)
	require.NoError(t, h.Release(ctx), "a second Release")

	// Release after loss must not have written anything: nobody re-created
	// the document.
	require.Nil(t, e.Doc(mongolock.DefaultCollection, "deleted"))
}

func TestHandleLostClosesWhenSomeoneElseTakesOver(t *testing.T) {
	conformance.Over(t, handleLostWhenTaken)
}

func handleLostWhenTaken(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, other, within := lossWatch(e)
	h, err := p.Lock("taken").TryAcquire(ctx)
	require.NoError(t, err)

	// Someone else (another library, a person) now holds the lock: its
	// lockId is in the document, with a lease of a minute.
	const intruder = "0123456789abcdef0123456789abcdef"
	e.Edit(mongolock.DefaultCollection, "taken", bson.D{{Key: "$set", Value: bson.D{
		{Key: "lockId", Value: intruder},
		{Key: "expiresAt", Value: time.Now().Add(time.Minute)},
	}}})
	taken := time.Now()

	lost := awaitClosed(t, h.Lost(), within, "Lost after a takeover")
	t.Logf("loss signalled %v after the takeover", lost.Sub(taken))
	awaitClosed(t, h.Context().Done(), within, "Context after loss")
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	awaitClosed(t, mongolock.LeaseUnkept(h), within, "the extension goroutine after loss")

	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	require.NoError(t, h.Release(ctx))

	// The stale holder neither extended nor released the intruder's lock.
	doc := e.Doc(mongolock.DefaultCollection, "taken")
	require.Equal(t, intruder, doc.Lookup("lockId").StringValue())
	_, err = other.Lock("taken").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
}

// Whoever sees Lost closed must find Context done, with the cause
// ErrLockLost: code that wakes on Lost and then asks Context why must not
// be told "not done".
func TestHandleContextIsDoneWithErrLockLostOnceLostIsClosed(t *testing.T) {
	conformance.Over(t, contextDoneOnceLost)
}

func contextDoneOnceLost(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, _ := e.Process(mongolock.WithExpiry(shortExpiry))
	l := p.Lock("ordered")
	const trials = 100
	notDone := 0
	for trial := range trials {
		h, err := l.TryAcquire(ctx)
		require.NoError(t, err)
		e.Remove(mongolock.DefaultCollection, "ordered")
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
// and the lock is freed in the background with one operation, or handed to
// a waiter of this process.
func TestADoneContextSendsNothingAndReleaseStillFreesTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		ctx := d.Ctx
		p, net := d.process()
		other, _ := d.process()
		done, cancel := context.WithCancel(ctx)
		cancel()
		l := p.Lock("done")
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
		synctest.Wait()
		require.Zero(t, net.Sent(), "operations sent with a done ctx")

		h = mustTryAcquire(t, ctx, l)
		synctest.Wait()
		before := net.Sent()
		err = h.Release(done)
		require.ErrorIs(t, err, context.Canceled, "Release")
		require.NotErrorIs(t, err, mongolock.ErrLockLost)
		require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
		require.False(t, closedNow(h.Lost()))
		require.True(t, closedNow(mongolock.LeaseUnkept(h)))
		synctest.Wait()
		require.Equal(t, int64(1), net.Sent()-before, "operations sent to free the lock")
		require.NoError(t, mustTryAcquire(t, ctx, other.Lock("done")).Release(ctx))
		require.NoError(t, h.Release(ctx), "a second Release")

		// With a waiter of this process: it gets the lock.
		h = mustTryAcquire(t, ctx, l)
		next := acquireInBackground(ctx, l)
		synctest.Wait()
		require.Equal(t, 1, mongolock.QueueLen(p, "done"))
		require.ErrorIs(t, h.Release(done), context.Canceled)
		require.NoError(t, <-next, "the waiter")
	})
}

// On the wire too, a done ctx starts no command, of an acquisition or an
// inspection or a forced release, not even the TTL index of the provider's
// first call, which the model does not keep, nor the check of the
// collection's collation: the driver starts a command whose ctx is
// done (command monitors see it start, then fail before it is written)
// when its client already has a server at hand, so the client here has
// one first.
func TestADoneContextSendsNothingOnTheWire(t *testing.T) {
	count := &commandCounter{}
	db := ownClient(t, testdb.Database(t), count)
	live := boundedCtx(t, 10*time.Second)
	require.NoError(t, db.Client().Ping(live, nil))
	p := newProvider(t, db)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	l := p.Lock("done")
	_, err := l.TryAcquire(done)
	require.ErrorIs(t, err, context.Canceled, "TryAcquire, the provider's first call")
	mongolock.WaitBackground(p)
	count.mu.Lock()
	require.Equal(t, map[string]int64{"ping": 1}, count.byNames, "commands sent: the ping, and nothing with a done ctx")
	count.mu.Unlock()

	// Once the collection has been checked, each operation's own statement
	// is not started either.
	require.NoError(t, mustTryAcquire(t, live, p.Lock("checked")).Release(live))
	require.NoError(t, must(p.Semaphore("checked", 2).TryAcquire(live)).Release(live))
	mongolock.WaitBackground(p)
	count.mu.Lock()
	before := maps.Clone(count.byNames)
	count.mu.Unlock()
	_, err = l.TryAcquire(done)
	require.ErrorIs(t, err, context.Canceled, "TryAcquire")
	_, err = l.Acquire(done)
	require.ErrorIs(t, err, context.Canceled, "Acquire")
	require.ErrorIs(t, l.Do(done, func(context.Context) error {
		t.Error("fn ran with a done ctx")
		return nil
	}), context.Canceled, "Do")
	_, err = p.Inspect(done, "done")
	require.ErrorIs(t, err, context.Canceled, "Inspect")
	for _, err := range p.Locks(done, "") {
		require.ErrorIs(t, err, context.Canceled, "Locks")
	}
	_, err = p.ForceRelease(done, "done")
	require.ErrorIs(t, err, context.Canceled, "ForceRelease")
	_, err = p.Semaphore("done", 2).Inspect(done)
	require.ErrorIs(t, err, context.Canceled, "Semaphore.Inspect")
	mongolock.WaitBackground(p)
	count.mu.Lock()
	defer count.mu.Unlock()
	require.Equal(t, before, count.byNames, "commands sent with a done ctx")
}

// Every operation on a client that was disconnected fails at once with an
// error that says so: it is not retried as an outage until ctx ends, not
// reported as contention, and fn never runs.
func TestOperationsOnADisconnectedClientFailAtOnceSayingSo(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c := testdb.NewClient(t)
	db := c.Database(testdb.Database(t).Name())
	// The handle held when the client goes away is lost at its next
	// extension, which finds the client disconnected: a quarter second
	// away, with a lease that a loaded machine's stall does not lose first.
	p := newProvider(t, db, stallProof...)
	h, err := p.Lock("before").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))

	after := newProvider(t, db) // does no I/O: fine
	// Acquire of "before" first waits, in this process's line, for the
	// handle that holds it here: until its next extension.
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
		// Far longer than a stall, far shorter than ctx: a retry as an
		// outage would last until ctx ends.
		require.Less(t, time.Since(start), 10*time.Second, "retried a closed client")
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
			conformance.Over(t, func(e *conformance.Env) {
				t, ctx := e.T, e.Ctx
				p, other, within := lossWatch(e)
				err := p.Lock("do-lost").Do(ctx, func(fctx context.Context) error {
					e.Remove(mongolock.DefaultCollection, "do-lost")
					awaitClosed(t, fctx.Done(), within, "fn's ctx after the document was deleted")
					require.ErrorIs(t, context.Cause(fctx), mongolock.ErrLockLost)
					return tc.returns(fctx)
				})
				require.ErrorIs(t, err, mongolock.ErrLockLost)
				for _, w := range tc.want {
					require.ErrorIs(t, err, w)
				}
				// Do did not re-create or hold anything: the lock is free.
				h, err := other.Lock("do-lost").TryAcquire(ctx)
				require.NoError(t, err)
				require.NoError(t, h.Release(ctx))
			})
		})
	}
}

func TestDoEndsFnsContextWhenCtxIsCancelled(t *testing.T) { conformance.Over(t, doEndsFnsContext) }

func doEndsFnsContext(e *conformance.Env) {
	t := e.T
	p, _ := e.Process()
	other, _ := e.Process()
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	err := p.Lock("do-cancel").Do(ctx, func(fctx context.Context) error {
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
	h, err := other.Lock("do-cancel").TryAcquire(tctx)
	require.NoError(t, err, "Do did not release the lock after ctx was cancelled")
	require.NoError(t, h.Release(tctx))
}

func TestDoReleasesWhenFnPanics(t *testing.T) { conformance.Over(t, doReleasesWhenFnPanics) }

func doReleasesWhenFnPanics(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, _ := e.Process()
	other, _ := e.Process()
	recovered := func() (r any) {
		defer func() { r = recover() }()
		_ = p.Lock("do-panic").Do(ctx, func(context.Context) error { panic("boom") })
		return nil
	}()
	require.Equal(t, "boom", recovered)
	h, err := other.Lock("do-panic").TryAcquire(ctx)
	require.NoError(t, err, "Do did not release the lock after fn panicked")
	require.NoError(t, h.Release(ctx))
}

// Do of a lock held by another process until Do's ctx ends does not run fn,
// and says the lock was held. Over the model, in simulated time.
func TestDoDoesNotRunFnWhenTheLockCannotBeAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, net, other := d.holderAndRival()
		net.Delay(time.Millisecond) // a round trip takes time, as a server's does
		h := mustTryAcquire(t, ctx, other.Lock("do-busy"))
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := p.Lock("do-busy").Do(wctx, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, h.Release(ctx))
	})
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
// known to last, which each extension moves on. Over both stores; on the
// server, with a lease (stallProof) that a loaded machine's stall does not
// lose before an extension is seen.
func TestHandlesTellTheirAcquisitionOwnerAndLeaseEnd(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		conformance.Over(t, func(e *conformance.Env) { handleTellsItsLease(e, r) })
	})
}

func handleTellsItsLease(e *conformance.Env, r kindRow) {
	const name, expiry = "meta", 3 * time.Second
	t, ctx := e.T, e.Ctx
	p, _ := e.Process(append([]mongolock.Option{mongolock.WithOwner("meta-owner")}, stallProof...)...)
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
	require.False(t, first.Before(sent.Add(expiry)), "lease end %v, before the acquisition's sending %v + the expiry", first, sent)
	require.False(t, first.After(time.Now().Add(expiry)), "lease end %v, after now + the expiry", first)
	pollUntil(t, 10*time.Second, "an extension moving the lease's end on", func() bool { return h.LeaseEnd().After(first) })
}
