package mongolock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// The privileges locking needs (docs-draft-permissions.md): find, insert
// and update on the lock collection. Without createIndex the TTL index is
// not created, and nothing else changes; without changeStream (replica
// sets) waiters poll.
//
// It needs a server that enforces access control and has custom roles,
// with MONGODB_URI authenticating a user allowed to create roles and users
// (userAdmin on the test databases, e.g. root). FerretDB has neither
// (--no-auth; no createRole): there TestAcquireWorksWhenAnExpiresAtIndexExistsWithOtherOptions
// makes createIndexes fail another way.
func TestLockingNeedsOnlyFindInsertUpdateOnTheCollection(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	admin := testdb.Client(t)
	db := testdb.Database(t)
	var status struct {
		AuthInfo struct {
			Users []bson.Raw `bson:"authenticatedUsers"`
		} `bson:"authInfo"`
	}
	require.NoError(t, admin.Database("admin").RunCommand(ctx, bson.D{{Key: "connectionStatus", Value: 1}}).Decode(&status))
	if len(status.AuthInfo.Users) == 0 {
		t.Skipf("needs a server that enforces access control, with MONGODB_URI authenticating a user that may create roles; %s does not authenticate this client", testdb.Info(t).Name())
	}
	const role, user, pwd = "mongolock_locker", "mongolock_locker", "mongolock-test-password"
	err := db.RunCommand(ctx, bson.D{
		{Key: "createRole", Value: role},
		{Key: "privileges", Value: bson.A{bson.D{
			{Key: "resource", Value: bson.D{{Key: "db", Value: db.Name()}, {Key: "collection", Value: mongolock.DefaultCollection}}},
			{Key: "actions", Value: bson.A{"find", "insert", "update"}},
		}}},
		{Key: "roles", Value: bson.A{}},
	}).Err()
	if err != nil {
		t.Skipf("needs custom roles (createRole), which %s refused: %v", testdb.Info(t).Name(), err)
	}
	t.Cleanup(func() { _ = db.RunCommand(context.Background(), bson.D{{Key: "dropRole", Value: role}}).Err() })
	require.NoError(t, db.RunCommand(ctx, bson.D{
		{Key: "createUser", Value: user}, {Key: "pwd", Value: pwd},
		{Key: "roles", Value: bson.A{bson.D{{Key: "role", Value: role}, {Key: "db", Value: db.Name()}}}},
	}).Err())
	t.Cleanup(func() { _ = db.RunCommand(context.Background(), bson.D{{Key: "dropUser", Value: user}}).Err() })

	c := testdb.NewClient(t, options.Client().SetAuth(options.Credential{Username: user, Password: pwd, AuthSource: db.Name()}))
	coll := c.Database(db.Name()).Collection(mongolock.DefaultCollection)
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "x", Value: 1}}})
	var se mongo.ServerError
	require.ErrorAs(t, err, &se, "the user may create indexes: the test proves nothing")
	require.True(t, se.HasErrorCode(13), "want Unauthorized (13): %v", err)

	// Acquire (creating the document), be waited for, be extended past
	// several expiries, release, and Do: all as the restricted user.
	const expiry = 500 * time.Millisecond
	p := newProvider(t, c.Database(db.Name()), mongolock.WithExpiry(expiry))
	other := newProvider(t, db, mongolock.WithExpiry(expiry))
	h, err := p.Lock("restricted").Acquire(ctx)
	require.NoError(t, err)
	staysOpen(t, h.Lost(), 3*expiry, "Lost of a handle extended by the restricted user")
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = other.Lock("restricted").Acquire(wctx)
	cancel()
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, p.Lock("restricted").Do(ctx, func(context.Context) error { return nil }))
	mongolock.WaitBackground(p)

	// The TTL index was tried, and refused.
	names, err := db.Collection(mongolock.DefaultCollection).Indexes().ListSpecifications(ctx)
	require.NoError(t, err)
	for _, s := range names {
		require.NotEqual(t, mongolock.TTLIndexName, s.Name, "created without the privilege?")
	}
}
