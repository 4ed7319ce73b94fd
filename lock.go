package mongolock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

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
}

const (
	// maxRaceRetries bounds the immediate retries of one attempt that lost
	// the race to create a brand-new lock document (see isUpsertRace).
	maxRaceRetries = 5
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

func ifExpired(then, otherwise any) bson.D {
	return bson.D{{Key: "$cond", Value: bson.A{expired, then, otherwise}}}
}

// leaseEnd is $$NOW + expiry: $add rather than $dateAdd, which needs 5.0.
func leaseEnd(expiry time.Duration) bson.D {
	return bson.D{{Key: "$add", Value: bson.A{"$$NOW", expiry.Milliseconds()}}}
}

// acquireUpdate is the aggregation pipeline of an acquisition attempt: if
// the lock is free, take it with a fresh lockId; otherwise leave the
// document exactly as it is. Every field's $cond sees the document as it was
// before the update, so the decision and the write are one atomic step.
//
// The fencing token is max(old + 1, toLong($$NOW) * 1024): it increases by
// one per acquisition, and it also outranks every earlier token when the
// document was deleted (by the TTL monitor, a person, or
// DistributedLock.MongoDB's release) and is created anew.
func acquireUpdate(lockID string, expiry time.Duration) mongo.Pipeline {
	token := bson.D{{Key: "$max", Value: bson.A{
		bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$fencingToken", int64(0)}}}, int64(1)}}},
		bson.D{{Key: "$multiply", Value: bson.A{bson.D{{Key: "$toLong", Value: "$$NOW"}}, int64(tokenFloorScale)}}},
	}}}
	return mongo.Pipeline{{{Key: "$set", Value: bson.D{
		{Key: "lockId", Value: ifExpired(lockID, "$lockId")},
		{Key: "acquiredAt", Value: ifExpired("$$NOW", "$acquiredAt")},
		{Key: "expiresAt", Value: ifExpired(leaseEnd(expiry), "$expiresAt")},
		{Key: "fencingToken", Value: ifExpired(token, "$fencingToken")},
	}}}}
}

// releaseUpdate frees the lock at once but keeps the document, and with it
// the fencing token: the holder is cleared and the lease ends now.
var releaseUpdate = mongo.Pipeline{{{Key: "$set", Value: bson.D{
	{Key: "lockId", Value: "$$REMOVE"},
	{Key: "expiresAt", Value: "$$NOW"},
}}}}

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
	h, err := l.attempt(ctx)
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
// When ctx ends first, the error satisfies errors.Is(err, ctx.Err()), and
// also errors.Is(err, ErrNotAcquired) if every attempt found the lock held
// by someone else, so that contention can be told from an outage.
func (l *Lock) Acquire(ctx context.Context) (*Handle, error) {
	if ctx == nil {
		return nil, l.errorf("acquire", errNilContext)
	}
	b := backoff{min: l.p.opts.sleepMin, max: l.p.opts.sleepMax, adaptive: l.p.opts.adaptive}
	var lastErr error // the last error other than contention
	var timer *time.Timer
	for failures := 1; ; failures++ {
		h, err := l.attempt(ctx)
		switch {
		case err == nil:
			return h, nil
		case ctx.Err() != nil:
			// The attempt was cut short by ctx; judge by what came before.
		case errors.Is(err, ErrNotAcquired):
		case isTransient(err):
			lastErr = err
		default:
			return nil, l.errorf("acquire", err)
		}
		if ctx.Err() == nil {
			d := b.next(failures)
			if timer == nil {
				timer = time.NewTimer(d)
				defer timer.Stop()
			} else {
				timer.Reset(d)
			}
			select {
			case <-timer.C:
				continue
			case <-ctx.Done():
			}
		}
		if lastErr != nil {
			return nil, l.errorf("acquire", fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr))
		}
		return nil, l.errorf("acquire", fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err()))
	}
}

// Do acquires the lock (waiting, as Acquire), runs fn, and releases the lock,
// also when fn panics. fn's ctx ends when ctx ends or the lock is lost; its
// cause is then ErrLockLost. Do returns fn's error; if the lock was lost
// while fn ran, the error also satisfies errors.Is(err, ErrLockLost). If the
// lock cannot be acquired, fn does not run and Do returns Acquire's error.
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if ctx == nil {
		return l.errorf("do", errNilContext)
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

// attempt is one acquisition attempt: one findOneAndUpdate round trip
// (a few more only when losing the race to create a new document).
func (l *Lock) attempt(ctx context.Context) (*Handle, error) {
	l.p.ensureIndex()
	lockID := newLockID()
	update := acquireUpdate(lockID, l.p.opts.expiry)
	filter := bson.D{{Key: "_id", Value: l.name}}
	for race := 0; ; race++ {
		sent := time.Now()
		var doc lockDoc
		err := l.p.coll.FindOneAndUpdate(ctx, filter, update, l.p.acquireOpts).Decode(&doc)
		switch {
		case err == nil && doc.LockID == lockID:
			return newHandle(l, lockID, doc.FencingToken, sent), nil
		case err == nil:
			return nil, ErrNotAcquired
		case isUpsertRace(err) && race < maxRaceRetries:
			// Another client created the document first; it exists now,
			// so try again at once.
			continue
		case isUpsertRace(err):
			return nil, fmt.Errorf("%w (creating the lock document raced: %w)", ErrNotAcquired, err)
		}
		if isAmbiguous(err) {
			// The update may have been applied even though we got no reply:
			// free that acquisition rather than leave it held for an expiry.
			l.p.releaseInBackground(l.name, lockID)
		}
		return nil, err
	}
}

// releaseInBackground releases lockID's acquisition of name, if it holds it,
// without waiting: for acquisitions nobody will get a handle for, and for a
// Release whose round trip failed. It is owner-checked, so it can never free
// someone else's acquisition.
func (p *Provider) releaseInBackground(name, lockID string) {
	p.background(cleanupTimeout, func(ctx context.Context) {
		_, _ = p.coll.UpdateOne(ctx, ownerFilter(name, lockID), releaseUpdate)
	})
}

var errNilContext = errors.New("nil context.Context")

// errorf wraps err with the operation and the lock's name (shortened: names
// may be megabytes long).
func (l *Lock) errorf(op string, err error) error {
	name := l.name
	if len(name) > 64 {
		name = name[:61] + "..."
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
