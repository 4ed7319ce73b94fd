package mongolock

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// LockInfo is the state of one lock as the server saw it at ServerTime.
type LockInfo struct {
	Name string
	// Held reports whether an unexpired acquisition holds the lock, judged
	// by the server's clock.
	Held bool
	// Owner and Value are the holder's (WithOwner; an election's value),
	// when a mongolock acquisition holds the lock; otherwise "" (a free
	// lock, or one held by DistributedLock.MongoDB).
	Owner, Value string
	// AcquiredAt and ExpiresAt are the last acquisition's, in server time.
	AcquiredAt, ExpiresAt time.Time
	// FencingToken is the last acquisition's token.
	FencingToken int64
	// Waiting reports whether a mongolock process waiting in Acquire
	// claims the next turn.
	Waiting bool
	// ServerTime is the server's clock when it was read.
	ServerTime time.Time
}

// ErrNoLock reports that a lock, a Semaphore or an RWLock has no document:
// it was never used, or its document was deleted a while after its last
// release.
var ErrNoLock = errors.New("mongolock: no such lock")

// Inspect returns the state of the lock called name, in one round trip. It
// returns an error wrapping ErrNoLock if the lock has no document.
func (p *Provider) Inspect(ctx context.Context, name string) (LockInfo, error) {
	for info, err := range p.infos(ctx, "inspect", name, inspectPipeline(acquireFilter(name))) {
		return info, err
	}
	return LockInfo{}, p.Lock(name).errorf("inspect", ErrNoLock)
}

// Locks returns the states of the locks whose names begin with prefix ("":
// every lock of the collection), in byte order of name, as an iterator:
//
//	for info, err := range locks.Locks(ctx, "billing/") { ... }
//
// It reads them in batches of up to 1000 locks, one round trip each, from a
// server cursor over the _id index; ctx bounds every round trip. Breaking
// out of the loop closes the cursor. An error is yielded once, with a zero
// LockInfo, and ends the iteration.
//
// It is not a snapshot: each lock is as the server read its document, when
// its batch was read; locks created or deleted meanwhile may or may not
// appear. Held is judged at ServerTime, the server's clock when the listing
// began (the same for every lock: $$NOW holds for a whole aggregation), so
// it may be stale by as long as the listing took. A server closes a cursor
// left idle for long (10 minutes on MongoDB): linger longer between two
// locks, and the next batch fails.
func (p *Provider) Locks(ctx context.Context, prefix string) iter.Seq2[LockInfo, error] {
	return p.infos(ctx, "list", prefix, listPipeline(prefix))
}

// infos yields the state of each lock that pipeline returns; an error,
// wrapped with op and name, is yielded once and ends it. The cursor is
// closed when the iteration ends, also early.
func (p *Provider) infos(ctx context.Context, op, name string, pipeline mongo.Pipeline) iter.Seq2[LockInfo, error] {
	return func(yield func(LockInfo, error) bool) {
		fail := func(err error) { yield(LockInfo{}, p.Lock(name).errorf(op, err)) }
		if ctx == nil {
			fail(errNilContext)
			return
		}
		cur, err := p.locks.coll.Aggregate(ctx, pipeline, options.Aggregate().SetBatchSize(p.listBatchSize()))
		if err != nil {
			fail(err)
			return
		}
		defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
		for cur.Next(ctx) {
			info, err := decodeInfo(cur.Current)
			if err != nil {
				fail(err)
				return
			}
			if !yield(info, nil) {
				return
			}
		}
		if err := cur.Err(); err != nil {
			fail(err)
		}
	}
}

// listBatchSize is how many locks one reply of p's listings carries.
func (p *Provider) listBatchSize() int32 {
	if testHookListBatch != nil {
		return cmp.Or(testHookListBatch(p), listBatchSize)
	}
	return listBatchSize
}

// ForceRelease ends whatever acquisition holds the lock called name, of any
// process (DistributedLock.MongoDB's too), in one round trip: an operator's
// tool for a holder that is stuck. The document and its fencing token stay,
// so the next holder outranks the old one. The old holder is not told at
// once: it finds out at its next extension, within one extension cadence
// (its Lost closes, its Context ends with cause ErrLockLost), and until
// then only fencing tokens keep its writes out.
//
// It reports whether there was an acquisition to end: one that held the
// lock, or whose lease ran out without a release. false and no error mean
// that the lock was released already or has no document.
func (p *Provider) ForceRelease(ctx context.Context, name string) (bool, error) {
	if ctx == nil {
		return false, p.Lock(name).errorf("force release", errNilContext)
	}
	res, err := p.locks.coll.UpdateOne(ctx, forceReleaseFilter(name), releaseUpdate)
	if err != nil {
		return false, p.Lock(name).errorf("force release", err)
	}
	return res.MatchedCount > 0, nil
}

// infoDoc is what inspectPipeline returns per document.
type infoDoc struct {
	Name         string    `bson:"_id"`
	Held         bool      `bson:"held"`
	Mine         bool      `bson:"mongolock"`
	Owner        string    `bson:"owner"`
	Value        string    `bson:"value"`
	AcquiredAt   time.Time `bson:"acquiredAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	FencingToken int64     `bson:"fencingToken"`
	Waiting      bool      `bson:"waiting"`
	Now          time.Time `bson:"now"`
}

func decodeInfo(raw bson.Raw) (LockInfo, error) {
	var d infoDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return LockInfo{}, err
	}
	info := LockInfo{Name: d.Name, Held: d.Held, AcquiredAt: d.AcquiredAt, ExpiresAt: d.ExpiresAt,
		FencingToken: d.FencingToken, Waiting: d.Waiting, ServerTime: d.Now}
	if d.Held && d.Mine {
		info.Owner, info.Value = d.Owner, d.Value
	}
	return info, nil
}

// HolderInfo is one live acquisition of a Semaphore's slot or of an RWLock.
type HolderInfo struct {
	// Owner is the holder's (WithOwner; by default host/pid).
	Owner string
	// Write reports whether the holder holds an RWLock for writing (false:
	// for reading). It is false for a Semaphore's slot.
	Write bool
	// Upgradeable reports whether the holder is an RWLock's upgradeable
	// reader (RWLock.Upgradeable), which reads.
	Upgradeable bool
	// AcquiredAt is when the holder acquired, ExpiresAt when its lease
	// ends unless extended, in server time.
	AcquiredAt, ExpiresAt time.Time
	// FencingToken is the acquisition's token.
	FencingToken int64
}

// SemaphoreInfo is the state of a Semaphore as the server saw it at
// ServerTime.
type SemaphoreInfo struct {
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

// RWLockInfo is the state of an RWLock as the server saw it at ServerTime.
type RWLockInfo struct {
	Name string
	// Holders are those whose lease had not ended at ServerTime, in the
	// order they acquired: readers, or one writer; empty when the lock is
	// free.
	Holders []HolderInfo
	// FencingToken is the last acquisition's token: the greatest issued.
	FencingToken int64
	// WriterWaiting reports whether a writer waiting in Acquire claims the
	// lock, or an upgradeable reader's Upgrade waits for the other readers
	// to leave: while one does, new readers are refused.
	WriterWaiting bool
	// ServerTime is the server's clock when it was read.
	ServerTime time.Time
}

// Inspect returns the semaphore's state in one round trip, judged by the
// server's clock: a holder whose lease has ended is not listed, though it
// was never released. It returns an error wrapping ErrNoLock if the
// semaphore has no document, and an *Error wrapping the server's, the
// network's or ctx's error if the round trip failed. It changes nothing,
// and ignores the Semaphore's n.
func (s *Semaphore) Inspect(ctx context.Context) (SemaphoreInfo, error) {
	d, err := s.lock.inspectSlots(ctx)
	return SemaphoreInfo{Name: d.Name, N: d.N, Holders: d.holders(false), FencingToken: d.FencingToken, ServerTime: d.Now}, err
}

// Inspect returns the lock's state in one round trip, judged by the
// server's clock: a holder whose lease has ended is not listed. Errors are
// as Semaphore.Inspect's: ErrNoLock if the lock has no document.
func (rw *RWLock) Inspect(ctx context.Context) (RWLockInfo, error) {
	d, err := rw.w.inspectSlots(ctx)
	return RWLockInfo{Name: d.Name, Holders: d.holders(true), FencingToken: d.FencingToken, WriterWaiting: d.WriterWaiting, ServerTime: d.Now}, err
}

// slotsDoc is what semInspectPipeline returns.
type slotsDoc struct {
	Name    string `bson:"_id"`
	N       int    `bson:"n"`
	Holders []struct {
		Owner      string    `bson:"owner"`
		Mode       string    `bson:"mode"`
		AcquiredAt time.Time `bson:"acquiredAt"`
		ExpiresAt  time.Time `bson:"expiresAt"`
		Token      int64     `bson:"token"`
	} `bson:"holders"`
	FencingToken  int64     `bson:"fencingToken"`
	WriterWaiting bool      `bson:"writerWaiting"`
	Now           time.Time `bson:"now"`
}

// inspectSlots reads the state of l, a Semaphore's or an RWLock's (semInspectPipeline).
func (l *Lock) inspectSlots(ctx context.Context) (slotsDoc, error) {
	if ctx == nil {
		return slotsDoc{}, l.errorf("inspect", errNilContext)
	}
	cur, err := l.p.slots.coll.Aggregate(ctx, semInspectPipeline(l.name))
	if err != nil {
		return slotsDoc{}, l.errorf("inspect", err)
	}
	var docs []slotsDoc
	if err := cur.All(ctx, &docs); err != nil {
		return slotsDoc{}, l.errorf("inspect", err)
	}
	if len(docs) == 0 {
		return slotsDoc{}, l.errorf("inspect", ErrNoLock)
	}
	return docs[0], nil
}

// holders returns d's holders; of an RWLock if rw, where a holder without
// a mode (a Semaphore's) counts as a writer, as acquisitions count it.
func (d slotsDoc) holders(rw bool) []HolderInfo {
	var hs []HolderInfo
	for _, h := range d.Holders {
		reads := h.Mode == string(readMode) || h.Mode == string(upgradeMode)
		hs = append(hs, HolderInfo{Owner: h.Owner, Write: rw && !reads, Upgradeable: rw && h.Mode == string(upgradeMode),
			AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt, FencingToken: h.Token})
	}
	return hs
}
