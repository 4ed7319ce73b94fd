package mongolock

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// store is one collection of lock documents as the engine uses it:
// every statement the engine sends goes through it. Values in and out are
// bson values and the driver's errors (mongo.ErrNoDocuments for no match,
// a server's refusal as a mongo.ServerError), so that the engine does not
// depend on the store beneath it.
type store interface {
	// findOneAndUpdate updates the first document that filter matches and
	// returns it as it is after the update, only projection's fields if
	// projection is not nil; mongo.ErrNoDocuments if none matched.
	findOneAndUpdate(ctx context.Context, filter, update, projection any) (bson.Raw, error)
	// updateOne and updateMany update the first document, or every
	// document, that filter matches.
	updateOne(ctx context.Context, filter, update any) (matched, modified int64, err error)
	updateMany(ctx context.Context, filter, update any) (matched, modified int64, err error)
	insertOne(ctx context.Context, doc any) error
	// find returns the documents that filter matches, with projection's
	// fields.
	find(ctx context.Context, filter, projection any) ([]bson.Raw, error)
	// aggregate runs pipeline and calls each with every document it
	// returns, in order, until each returns false. The documents come
	// batchSize at a time (0: the server's default), so that a long
	// listing streams; a document is valid only during its call.
	aggregate(ctx context.Context, pipeline any, batchSize int32, each func(doc bson.Raw) bool) error

	// createIndex creates index; indexes lists the collection's indexes;
	// collMod runs cmd, a collMod of the collection, on its database.
	createIndex(ctx context.Context, index mongo.IndexModel) error
	indexes(ctx context.Context) ([]bson.Raw, error)
	collMod(ctx context.Context, cmd bson.D) error
	// listCollections returns the collection's options as listCollections
	// reports them: none if it does not exist yet.
	listCollections(ctx context.Context) ([]bson.Raw, error)

	// watch runs a change stream of the collection's events that match
	// pipeline until ctx ends, calling ready once it is open and event
	// with each event's documentKey._id. It returns nil when ctx ends,
	// else why the stream could not open or ended.
	watch(ctx context.Context, pipeline mongo.Pipeline, ready func(), event func(id bson.RawValue)) error
}

// mongoStore is a collection on MongoDB, with the library's concerns
// (collectionConcerns).
type mongoStore struct {
	coll *mongo.Collection
}

// collectionConcerns override the database's. The read after a partial
// batch of extensions decides which handles are still held: at "local" on
// the primary it sees every write the batch saw, and every majority-written
// one, also after a failover; "majority" could show a state older than the
// batch's and keep a lost handle.
var collectionConcerns = options.Collection().
	SetWriteConcern(writeconcern.Majority()).
	SetReadPreference(readpref.Primary()).
	SetReadConcern(readconcern.Local())

func newMongoStore(db *mongo.Database, name string) mongoStore {
	return mongoStore{db.Collection(name, collectionConcerns)}
}

func (c mongoStore) findOneAndUpdate(ctx context.Context, filter, update, projection any) (bson.Raw, error) {
	opts := acquireOptions // built once: the acquisitions of locks send it
	if projection != nil {
		opts = options.FindOneAndUpdate().SetReturnDocument(options.After).SetProjection(projection)
	}
	return c.coll.FindOneAndUpdate(ctx, filter, update, opts).Raw()
}

func (c mongoStore) updateOne(ctx context.Context, filter, update any) (int64, int64, error) {
	return updateCounts(c.coll.UpdateOne(ctx, filter, update))
}

func (c mongoStore) updateMany(ctx context.Context, filter, update any) (int64, int64, error) {
	return updateCounts(c.coll.UpdateMany(ctx, filter, update))
}

// updateCounts are what the store reads of an update's reply.
func updateCounts(res *mongo.UpdateResult, err error) (matched, modified int64, _ error) {
	if err != nil {
		return 0, 0, err
	}
	return res.MatchedCount, res.ModifiedCount, nil
}

func (c mongoStore) insertOne(ctx context.Context, doc any) error {
	_, err := c.coll.InsertOne(ctx, doc)
	return err
}

func (c mongoStore) find(ctx context.Context, filter, projection any) ([]bson.Raw, error) {
	cur, err := c.coll.Find(ctx, filter, options.Find().SetProjection(projection))
	if err != nil {
		return nil, err
	}
	var docs []bson.Raw
	err = cur.All(ctx, &docs) // closes the cursor
	return docs, err
}

func (c mongoStore) aggregate(ctx context.Context, pipeline any, batchSize int32, each func(bson.Raw) bool) error {
	opts := options.Aggregate()
	if batchSize > 0 {
		opts.SetBatchSize(batchSize)
	}
	cur, err := c.coll.Aggregate(ctx, pipeline, opts)
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		if !each(cur.Current) {
			return nil
		}
	}
	return cur.Err()
}

func (c mongoStore) createIndex(ctx context.Context, index mongo.IndexModel) error {
	_, err := c.coll.Indexes().CreateOne(ctx, index)
	return err
}

func (c mongoStore) indexes(ctx context.Context) ([]bson.Raw, error) {
	cur, err := c.coll.Indexes().List(ctx)
	if err != nil {
		return nil, err
	}
	var all []bson.Raw
	err = cur.All(ctx, &all)
	return all, err
}

func (c mongoStore) collMod(ctx context.Context, cmd bson.D) error {
	return c.coll.Database().RunCommand(ctx, cmd).Err()
}

func (c mongoStore) listCollections(ctx context.Context) ([]bson.Raw, error) {
	specs, err := c.coll.Database().ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: c.coll.Name()}})
	opts := make([]bson.Raw, len(specs))
	for i, s := range specs {
		opts[i] = s.Options
	}
	return opts, err
}

func (c mongoStore) watch(ctx context.Context, pipeline mongo.Pipeline, ready func(), event func(bson.RawValue)) error {
	// Change streams need read concern majority; the collection reads at local.
	cs, err := c.coll.Clone(options.Collection().SetReadConcern(readconcern.Majority())).Watch(ctx, pipeline)
	if err != nil {
		return err
	}
	ready()
	defer func() { _ = cs.Close(context.WithoutCancel(ctx)) }()
	for cs.Next(ctx) {
		event(cs.Current.Lookup("documentKey", "_id"))
	}
	if ctx.Err() != nil {
		return nil
	}
	return cs.Err()
}
