package mongolock

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

const indexTimeout = 30 * time.Second

// ensureIndex creates the TTL index in the background, at most once per
// process for each client, database and collection, and raises a smaller
// expireAfterSeconds of an existing one to the grace. Failure is not an
// error, only logged (WithLogger): the index may exist with other options,
// or the user may lack the createIndex or collMod permission; locking never
// depends on it (expiry is judged on every acquisition). The index keeps
// the collection small, and its grace keeps documents long enough for their
// fencing tokens to count.
func (p *Provider) ensureIndex(sp *collection) {
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
		var ix struct {
			Name               string        `bson:"name"`
			ExpireAfterSeconds bson.RawValue `bson:"expireAfterSeconds"`
		}
		if bson.Unmarshal(raw, &ix) != nil {
			return 0, false
		}
		if ix.Name == TTLIndexName {
			return ix.ExpireAfterSeconds.AsInt64OK()
		}
	}
	return 0, false
}
