package mongolock

import (
	"context"
	"time"
)

const indexTimeout = 30 * time.Second

// ensureIndex creates the TTL index in the background, at most once per
// process for each client, database and collection. Failure is not an
// error: the index may exist with other options, or the user may lack the
// createIndex permission; locking never depends on it (expiry is judged on
// every acquisition), the index only keeps the collection small.
func (p *Provider) ensureIndex() {
	p.local.indexOnce.Do(func() {
		p.background(indexTimeout, func(ctx context.Context) {
			_, _ = p.coll.Indexes().CreateOne(ctx, ttlIndex())
		})
	})
}
