package mongolock_test

// The lock collection as the library reaches it (mongostore.go): with the
// library's concerns on every command, whatever the database's.

import (
	"context"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

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
			// It gives up once the stream is opened, which a refusal's reply
			// starts: a deadline could end it before any reply.
			c := releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock("c")))
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			waited := acquireInBackground(wctx, p.Lock("c"))
			pollUntil(t, 20*time.Second, "the release events' stream", func() bool { return len(log.commands()["aggregate"]) > 0 })
			cancel()
			require.ErrorIs(t, <-waited, mongolock.ErrNotAcquired)
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
