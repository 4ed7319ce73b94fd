package mongolock

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TTLIndexName is the name of the index {expiresAt: 1} with
// expireAfterSeconds 0 that lets the server delete idle lock documents.
// DistributedLock.MongoDB creates the same index under the same name.
const TTLIndexName = "expiresAt_ttl"

const indexTimeout = 30 * time.Second

// ensureIndex creates the TTL index in the background, at most once per
// process for each client, database and collection. Failure is not an
// error: the index may exist with other options, or the user may lack the
// createIndex permission; locking never depends on it (expiry is judged on
// every acquisition), the index only keeps the collection small.
func (p *Provider) ensureIndex() {
	p.shared.indexOnce.Do(func() {
		p.background(indexTimeout, func(ctx context.Context) {
			_ = createTTLIndex(ctx, p.coll)
		})
	})
}

func createTTLIndex(ctx context.Context, coll *mongo.Collection) error {
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "expiresAt", Value: 1}},
		Options: options.Index().SetName(TTLIndexName).SetExpireAfterSeconds(0),
	})
	return err
}
