// Package mongolock provides distributed locks on MongoDB.
//
// A lock is one document in a collection (default "distributed_locks"),
// taken with a single atomic findOneAndUpdate whose aggregation-pipeline
// update is judged by the server's clock ($$NOW), so client clocks never
// matter. A held lock is a Handle: its lease is extended in the background
// (together with the provider's other handles, one round trip per 500), and its
// Context and Lost channel signal loss before the server would let anyone
// else in. Every acquisition carries a fencing token that strictly increases
// per lock name. Waiters of one process queue locally, and a release hands
// the lock to the next of them in the same round trip. Between processes, a
// waiter claims the next turn in the lock document, which keeps a freed lock
// for it, and a process that passed the lock on within itself several times
// in a row steps aside for it; only the claimant
// polls often, and a change stream wakes waiters where the server has one.
//
// Basic use:
//
//	p, err := mongolock.NewProvider(db)
//	...
//	h, err := p.Lock("reports").Acquire(ctx)
//	if err != nil {
//		return err
//	}
//	defer h.Release(context.Background())
//	// work with h.Context(), pass h.FencingToken() to the protected resource
//
// The document format is compatible with DistributedLock.MongoDB 1.0: Go and
// .NET services can share a lock. The README and the pages under docs/ in
// the repository state the guarantees, the differences, and how to run it
// in production.
package mongolock
