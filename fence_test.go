package mongolock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/drivertest"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/xoptions"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// token is a fixed fencing token, for tests of the write itself.
type token int64

func (t token) FencingToken() int64 { return int64(t) }

type fencedDoc struct {
	ID     string `bson:"_id"`
	Writer string `bson:"writer"`
	N      int    `bson:"n"`
	Fence  int64  `bson:"_mongolockFencingToken"`
}

func readFenced(t *testing.T, coll *mongo.Collection, id string) fencedDoc {
	t.Helper()
	var d fencedDoc
	require.NoError(t, coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&d))
	return d
}

func fencedColl(t *testing.T) *mongo.Collection {
	return testdb.Database(t).Collection("resources")
}

func setWriter(w string) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{{Key: "writer", Value: w}}}, {Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
}

func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }

var upsert = options.UpdateOne().SetUpsert(true)

func TestFencedUpdateOneRefusesALowerTokenWithErrFenced(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	_, err := mongolock.FencedUpdateOne(ctx, coll, token(5), byID("r"), setWriter("five"), upsert)
	require.NoError(t, err)

	res, err := mongolock.FencedUpdateOne(ctx, coll, token(4), byID("r"), setWriter("four"))
	require.ErrorIs(t, err, mongolock.ErrFenced)
	require.Equal(t, int64(0), res.ModifiedCount)
	require.Equal(t, fencedDoc{ID: "r", Writer: "five", N: 1, Fence: 5}, readFenced(t, coll, "r"))

	// An equal token is the same holder again; a higher one a later holder.
	_, err = mongolock.FencedUpdateOne(ctx, coll, token(5), byID("r"), setWriter("five again"))
	require.NoError(t, err)
	_, err = mongolock.FencedUpdateOne(ctx, coll, token(9), byID("r"), setWriter("nine"))
	require.NoError(t, err)
	require.Equal(t, fencedDoc{ID: "r", Writer: "nine", N: 3, Fence: 9}, readFenced(t, coll, "r"))
}

func TestFencedUpdateOneOfNoMatchingDocumentIsNotErrFenced(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	_, err := mongolock.FencedUpdateOne(ctx, coll, token(5), byID("r"), setWriter("five"), upsert)
	require.NoError(t, err)

	res, err := mongolock.FencedUpdateOne(ctx, coll, token(9), byID("other"), setWriter("nine"))
	require.NoError(t, err)
	require.Equal(t, int64(0), res.MatchedCount)
	// The filter's other conditions are kept: a low token on a document
	// the filter does not match is no match, not a refusal.
	res, err = mongolock.FencedUpdateOne(ctx, coll, token(1), bson.D{{Key: "_id", Value: "r"}, {Key: "writer", Value: "nobody"}}, setWriter("one"))
	require.NoError(t, err)
	require.Equal(t, int64(0), res.MatchedCount)
}

func TestFencedUpdateOneAppliesAPipelineUpdateAndRecordsTheToken(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	pipe := mongo.Pipeline{{{Key: "$set", Value: bson.D{
		{Key: "writer", Value: "pipe"},
		{Key: "n", Value: bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$n", 0}}}, 1}}}},
	}}}}
	_, err := mongolock.FencedUpdateOne(ctx, coll, token(7), byID("r"), pipe, upsert)
	require.NoError(t, err)
	_, err = mongolock.FencedUpdateOne(ctx, coll, token(8), byID("r"), pipe)
	require.NoError(t, err)
	require.Equal(t, fencedDoc{ID: "r", Writer: "pipe", N: 2, Fence: 8}, readFenced(t, coll, "r"))

	_, err = mongolock.FencedUpdateOne(ctx, coll, token(6), byID("r"), pipe)
	require.ErrorIs(t, err, mongolock.ErrFenced)
	require.Equal(t, fencedDoc{ID: "r", Writer: "pipe", N: 2, Fence: 8}, readFenced(t, coll, "r"))
}

func TestFencedUpdateOneKeepsTheUsersMaxAndNeverLowersTheToken(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	up := bson.D{{Key: "$max", Value: bson.D{{Key: "n", Value: 4}}}}
	_, err := mongolock.FencedUpdateOne(ctx, coll, token(3), byID("r"), up, upsert)
	require.NoError(t, err)
	require.Equal(t, fencedDoc{ID: "r", N: 4, Fence: 3}, readFenced(t, coll, "r"))
}

func TestStaleFencedUpsertIsErrFencedAndInsertsNoSecondDocument(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	_, err := mongolock.FencedUpdateOne(ctx, coll, token(5), byID("r"), setWriter("five"), upsert)
	require.NoError(t, err)

	_, err = mongolock.FencedUpdateOne(ctx, coll, token(2), byID("r"), setWriter("two"), upsert)
	require.ErrorIs(t, err, mongolock.ErrFenced)
	err = mongolock.FencedFindOneAndUpdate(ctx, coll, token(2), byID("r"), setWriter("two"),
		options.FindOneAndUpdate().SetUpsert(true)).Err()
	require.ErrorIs(t, err, mongolock.ErrFenced)

	n, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, fencedDoc{ID: "r", Writer: "five", N: 1, Fence: 5}, readFenced(t, coll, "r"))
}

func TestFencedUpsertWithoutAnIDEqualityIsErrInvalidArgument(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	for _, f := range []bson.D{
		{{Key: "key", Value: "r"}},
		{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"r", "s"}}}}},
	} {
		_, err := mongolock.FencedUpdateOne(ctx, coll, token(1), f, setWriter("x"), upsert)
		require.ErrorIs(t, err, mongolock.ErrInvalidArgument, "%v", f)
	}
	n, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestFencedUpdateOfTheFenceFieldOrAReplacementIsErrInvalidArgument(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	for name, up := range map[string]any{
		"replacement":                bson.D{{Key: "writer", Value: "x"}},
		"$set of fence":              bson.D{{Key: "$set", Value: bson.D{{Key: mongolock.FenceField, Value: 1}}}},
		"$unset":                     bson.D{{Key: "$unset", Value: bson.D{{Key: mongolock.FenceField, Value: ""}}}},
		"$rename to":                 bson.D{{Key: "$rename", Value: bson.D{{Key: "a", Value: mongolock.FenceField}}}},
		"pipeline $set":              mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: mongolock.FenceField, Value: 99}}}}},
		"empty":                      bson.D{},
		"not a document":             bson.D{{Key: "$set", Value: 1}},
		"pipeline $unset":            []bson.D{{{Key: "$unset", Value: mongolock.FenceField}}},
		"pipeline $unset of several": bson.A{bson.D{{Key: "$unset", Value: bson.A{"a", mongolock.FenceField + ".x"}}}},
		"pipeline $addFields":        []any{bson.D{{Key: "$addFields", Value: bson.D{{Key: mongolock.FenceField, Value: 1}}}}},
	} {
		_, err := mongolock.FencedUpdateOne(ctx, coll, token(1), byID("r"), up, upsert)
		require.ErrorIs(t, err, mongolock.ErrInvalidArgument, name)
		err = mongolock.FencedFindOneAndUpdate(ctx, coll, token(1), byID("r"), up).Err()
		require.ErrorIs(t, err, mongolock.ErrInvalidArgument, name)
	}
	_, err := mongolock.FencedUpdateOne(ctx, coll, token(0), byID("r"), setWriter("x"))
	require.ErrorIs(t, err, mongolock.ErrInvalidArgument, "token 0")
	unsetOthers := mongo.Pipeline{{{Key: "$unset", Value: bson.A{"a", "b"}}}, {{Key: "$unset", Value: "c"}}}
	_, err = mongolock.FencedUpdateOne(ctx, coll, token(1), byID("r"), unsetOthers, upsert)
	require.NoError(t, err, "a pipeline's $unset of other fields")
}

func TestFencedFindOneAndUpdateTellsRefusalFromNoDocuments(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	var d fencedDoc
	err := mongolock.FencedFindOneAndUpdate(ctx, coll, token(5), byID("r"), setWriter("five"),
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&d)
	require.NoError(t, err)
	require.Equal(t, fencedDoc{ID: "r", Writer: "five", N: 1, Fence: 5}, d)

	err = mongolock.FencedFindOneAndUpdate(ctx, coll, token(4), byID("r"), setWriter("four")).Err()
	require.ErrorIs(t, err, mongolock.ErrFenced)
	require.NotErrorIs(t, err, mongo.ErrNoDocuments)

	err = mongolock.FencedFindOneAndUpdate(ctx, coll, token(9), byID("none"), setWriter("nine")).Err()
	require.ErrorIs(t, err, mongo.ErrNoDocuments)
	require.NotErrorIs(t, err, mongolock.ErrFenced)

	require.NoError(t, mongolock.FencedFindOneAndUpdate(ctx, coll, token(6), byID("r"), setWriter("six")).Decode(&d))
	require.Equal(t, fencedDoc{ID: "r", Writer: "five", N: 1, Fence: 5}, d, "the document before the update")
	require.Equal(t, fencedDoc{ID: "r", Writer: "six", N: 2, Fence: 6}, readFenced(t, coll, "r"))
}

// Writers with random tokens race to upsert and update one document, each
// several times: whatever the interleaving, the document ends with the
// highest token's data, and every refused write was ErrFenced.
func TestConcurrentFencedWritersEndWithTheHighestTokensData(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	coll := fencedColl(t)
	for round := range 5 {
		id := "r" + string(rune('a'+round))
		tokens := rand.Perm(1000)[:8]
		var wg sync.WaitGroup
		errs := make(chan error, len(tokens)*3)
		for _, tk := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 3 {
					set := bson.D{{Key: "$set", Value: bson.D{{Key: "tok", Value: tk + 1}}}}
					var err error
					if i%2 == 0 {
						_, err = mongolock.FencedUpdateOne(ctx, coll, token(tk+1), byID(id), set, upsert)
					} else {
						err = mongolock.FencedFindOneAndUpdate(ctx, coll, token(tk+1), byID(id), set,
							options.FindOneAndUpdate().SetUpsert(true)).Err()
						if errors.Is(err, mongo.ErrNoDocuments) {
							err = nil // the upsert inserted: no document before it
						}
					}
					if err != nil && !errors.Is(err, mongolock.ErrFenced) {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		highest := int64(0)
		for _, tk := range tokens {
			highest = max(highest, int64(tk+1))
		}
		var d struct {
			Tok   int64 `bson:"tok"`
			Fence int64 `bson:"_mongolockFencingToken"`
		}
		require.NoError(t, coll.FindOne(ctx, byID(id)).Decode(&d))
		require.Equal(t, highest, d.Tok, "round %d, tokens %v", round, tokens)
		require.Equal(t, highest, d.Fence)
		n, err := coll.CountDocuments(ctx, byID(id))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	}
}

// The failure fencing exists for: a holder that lost its lock and does
// not know it yet (its lock force-released, a rival acquired and wrote
// before the holder's next extension): its fenced write is sent, the
// token check refuses it (ErrFenced), and the document keeps the rival's
// data.
func TestFencedWriteOfAHolderThatDoesNotKnowItLostIsErrFenced(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	db := testdb.Database(t)
	holderP := newProvider(t, ownClient(t, db, nil), mongolock.WithExpiry(time.Minute)) // no extension in the test's time
	rivalP := newProvider(t, ownClient(t, db, nil))
	coll := db.Collection("resources")

	h := releaseAtCleanup(t, mustAcquire(t, ctx, holderP.Lock("ledger")))
	_, err := mongolock.FencedUpdateOne(ctx, coll, h, byID("ledger"), setWriter("holder"), upsert)
	require.NoError(t, err)

	released, err := rivalP.ForceRelease(ctx, "ledger")
	require.NoError(t, err)
	require.True(t, released)
	rival := releaseAtCleanup(t, mustAcquire(t, ctx, rivalP.Lock("ledger")))
	_, err = mongolock.FencedUpdateOne(ctx, coll, rival, byID("ledger"), setWriter("rival"))
	require.NoError(t, err)

	require.NoError(t, h.Context().Err(), "the holder knows of its loss already")
	_, err = mongolock.FencedUpdateOne(ctx, coll, h, byID("ledger"), setWriter("stale holder"))
	require.ErrorIs(t, err, mongolock.ErrFenced)
	require.ErrorIs(t, mongolock.FencedFindOneAndUpdate(ctx, coll, h, byID("ledger"), setWriter("stale holder")).Err(), mongolock.ErrFenced)
	require.Equal(t, fencedDoc{ID: "ledger", Writer: "rival", N: 2, Fence: rival.FencingToken()}, readFenced(t, coll, "ledger"))
}

// What the token fences, per kind. Each stale holder, of another
// process, does not know it is stale yet (force-released, its next
// extension a minute away): a released one would be refused unsent.
func TestFencedWritesPerKind(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, ownClient(t, db, nil))
	staleP := newProvider(t, ownClient(t, db, nil), mongolock.WithExpiry(3*time.Minute))
	coll := db.Collection("resources")
	forceRelease := func(t *testing.T, name string) {
		released, err := p.ForceRelease(ctx, name)
		require.NoError(t, err)
		require.True(t, released)
	}
	write := func(src mongolock.TokenSource, id, w string) error {
		_, err := mongolock.FencedUpdateOne(ctx, coll, src, byID(id), setWriter(w), upsert)
		return err
	}

	t.Run("lock: the next holder fences out the last", func(t *testing.T) {
		first := mustAcquire(t, ctx, staleP.Lock("l"))
		forceRelease(t, "l")
		second := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("l")))
		require.NoError(t, write(second, "l", "second"))
		require.ErrorIs(t, write(first, "l", "first"), mongolock.ErrFenced)
	})
	t.Run("election: the next leader fences out the last", func(t *testing.T) {
		first, err := staleP.Election("e").Campaign(ctx, "a")
		require.NoError(t, err)
		forceRelease(t, "e")
		second, err := p.Election("e").Campaign(ctx, "b")
		require.NoError(t, err)
		t.Cleanup(func() { _ = second.Release(context.Background()) })
		require.NoError(t, write(second, "e", "b"))
		require.ErrorIs(t, write(first, "e", "a"), mongolock.ErrFenced)
	})
	t.Run("semaphore: a later slot's write fences out earlier slots", func(t *testing.T) {
		s := p.Semaphore("s", 2)
		a, err := s.Acquire(ctx)
		require.NoError(t, err)
		releaseAtCleanup(t, a)
		b, err := s.Acquire(ctx)
		require.NoError(t, err)
		releaseAtCleanup(t, b)
		require.Greater(t, b.FencingToken(), a.FencingToken())
		require.NoError(t, write(a, "s", "a"), "the earlier slot, before the later one wrote")
		require.NoError(t, write(b, "s", "b"))
		require.ErrorIs(t, write(a, "s", "a"), mongolock.ErrFenced, "both hold, but b wrote with a higher token")
	})
	t.Run("rwlock: a writer fences out the readers before it, and a reader after it fences out the writer", func(t *testing.T) {
		rw := p.RWLock("rw")
		r1 := mustAcquire(t, ctx, staleP.RWLock("rw").Reader())
		require.NoError(t, write(r1, "rw", "reader 1"))
		forceRelease(t, "rw")
		w := mustAcquire(t, ctx, rw.Writer())
		require.Greater(t, w.FencingToken(), r1.FencingToken())
		require.NoError(t, write(w, "rw", "writer"))
		require.ErrorIs(t, write(r1, "rw", "reader 1"), mongolock.ErrFenced)
		forceRelease(t, "rw")
		r2 := releaseAtCleanup(t, mustAcquire(t, ctx, staleP.RWLock("rw").Reader()))
		require.Greater(t, r2.FencingToken(), w.FencingToken())
		require.NoError(t, write(r2, "rw", "reader 2"))
		require.ErrorIs(t, write(w, "rw", "writer"), mongolock.ErrFenced)
	})
	t.Run("composite: each part's token fences its own resource", func(t *testing.T) {
		c, err := mongolock.NewComposite(p.Lock("c1"), p.Lock("c2"))
		require.NoError(t, err)
		staleC, err := mongolock.NewComposite(staleP.Lock("c1"), staleP.Lock("c2"))
		require.NoError(t, err)
		first, err := staleC.Acquire(ctx)
		require.NoError(t, err)
		forceRelease(t, "c1")
		forceRelease(t, "c2")
		second, err := c.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = second.Release(context.Background()) })
		for i, id := range []string{"c1", "c2"} {
			require.NoError(t, write(second.Handles()[i], id, "second"))
			require.ErrorIs(t, write(first.Handles()[i], id, "first"), mongolock.ErrFenced)
		}
	})
}

// Fenced writes run in the session and transaction ctx carries: both
// commit, or neither.
func TestFencedWritesInATransactionCommitTogether(t *testing.T) {
	if !testdb.Info(t).ReplicaSet {
		t.Skipf("needs transactions (a replica set), which %s lacks", testdb.Info(t).Name())
	}
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	for _, id := range []string{"a", "b"} {
		_, err := mongolock.FencedUpdateOne(ctx, coll, token(5), byID(id), setWriter("five"), upsert)
		require.NoError(t, err)
	}
	sess, err := coll.Database().Client().StartSession()
	require.NoError(t, err)
	defer sess.EndSession(ctx)
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		if _, err := mongolock.FencedUpdateOne(ctx, coll, token(6), byID("a"), setWriter("six")); err != nil {
			return nil, err
		}
		return mongolock.FencedUpdateOne(ctx, coll, token(4), byID("b"), setWriter("four"))
	})
	require.ErrorIs(t, err, mongolock.ErrFenced)
	require.Equal(t, "five", readFenced(t, coll, "a").Writer, "the transaction's first write was rolled back")
}

// Where there are no transactions, a session's ctx still carries both round
// trips: a refusal inside the session's callback is ErrFenced.
func TestFencedWritesRunInTheSessionCtxCarries(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	coll := fencedColl(t)
	err := coll.Database().Client().UseSession(ctx, func(ctx context.Context) error {
		require.NotNil(t, mongo.SessionFromContext(ctx))
		if _, err := mongolock.FencedUpdateOne(ctx, coll, token(5), byID("r"), setWriter("five"), upsert); err != nil {
			return err
		}
		_, err := mongolock.FencedUpdateOne(ctx, coll, token(4), byID("r"), setWriter("four"))
		return err
	})
	require.ErrorIs(t, err, mongolock.ErrFenced)
	require.Equal(t, "five", readFenced(t, coll, "r").Writer)
}

// scriptedColl is a collection of a client that reaches no server: the
// driver's mock deployment answers each command with the next of the
// replies the test adds, and sent counts the commands it was sent.
func scriptedColl(t *testing.T) (coll *mongo.Collection, replies *drivertest.MockDeployment, sent *atomic.Int64) {
	t.Helper()
	sent = &atomic.Int64{}
	replies = drivertest.NewMockDeployment()
	o := options.Client().SetMonitor(&event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) { sent.Add(1) }})
	require.NoError(t, xoptions.SetInternalClientOptions(o, "deployment", replies))
	c, err := mongo.Connect(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database("app").Collection("resources"), replies, sent
}

// A fenced write with a handle known lost, or whose lease's local deadline
// has passed though no timer has said so yet, is refused before anything
// is sent, with an error wrapping ErrLockLost: the token check would
// refuse it only where a later holder wrote, and nothing of a known loss
// should leave the process.
func TestAFencedWriteOfAHandleKnownLostIsNotSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, store *mongolocktest.Store, clocks *mongolock.Clocks, h *mongolock.Handle)
	}{
		{"stopped past its lease, not asked yet", func(_ *testing.T, _ *mongolocktest.Store, clocks *mongolock.Clocks, _ *mongolock.Handle) {
			clocks.Stop(stoppedFor)
		}},
		{"its lease ran out, and Err said so", func(t *testing.T, store *mongolocktest.Store, _ *mongolock.Clocks, h *mongolock.Handle) {
			store.Partition()
			defer store.Heal()
			time.Sleep(stoppedExpiry)
			require.ErrorIs(t, h.Context().Err(), context.Canceled)
		}},
		{"taken over", func(_ *testing.T, _ *mongolocktest.Store, _ *mongolock.Clocks, h *mongolock.Handle) {
			mongolocktest.Lose(h)
		}},
		{"paused past its lease, a rival in, not asked yet", func(t *testing.T, store *mongolocktest.Store, _ *mongolock.Clocks, h *mongolock.Handle) {
			store.Partition() // the pause: nothing the holder sends arrives
			time.Sleep(stoppedExpiry)
			store.Heal()
			rivalP, err := store.NewProvider(mongolock.WithExpiry(stoppedExpiry))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, rivalP.Close(context.Background())) })
			rival := releaseAtCleanup(t, mustTryAcquire(t, t.Context(), rivalP.Lock(h.Name())))
			require.Greater(t, rival.FencingToken(), h.FencingToken())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				store := mongolocktest.NewStore()
				p, err := store.NewProvider(mongolock.WithExpiry(stoppedExpiry))
				require.NoError(t, err)
				clocks := mongolock.FakeClocks(p, false)
				defer func() {
					require.NoError(t, p.Close(context.Background()))
					time.Sleep(time.Second) // simulated: the idle senders end
				}()
				coll, replies, sent := scriptedColl(t)
				h := mustTryAcquire(t, ctx, p.Lock("ledger"))
				replies.AddResponses(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 1}, {Key: "nModified", Value: 1}})
				_, err = mongolock.FencedUpdateOne(ctx, coll, h, byID("ledger"), setWriter("holder"))
				require.NoError(t, err)
				require.Equal(t, int64(1), sent.Load(), "the holder's write was sent")

				tc.lose(t, store, clocks, h)
				_, err = mongolock.FencedUpdateOne(ctx, coll, h, byID("ledger"), setWriter("lost holder"))
				ferr := mongolock.FencedFindOneAndUpdate(ctx, coll, h, byID("ledger"), setWriter("lost holder")).Err()
				require.Equal(t, int64(1), sent.Load(), "a lost holder's fenced write was sent")
				require.ErrorIs(t, err, mongolock.ErrLockLost)
				require.ErrorIs(t, ferr, mongolock.ErrLockLost)
				require.ErrorIs(t, h.Context().Err(), context.Canceled)
				require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
			})
		})
	}
}

// sourceWithContext is a TokenSource of another package with a Context,
// as a wrapper of a Handle might be.
type sourceWithContext struct {
	tok int64
	ctx context.Context
}

func (s sourceWithContext) FencingToken() int64      { return s.tok }
func (s sourceWithContext) Context() context.Context { return s.ctx }

// A fenced write of a released handle is refused before anything is
// sent, with an error wrapping ErrReleased and not ErrLockLost: its holder
// gave the lock up, so the write is no longer protected, though the token
// check would accept it until a later holder writes. So for every way a
// handle is released (its Release, a Leadership's, a CompositeHandle's,
// its Provider's Close), and for a TokenSource of another type whose
// Context has ended.
func TestAFencedWriteOfAReleasedHandleIsNotSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold returns a token source that holds, and how to release it.
		hold func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error)
		is   error
	}{
		{"a handle, released", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			h := mustTryAcquire(t, t.Context(), p.Lock("ledger"))
			return h, func() error { return h.Release(t.Context()) }
		}, mongolock.ErrReleased},
		{"a semaphore's slot, released", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			h, err := p.Semaphore("ledger", 2).TryAcquire(t.Context())
			require.NoError(t, err)
			return h, func() error { return h.Release(t.Context()) }
		}, mongolock.ErrReleased},
		{"a leadership, released", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			l, err := p.Election("ledger").Campaign(t.Context(), "me")
			require.NoError(t, err)
			return l, func() error { return l.Release(t.Context()) }
		}, mongolock.ErrReleased},
		{"a composite's part, the composite released", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			c, err := mongolock.NewComposite(p.Lock("ledger"), p.Lock("other"))
			require.NoError(t, err)
			ch, err := c.TryAcquire(t.Context())
			require.NoError(t, err)
			return ch.Handles()[0], func() error { return ch.Release(t.Context()) }
		}, mongolock.ErrReleased},
		{"a handle, its provider closed", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			h := mustTryAcquire(t, t.Context(), p.Lock("ledger"))
			return h, func() error { return p.Close(t.Context()) }
		}, mongolock.ErrReleased},
		{"another type with a Context, released", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			h := mustTryAcquire(t, t.Context(), p.Lock("ledger"))
			return sourceWithContext{h.FencingToken(), h.Context()}, func() error { return h.Release(t.Context()) }
		}, mongolock.ErrReleased},
		{"another type with a Context, lost", func(t *testing.T, p *mongolock.Provider) (mongolock.TokenSource, func() error) {
			h := mustTryAcquire(t, t.Context(), p.Lock("ledger"))
			return sourceWithContext{h.FencingToken(), h.Context()}, func() error {
				mongolocktest.Lose(h)
				return nil
			}
		}, mongolock.ErrLockLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				store := mongolocktest.NewStore()
				p, err := store.NewProvider()
				require.NoError(t, err)
				defer func() {
					require.NoError(t, p.Close(context.Background()))
					time.Sleep(time.Second) // simulated: the idle senders end
				}()
				coll, replies, sent := scriptedColl(t)
				src, release := tc.hold(t, p)
				replies.AddResponses(updated)
				_, err = mongolock.FencedUpdateOne(ctx, coll, src, byID("ledger"), setWriter("holder"))
				require.NoError(t, err)
				require.Equal(t, int64(1), sent.Load(), "the holder's write was sent")

				require.NoError(t, release())
				_, err = mongolock.FencedUpdateOne(ctx, coll, src, byID("ledger"), setWriter("released holder"))
				ferr := mongolock.FencedFindOneAndUpdate(ctx, coll, src, byID("ledger"), setWriter("released holder")).Err()
				require.Equal(t, int64(1), sent.Load(), "a released holder's fenced write was sent")
				for _, err := range []error{err, ferr} {
					require.ErrorIs(t, err, tc.is)
					if tc.is == mongolock.ErrReleased {
						require.NotErrorIs(t, err, mongolock.ErrLockLost)
					}
					var e *mongolock.Error
					require.ErrorAs(t, err, &e)
				}
			})
		})
	}
}

// loggedColl is scriptedColl's collection whose commands log keeps, and
// the replies the test adds.
func loggedColl(t *testing.T) (*mongo.Collection, *drivertest.MockDeployment, *commandLog) {
	t.Helper()
	log := &commandLog{coll: "resources"}
	replies := drivertest.NewMockDeployment()
	o := options.Client().SetMonitor(log.monitor())
	require.NoError(t, xoptions.SetInternalClientOptions(o, "deployment", replies))
	c, err := mongo.Connect(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database("app").Collection("resources"), replies, log
}

// Scripted replies of a server.
var (
	updated     = bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 1}, {Key: "nModified", Value: 1}}
	matchedNone = bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0}, {Key: "nModified", Value: 0}}
	upsertedR   = bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 1}, {Key: "nModified", Value: 0},
		{Key: "upserted", Value: bson.A{bson.D{{Key: "index", Value: 0}, {Key: "_id", Value: "r"}}}}}
	duplicateR = bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0}, {Key: "nModified", Value: 0},
		{Key: "writeErrors", Value: bson.A{bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 11000}, {Key: "errmsg", Value: "E11000 duplicate key: _id r"}}}}}
	duplicateFAM = bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: 11000}, {Key: "codeName", Value: "DuplicateKey"}, {Key: "errmsg", Value: "E11000 duplicate key: _id r"}}
	unauthorized = bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: 13}, {Key: "codeName", Value: "Unauthorized"}, {Key: "errmsg", Value: "not authorized"}}
	noValue      = bson.D{{Key: "ok", Value: 1}, {Key: "value", Value: nil}}
)

// found is a find's reply of docs.
func found(docs ...any) bson.D {
	docs = append(make([]any, 0, len(docs)), docs...) // an array, not null, when empty
	return bson.D{{Key: "ok", Value: 1}, {Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "ns", Value: "app.resources"}, {Key: "firstBatch", Value: bson.A(docs)}}}}
}

// fenced is a document r carrying the fencing token tok.
func fenced(tok int64) bson.D {
	return bson.D{{Key: "_id", Value: "r"}, {Key: mongolock.FenceField, Value: tok}}
}

// A fenced write that is not one (a replacement, an update of FenceField
// by any operator or pipeline stage, an upsert without an equality on
// _id, a filter that is not a document, a token no acquisition gave) is
// ErrInvalidArgument of its operation, and sends nothing.
func TestFencedWriteThatIsNotOneSendsNothing(t *testing.T) {
	coll, _, log := loggedColl(t)
	ctx := t.Context()
	F := mongolock.FenceField
	set := func(k string, v any) bson.D { return bson.D{{Key: "$set", Value: bson.D{{Key: k, Value: v}}}} }
	invalidRaw := bson.Raw{5, 0, 0, 0, 1} // a length that is not its own
	for _, tc := range []struct {
		name           string
		tok            int64
		filter, update any
		upsert         bool
	}{
		{"replacement", 1, byID("r"), bson.D{{Key: "writer", Value: "x"}}, false},
		{"empty", 1, byID("r"), bson.D{}, false},
		{"an operator of no document", 1, byID("r"), bson.D{{Key: "$set", Value: 1}}, false},
		{"an update that is not a document", 1, byID("r"), invalidRaw, false},
		{"$set of a field inside it", 1, byID("r"), set(F+".x", 1), false},
		{"$max of it", 1, byID("r"), bson.D{{Key: "$max", Value: bson.D{{Key: F, Value: 99}}}}, false},
		{"$rename of it", 1, byID("r"), bson.D{{Key: "$rename", Value: bson.D{{Key: F, Value: "a"}}}}, false},
		{"$rename to it", 1, byID("r"), bson.D{{Key: "$rename", Value: bson.D{{Key: "a", Value: F}}}}, false},
		{"mongo.Pipeline $set", 1, byID("r"), mongo.Pipeline{set(F, 99)}, false},
		{"[]bson.D $addFields", 1, byID("r"), []bson.D{{{Key: "$addFields", Value: bson.D{{Key: F, Value: 1}}}}}, false},
		{"bson.A $unset", 1, byID("r"), bson.A{bson.D{{Key: "$unset", Value: F}}}, false},
		{"[]any $unset of several", 1, byID("r"), []any{set("a", 1), bson.D{{Key: "$unset", Value: bson.A{"a", F + ".x"}}}}, false},
		{"a stage that is not a document", 1, byID("r"), bson.A{invalidRaw}, false},
		{"a filter that is not a document", 1, invalidRaw, set("a", 1), false},
		{"an upsert without _id", 1, bson.D{{Key: "key", Value: "r"}}, set("a", 1), true},
		{"an upsert of _id $in", 1, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"r", "s"}}}}}, set("a", 1), true},
		{"token 0", 0, byID("r"), set("a", 1), false},
		{"a negative token", -3, byID("r"), set("a", 1), false},
		{"nil filter", 1, nil, set("a", 1), false},
		{"nil update", 1, byID("r"), nil, false},
	} {
		_, err := mongolock.FencedUpdateOne(ctx, coll, token(tc.tok), tc.filter, tc.update, options.UpdateOne().SetUpsert(tc.upsert))
		requireInvalid(t, err, "fenced update one")
		err = mongolock.FencedFindOneAndUpdate(ctx, coll, token(tc.tok), tc.filter, tc.update, options.FindOneAndUpdate().SetUpsert(tc.upsert)).Err()
		requireInvalid(t, err, "fenced find one and update")
		require.Empty(t, log.commands(), tc.name)
	}
	_, err := mongolock.FencedUpdateOne(ctx, nil, token(1), byID("r"), set("a", 1))
	requireInvalid(t, err, "fenced update one")
}

// A fenced write sends the user's filter with the token check, and the
// user's update with the token's record: a $max of FenceField beside the
// user's own $max, or a last pipeline stage that sets it to the higher of
// the two, whichever form the pipeline is given in. An equality on _id
// that is a document, not an operator, is one for an upsert.
func TestFencedWriteSendsTheTokenCheckAndTheTokensRecord(t *testing.T) {
	F := mongolock.FenceField
	check := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: F, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: F, Value: bson.D{{Key: "$lte", Value: int64(7)}}}},
	}}}
	record := bson.D{{Key: "$set", Value: bson.D{{Key: F, Value: bson.D{{Key: "$max", Value: bson.A{"$" + F, int64(7)}}}}}}}
	stage := bson.D{{Key: "$set", Value: bson.D{{Key: "writer", Value: "pipe"}}}}
	unsetOthers := bson.D{{Key: "$unset", Value: bson.A{"a", "b"}}}
	for _, tc := range []struct {
		name           string
		filter, update any
		want           bson.D
	}{
		{"operators and the user's $max", byID("r"),
			bson.D{{Key: "$set", Value: bson.D{{Key: "w", Value: 1}}}, {Key: "$max", Value: bson.D{{Key: "n", Value: 4}}}, {Key: "$rename", Value: bson.D{{Key: "a", Value: "b"}}}},
			bson.D{{Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "w", Value: 1}}}, {Key: "$rename", Value: bson.D{{Key: "a", Value: "b"}}},
				{Key: "$max", Value: bson.D{{Key: "n", Value: 4}, {Key: F, Value: int64(7)}}}}}}},
		{"bson.Raw", byID("r"), mustMarshal(t, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
			bson.D{{Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}, {Key: "$max", Value: bson.D{{Key: F, Value: int64(7)}}}}}}},
		{"mongo.Pipeline", byID("r"), mongo.Pipeline{stage, unsetOthers}, bson.D{{Key: "u", Value: bson.A{stage, unsetOthers, record}}}},
		{"[]bson.D", byID("r"), []bson.D{stage}, bson.D{{Key: "u", Value: bson.A{stage, record}}}},
		{"bson.A", byID("r"), bson.A{stage}, bson.D{{Key: "u", Value: bson.A{stage, record}}}},
		{"[]any", bson.D{{Key: "_id", Value: bson.D{{Key: "tenant", Value: 1}}}}, []any{stage},
			bson.D{{Key: "u", Value: bson.A{stage, record}}}},
	} {
		coll, replies, log := loggedColl(t)
		replies.AddResponses(updated)
		_, err := mongolock.FencedUpdateOne(t.Context(), coll, token(7), tc.filter, tc.update, upsert)
		require.NoError(t, err, tc.name)
		sent := log.commands()["update"]
		require.Len(t, sent, 1, tc.name)
		var got struct{ Updates []bson.D }
		require.NoError(t, bson.Unmarshal(sent[0], &got))
		require.Len(t, got.Updates, 1)
		stmt := map[string]any{}
		for _, e := range got.Updates[0] {
			stmt[e.Key] = e.Value
		}
		filter := bson.D{{Key: "$and", Value: bson.A{tc.filter, check}}}
		require.Equal(t, canonical(t, filter), canonical(t, stmt["q"]), tc.name)
		require.Equal(t, canonical(t, tc.want[0].Value), canonical(t, stmt["u"]), tc.name)
	}
}

// mustMarshal is v as BSON.
func mustMarshal(t *testing.T, v any) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(v)
	require.NoError(t, err)
	return raw
}

// canonical is v as extended JSON, for comparing a document however it
// was built or decoded.
func canonical(t *testing.T, v any) string {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	require.NoError(t, err)
	var d bson.D
	require.NoError(t, bson.Unmarshal(raw, &d))
	out, err := bson.MarshalExtJSON(d, false, false)
	require.NoError(t, err)
	return string(out)
}

// The round trips a log saw, by command name, in order.
func roundTrips(log *commandLog) []string {
	log.mu.Lock()
	defer log.mu.Unlock()
	var names []string
	for _, c := range log.sent {
		names = append(names, c.Index(0).Key())
	}
	return names
}

// When a fenced update matched nothing, and only then, a second round
// trip reads the document the user's filter matches: a higher token there
// is ErrFenced; a lower or no token, or no document, is no match, as
// UpdateOne reports it; a failed read is the write's error, not ErrFenced.
func TestFencedUpdateOneTellsARefusalFromNoMatchInASecondRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replies []bson.D
		fenced  bool
		failed  string
		trips   []string
	}{
		{"matched", []bson.D{updated}, false, "", []string{"update"}},
		{"a higher token", []bson.D{matchedNone, found(fenced(9))}, true, "", []string{"update", "find"}},
		{"a lower token", []bson.D{matchedNone, found(fenced(3))}, false, "", []string{"update", "find"}},
		{"no token", []bson.D{matchedNone, found(byID("r"))}, false, "", []string{"update", "find"}},
		{"no document", []bson.D{matchedNone, found()}, false, "", []string{"update", "find"}},
		{"the read failed", []bson.D{matchedNone, unauthorized}, false, "telling a refusal from no match", []string{"update", "find"}},
		{"the update failed", []bson.D{unauthorized}, false, "not authorized", []string{"update"}},
	} {
		coll, replies, log := loggedColl(t)
		replies.AddResponses(tc.replies...)
		res, err := mongolock.FencedUpdateOne(t.Context(), coll, token(5), byID("r"), setWriter("five"), nil)
		require.Equal(t, tc.trips, roundTrips(log), tc.name)
		switch {
		case tc.fenced:
			require.ErrorIs(t, err, mongolock.ErrFenced, tc.name)
			var me *mongolock.Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, "fenced update one", me.Op)
		case tc.failed != "":
			require.ErrorContains(t, err, tc.failed, tc.name)
			require.NotErrorIs(t, err, mongolock.ErrFenced, tc.name)
		default:
			require.NoError(t, err, tc.name)
			require.Equal(t, int64(len(tc.trips)%2), res.MatchedCount, tc.name)
		}
	}
}

// A fenced upsert whose insert met the _id's unique index (another upsert
// inserted the document at the same moment) reads the document: a higher
// token is ErrFenced; a lower one is tried once more, when it matches; a
// second duplicate is the driver's error, seen through.
func TestFencedUpsertThatMetADuplicateIsTriedOnceMoreOrFenced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fam     bool
		replies []bson.D
		want    func(t *testing.T, err error)
		trips   int
	}{
		{"a lower token: tried again", false, []bson.D{duplicateR, found(fenced(3)), upsertedR},
			func(t *testing.T, err error) { require.NoError(t, err) }, 3},
		{"a higher token", false, []bson.D{duplicateR, found(fenced(9))},
			func(t *testing.T, err error) { require.ErrorIs(t, err, mongolock.ErrFenced) }, 2},
		{"a duplicate again", false, []bson.D{duplicateR, found(fenced(3)), duplicateR, found(fenced(3))},
			func(t *testing.T, err error) { require.True(t, mongo.IsDuplicateKeyError(err), "%v", err) }, 4},
		{"findAndModify, a lower token: tried again", true, []bson.D{duplicateFAM, found(fenced(3)), bson.D{{Key: "ok", Value: 1}, {Key: "value", Value: fenced(5)}}},
			func(t *testing.T, err error) { require.NoError(t, err) }, 3},
		{"findAndModify, a higher token", true, []bson.D{duplicateFAM, found(fenced(9))},
			func(t *testing.T, err error) { require.ErrorIs(t, err, mongolock.ErrFenced) }, 2},
		{"findAndModify, a duplicate again", true, []bson.D{duplicateFAM, found(), duplicateFAM, found()},
			func(t *testing.T, err error) { require.True(t, mongo.IsDuplicateKeyError(err), "%v", err) }, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coll, replies, log := loggedColl(t)
			replies.AddResponses(tc.replies...)
			var err error
			if tc.fam {
				err = mongolock.FencedFindOneAndUpdate(t.Context(), coll, token(5), byID("r"), setWriter("five"),
					options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Err()
			} else {
				_, err = mongolock.FencedUpdateOne(t.Context(), coll, token(5), byID("r"), setWriter("five"), upsert)
			}
			tc.want(t, err)
			require.Len(t, roundTrips(log), tc.trips)
		})
	}
}

// FencedFindOneAndUpdate with no document returned: without upsert, a
// second round trip tells ErrFenced from mongo.ErrNoDocuments; with
// upsert, returning the document before the update, it did insert, and
// nothing more is sent. Its other errors are *Error of its operation,
// naming the election whose Leadership gave the token.
func TestFencedFindOneAndUpdateOfNoDocumentReturned(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		upsert  bool
		replies []bson.D
		want    error
		trips   int
	}{
		{"a higher token", false, []bson.D{noValue, found(fenced(9))}, mongolock.ErrFenced, 2},
		{"no document", false, []bson.D{noValue, found()}, mongo.ErrNoDocuments, 2},
		{"an upsert that inserted", true, []bson.D{noValue}, mongo.ErrNoDocuments, 1},
	} {
		coll, replies, log := loggedColl(t)
		replies.AddResponses(tc.replies...)
		err := mongolock.FencedFindOneAndUpdate(ctx, coll, token(5), byID("r"), setWriter("five"),
			options.FindOneAndUpdate().SetUpsert(tc.upsert)).Err()
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Len(t, roundTrips(log), tc.trips, tc.name)
	}

	synctest.Test(t, func(t *testing.T) {
		p, err := mongolocktest.NewStore().NewProvider()
		require.NoError(t, err)
		defer func() { require.NoError(t, p.Close(context.Background())) }()
		leader, err := p.Election("billing").Campaign(t.Context(), "me")
		require.NoError(t, err)
		coll, replies, _ := loggedColl(t)
		replies.AddResponses(unauthorized)
		err = mongolock.FencedFindOneAndUpdate(t.Context(), coll, leader, byID("r"), setWriter("leader")).Err()
		var me *mongolock.Error
		require.ErrorAs(t, err, &me)
		require.Equal(t, mongolock.Error{Op: "fenced find one and update", Name: "billing", Err: me.Err}, *me)
		require.ErrorContains(t, err, "not authorized")
		require.NoError(t, leader.Release(t.Context()))
		time.Sleep(time.Second) // simulated: the idle senders end
	})
}

// Fencing tokens: per name, every acquisition's token is greater than every
// earlier one, whatever happened in between.

// requireTokenInDocument checks that the document holds h's acquisition with
// h's token, stored as an int64.
func requireTokenInDocument(t *testing.T, e *lockEnv, h *mongolock.Handle) {
	t.Helper()
	requireToken(t, rawLockDoc(t, e.coll, h.Name()), h)
}

// requireToken checks that doc, h's lock's document, holds h's token as
// an int64.
func requireToken(t *testing.T, doc bson.Raw, h *mongolock.Handle) {
	t.Helper()
	require.NotNil(t, doc, "the document of %q", h.Name())
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

func TestFencingTokenIncreasesAfterTheDocumentIsDeleted(t *testing.T) {
	conformance.Over(t, tokenIncreasesAfterDeletion)
}

func tokenIncreasesAfterDeletion(e *conformance.Env) {
	t, ctx := e.T, e.Ctx
	p, other, within := lossWatch(e)
	log := &tokenLog{t: t}
	inDocument := func(h *mongolock.Handle) {
		t.Helper()
		requireToken(t, e.Doc(mongolock.DefaultCollection, h.Name()), h)
	}

	// Build up a few tokens by +1 steps first, so that a reset to a floor
	// that is merely close to the old tokens would show.
	for range 10 {
		h, err := p.Lock("deleted").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h.FencingToken(), "a release")
		require.NoError(t, h.Release(ctx))
	}

	for i := range 20 {
		p := p
		if i%2 == 1 {
			p = other
		}
		h, err := p.Lock("deleted").TryAcquire(ctx)
		require.NoError(t, err)
		acquired := time.Now()
		log.add(h.FencingToken(), "a deletion of the free document")
		inDocument(h)
		if i%4 == 0 {
			// Deleted while held: the holder loses it.
			afterTheMillisecondOf(acquired)
			e.Remove(mongolock.DefaultCollection, "deleted")
			awaitClosed(t, h.Lost(), within, "Lost after the document was deleted")
			require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
			continue
		}
		require.NoError(t, h.Release(ctx))
		afterTheMillisecondOf(acquired)
		e.Remove(mongolock.DefaultCollection, "deleted")
	}
}
