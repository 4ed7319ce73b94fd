package main

import (
	"context"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
)

// A locker takes named locks the way one implementation does, for one
// "process" (one client). acquire waits until it holds name or ctx ends.
type locker interface {
	acquire(ctx context.Context, name string) (held, error)
}

// held is one acquisition.
type held struct {
	release func(context.Context) error
	lost    <-chan struct{} // closed if the lock is known lost; nil if never signalled
}

// isLost reports whether h's implementation has signalled its loss.
func (h held) isLost() bool {
	select {
	case <-h.lost:
		return true
	default:
		return false
	}
}

// An impl is one of the implementations compared side by side.
type impl struct {
	name string
	// open returns the locker of one process, keeping its lock documents in
	// coll; expiry is the lease where the implementation has one.
	open func(db *mongo.Database, coll string, expiry time.Duration) (locker, error)
}

var impls = []impl{
	{name: "raw", open: openRaw},
	{name: "mongolock", open: openMongolock},
	{name: "baseline", open: openBaseline},
}

// defaultExpiry is the lease of mongolock and of the baseline unless a
// workload says otherwise (both libraries' default).
const defaultExpiry = mongolock.DefaultExpiry

// raw is the bound: the two round trips a lock needs at the least, a
// findOneAndUpdate to acquire and an updateOne to release, on the lock's
// document, with no locking semantics beyond that (it never waits and
// excludes no one).
type raw struct{ coll *mongo.Collection }

func openRaw(db *mongo.Database, coll string, _ time.Duration) (locker, error) {
	return raw{coll: db.Collection(coll)}, nil
}

var rawAcquireOpts = options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)

func (r raw) acquire(ctx context.Context, name string) (held, error) {
	filter := bson.D{{Key: "_id", Value: name}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "lockId", Value: dotnet.NewLockID()}}}}
	for {
		err := r.coll.FindOneAndUpdate(ctx, filter, update, rawAcquireOpts).Err()
		if err != nil && dotnet.LostCreateRace(err) {
			continue // two first upserts of one _id raced on FerretDB: again
		}
		if err != nil {
			return held{}, err
		}
		return held{release: func(ctx context.Context) error {
			_, err := r.coll.UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: bson.D{{Key: "lockId", Value: ""}}}})
			return err
		}}, nil
	}
}

// mongolockImpl is the library through its public API, one Provider per
// process.
type mongolockImpl struct{ p *mongolock.Provider }

func openMongolock(db *mongo.Database, coll string, expiry time.Duration) (locker, error) {
	p, err := mongolock.NewProvider(db, mongolock.WithCollection(coll), mongolock.WithExpiry(expiry))
	if err != nil {
		return nil, err
	}
	return mongolockImpl{p: p}, nil
}

func (m mongolockImpl) acquire(ctx context.Context, name string) (held, error) {
	return fromHandle(m.p.Lock(name).Acquire(ctx))
}

// fromHandle is a mongolock acquisition as a held.
func fromHandle(h *mongolock.Handle, err error) (held, error) {
	if err != nil {
		return held{}, err
	}
	return held{release: h.Release, lost: h.Lost()}, nil
}

// baseline is DistributedLock.MongoDB 1.0's algorithm, as its source
// has it: one findOneAndUpdate upsert with the $cond pipeline (returning
// the document after), acquired iff the returned lockId is the fresh one;
// one immediate try, then uniformly random 10–800 ms sleeps between tries;
// release by deleteOne({_id, lockId}).
//
// DistributedLock.MongoDB also extends a held lease from a timer per handle;
// the holds measured here are far shorter than the lease, so the baseline
// omits extension (the report says so).
type baseline struct {
	coll   *mongo.Collection
	expiry time.Duration
}

const (
	baselineSleepMin = 10 * time.Millisecond
	baselineSleepMax = 800 * time.Millisecond
)

func openBaseline(db *mongo.Database, coll string, expiry time.Duration) (locker, error) {
	return baseline{coll: db.Collection(coll), expiry: expiry}, nil
}

func (b baseline) acquire(ctx context.Context, name string) (held, error) {
	lockID, err := b.wait(ctx, name)
	if err != nil {
		return held{}, err
	}
	return held{release: func(ctx context.Context) error {
		_, err := dotnet.Release(ctx, b.coll, name, lockID)
		return err
	}}, nil
}

// wait tries until it acquires name, and returns the acquisition's lockId.
func (b baseline) wait(ctx context.Context, name string) (string, error) {
	for {
		lockID, err := b.try(ctx, name)
		switch {
		case err != nil && ctx.Err() != nil:
			return "", ctx.Err()
		case err != nil:
			return "", err
		case lockID != "":
			return lockID, nil
		}
		sleep := baselineSleepMin + rand.N(baselineSleepMax-baselineSleepMin+1)
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// try makes one attempt and returns the acquisition's lockId, or "" if the
// lock is held. Losing FerretDB's race to upsert a brand-new _id (a known race)
// counts as not acquired.
func (b baseline) try(ctx context.Context, name string) (string, error) {
	lockID := dotnet.NewLockID()
	_, ok, err := dotnet.TryAcquire(ctx, b.coll, name, lockID, b.expiry)
	if err != nil || !ok {
		return "", err
	}
	return lockID, nil
}
