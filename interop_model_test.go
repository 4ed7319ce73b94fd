package mongolock_test

// The C# library DistributedLock.MongoDB's protocol (internal/dotnet) over
// the model: its statements applied to the model's documents, beside
// mongolock's processes, in simulated time. That the two protocols'
// statements agree on a real engine is the server tier's
// (integration_test.go).

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
	"github.com/mongolock/mongolock/internal/memdb"
)

// memDotnetLock is a lock of the C# protocol on a client of its own to a
// memDB: one attempt at a time, as dotnetLock on a server.
type memDotnetLock struct {
	client *memdb.Store
	name   string
}

func (d *memDB) dotnetLock(name string) *memDotnetLock {
	return &memDotnetLock{client: d.store.Client(), name: name}
}

// tryAcquire makes one attempt: the C# findOneAndUpdate with upsert, which
// the model, having no upsert, applies to an inserted {_id: name} when no
// document matches, in the same operation, as the server does. It returns
// nil and no error when the lock is held by someone else.
func (l *memDotnetLock) tryAcquire(ctx context.Context) (*dotnetHandle, error) {
	lockID := dotnet.NewLockID()
	filter := bson.D{{Key: "_id", Value: l.name}}
	update := dotnet.AcquireUpdate(lockID, dotnet.DefaultExpiry)
	var raw bson.Raw
	err := l.client.Do(ctx, mongolock.DefaultCollection, func(c *memdb.Table, now time.Time) (err error) {
		raw, err = c.FindOneAndUpdate(now, filter, update, memdb.FindOneAndUpdateOptions{After: true})
		if errors.Is(err, mongo.ErrNoDocuments) {
			if err = c.InsertOne(now, filter); err == nil {
				raw, err = c.FindOneAndUpdate(now, filter, update, memdb.FindOneAndUpdateOptions{After: true})
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var doc struct {
		LockID       string `bson:"lockId"`
		FencingToken int64  `bson:"fencingToken"`
	}
	if err := bson.Unmarshal(raw, &doc); err != nil || doc.LockID != lockID {
		return nil, err
	}
	return &dotnetHandle{lockID: lockID, token: doc.FencingToken}, nil
}

// release is the C# release: it deletes the document if h still holds the
// lock, and reports whether it did.
func (l *memDotnetLock) release(ctx context.Context, h *dotnetHandle) (deleted bool, err error) {
	err = l.client.Do(ctx, mongolock.DefaultCollection, func(c *memdb.Table, now time.Time) (err error) {
		deleted, err = c.DeleteOne(now, bson.D{{Key: "_id", Value: l.name}, {Key: "lockId", Value: h.lockID}})
		return err
	})
	return deleted, err
}

// A lock the C# protocol holds is not acquired by mongolock until the C#
// holder releases it: TryAcquire is refused, and an Acquire ended by its
// deadline anywhere in its attempts (during a round trip, or in a sleep
// between two: the deadlines step through a quarter of a round trip at a
// time) is ErrNotAcquired with DeadlineExceeded. mongolock's attempts leave
// the C# holder's lockId in place, so its owner-checked delete still
// matches, and the acquisition after it outranks the C# token.
func TestLockHeldByDotnetProtocolOverTheModelIsNotAcquiredUntilDotnetReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const trip = 4 * time.Millisecond
		ctx := t.Context()
		d := newMemDB(t)
		cs := d.dotnetLock("shared-report")
		dh, err := cs.tryAcquire(ctx)
		require.NoError(t, err)
		require.NotNil(t, dh, "the C# protocol must acquire a lock nobody holds")

		p, net := d.process(mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
		net.Delay(trip)
		l := p.Lock("shared-report")
		for range 3 {
			h, err := l.TryAcquire(ctx)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired)
			require.Nil(t, h)
		}
		for wait := trip + time.Millisecond; wait < 20*trip; wait += trip / 4 {
			actx, cancel := context.WithTimeout(ctx, wait)
			h, err := l.Acquire(actx)
			cancel()
			require.Nil(t, h)
			require.ErrorIs(t, err, context.DeadlineExceeded, "deadline %v", wait)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "deadline %v", wait)
		}

		deleted, err := cs.release(ctx, dh)
		require.NoError(t, err)
		require.True(t, deleted, "the C# holder's lockId must still be on the document")
		h := mustTryAcquire(t, ctx, l)
		require.Greater(t, h.FencingToken(), dh.token)
		require.NoError(t, h.Release(ctx))
	})
}
