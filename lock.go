package mongolock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A Lock is a named distributed lock. It holds no state of its own: every
// Acquire or TryAcquire that succeeds returns a new Handle, and the lock is
// held until that Handle is released or lost. A Lock is safe for concurrent
// use; two Acquire calls on the same Lock compete like any two holders.
type Lock struct {
	p    *Provider
	name string
}

// Name returns the lock's name, exactly as given.
func (l *Lock) Name() string { return l.name }

// lockDoc is the lock document (PROTOCOL.md, "The document"); the field
// names are shared with DistributedLock.MongoDB 1.0.
type lockDoc struct {
	ID           string    `bson:"_id"`
	LockID       string    `bson:"lockId"`
	AcquiredAt   time.Time `bson:"acquiredAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	FencingToken int64     `bson:"fencingToken"`
	Waiters      []struct {
		P string    `bson:"p"`
		U time.Time `bson:"u"`
	} `bson:"waiters"` // processes waiting in line (fair.go)
	Process string `bson:"process"` // the last mongolock holder's process (fair.go)
	Streak  int    `bson:"streak"`  // its acquisitions in a row
}

const (
	// maxCreateTries bounds how often one attempt creates the lock document
	// or retries after losing the race to create it (see attempt).
	maxCreateTries = 5
	// cleanupTimeout bounds a background release of an acquisition nobody
	// will get a handle for (guarantee 6), or of a failed Release.
	cleanupTimeout = 5 * time.Second
	// tokenFloorScale makes the fencing token's floor toLong($$NOW) * 1024:
	// a re-created document still outranks every earlier token, and up to
	// 1024 acquisitions per millisecond keep strictly increasing by +1.
	tokenFloorScale = 1024
)

var epoch = bson.NewDateTimeFromTime(time.Unix(0, 0))

// expired is true when the document is free: no holder ever, released, or
// lease over, judged by the server's clock. It is DistributedLock.MongoDB's
// expression, so both libraries agree on who holds a lock.
var expired = bson.D{{Key: "$lte", Value: bson.A{
	bson.D{{Key: "$ifNull", Value: bson.A{"$expiresAt", epoch}}},
	"$$NOW",
}}}

// leaseEnd is $$NOW + expiry: $add rather than $dateAdd, which needs 5.0.
func leaseEnd(expiry time.Duration) bson.D {
	return bson.D{{Key: "$add", Value: bson.A{"$$NOW", expiry.Milliseconds()}}}
}

// acquireUpdate is the aggregation pipeline of an acquisition attempt: if
// the lock is free (expired, and not reserved for another process's waiter:
// see fair.go), take it with a fresh lockId; otherwise leave the holder's
// fields as they are. The first two stages decide (into two scratch fields
// that the last stage removes), the third writes; every stage of one
// update is one atomic step.
//
// The fencing token is max(old + 1, toLong($$NOW) * 1024): it increases by
// one per acquisition, and it also outranks every earlier token when the
// document was deleted (by the TTL monitor, a person, or
// DistributedLock.MongoDB's release) and is created anew.
func acquireUpdate(lockID string, expiry time.Duration, f fairness) mongo.Pipeline {
	token := bson.D{{Key: "$max", Value: bson.A{
		bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$fencingToken", int64(0)}}}, int64(1)}}},
		bson.D{{Key: "$multiply", Value: bson.A{bson.D{{Key: "$toLong", Value: "$$NOW"}}, int64(tokenFloorScale)}}},
	}}}
	live, free, fairFields := f.exprs()
	ifFree := func(then, otherwise any) bson.D {
		return bson.D{{Key: "$cond", Value: bson.A{"$" + freeField, then, otherwise}}}
	}
	// Refused, an attempt leaves the holder as it is; a hand-over that may
	// not hand over releases (handoff.go).
	keptID, keptExpiry := any("$lockId"), any("$expiresAt")
	if f.from != "" {
		keptID, keptExpiry = "$$REMOVE", "$$NOW"
	}
	fields := bson.D{
		{Key: "lockId", Value: ifFree(lockID, keptID)},
		{Key: "acquiredAt", Value: ifFree("$$NOW", "$acquiredAt")},
		{Key: "expiresAt", Value: ifFree(leaseEnd(expiry), keptExpiry)},
		{Key: "fencingToken", Value: ifFree(token, "$fencingToken")},
	}
	return mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: liveField, Value: live}}}},
		{{Key: "$set", Value: bson.D{{Key: freeField, Value: free}}}},
		{{Key: "$set", Value: append(fields, fairFields...)}},
		{{Key: "$unset", Value: bson.A{liveField, freeField}}},
	}
}

// releaseUpdate frees the lock at once but keeps the document, and with it
// the fencing token: the holder is cleared and the lease ends now (the
// server's clock). A plain update rather than a pipeline: the server does
// less, and it is encoded once.
var releaseUpdate = mustMarshal(bson.D{
	{Key: "$unset", Value: bson.D{{Key: "lockId", Value: ""}}},
	{Key: "$currentDate", Value: bson.D{{Key: "expiresAt", Value: true}}},
})

func mustMarshal(doc bson.D) bson.Raw {
	raw, err := bson.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return raw
}

func ownerFilter(name, lockID string) bson.D {
	return bson.D{{Key: "_id", Value: name}, {Key: "lockId", Value: lockID}}
}

func newLockID() string {
	id := uuid.New()
	return hex.EncodeToString(id[:])
}

// TryAcquire makes one attempt to take the lock. It returns a Handle if the
// lock was free, ErrNotAcquired if someone else holds it, or another error
// if the attempt failed (the server, the network, or ctx). ctx bounds only
// the round trip; the Handle lives until released or lost.
func (l *Lock) TryAcquire(ctx context.Context) (*Handle, error) {
	if ctx == nil {
		return nil, l.errorf("try acquire", errNilContext)
	}
	h, _, err := l.attempt(ctx, false)
	if err != nil {
		return nil, l.errorf("try acquire", err)
	}
	return h, nil
}

// Acquire waits until it holds the lock or ctx ends. Between attempts it
// sleeps as configured by WithBusyWaitSleep and WithAdaptiveBackoff.
// Transient server and network errors are retried; an error that retrying
// cannot fix (a name the server cannot store, missing permission) is
// returned at once.
//
// Acquire calls of one process for the same lock (same client, database,
// collection and name) wait in line, first come first served: only the
// first talks to the database. When a handle of this process releases the
// lock, the release hands it to the next in line in the same round trip
// (unless another process's turn has come); when one is lost, the next in
// line attempts at once instead of sleeping. A call whose ctx ends leaves
// the line without disturbing the others. Where the server has change
// streams, a release in another process also wakes the first in line.
// Between attempts, processes in line take turns (fair.go).
//
// When ctx ends first, the error satisfies errors.Is(err, ctx.Err()), and
// also errors.Is(err, ErrNotAcquired) if the lock was held by someone else
// the whole time, so that contention can be told from an outage.
func (l *Lock) Acquire(ctx context.Context) (_ *Handle, err error) {
	if ctx == nil {
		return nil, l.errorf("acquire", errNilContext)
	}
	o := l.p.opts
	b := backoff{min: o.sleepMin, max: o.sleepMax, adaptive: o.adaptive}
	// Processes in line get the lock in turn when it comes free: they poll
	// with short sleeps growing from the minimum up to a few times it
	// (fair.go).
	bt := o.frontBackoff()
	var inLine bool // an attempt put this process in the line
	qs := &l.p.shared.queues
	w := qs.join(l)
	var watching bool // this call counts as a waiter for release events
	defer func() {
		if watching {
			l.p.shared.notify.leave()
		}
	}()
	defer func() {
		left, untaken := qs.leave(l.name, w)
		if untaken != nil {
			// Handed over as ctx ended: nobody will use it.
			l.p.background(cleanupTimeout, func(ctx context.Context) { _ = untaken.Release(ctx) })
		}
		if err != nil && inLine && left == 0 {
			// Nobody of this process waits any more: do not keep others
			// waiting for us.
			l.p.leaveLine(l.name)
		}
	}()
	var (
		lastErr      error // the last error other than contention
		contended    bool  // the lock was seen held by someone else
		failures     int   // attempts that did not get the lock
		soonFailures int   // of those, the ones in a row near the front of the line
		timer        = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		if h := qs.takeHandoff(w); h != nil {
			return h, nil
		}
		var sleep <-chan time.Time // nil: wait for a wake-up only
		head, heldHere := qs.state(l.name, w)
		if !head || heldHere {
			// Someone of this process is ahead in line or holds the lock:
			// the database has nothing new to say until they are done.
			contended = true
		} else {
			h, turn, err := l.attempt(ctx, true)
			failures++
			inLine = inLine || turn.inLine
			switch {
			case err == nil:
				return h, nil
			case errors.Is(err, ErrNotAcquired):
				contended = true
				if !watching {
					// Held by another process: its release may be
					// announced (notify.go).
					watching = true
					l.p.shared.notify.join(l.p.coll, qs.wakeHead, &l.p.shared.bg)
				}
			case ctx.Err() != nil || endedByDeadline(ctx, err):
				// The attempt was cut short by ctx: it tells nothing.
			case isTransient(err):
				lastErr = err
			default:
				return nil, l.errorf("acquire", err)
			}
			if turn.soon {
				soonFailures++
				d := bt.next(soonFailures)
				if left, ok := qs.observe(l.name, turn, time.Now()); ok {
					if turn.first {
						// Poll when the lock is due to come free, not later.
						d = max(min(d, left), o.sleepMin)
					} else {
						// Others go first: no sooner than that.
						d = max(d, min(left, o.sleepMax))
					}
				}
				timer.Reset(d)
			} else {
				soonFailures = 0
				timer.Reset(b.next(failures))
			}
			sleep = timer.C
		}
		select {
		case <-w.wake:
			continue
		case <-sleep:
			continue
		case <-ctx.Done():
		}
		switch {
		case lastErr != nil:
			return nil, l.errorf("acquire", fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr))
		case contended:
			return nil, l.errorf("acquire", fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err()))
		default: // no attempt came back before ctx ended
			return nil, l.errorf("acquire", ctx.Err())
		}
	}
}

// Do acquires the lock (waiting, as Acquire), runs fn, and releases the lock,
// also when fn panics. fn's ctx ends when ctx ends or the lock is lost; its
// cause is then ErrLockLost. Do returns fn's error; if the lock was lost
// while fn ran, the error also satisfies errors.Is(err, ErrLockLost). If the
// lock cannot be acquired, fn does not run and Do returns Acquire's error. A nil
// fn is an error, returned before anything is acquired.
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if ctx == nil {
		return l.errorf("do", errNilContext)
	}
	if fn == nil {
		return l.errorf("do", errors.New("nil function"))
	}
	h, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// Release even when ctx is already over: the caller is done with
		// the lock, and others should not wait for its lease to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := h.Release(rctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })
	defer stop()
	return fn(fctx)
}

// attempt is one acquisition attempt: one findOneAndUpdate round trip on an
// existing lock document.
//
// The update never upserts. When there is no document, attempt inserts a bare
// one ({_id, expiresAt: epoch}; a duplicate key means someone else just did)
// and then updates it. Two reasons:
//
//   - The fencing token's server-time floor must come from a $$NOW taken
//     after the previous document was deleted. Servers take $$NOW when a
//     statement starts (FerretDB/DocumentDB, measured: up to 85 ms before it
//     gets the row under contention), so an upsert that started before a
//     deletion could re-create the document with a floor below tokens issued
//     meanwhile. An update of an existing row always sees the row's current
//     token instead, and the insert orders the deletion before our $$NOW.
//   - Concurrent upserts of a brand-new _id fail on FerretDB with duplicate
//     key (code 1) or "$$NOW cannot be used" errors rather than being
//     retried by the server as MongoDB does.
//
// FerretDB/DocumentDB answers a findAndModify whose pipeline uses $$NOW and
// whose filter matches nothing with "(FailedToParse) The $$NOW operator
// cannot be used within this specific context" instead of no document; both
// lead to creating the document (see mayBeMissing).
//
// join says whether a refused attempt puts this process in the lock's line
// of waiting processes (fair.go); turn says what a refused attempt saw.
func (l *Lock) attempt(ctx context.Context, join bool) (h *Handle, turn turn, err error) {
	l.p.ensureIndex()
	pipeline := l.p.tryPipeline
	if join {
		pipeline = l.p.waitPipeline
	}
	for tries := 0; ; tries++ {
		// A fresh lockId per round trip: a cleanup of one can never free
		// another.
		lockID := newLockID()
		update := pipeline.with(lockID, "")
		sent := time.Now()
		doc, err := l.p.acquireRoundTrip(ctx, l.name, update, lockID)
		switch {
		case err == nil && doc.LockID == lockID:
			return newHandle(l, lockID, doc.FencingToken, sent), turn, nil
		case err == nil:
			turn = turnOf(doc, l.p.shared.id)
			return nil, turn, ErrNotAcquired
		case !mayBeMissing(err):
		case tries >= maxCreateTries:
			// The document keeps vanishing (deleted as soon as created) or
			// others keep racing to create it: contention, not failure.
			return nil, turn, fmt.Errorf("%w (the lock document was created and removed concurrently: %w)", ErrNotAcquired, err)
		default:
			if err := l.create(ctx); err != nil {
				return nil, turn, err
			}
			continue
		}
		return nil, turn, err
	}
}

// leaveLine removes this process from name's line, in the background.
func (p *Provider) leaveLine(name string) {
	p.background(cleanupTimeout, func(ctx context.Context) {
		filter := bson.D{{Key: "_id", Value: name}, {Key: "waiters.p", Value: p.shared.id}}
		_, _ = p.coll.UpdateOne(ctx, filter, leaveLineUpdate(p.shared.id))
	})
}

// acquireRoundTrip sends one acquisition and waits for its reply or for ctx.
//
// No orphans (guarantee 6): if ctx ends first, the request may already be on
// the server, and a release sent now could overtake it there. So the request
// is not cancelled: it finishes in the background (for at most
// cleanupTimeout more), and if it turns out to have acquired the lock, that
// acquisition is released at once, since nobody will get a handle for it. A
// request that fails ambiguously (the connection dropped after sending) is
// released in the background too.
func (p *Provider) acquireRoundTrip(ctx context.Context, name string, update rawArray, lockID string) (lockDoc, error) {
	filter := bson.D{{Key: "_id", Value: name}}
	orphan := func(doc lockDoc, err error) {
		switch {
		case err == nil && doc.LockID == lockID:
			p.releaseInBackground(name, lockID, once)
		case err == nil && turnOf(doc, p.shared.id).inLine && p.shared.queues.waiting(name) == 0:
			// It put this process in the line, but nobody of this process
			// waits any more (fair.go).
			p.leaveLine(name)
		case err != nil && isAmbiguous(err):
			p.releaseInBackground(name, lockID, cleanupSchedule)
		}
	}
	if ctx.Done() == nil { // cannot end: no need for a goroutine
		var doc lockDoc
		err := p.coll.FindOneAndUpdate(ctx, filter, update, p.acquireOpts).Decode(&doc)
		if err != nil && isAmbiguous(err) {
			orphan(doc, err)
		}
		return doc, err
	}

	type result struct {
		doc lockDoc
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
		timeout   *time.Timer
		reply     = make(chan result, 1)
	)
	opCtx, cancelOp := context.WithCancel(context.WithoutCancel(ctx))
	p.shared.bg.Add(1)
	go func() {
		defer p.shared.bg.Done()
		var r result
		r.err = p.coll.FindOneAndUpdate(opCtx, filter, update, p.acquireOpts).Decode(&r.doc)
		mu.Lock()
		cancelOp()
		if timeout != nil {
			timeout.Stop()
		}
		if !abandoned {
			reply <- r
			mu.Unlock()
			if r.err != nil && isAmbiguous(r.err) {
				orphan(r.doc, r.err)
			}
			return
		}
		mu.Unlock()
		orphan(r.doc, r.err)
	}()
	select {
	case r := <-reply:
		return r.doc, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-reply: // it finished meanwhile: take it
		return r.doc, r.err
	default:
	}
	abandoned = true
	timeout = time.AfterFunc(cleanupTimeout, cancelOp)
	return lockDoc{}, ctx.Err()
}

// create inserts the lock's document, free, unless it exists already. Its
// expiresAt lets the TTL index remove it should nobody ever acquire it.
func (l *Lock) create(ctx context.Context) error {
	_, err := l.p.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: l.name}, {Key: "expiresAt", Value: epoch}})
	if err != nil && !isDuplicateKey(err) {
		return err
	}
	return nil
}

// releaseInBackground releases lockID's acquisition of name, if it holds it,
// without waiting: for acquisitions nobody will get a handle for, and for a
// Release whose round trip failed. It is owner-checked, so it can never free
// someone else's acquisition.
//
// It tries at each wait of schedule until one matches. An acquisition whose
// reply has arrived needs one try (once); otherwise it may still be on its
// way to the server (the caller gave up waiting for the reply, not the
// server for the request) and a release on another connection can overtake
// it, so cleanupSchedule repeats the release for a while.
func (p *Provider) releaseInBackground(name, lockID string, schedule []time.Duration) {
	p.background(cleanupTimeout, func(ctx context.Context) {
		filter := ownerFilter(name, lockID)
		for _, wait := range schedule {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
			res, err := p.coll.UpdateOne(ctx, filter, releaseUpdate)
			if err == nil && res.MatchedCount > 0 || isClosed(err) {
				return
			}
		}
	})
}

// Schedules for releaseInBackground: how long it waits before each try.
var (
	once            = []time.Duration{0}
	cleanupSchedule = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond}
)

var errNilContext = errors.New("nil context.Context")

// errorf wraps err with the operation and the lock's name (shortened: names
// may be megabytes long).
func (l *Lock) errorf(op string, err error) error {
	name := l.name
	if len(name) > 64 {
		cut := 61
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut] + "..."
	}
	return &Error{Op: op, Name: name, Err: err}
}

// Error is the error type of every failed operation on a lock: the
// operation, the lock's name (shortened past 64 bytes), and the cause, which
// errors.Is and errors.As see through.
type Error struct {
	Op   string // "acquire", "try acquire", "do", "release"
	Name string
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("mongolock: %s %q: %s", e.Op, e.Name, strings.TrimPrefix(e.Err.Error(), "mongolock: "))
}

func (e *Error) Unwrap() error { return e.Err }
