package mongolock_test

import (
	"context"
	"encoding/base64"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/drivertest"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/xoptions"

	"github.com/mongolock/mongolock"
)

// notUTF8 is a name, a prefix or a value that is not valid UTF-8.
const notUTF8 = "job-\xff\xfe"

// unsentDatabase is a database of a client whose every command fails
// unanswered, and sent counts the commands it started.
func unsentDatabase(t *testing.T) (db *mongo.Database, sent *atomic.Int64) {
	t.Helper()
	sent = &atomic.Int64{}
	o := options.Client().SetMonitor(&event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) { sent.Add(1) }})
	require.NoError(t, xoptions.SetInternalClientOptions(o, "deployment", drivertest.NewMockDeployment()))
	c, err := mongo.Connect(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database("app"), sent
}

// forgedTicket is a ticket of the lock called name, as Handle.Ticket
// encodes one, for the database app and the default collection.
func forgedTicket(t *testing.T, kind mongolock.Kind, name string) string {
	raw, err := bson.Marshal(bson.D{{Key: "k", Value: kind}, {Key: "d", Value: "app"}, {Key: "c", Value: mongolock.DefaultCollection},
		{Key: "n", Value: name}, {Key: "i", Value: "0123456789abcdef0123456789abcdef"}})
	require.NoError(t, err)
	return "mlt1_" + base64.RawURLEncoding.EncodeToString(raw)
}

// A name, a listing's prefix or an election's value that is not valid
// UTF-8 (BSON's strings are UTF-8) is refused with ErrInvalidArgument,
// before anything is sent, wherever it enters: every kind's Acquire,
// TryAcquire and Do, inspection, listing, force release, take-over,
// composites, elections' calls and values. Provider.Lock and its kin
// return no error: the refusal comes at the first call.
func TestANameThatIsNotUTF8IsRefusedUnsent(t *testing.T) {
	db, sent := unsentDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	job := func(context.Context) error { return nil }
	acquire := func(l *mongolock.Lock) func() error {
		return func() error { _, err := l.Acquire(ctx); return err }
	}
	tryAcquire := func(l *mongolock.Lock) func() error {
		return func() error { _, err := l.TryAcquire(ctx); return err }
	}
	do := func(l *mongolock.Lock) func() error { return func() error { return l.Do(ctx, job) } }
	rw, sem, e := p.RWLock(notUTF8), p.Semaphore(notUTF8, 2), p.Election(notUTF8)
	for _, tc := range []struct {
		call string
		run  func() error
	}{
		{"Lock.Acquire", acquire(p.Lock(notUTF8))},
		{"Lock.TryAcquire", tryAcquire(p.Lock(notUTF8))},
		{"Lock.Do", do(p.Lock(notUTF8))},
		{"RWLock.Reader().Acquire", acquire(rw.Reader())},
		{"RWLock.Writer().TryAcquire", tryAcquire(rw.Writer())},
		{"RWLock.Upgradeable().Do", func() error {
			return rw.Upgradeable().Do(ctx, func(context.Context, *mongolock.UpgradeableHandle) error { return nil })
		}},
		{"RWLock.Upgradeable().Acquire", func() error { _, err := rw.Upgradeable().Acquire(ctx); return err }},
		{"RWLock.Inspect", func() error { _, err := rw.Inspect(ctx); return err }},
		{"Semaphore.Acquire", func() error { _, err := sem.Acquire(ctx); return err }},
		{"Semaphore.TryAcquire", func() error { _, err := sem.TryAcquire(ctx); return err }},
		{"Semaphore.Do", func() error { return sem.Do(ctx, job) }},
		{"Semaphore.Units.Acquire", func() error { _, err := sem.Units(2).Acquire(ctx); return err }},
		{"Semaphore.Inspect", func() error { _, err := sem.Inspect(ctx); return err }},
		{"Election.Campaign", func() error { _, err := e.Campaign(ctx, "v"); return err }},
		{"Election.Run", func() error { return e.Run(ctx, "v", func(context.Context, *mongolock.Leadership) {}) }},
		{"Election.Leader", func() error { _, err := e.Leader(ctx); return err }},
		{"Election.TakeOver", func() error {
			_, err := e.TakeOver(ctx, forgedTicket(t, mongolock.KindElection, notUTF8), "v")
			return err
		}},
		{"Election.Campaign's value", func() error { _, err := p.Election("e").Campaign(ctx, notUTF8); return err }},
		{"Election.Run's value", func() error {
			return p.Election("e").Run(ctx, notUTF8, func(context.Context, *mongolock.Leadership) {})
		}},
		{"Election.TakeOver's value", func() error {
			_, err := p.Election("e").TakeOver(ctx, forgedTicket(t, mongolock.KindElection, "e"), notUTF8)
			return err
		}},
		{"Provider.TakeOver", func() error { _, err := p.TakeOver(ctx, forgedTicket(t, mongolock.KindLock, notUTF8)); return err }},
		{"Provider.Inspect", func() error { _, err := p.Inspect(ctx, notUTF8); return err }},
		{"Provider.Locks", func() error {
			for _, err := range p.Locks(ctx, notUTF8) {
				return err
			}
			return nil
		}},
		{"Provider.ForceRelease", func() error { _, err := p.ForceRelease(ctx, notUTF8); return err }},
		{"Provider.ForceReleaseHolder", func() error { _, err := p.ForceReleaseHolder(ctx, notUTF8, "id"); return err }},
		{"Provider.ForceReleaseHolder's id", func() error { _, err := p.ForceReleaseHolder(ctx, "x", notUTF8); return err }},
		{"New", func() error { _, err := mongolock.New(db, notUTF8); return err }},
		{"NewComposite", func() error { _, err := mongolock.NewComposite(p.Lock("a"), p.Lock(notUTF8)); return err }},
		{"NewComposite of a semaphore", func() error { _, err := mongolock.NewComposite(p.Lock("a"), sem); return err }},
	} {
		t.Run(tc.call, func(t *testing.T) {
			err := tc.run()
			require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
			require.ErrorContains(t, err, "UTF-8")
			var me *mongolock.Error
			require.ErrorAs(t, err, &me)
			require.Zero(t, sent.Load(), "sent")
		})
	}
	t.Run("Election.Observe", func(t *testing.T) {
		_, open := <-e.Observe(ctx)
		require.False(t, open, "Observe of a name that is not UTF-8 delivers nothing")
		require.Zero(t, sent.Load(), "sent")
	})
}
