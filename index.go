package mongolock

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TTLIndexName is the name of the TTL index on expiresAt, with which the
// server deletes a lock document an hour after its lease ended.
//
// The library creates it once per process and collection, in the
// background. DistributedLock.MongoDB creates the same index with
// expireAfterSeconds 0, and ignores the conflict when it finds ours.
const TTLIndexName = "expiresAt_ttl"

// ttlGraceSeconds is how long a released or expired document stays: one
// hour. A re-created document's token floor comes from the server's clock,
// so the grace is how far that clock may step back without tokens going back.
const ttlGraceSeconds = 3600

// ttlIndex: createIndex of the TTL index.
func ttlIndex() mongo.IndexModel {
	return mongo.IndexModel{Keys: obj("expiresAt", 1), Options: options.Index().SetName(TTLIndexName).SetExpireAfterSeconds(ttlGraceSeconds)}
}

// If createIndex finds the index with other options (IndexOptionsConflict),
// listIndexes reads its expireAfterSeconds, and collMod (raiseTTL) raises a
// smaller one to the grace. A larger one, or none (no TTL), is left alone.
const indexOptionsConflict = 85

func raiseTTL(coll string) bson.D {
	return obj("collMod", coll, "index", obj("name", TTLIndexName, "expireAfterSeconds", int32(ttlGraceSeconds)))
}

const indexTimeout = 30 * time.Second

// ensureIndex creates the TTL index in the background, at most once per
// process for each client, database and collection, and raises a smaller
// expireAfterSeconds of an existing one to the grace. Failure is not an
// error, only logged (WithLogger): the index may exist with other options,
// or the user may lack the createIndex or collMod permission; locking never
// depends on it (expiry is judged on every acquisition). The index keeps
// the collection small, and its grace keeps documents long enough for their
// fencing tokens to count.
func (p *Provider) ensureIndex(sp *lockCollection) {
	st, db, name := sp.store, sp.db, sp.name
	sp.indexOnce.Do(func() {
		p.background(indexTimeout, func(ctx context.Context) {
			err := st.createIndex(ctx, ttlIndex())
			var se mongo.ServerError
			if errors.As(err, &se) && se.HasErrorCode(indexOptionsConflict) {
				secs, ok := ttlSeconds(ctx, st)
				switch {
				case ok && secs < ttlGraceSeconds:
					err = st.collMod(ctx, raiseTTL(name))
				case ok:
					err = nil // ours already, keeping documents as long or longer
				}
			}
			p.tel.indexFailed(db, name, err)
		})
	})
}

// ttlSeconds returns the expireAfterSeconds of the index named TTLIndexName,
// if it has one.
func ttlSeconds(ctx context.Context, st store) (int64, bool) {
	all, err := st.indexes(ctx)
	if err != nil {
		return 0, false
	}
	for _, raw := range all {
		if name, _ := raw.Lookup("name").StringValueOK(); name == TTLIndexName {
			return raw.Lookup("expireAfterSeconds").AsInt64OK()
		}
	}
	return 0, false
}

// indexFailed tells the hooks, and logs (Info), err, if not nil, of
// creating or raising the TTL index of coll.
func (t *telemetry) indexFailed(db, coll string, err error) {
	if err == nil {
		return
	}
	if hook := t.trace.IndexFailed; hook != nil {
		hook(IndexInfo{Database: db, Collection: coll, Index: TTLIndexName, Err: err})
	}
	t.log.Info("mongolock: could not create the TTL index; idle lock documents stay in the collection",
		"collection", coll, "index", TTLIndexName, "error", err)
}
