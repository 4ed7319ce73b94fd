package mongolock

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Plain locks, the lock kind: a document per name with one holder
// (createDoc, acquirePipeline, releaseUpdate, extendUpdate, holdersQuery),
// which DistributedLock.MongoDB shares. An
// election's documents are a lock's, with a value (election.go).

// New returns the lock called name in db, minted by a Provider of its own.
// As NewProvider, it returns an error naming a bad option, and a nil db is
// an error; it does no I/O.
func New(db *mongo.Database, name string, opts ...Option) (*Lock, error) {
	p, err := NewProvider(db, opts...)
	if err != nil {
		return nil, &Error{Op: "new", Name: shortName(name), Err: errors.Unwrap(err)}
	}
	if err := checkName(name); err != nil {
		return nil, &Error{Op: "new", Name: shortName(name), Err: err}
	}
	return p.Lock(name), nil
}

// Lock returns the lock called name. Locks with the same name, collection
// and database exclude each other, in this process and in any other,
// whichever Provider minted them.
//
// Names are arbitrary strings, used as the document's _id exactly as given
// (case-sensitive, not hashed): "", " ", "\x00", any Unicode, a megabyte.
// A name that is not valid UTF-8 (BSON's strings are UTF-8) makes every
// call of the Lock fail with ErrInvalidArgument, before anything is sent;
// New refuses it at once.
func (p *Provider) Lock(name string) *Lock { return &Lock{p: p, name: name, kind: lockDriver{}} }

// lockDriver is a lock's kind; an election's shares its documents.
type lockDriver struct{}

func (lockDriver) collection(p *Provider) *lockCollection { return &p.locks }

func (lockDriver) create(name string) bson.D { return createDoc(name) }

func (lockDriver) acquire(ctx context.Context, p *Provider, name string, a attempt) (reply, error) {
	return acquireMutex(ctx, p, name, a, nil, p.acquire[a.mode], turnLength)
}

// acquireMutex sends one acquisition of a lock's document, held with value (nil: a lock's).
func acquireMutex(ctx context.Context, p *Provider, name string, a attempt, value *string, parts acquireParts, turn int) (doc reply, err error) {
	filter := acquireFilter(name)
	if a.releasing != "" {
		filter = ownerFilter(name, a.releasing)
	}
	var update bson.A
	if a.mode == unclaimedMode {
		update = unclaimedPipeline(p.locks.process, p.opts.owner, p.opts.expiry, a.id, value)
	} else {
		update = acquirePipeline(a.id, a.waitToken, value, parts)
	}
	raw, err := p.locks.store.findOneAndUpdate(ctx, filter, update, nil)
	if err == nil {
		err = bson.Unmarshal(raw, &doc)
	}
	if a.mode == unclaimedMode && err == nil && doc.LockID != a.id {
		err = errUnclaimedRefused
	}
	doc.turn = turn
	return doc, err
}

func (lockDriver) release(name, id string, hold time.Duration) (bson.D, any) {
	if hold > 0 {
		return ownerFilter(name, id), holdReleaseUpdate(hold)
	}
	return ownerFilter(name, id), releaseUpdate
}

func (lockDriver) extend(lockUpdate bson.A, _ time.Duration, names, ids bson.A) (bson.D, any) {
	return extendFilter(names, ids), lockUpdate
}

func (lockDriver) holders(names bson.A) (bson.D, bson.D) { return holdersQuery(names) }

func (lockDriver) heldBy(raw bson.Raw, seen holderIDs) error {
	var doc struct {
		LockID    string `bson:"lockId"`
		TakenOver string `bson:"takenOverLockId"`
	}
	err := bson.Unmarshal(raw, &doc)
	seen.held[doc.LockID] = true
	if doc.TakenOver != "" {
		seen.takenOver[doc.TakenOver] = true
	}
	return err
}

func (lockDriver) limit() (int, bool) { return 1, true }

func (lockDriver) unclaimed() bool { return true }

func (lockDriver) describe() kindInfo { return kindInfo{kind: KindLock} }

func (lockDriver) holdsApply() bool { return true }
