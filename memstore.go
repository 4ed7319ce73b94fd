package mongolock

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/memdb"
)

// memStore is a collection of a database in process memory (memdb): the
// engine's statements are applied to its documents as the server applies
// them, at the database's clock and through its network faults, with the
// driver's replies and errors. It adds nothing of its own: no waiting, no
// lines, no grants; those are the engine's, as over MongoDB.
type memStore struct {
	db   memdb.Conn
	coll string
}

// newMemProvider returns a Provider with opts over s, a database named db
// in process memory, or the error NewProvider returns for them. It is a
// process of its own, as a replica of a service with its own client is;
// the providers of one s share their locks, as those of one database do.
func newMemProvider(s memdb.Conn, db string, opts []Option) (*Provider, error) {
	o, err := buildConfig(db, opts)
	if err != nil {
		return nil, &Error{Op: opNewProvider, Err: err}
	}
	return newProvider(o, memCollection(s, db, o.collection), memCollection(s, db, o.collection+semSuffix)), nil
}

// memCollection is the collection coll of s, with state of its own: the
// provider that has it is a process.
func memCollection(s memdb.Conn, db, coll string) lockCollection {
	return lockCollection{memStore{s, coll}, db, coll, newCollState()}
}

// write runs op, a statement that may write, as one round trip. A ctx
// that has ended sends nothing, as the driver does not.
func (m memStore) write(ctx context.Context, op func(c *memdb.Table, now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.db.Write(ctx, m.coll, op)
}

// read is write of op, which only reads, at read concern "local".
func (m memStore) read(ctx context.Context, op func(c *memdb.Table, now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.db.Read(ctx, m.coll, op)
}

// returning is send (write or read) of op, a statement with a result.
func returning[T any](ctx context.Context, send func(context.Context, func(*memdb.Table, time.Time) error) error, op func(c *memdb.Table, now time.Time) (T, error)) (res T, err error) {
	err = send(ctx, func(c *memdb.Table, now time.Time) (err error) {
		res, err = op(c, now)
		return err
	})
	return res, err
}

func (m memStore) findOneAndUpdate(ctx context.Context, filter, update, projection any) (bson.Raw, error) {
	return returning(ctx, m.write, func(c *memdb.Table, now time.Time) (bson.Raw, error) {
		return c.FindOneAndUpdate(now, filter, update, memdb.FindOneAndUpdateOptions{After: true, Projection: projection})
	})
}

func (m memStore) updateOne(ctx context.Context, filter, update any) (int64, int64, error) {
	return m.update(ctx, (*memdb.Table).UpdateOne, filter, update)
}

func (m memStore) updateMany(ctx context.Context, filter, update any) (int64, int64, error) {
	return m.update(ctx, (*memdb.Table).UpdateMany, filter, update)
}

// update is do of op, an update, with the counts of its reply.
func (m memStore) update(ctx context.Context, op func(*memdb.Table, time.Time, any, any) (int, int, error), filter, update any) (matched, modified int64, err error) {
	err = m.write(ctx, func(c *memdb.Table, now time.Time) error {
		n, k, err := op(c, now, filter, update)
		matched, modified = int64(n), int64(k)
		return err
	})
	return matched, modified, err
}

func (m memStore) insertOne(ctx context.Context, doc any) error {
	return m.write(ctx, func(c *memdb.Table, now time.Time) error { return c.InsertOne(now, doc) })
}

func (m memStore) find(ctx context.Context, filter, projection any) ([]bson.Raw, error) {
	return returning(ctx, m.read, func(c *memdb.Table, now time.Time) ([]bson.Raw, error) { return c.Find(now, filter, projection) })
}

// aggregate runs the whole pipeline in one round trip (one $$NOW, as the
// server's), then hands the documents over one by one: batchSize changes
// nothing.
func (m memStore) aggregate(ctx context.Context, pipeline any, _ int32, each func(bson.Raw) bool) error {
	docs, err := returning(ctx, m.read, func(c *memdb.Table, now time.Time) ([]bson.Raw, error) { return c.Aggregate(now, pipeline) })
	for _, d := range docs {
		if !each(d) {
			break
		}
	}
	return err
}

// The model has no indexes but _id's, and no TTL monitor: the TTL index
// operations do nothing and report the index as the library creates it,
// so that nothing is logged. Documents are never deleted by age; the
// engine judges expiry on every statement, as over MongoDB.

func (memStore) createIndex(context.Context, mongo.IndexModel) error { return nil }

func (memStore) indexes(context.Context) ([]bson.Raw, error) {
	ix, err := bson.Marshal(bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "expiresAt", Value: int32(1)}}},
		{Key: "name", Value: TTLIndexName}, {Key: "expireAfterSeconds", Value: int32(ttlGraceSeconds)}})
	return []bson.Raw{ix}, err
}

func (memStore) collMod(context.Context, bson.D) error { return nil }

// listCollections reports no options: the model compares strings byte by
// byte, the simple collation.
func (m memStore) listCollections(ctx context.Context) ([]bson.Raw, error) {
	return nil, m.read(ctx, func(*memdb.Table, time.Time) error { return nil })
}

// watch opens a change stream of the collection in one round trip, then
// delivers its events as they come, in this goroutine, until ctx ends or
// a read fails (history lost, the cursor killed), with the error the
// driver would return. It reads as the driver's getMores do: it waits for
// events within a read, so the stream is never idle while it runs, and a
// stream whose reply was lost, which nobody reads, times out.
func (m memStore) watch(ctx context.Context, pipeline mongo.Pipeline, ready func(), event func(bson.RawValue)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, err := m.db.Watch(ctx, m.coll, pipeline)
	if err != nil {
		return err
	}
	defer s.Close()
	ready()
	for {
		ev, err := s.Next()
		switch {
		case err != nil:
			return err
		case ev != nil:
			event(ev.Lookup("documentKey", "_id"))
			continue
		}
		if s.Wait(ctx) != nil {
			return nil // ctx ended
		}
	}
}
