package mongolock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Lease keeping.
//
// One scheduler per collection (client, database, collection) extends the
// leases of every handle held there, so a process holding N locks runs one
// goroutine and sends about ceil(N/maxBatch) round trips per cadence, not N
// of each: handles that are due together are extended together by one
// updateMany. The scheduler runs only while handles are held.
//
// Each handle's lease is measured on the client's monotonic clock from when
// its last successful acquire or extend was *sent*: the server computed its
// expiresAt from a $$NOW no earlier than that, so the client's deadline
// (minus a safety margin) comes before the server's. A timer per handle
// (time.AfterFunc: no goroutine until it fires) signals loss at that
// deadline, however long a round trip takes, so the loss is signalled before
// anyone else can take the lock. Transient errors are retried until the
// deadline; a handle that an extension did not match (someone else holds the
// lock, or its document was deleted) is lost at once.

// maxBatch bounds how many handles one extension round trip covers.
const maxBatch = 500

// scheduler keeps the leases of one collection's handles.
type scheduler struct {
	mu      sync.Mutex
	leases  map[*Handle]*lease
	origins map[*Provider]time.Time // each provider's extension grid (tick)
	running bool
	planned time.Time     // when run will look again at the latest
	wake    chan struct{} // room for one signal: look again
}

type lease struct {
	next     time.Time   // when the next extension is due
	deadline time.Time   // the client's end of the lease
	timer    *time.Timer // signals loss at deadline
	inFlight bool        // an extension is on its way
	lastErr  error       // the last failed extension's error
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// tick returns the first tick of p's extension grid at or after t; s.mu
// must be held. All of a provider's leases are extended on the same ticks,
// one cadence apart, so that one round trip per maxBatch handles serves
// them all. A new lease is first extended at the first tick after its
// acquisition: within one cadence, as if it had no grid to keep to.
func (s *scheduler) tick(p *Provider, t time.Time) time.Time {
	origin, ok := s.origins[p]
	if !ok {
		s.origins[p] = t
		return t.Add(p.opts.cadence)
	}
	c := p.opts.cadence
	k := (t.Sub(origin) + c - 1) / c
	return origin.Add(k * c)
}

// keep starts keeping h's lease, acquired by a request sent at sent.
func (s *scheduler) keep(h *Handle, sent time.Time) {
	p := h.lock.p
	o := p.opts
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		s.leases = make(map[*Handle]*lease)
		s.origins = make(map[*Provider]time.Time)
		s.wake = make(chan struct{}, 1)
	}
	l := &lease{next: s.tick(p, sent), deadline: sent.Add(o.expiry - o.safetyMargin())}
	l.timer = time.AfterFunc(time.Until(l.deadline), func() { s.expire(h) })
	s.leases[h] = l
	switch {
	case !s.running:
		s.running = true
		go s.run()
	case l.next.Before(s.planned):
		// Only then: run scans every lease each time it looks.
		s.signal()
	}
}

// forget stops keeping h's lease (it is being released). No extension of h
// starts afterwards; one already on its way cannot match once the release
// has cleared the lockId.
func (s *scheduler) forget(h *Handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drop(h) && len(s.leases) == 0 {
		s.signal() // so that run ends
	}
}

// drop removes h's lease, if kept; s.mu must be held. It reports whether h
// was kept.
func (s *scheduler) drop(h *Handle) bool {
	l := s.leases[h]
	if l == nil {
		return false
	}
	l.timer.Stop()
	delete(s.leases, h)
	close(h.unkept)
	return true
}

// expire runs when h's lease timer fires: unless an extension moved the
// deadline meanwhile, the lease ran out.
func (s *scheduler) expire(h *Handle) {
	s.mu.Lock()
	l := s.leases[h]
	if l == nil || time.Now().Before(l.deadline) {
		s.mu.Unlock()
		return
	}
	lastErr := l.lastErr
	s.drop(h)
	s.mu.Unlock()
	h.leaseOver(lastErr)
}

// run extends due leases until no handle is kept.
func (s *scheduler) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if len(s.leases) == 0 {
			s.running = false
			clear(s.origins) // providers are not kept alive by an idle scheduler
			s.mu.Unlock()
			return
		}
		now := time.Now()
		due := make(map[*Provider][]*Handle)
		next := now.Add(time.Hour)
		for h, l := range s.leases {
			switch {
			case l.inFlight:
			case !l.next.After(now):
				l.inFlight = true
				due[h.lock.p] = append(due[h.lock.p], h)
			case l.next.Before(next):
				next = l.next
			}
		}
		s.planned = next
		s.mu.Unlock()
		for p, hs := range due {
			for len(hs) > 0 {
				n := min(len(hs), maxBatch)
				go s.extend(p, hs[:n])
				hs = hs[n:]
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-s.wake:
		}
	}
}

// extend extends the leases of hs (of one provider) in one round trip, and
// records the outcome for each.
func (s *scheduler) extend(p *Provider, hs []*Handle) {
	o := p.opts
	s.mu.Lock()
	var latest time.Time
	for _, h := range hs {
		if l := s.leases[h]; l != nil && l.deadline.After(latest) {
			latest = l.deadline
		}
	}
	s.mu.Unlock()

	sent := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	lost, err := extendLeases(ctx, p.coll, hs, p.extend)

	retry := min(o.cadence/4, 250*time.Millisecond)
	var gone []*Handle
	s.mu.Lock()
	for _, h := range hs {
		l := s.leases[h]
		if l == nil {
			continue // released, or its lease ran out, meanwhile
		}
		l.inFlight = false
		switch {
		case isClosed(err):
			// Nothing sent through this client will ever succeed: lost
			// now, rather than when the lease runs out.
			s.drop(h)
			gone = append(gone, h)
		case err != nil:
			l.lastErr = err
			l.next = time.Now().Add(retry)
		case lost[h]:
			s.drop(h)
			gone = append(gone, h)
		default:
			l.lastErr = nil
			l.deadline = sent.Add(o.expiry - o.safetyMargin())
			l.next = s.tick(p, sent.Add(o.cadence/2)) // the tick after this one
			l.timer.Reset(time.Until(l.deadline))
		}
	}
	s.signal()
	s.mu.Unlock()
	for _, h := range gone {
		if err != nil {
			h.markLost(fmt.Errorf("%w: its client was disconnected (%w)", ErrLockLost, err))
		} else {
			h.markLost(fmt.Errorf("%w: someone else holds it, or its document was deleted", ErrLockLost))
		}
	}
}

// extendLeases pushes the leases of hs to $$NOW + expiry in one
// owner-checked round trip, and reports which handles it did not match. Only
// when a batch did not match them all does it read their documents to find
// out which (one more round trip).
func extendLeases(ctx context.Context, coll *mongo.Collection, hs []*Handle, update bson.A) (map[*Handle]bool, error) {
	if len(hs) == 1 {
		res, err := coll.UpdateOne(ctx, ownerFilter(hs[0].lock.name, hs[0].lockID), update)
		if err != nil || res.MatchedCount == 1 {
			return nil, err
		}
		return map[*Handle]bool{hs[0]: true}, nil
	}
	names, ids := make(bson.A, len(hs)), make(bson.A, len(hs))
	for i, h := range hs {
		names[i], ids[i] = h.lock.name, h.lockID
	}
	res, err := coll.UpdateMany(ctx, batchFilter(names, ids), update)
	if err != nil || int(res.MatchedCount) == len(hs) {
		return nil, err
	}
	filter, projection := holdersQuery(names)
	cur, err := coll.Find(ctx, filter, options.Find().SetProjection(projection))
	if err != nil {
		return nil, err
	}
	var docs []struct {
		ID     string `bson:"_id"`
		LockID string `bson:"lockId"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	holder := make(map[string]string, len(docs))
	for _, d := range docs {
		holder[d.ID] = d.LockID
	}
	lost := make(map[*Handle]bool)
	for _, h := range hs {
		if holder[h.lock.name] != h.lockID {
			lost[h] = true
		}
	}
	return lost, nil
}
