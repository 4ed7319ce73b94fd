// Package mongolock provides distributed locks on MongoDB.
//
// A lock is one document in a collection (default "distributed_locks"),
// taken with a single atomic findOneAndUpdate whose aggregation-pipeline
// update is judged by the server's clock ($$NOW), so client clocks never
// matter. A Provider, one per application, mints locks, semaphores,
// reader-writer locks and elections that share its options.
//
// The words of this documentation:
//
//   - An acquisition is one taking of a lock (or of a semaphore's slot, an
//     RWLock's read or write lock, a leadership); its Handle is what the
//     caller holds of it, until Release or a loss.
//   - The lease is how long an acquisition keeps others out unless it is
//     extended: the expiry (WithExpiry, 30s by default) from the server's
//     $$NOW at its last acquisition or extension. A crashed holder keeps
//     the lock for at most that long.
//   - An extension moves a held lease's end to the server's now plus the
//     expiry; a Provider extends its handles' leases together, one round
//     trip per 1,000, every extension cadence (WithExtensionCadence).
//   - A loss is a lease that could not be kept: the Handle's Lost channel
//     closes and its Context ends (cause ErrLockLost) before the server
//     would let anyone else in.
//   - The fencing token is a number every acquisition of a name carries,
//     greater than every earlier one of the name. A resource that refuses
//     tokens lower than the highest it has seen keeps out a holder that
//     lost the lock without knowing it (FencedUpdateOne).
//   - A hand-over is a release that, in the same round trip, acquires the
//     lock for the next Acquire of its process waiting for it: a new
//     acquisition, with a new fencing token.
//   - A turn is a process's run of acquisitions in a row while another
//     process waits: at most 8 for a lock, one term for an election. A
//     refused Acquire claims the next turn for its process in the lock's
//     document, and the holder's process steps aside for it once its turn
//     is over. The rule in full: docs/contention.md in the repository.
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
