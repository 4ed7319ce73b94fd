package mongolock_test

// Behaviour of Lock against the real server, ported from
// DistributedLock.MongoDB's own test suite into Go form, plus the lock
// document's format and the TTL index (PROTOCOL.md, "The document").

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

func TestTryAcquireOnHeldLockReturnsErrNotAcquiredAndReleaseFreesIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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

func TestAcquireReturnsPromptlyWhenCancelledWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db := testdb.Database(t)
	holder := releaseAtCleanup(t, mustAcquire(t, ctx, newProvider(t, db).Lock("cancel")))

	var count commandCounter
	// Every sleep between attempts is at least 2s: returning sooner than
	// that after the cancel means the sleep was interrupted.
	p := newProvider(t, ownClient(t, db, &count), mongolock.WithBusyWaitSleep(2*time.Second, 3*time.Second))

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
	pollUntil(t, 10*time.Second, "the waiter's first attempt", func() bool { return count.replies.Load() >= 1 })

	cancelled := time.Now()
	wcancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return after its ctx was cancelled")
	}
	releaseAtCleanup(t, r.h)
	require.Nil(t, r.h)
	require.ErrorIs(t, r.err, context.Canceled)
	require.ErrorIs(t, r.err, mongolock.ErrNotAcquired)
	require.Less(t, r.at.Sub(cancelled), 500*time.Millisecond, "Acquire returned late after cancellation")
	require.NoError(t, holder.Release(ctx))
}

func TestAcquireWaitsUntilTheHolderReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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

func TestConcurrentAcquirersNeverOverlap(t *testing.T) {
	const clients, perClient = 5, 20
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.Database(t)
	locks := make([]*mongolock.Lock, clients)
	for i := range locks {
		p := newProvider(t, ownClient(t, db, nil), mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond))
		locks[i] = p.Lock("contended")
	}

	var (
		inLock, maxInLock atomic.Int32
		wg                sync.WaitGroup
		mu                sync.Mutex
		errs              []error
		tokens            = map[int64]bool{}
	)
	start := make(chan struct{})
	for i := range clients * perClient {
		wg.Add(1)
		go func(l *mongolock.Lock) {
			defer wg.Done()
			<-start
			h, err := l.Acquire(ctx)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			n := inLock.Add(1)
			for m := maxInLock.Load(); n > m && !maxInLock.CompareAndSwap(m, n); m = maxInLock.Load() {
			}
			mu.Lock()
			tokens[h.FencingToken()] = true
			mu.Unlock()
			inLock.Add(-1)
			if err := h.Release(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(locks[i%clients])
	}
	close(start)
	wg.Wait()

	require.Empty(t, errs)
	require.EqualValues(t, 1, maxInLock.Load(), "holders at once")
	require.Len(t, tokens, clients*perClient, "every goroutine got the lock, each with its own fencing token")
}

func TestUnusualNamesWorkAndDoNotCollide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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

var lockIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestLockDocumentHasTheProtocolFields(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	require.EqualValues(t, 0, secs)
}

func TestTTLIndexIsCreatedOncePerCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
			Options: options.Index().SetName(mongolock.TTLIndexName).SetExpireAfterSeconds(3600),
		}},
		{"another name, another TTL", "my_ttl", mongo.IndexModel{
			Keys:    bson.D{{Key: "expiresAt", Value: 1}},
			Options: options.Index().SetName("my_ttl").SetExpireAfterSeconds(60),
		}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
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
			// The user's index is left as it was.
			var names []string
			for _, ix := range listIndexes(ctx, t, coll) {
				names = append(names, ix.Name)
			}
			require.Contains(t, names, tc.name)
		})
	}
}

func TestWithCollectionPutsDocumentsInThatCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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

func TestNameTooLargeForTheServerReturnsAClearErrorAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newProvider(t, testdb.Database(t))
	// Larger than the 16 MB BSON document limit on its own.
	l := p.Lock(strings.Repeat("x", 17<<20))

	for _, op := range []struct {
		label string
		fn    func(context.Context) (*mongolock.Handle, error)
	}{
		{"TryAcquire", l.TryAcquire},
		{"Acquire", l.Acquire},
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
		require.LessOrEqual(t, len(le.Name), 64, op.label)
	}
	require.NotPanics(t, func() { mongolock.WaitBackground(p) })
}

// Errors shorten long names to 64 bytes; a name of multi-byte characters
// must be cut between characters, not inside one.
func TestErrorShortensLongNamesWithoutSplittingCharacters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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

// An Acquire whose ctx ends during an outage must not report contention:
// ErrNotAcquired means "held by someone else", and callers use it to tell
// contention from an outage (PROTOCOL.md). No server answers at this
// address; nobody holds the lock.
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

			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
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
