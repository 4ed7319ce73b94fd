package mongolock

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Semaphores.
//
// A semaphore is a lock with n slots: each acquisition holds one slot, and
// its Handle is a lock's Handle in every way (a lease extended in the
// provider's batches, loss signalled before the server's lease ends,
// owner-checked release, fencing tokens that increase per semaphore), only
// its statements differ (createSemDoc, slotPipeline, semReleaseUpdate,
// semExtendUpdate, semHoldersQuery).

// errSemaphoreSize reports that a semaphore's slots are held with another n.
var errSemaphoreSize error = mismatch("the semaphore is held with another number of slots")

// errOtherKind reports that a Semaphore's name is an RWLock's, or the
// other way round.
var errOtherKind error = mismatch("the name is taken by another kind of lock")

// A mismatch is an ErrMismatch that says which.
type mismatch string

func (m mismatch) Error() string { return string(m) }

func (mismatch) Is(target error) bool { return target == ErrMismatch }

// MaxSemaphoreSlots is the most slots a Semaphore can have.
//
// Its holders share one document, which must stay far below the server's
// 16 MB limit even with owners of MaxOwnerLen bytes (BENCHMARKS.md gives
// the size at this bound).
const MaxSemaphoreSlots = 4096

// A Semaphore lets at most n holders at a time hold it, in this process and
// in others, by the server's clock. A Semaphore is safe for concurrent use.
//
// Semaphores live in the collection "<collection>_semaphores": a Lock and a
// Semaphore of the same name are unrelated. Processes must agree on n:
// while any slot is held, an acquisition with another n fails at once with
// an error (not retried); the first acquisition that finds no slot held
// sets n.
type Semaphore struct {
	lock *Lock
	err  error // a bad n or number of units, returned by every acquisition
}

// Semaphore returns the semaphore called name with n slots; names are used
// as Lock's are. An n below 1 or above MaxSemaphoreSlots makes every
// acquisition fail with ErrInvalidArgument, before anything is sent.
func (p *Provider) Semaphore(name string, n int) *Semaphore {
	s := &Semaphore{lock: &Lock{p: p, name: name, kind: semDriver{n: n, units: 1}}}
	if n < 1 || n > MaxSemaphoreSlots {
		s.err = invalidf("semaphore of %d slots: need 1 <= n <= %d", n, MaxSemaphoreSlots)
	}
	return s
}

// Units returns the semaphore whose every acquisition takes k of its n
// slots at once. A k below 1 or above n makes every acquisition fail with
// ErrInvalidArgument, before anything is sent.
//
// It does across processes what golang.org/x/sync/semaphore's
// Acquire(ctx, k) does within one. Acquire, TryAcquire and Do are s's, and
// each Handle holds its k units with one lease and one fencing token, and
// releases them all at once. Holders of one unit and of several share the
// n slots (s.Units(1) acquires as s does): the units held never exceed n.
// A waiting Acquire's claim (see Acquire) keeps k units free for its
// process, so a stream of smaller requests cannot starve a larger one.
func (s *Semaphore) Units(k int) *Semaphore {
	n := s.lock.kind.describe().slots
	w := &Semaphore{lock: &Lock{p: s.lock.p, name: s.lock.name, kind: semDriver{n: n, units: k}}, err: s.err}
	if w.err == nil && (k < 1 || k > n) {
		w.err = invalidf("%d units of a semaphore of %d slots: need 1 <= k <= n", k, n)
	}
	return w
}

// Name returns the semaphore's name, exactly as given.
func (s *Semaphore) Name() string { return s.lock.name }

// TryAcquire makes one attempt to take a slot. It returns a Handle if fewer
// than n slots were held, ErrNotAcquired if all were, or another error if
// the attempt failed (the server, the network, ctx, or n, see Semaphore).
//
// All but one held count as all while an Acquire of another process claims
// the next free slot. A refused TryAcquire claims nothing. ctx bounds only
// the round trip; the Handle lives until released or lost.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Handle, error) {
	if err := s.check(ctx); err != nil {
		return nil, s.lock.errorf("try acquire", err)
	}
	return s.lock.TryAcquire(ctx) // attempt takes a slot
}

// Acquire waits until it holds a slot or ctx ends, as Lock.Acquire waits
// for a lock. Errors are as Lock.Acquire's; a semaphore held with another n
// (or a name an RWLock holds) is ErrMismatch, returned at once.
//
// Acquire calls of one process wait in line, first come first served, and a
// release in this process hands its slot to the next in line in the same
// round trip. Between processes, a refused Acquire claims the next free
// slot for its process, or takes it over from a process that has waited
// less: while the claim lasts, other processes take a slot only if another
// stays free. A mismatch claims nothing.
func (s *Semaphore) Acquire(ctx context.Context) (*Handle, error) {
	if err := s.check(ctx); err != nil {
		return nil, s.lock.errorf("acquire", err)
	}
	return s.lock.Acquire(ctx)
}

// Do acquires a slot (waiting, as Acquire), runs fn, and releases the slot,
// also when fn panics; as Lock.Do.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := s.check(ctx); err != nil {
		return s.lock.errorf("do", err)
	}
	return s.lock.Do(ctx, fn)
}

func (s *Semaphore) check(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	return s.err
}

// SemaphoreInfo is the state of a Semaphore as the server saw it at
// ServerTime.
type SemaphoreInfo struct {
	// Name is the semaphore's name, exactly as given.
	Name string
	// N is the number of slots the holders hold it with; with no holder,
	// the last acquisition's (the next may set another).
	N int
	// Holders are those whose lease had not ended at ServerTime, in the
	// order they acquired; empty when no slot is held.
	Holders []HolderInfo
	// FencingToken is the last acquisition's token: the greatest issued.
	FencingToken int64
	// ServerTime is the server's clock when it was read.
	ServerTime time.Time
}

// Inspect returns the semaphore's state in one round trip, judged by the
// server's clock. It returns an error wrapping ErrNoLock if the semaphore
// has no document, or an *Error wrapping the round trip's if it failed.
//
// A holder whose lease has ended is not listed, though it was never
// released. The round trip's error is the server's, the network's or
// ctx's. It changes nothing, and ignores the Semaphore's n.
func (s *Semaphore) Inspect(ctx context.Context) (SemaphoreInfo, error) {
	d, err := s.lock.inspectSlots(ctx)
	return SemaphoreInfo{Name: d.Name, N: d.N, Holders: d.holders(false), FencingToken: d.FencingToken, ServerTime: d.Now}, err
}

// semDriver is a Semaphore's kind: its documents list the holders, and
// each acquisition takes units of its n slots (Semaphore.Units). A
// reader-writer lock's share them.
type semDriver struct {
	n     int
	units int // 0 in a reader-writer lock's
}

func (semDriver) collection(p *Provider) *lockCollection { return &p.slots }

func (d semDriver) create(name string) bson.D { return createSemDoc(name, d.n) }

// acquire: only the acquisition asks how many units; the rest finds the
// holder by its id, whatever its units.
func (d semDriver) acquire(ctx context.Context, p *Provider, name string, a attempt) (reply, error) {
	return acquireSlot(ctx, p, name, a, slotAttempt{n: d.n, units: d.units})
}

// semDoc is a slot's acquisition's reply: the document after the update.
type semDoc struct {
	Kind           string      `bson:"kind"`
	N              int         `bson:"n"`
	FencingToken   int64       `bson:"fencingToken"`
	Holders        []semHolder `bson:"holders"`
	WaitingProcess string      `bson:"waitingProcess"`
}

type semHolder struct {
	ID         string    `bson:"id"`
	Token      int64     `bson:"token"`
	AcquiredAt time.Time `bson:"acquiredAt"`
}

// acquireSlot sends one acquisition of sa's units of its n slots in its
// mode rw (0: a semaphore's), or a hand-over from the holder releasing
// (slotPipeline), and returns its reply as a lock's: LockID is the newest
// holder's, a.id if it took a slot.
func acquireSlot(ctx context.Context, p *Provider, name string, a attempt, sa slotAttempt) (reply, error) {
	filter, n, rw := acquireFilter(name), sa.n, sa.rw
	if a.releasing != "" {
		filter = semHolderFilter(name, a.releasing)
	}
	sa.id, sa.releasing, sa.waitToken, sa.proc, sa.owner = a.id, a.releasing, a.waitToken, p.slots.process, p.opts.owner
	sa.mode, sa.expiry, sa.claim = a.mode, p.opts.expiry, p.opts.claimLifetime()
	var doc semDoc
	raw, err := p.slots.store.findOneAndUpdate(ctx, filter, slotPipeline(sa), slotReplyFields)
	if err == nil {
		err = bson.Unmarshal(raw, &doc)
	}
	r := reply{FencingToken: doc.FencingToken, WaitingProcess: doc.WaitingProcess}
	if len(doc.Holders) > 0 { // the newest only: an acquisition is appended
		r.LockID, r.AcquiredAt = doc.Holders[0].ID, doc.Holders[0].AcquiredAt
	}
	switch {
	case err != nil:
	case doc.Kind != slotKind(rw):
		r.wrong = fmt.Errorf("%w (a %s's)", errOtherKind, doc.Kind)
	case rw == 0 && doc.N != n:
		r.wrong = fmt.Errorf("%w: it has %d slots, not %d", errSemaphoreSize, doc.N, n)
	}
	return r, err
}

// release: the hold options do not apply to slots; hold is always 0.
func (semDriver) release(name, id string, _ time.Duration) (bson.D, any) {
	return semHolderFilter(name, id), semReleaseUpdate(id)
}

func (semDriver) extend(_ bson.A, expiry time.Duration, names, ids bson.A) (bson.D, any) {
	return semExtendFilter(names, ids), semExtendUpdate(ids, expiry)
}

func (semDriver) holders(names bson.A) (bson.D, bson.D) { return semHoldersQuery(names) }

func (semDriver) heldBy(raw bson.Raw, seen holderIDs) error {
	var doc struct {
		Holders   []semHolder `bson:"holders"`
		TakenOver []string    `bson:"takenOverIds"`
	}
	err := bson.Unmarshal(raw, &doc)
	for _, h := range doc.Holders {
		seen.held[h.ID] = true
	}
	for _, id := range doc.TakenOver {
		seen.takenOver[id] = true
	}
	return err
}

// limit: a semaphore's process holds at most n slots.
func (d semDriver) limit() (int, bool) { return d.n, false }

func (semDriver) unclaimed() bool { return false }

func (semDriver) holdsApply() bool { return false }

func (d semDriver) describe() kindInfo {
	return kindInfo{kind: KindSemaphore, slots: d.n, units: d.units}
}
