package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
	"github.com/mongolock/mongolock/internal/testdb"
)

// dotnetLock is a lock of the C# library DistributedLock.MongoDB 1.0,
// driven through its protocol (internal/dotnet) on a collection of its own
// client, so that these tests can show that a Go service and a .NET service
// sharing a lock exclude each other. It neither extends nor waits: a test
// holds a lock for far less than the expiry and retries as it sees fit.
type dotnetLock struct {
	coll   *mongo.Collection
	name   string
	expiry time.Duration
}

// dotnetHandle is one acquisition by the C# protocol.
type dotnetHandle struct {
	lockID string
	token  int64
}

func newDotnetLock(db *mongo.Database, name string) *dotnetLock {
	return &dotnetLock{coll: db.Collection(mongolock.DefaultCollection), name: name, expiry: dotnet.DefaultExpiry}
}

// tryAcquire makes one attempt. It returns nil and no error when the lock is
// held by someone else, or the attempt lost the race to create the document.
func (l *dotnetLock) tryAcquire(ctx context.Context) (*dotnetHandle, error) {
	lockID := dotnet.NewLockID()
	token, ok, err := dotnet.TryAcquire(ctx, l.coll, l.name, lockID, l.expiry)
	if err != nil || !ok {
		return nil, err
	}
	return &dotnetHandle{lockID: lockID, token: token}, nil
}

// release deletes the document if h still holds the lock, and reports
// whether it did.
func (l *dotnetLock) release(ctx context.Context, h *dotnetHandle) (bool, error) {
	return dotnet.Release(ctx, l.coll, l.name, h.lockID)
}

// interopDoc is the stored lock document, read back to check what each side
// left behind. LockID is "" when the field is absent.
type interopDoc struct {
	LockID       string    `bson:"lockId"`
	AcquiredAt   time.Time `bson:"acquiredAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	FencingToken int64     `bson:"fencingToken"`
}

func readInteropDoc(ctx context.Context, t *testing.T, db *mongo.Database, name string) (doc interopDoc, found bool) {
	t.Helper()
	err := db.Collection(mongolock.DefaultCollection).FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return doc, false
	}
	require.NoError(t, err)
	return doc, true
}

// interopSides gives each protocol a client of its own, as two services
// would have, on the same fresh database.
func interopSides(t *testing.T, name string, opts ...mongolock.Option) (*mongo.Database, *mongolock.Lock, *dotnetLock) {
	t.Helper()
	db := testdb.Database(t)
	l, err := mongolock.New(db, name, opts...)
	require.NoError(t, err)
	dotnet := newDotnetLock(testdb.NewClient(t).Database(db.Name()), name)
	return db, l, dotnet
}

func TestLockHeldByDotnetProtocolIsNotAcquiredByMongolockUntilDotnetReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, l, dotnet := interopSides(t, "shared-report", mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))

	dh, err := dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.NotNil(t, dh, "the C# protocol must acquire a lock nobody holds")

	start := time.Now()
	h, err := l.TryAcquire(ctx)
	rtt := time.Since(start)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.Nil(t, h)

	// Acquire times out with ErrNotAcquired: the lock was held by someone
	// else the whole time. Many short waits, so that the deadline falls at
	// every point of an attempt: before, during, and between round trips.
	// Each wait leaves room for a first round trip (on a loaded machine the
	// driver does not even send a request that cannot finish in time, and
	// then nothing is known about the lock).
	wait := 25*time.Millisecond + 3*rtt
	var misreported []string
	for i := range 40 {
		actx, acancel := context.WithTimeout(ctx, wait)
		h, err = l.Acquire(actx)
		acancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "wait %d", i)
		require.Nil(t, h)
		if !errors.Is(err, mongolock.ErrNotAcquired) {
			misreported = append(misreported, fmt.Sprintf("wait %d: %v", i, err))
		}
	}

	// mongolock's attempts left the C# acquisition intact: its owner-checked
	// delete still matches.
	deleted, err := dotnet.release(ctx, dh)
	require.NoError(t, err)
	require.True(t, deleted, "the C# holder's lockId must still be on the document")

	h, err = l.TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, h.FencingToken(), dh.token)
	require.NoError(t, h.Release(ctx))

	require.Empty(t, misreported, "Acquire timed out on a lock held by someone else the whole time, but its error does not satisfy errors.Is(err, ErrNotAcquired)")
}

func TestLockHeldByMongolockIsRefusedToDotnetProtocolUntilMongolockReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, l, dotnet := interopSides(t, "shared-report")

	h, err := l.TryAcquire(ctx)
	require.NoError(t, err)
	defer func() { _ = h.Release(context.Background()) }()

	dh, err := dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.Nil(t, dh, "the C# protocol must not acquire a lock mongolock holds")
	held, found := readInteropDoc(ctx, t, db, l.Name())
	require.True(t, found)
	require.Equal(t, h.FencingToken(), held.FencingToken, "a refused C# attempt must not change the token")
	require.NotEmpty(t, held.LockID)

	require.NoError(t, h.Release(ctx))
	released, found := readInteropDoc(ctx, t, db, l.Name())
	require.True(t, found, "mongolock's release keeps the document")
	require.Empty(t, released.LockID, "mongolock's release clears the holder")
	require.Equal(t, h.FencingToken(), released.FencingToken, "mongolock's release keeps the token")
	require.True(t, released.ExpiresAt.Before(held.ExpiresAt) && !released.ExpiresAt.Before(held.AcquiredAt),
		"mongolock's release ends the lease now (server time): acquired %v, lease to %v, released at %v", held.AcquiredAt, held.ExpiresAt, released.ExpiresAt)

	dh, err = dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.NotNil(t, dh, "the C# protocol must acquire once mongolock released")
	require.Equal(t, h.FencingToken()+1, dh.token)
	deleted, err := dotnet.release(ctx, dh)
	require.NoError(t, err)
	require.True(t, deleted)
}

// DistributedLock.MongoDB's release deletes the document, so on its own its
// tokens restart at 1. A mongolock acquisition after it must still outrank
// every earlier token, and a C# acquisition after mongolock continues from
// mongolock's token.
func TestFencingTokensKeepIncreasingAcrossDotnetDeleteReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, l, dotnet := interopSides(t, "shared-report")

	dotnetAcquire := func() *dotnetHandle {
		t.Helper()
		dh, err := dotnet.tryAcquire(ctx)
		require.NoError(t, err)
		require.NotNil(t, dh, "the C# protocol must acquire a free lock")
		return dh
	}
	dotnetRelease := func(dh *dotnetHandle) {
		t.Helper()
		deleted, err := dotnet.release(ctx, dh)
		require.NoError(t, err)
		require.True(t, deleted)
	}
	mongolockAcquire := func() int64 {
		t.Helper()
		h, err := l.TryAcquire(ctx)
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
		return h.FencingToken()
	}

	d1 := dotnetAcquire()
	require.EqualValues(t, 1, d1.token, "the C# protocol starts a new document at 1")
	dotnetRelease(d1)

	m1 := mongolockAcquire()
	require.Greater(t, m1, d1.token)

	d2 := dotnetAcquire()
	require.Equal(t, m1+1, d2.token, "the C# protocol continues from mongolock's token")
	dotnetRelease(d2)

	m2 := mongolockAcquire()
	require.Greater(t, m2, d2.token, "mongolock after a C# delete-release must outrank every earlier token")
	t.Logf("tokens: C# %d, mongolock %d, C# %d, mongolock %d", d1.token, m1, d2.token, m2)
}

// Goroutines of both protocols, each with a client of its own, contend for
// one lock for a few seconds. Inside the lock each does a read-modify-write
// of a counter document, which loses updates if two holders ever overlap,
// and an in-process counter of holders must never exceed one.
func TestDotnetAndMongolockContendersNeverOverlap(t *testing.T) {
	const (
		perSide  = 4
		duration = 3 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Database(t)
	const name = "shared-counter"
	counter := db.Collection("interop_counter")
	_, err := counter.InsertOne(ctx, bson.D{{Key: "_id", Value: name}, {Key: "n", Value: int64(0)}})
	require.NoError(t, err)

	var (
		inside, overlaps atomic.Int32
		acquisitions     [2]atomic.Int64 // [0]: C# protocol, [1]: mongolock
		mu               sync.Mutex
		errs             []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	// critical runs with the lock held, by either side.
	critical := func(c *mongo.Collection) error {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		var doc struct {
			N int64 `bson:"n"`
		}
		if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc); err != nil {
			return err
		}
		_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: name}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: doc.N + 1}}}})
		return err
	}

	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for range perSide {
		cdb := testdb.NewClient(t).Database(db.Name())
		dotnet := newDotnetLock(cdb, name)
		wg.Go(func() {
			for time.Now().Before(end) {
				dh, err := dotnet.tryAcquire(ctx)
				if err != nil {
					fail(err)
					return
				}
				if dh == nil {
					// DistributedLock's busy wait, shortened.
					time.Sleep(time.Duration(rand.N(20)+1) * time.Millisecond)
					continue
				}
				acquisitions[0].Add(1)
				err = critical(cdb.Collection(counter.Name()))
				deleted, rerr := dotnet.release(ctx, dh)
				if err = errors.Join(err, rerr); err == nil && !deleted {
					err = errors.New("C# release matched nothing: its acquisition was taken over")
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
		mdb := testdb.NewClient(t).Database(db.Name())
		l, err := mongolock.New(mdb, name, mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond))
		require.NoError(t, err)
		wg.Go(func() {
			for time.Now().Before(end) {
				actx, acancel := context.WithDeadline(ctx, end)
				h, err := l.Acquire(actx)
				acancel()
				if err != nil && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(end) {
					// Contended until the end. Whether the error also says
					// ErrNotAcquired is checked elsewhere (see
					// TestLockHeldByDotnetProtocolIsNotAcquiredByMongolockUntilDotnetReleases).
					return
				}
				if err != nil {
					fail(err)
					return
				}
				acquisitions[1].Add(1)
				err = critical(mdb.Collection(counter.Name()))
				if err = errors.Join(err, h.Release(ctx)); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()

	require.Empty(t, errs)
	require.Zero(t, overlaps.Load(), "two holders overlapped")
	total := acquisitions[0].Load() + acquisitions[1].Load()
	var doc struct {
		N int64 `bson:"n"`
	}
	require.NoError(t, counter.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc))
	require.Equal(t, total, doc.N, "the counter lost updates: two holders overlapped")
	require.Positive(t, acquisitions[0].Load(), "the C# protocol never got the lock")
	require.Positive(t, acquisitions[1].Load(), "mongolock never got the lock")

	t.Logf("acquisitions in %v: C# protocol %d, mongolock %d", duration, acquisitions[0].Load(), acquisitions[1].Load())
}

// DistributedLock.MongoDB's release deletes the document; the next
// acquisition re-creates it. When that is a mongolock acquisition, its token
// must outrank every token before it (guarantee 4), also while many
// acquirers of both protocols contend. Holders are exclusive, so recording
// tokens with the lock held records them in acquisition order.
func TestMongolockTokensOutrankEveryEarlierTokenWhileContendingWithDotnetReleases(t *testing.T) {
	const (
		mongolockers = 6
		dotnets      = 4
		duration     = 6 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Database(t)
	const name = "shared-ledger"

	var (
		mu           sync.Mutex
		highest      int64
		acquisitions [2]int // [0]: C# protocol, [1]: mongolock
		violations   []string
		errs         []error
	)
	record := func(token int64, mongolockSide bool) {
		mu.Lock()
		defer mu.Unlock()
		if mongolockSide && token <= highest && len(violations) < 5 {
			violations = append(violations, fmt.Sprintf("mongolock acquisition %d got token %d, not above the highest before it, %d (%d ms of server time below)",
				acquisitions[0]+acquisitions[1]+1, token, highest, (highest-token)/1024))
		}
		highest = max(highest, token)
		if mongolockSide {
			acquisitions[1]++
		} else {
			acquisitions[0]++
		}
	}
	stop := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) > 0 || len(errs) > 0
	}
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}

	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for range dotnets {
		dotnet := newDotnetLock(testdb.NewClient(t).Database(db.Name()), name)
		wg.Go(func() {
			for time.Now().Before(end) && !stop() {
				dh, err := dotnet.tryAcquire(ctx)
				if err == nil && dh != nil {
					record(dh.token, false)
					var deleted bool
					if deleted, err = dotnet.release(ctx, dh); err == nil && !deleted {
						err = errors.New("C# release matched nothing: its acquisition was taken over")
					}
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	for range mongolockers {
		l, err := mongolock.New(testdb.NewClient(t).Database(db.Name()), name)
		require.NoError(t, err)
		wg.Go(func() {
			for time.Now().Before(end) && !stop() {
				h, err := l.TryAcquire(ctx)
				if errors.Is(err, mongolock.ErrNotAcquired) {
					continue
				}
				if err == nil {
					record(h.FencingToken(), true)
					err = h.Release(ctx)
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()

	require.Empty(t, errs)
	require.Empty(t, violations, "fencing tokens went backwards")
	require.Positive(t, acquisitions[0], "the C# protocol never got the lock")
	require.Positive(t, acquisitions[1], "mongolock never got the lock")
	t.Logf("acquisitions in %v: C# protocol %d, mongolock %d", duration, acquisitions[0], acquisitions[1])
}
