package mongolock_test

// The TTL index on expiresAt (index.go): the first acquisition in a
// collection creates it, once, and an existing one is raised to the grace
// period, never lowered.

import (
	"fmt"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
