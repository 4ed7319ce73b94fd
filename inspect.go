package mongolock

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// LockInfo is the state of one lock, election, semaphore or RWLock as the
// server saw it at ServerTime.
type LockInfo struct {
	// Name is the lock's name, exactly as given.
	Name string
	// Kind says which of them Name is.
	Kind Kind
	// Held reports whether an unexpired acquisition holds it (of a
	// semaphore or an RWLock: any), judged by the server's clock.
	Held bool
	// Owner and Value are the holder's (WithOwner; an election's value),
	// when a mongolock acquisition holds a lock or an election; otherwise "".
	//
	// They are "" for a free lock, one held by DistributedLock.MongoDB, a
	// semaphore or an RWLock: see Holders.
	Owner, Value string
	// AcquiredAt and ExpiresAt are the last acquisition's, in server time.
	// A semaphore's or an RWLock's are its newest holder's acquisition and
	// the latest end of its holders' leases, zero when nobody holds it.
	AcquiredAt, ExpiresAt time.Time
	// FencingToken is the last acquisition's token: the greatest issued.
	FencingToken int64
	// Waiting reports whether a mongolock process waiting in Acquire
	// claims the next turn (of a semaphore or an RWLock: the next free slot).
	Waiting bool
	// WriterWaiting reports, of an RWLock, whether that claim is a
	// writer's: while it lasts, new readers are refused.
	WriterWaiting bool
	// Claim is what the document says of the claim that Waiting reports;
	// nil when Waiting is false.
	Claim *ClaimInfo
	// NextClaim is, of a lock or an election, the place of the process that
	// claims the turn after Claim's; nil when none counts.
	NextClaim *ClaimInfo
	// N is a semaphore's number of slots, as SemaphoreInfo's; 0 for the
	// other kinds.
	N int
	// Holders are the live acquisitions, in the order they acquired: a
	// lock's or an election's one while Held, a semaphore's slots, an
	// RWLock's readers or writer.
	Holders []HolderInfo
	// ServerTime is the server's clock when it was read.
	ServerTime time.Time
}

// ClaimInfo is a waiting process's place in the turns of a lock, an
// election, a semaphore or an RWLock, as its document keeps it.
type ClaimInfo struct {
	// Process is the waiting process's id: one per client, database and
	// collection of a process (of a mongolocktest Provider, one per
	// Provider), random (its owner is not stored).
	Process string
	// Since is the fencing token its process saw when it began to wait:
	// the longest waiting process has the smallest. While one wait goes
	// on, Since stays as it was.
	Since int64
	// Until is the server time until which the place counts unless the
	// waiting process renews it, as it does while it waits.
	Until time.Time
}

// claimAt is a place whose fields were process, since and until, if it
// counts at now; else nil.
func claimAt(process string, since int64, until, now time.Time) *ClaimInfo {
	if !until.After(now) {
		return nil
	}
	return &ClaimInfo{Process: process, Since: since, Until: until}
}

// Inspect returns the state of the lock or election called name, or if
// there is none, that of the semaphore or RWLock called name. If none of
// them has a document, the error wraps ErrNoLock.
//
// It reads the lock's in one round trip, the semaphore's or RWLock's in a
// second. A name used by both a lock and a semaphore shows the lock's:
// Locks lists both.
func (p *Provider) Inspect(ctx context.Context, name string) (LockInfo, error) {
	info, err := p.inspectLock(ctx, name)
	if !errors.Is(err, ErrNoLock) {
		return info, err
	}
	for info, err := range p.infos(ctx, &p.slots, "inspect", name, semInspectPipeline(acquireFilter(name))) {
		return info, err
	}
	return LockInfo{}, err
}

// inspectLock is Inspect of the locks' collection alone.
func (p *Provider) inspectLock(ctx context.Context, name string) (LockInfo, error) {
	for info, err := range p.infos(ctx, &p.locks, "inspect", name, inspectPipeline(acquireFilter(name))) {
		return info, err
	}
	return LockInfo{}, p.Lock(name).errorf("inspect", ErrNoLock)
}

// Locks returns the states of the locks, elections, semaphores and RWLocks
// whose names begin with prefix ("": all of them), in byte order of name,
// as an iterator:
//
//	for info, err := range locks.Locks(ctx, "billing/") { ... }
//
// A lock or an election and a semaphore or an RWLock of the same name are
// both listed, the lock first. It reads them in batches of up to 1000, one
// round trip each, from two server cursors over the _id indexes of the
// locks' and the semaphores' collections; ctx bounds every round trip.
// Breaking out of the loop closes the cursors. An error is yielded once,
// with a zero LockInfo, and ends the iteration.
//
// It is not a snapshot: each one is as the server read its document, when
// its batch was read; documents created or deleted meanwhile may or may
// not appear. Held is judged at ServerTime, the server's clock when the
// listing of its collection began (the same for every document of a
// collection: $$NOW holds for a whole aggregation), so it may be stale by
// as long as the listing took. A server closes a cursor left idle for long
// (10 minutes on MongoDB): linger longer between two locks, and the next
// batch fails.
func (p *Provider) Locks(ctx context.Context, prefix string) iter.Seq2[LockInfo, error] {
	return merged(p.infos(ctx, &p.locks, "list", prefix, listPipeline(prefix)),
		p.infos(ctx, &p.slots, "list", prefix, semListPipeline(prefix)))
}

// merged yields the infos of a and b, each in name order, in name order;
// a's first on a tie. An error of either is yielded and ends it.
func merged(a, b iter.Seq2[LockInfo, error]) iter.Seq2[LockInfo, error] {
	return func(yield func(LockInfo, error) bool) {
		nextA, stopA := iter.Pull2(a)
		defer stopA()
		nextB, stopB := iter.Pull2(b)
		defer stopB()
		ia, errA, okA := nextA()
		ib, errB, okB := nextB()
		for okA || okB {
			switch {
			case errA != nil || errB != nil: // an ended iterator's are nil
				yield(LockInfo{}, cmp.Or(errA, errB))
				return
			case okA && (!okB || ia.Name <= ib.Name):
				if !yield(ia, nil) {
					return
				}
				ia, errA, okA = nextA()
			default:
				if !yield(ib, nil) {
					return
				}
				ib, errB, okB = nextB()
			}
		}
	}
}

// infos yields the state of each document that pipeline returns from the
// collection of s, p's locks' or slots'; an error, wrapped with op and
// name, is yielded once and ends it. The cursor is closed when the
// iteration ends, also early.
func (p *Provider) infos(ctx context.Context, s *lockCollection, op, name string, pipeline mongo.Pipeline) iter.Seq2[LockInfo, error] {
	decode := infoOf[infoDoc]
	if s == &p.slots {
		decode = infoOf[slotsDoc]
	}
	return func(yield func(LockInfo, error) bool) {
		fail := func(err error) { yield(LockInfo{}, p.Lock(name).errorf(op, err)) }
		if err := checkName(name); err != nil {
			fail(err)
			return
		}
		if err := p.ensureCollection(ctx, s); err != nil {
			fail(err)
			return
		}
		read, stopped := false, false // stopped: by a decoding error, or by yield
		err := s.store.aggregate(ctx, pipeline, cmp.Or(testHookListBatch(p), listBatchSize), func(doc bson.Raw) bool {
			read = true
			info, err := decode(doc)
			if err != nil {
				fail(err)
			}
			stopped = err != nil || !yield(info, nil)
			return !stopped
		})
		switch {
		case stopped:
		case err != nil && !read && s == &p.slots && isUnauthorized(err):
			// A program that uses no semaphores needs no privilege on their collection.
		case err != nil:
			fail(err)
		}
	}
}

// ForceRelease ends whatever acquisitions hold name, of any process
// (DistributedLock.MongoDB's too), and reports whether it ended one that
// held. It is an operator's tool for a holder that is stuck.
//
// It ends the lock's or the election's holder, and every holder of the
// semaphore or RWLock of that name, in one round trip per collection. The
// documents and their fencing tokens stay, so the next holder outranks the
// old ones, and a waiter takes the freed lock or slots at its next attempt.
// An old holder is not told at once: it finds out at its next extension,
// within one extension cadence (its Lost closes, its Context ends with
// cause ErrLockLost), and until then only fencing tokens keep its writes
// out.
//
// It counts an acquisition as held if its lease had not ended by the
// server's clock, as Inspect judges Held. false and no error mean that name
// was released already, that its holders' leases ran out (a crashed
// holder's, a WithHoldAtLeast hold's that ended: their documents may still
// name them, and are left as they are), or that it has no document. After
// an error, the lock's holder may have been ended, and not the semaphore's.
func (p *Provider) ForceRelease(ctx context.Context, name string) (bool, error) {
	const op = "force release"
	lock, err := p.forceRelease(ctx, op, name, forceUpdate{&p.locks, forceReleaseFilter(name), forceReleaseUpdate})
	if err != nil {
		return false, err
	}
	slots, err := p.forceRelease(ctx, op, name, forceUpdate{&p.slots, semForceReleaseFilter(name), semForceReleaseUpdate})
	return err == nil && (lock || slots), err
}

// ForceReleaseHolder ends one acquisition of name, the one whose
// HolderInfo.ID is id, and reports whether id held name: false if its
// lease had ended, even unreleased. An empty id is ErrInvalidArgument.
//
// The acquisition is a lock's or an election's holder, a semaphore's slot,
// an RWLock's reader or writer. The other holders keep theirs. It is
// ForceRelease otherwise, in one round trip, or two for a semaphore's or
// an RWLock's holder.
func (p *Provider) ForceReleaseHolder(ctx context.Context, name, id string) (bool, error) {
	const op = "force release holder"
	switch {
	case id == "":
		return false, p.Lock(name).errorf(op, invalid("an empty holder id: HolderInfo.ID names one"))
	case !utf8.ValidString(id):
		return false, p.Lock(name).errorf(op, invalid("a holder id that is not valid UTF-8: HolderInfo.ID names one"))
	}
	ended, err := p.forceRelease(ctx, op, name, forceUpdate{&p.locks, ownerFilter(name, id), forceReleaseUpdate})
	if ended || err != nil { // the holder was the lock's: no slot is
		return ended, err
	}
	return p.forceRelease(ctx, op, name, forceUpdate{&p.slots, semHolderFilter(name, id), semForceReleaseHolderUpdate(id)})
}

// forceUpdate is an updateOne statement on a lock collection.
type forceUpdate struct {
	sp     *lockCollection
	filter bson.D
	update any
}

// forceRelease sends u, and reports whether it ended a holder (changed
// its document: a document whose holders' leases have all ended is left
// as it is). Its errors are op's.
func (p *Provider) forceRelease(ctx context.Context, op, name string, u forceUpdate) (bool, error) {
	if err := checkName(name); err != nil {
		return false, p.Lock(name).errorf(op, err)
	}
	err := p.ensureCollection(ctx, u.sp)
	var modified int64
	if err == nil {
		_, modified, err = u.sp.store.updateOne(ctx, u.filter, u.update)
	}
	switch {
	case err != nil && u.sp == &p.slots && isUnauthorized(err):
		return false, nil // as in infos: no semaphores to release
	case err != nil:
		return false, p.Lock(name).errorf(op, err)
	}
	return modified > 0, nil
}

// infoDoc is what inspectPipeline returns per document.
type infoDoc struct {
	Name         string    `bson:"_id"`
	Kind         Kind      `bson:"kind"`
	Held         bool      `bson:"held"`
	LockID       string    `bson:"lockId"`
	Mine         bool      `bson:"mongolock"`
	Owner        string    `bson:"owner"`
	Value        string    `bson:"value"`
	AcquiredAt   time.Time `bson:"acquiredAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	FencingToken int64     `bson:"fencingToken"`
	Waiting      bool      `bson:"waiting"`
	Now          time.Time `bson:"now"`

	WaitingProcess string    `bson:"waitingProcess"`
	WaitingSince   int64     `bson:"waitingSince"`
	WaitingUntil   time.Time `bson:"waitingUntil"`
	NextProcess    string    `bson:"nextProcess"`
	NextSince      int64     `bson:"nextSince"`
	NextUntil      time.Time `bson:"nextUntil"`
}

// infoOf decodes an inspection's document as D, and reads its state.
func infoOf[D interface{ info() LockInfo }](raw bson.Raw) (LockInfo, error) {
	var d D
	err := bson.Unmarshal(raw, &d)
	return d.info(), err
}

func (d infoDoc) info() LockInfo {
	info := LockInfo{Name: d.Name, Kind: d.Kind, Held: d.Held, AcquiredAt: d.AcquiredAt, ExpiresAt: d.ExpiresAt,
		FencingToken: d.FencingToken, Waiting: d.Waiting, ServerTime: d.Now,
		Claim: claimAt(d.WaitingProcess, d.WaitingSince, d.WaitingUntil, d.Now), NextClaim: claimAt(d.NextProcess, d.NextSince, d.NextUntil, d.Now)}
	if d.Held && d.Mine {
		info.Owner, info.Value = d.Owner, d.Value
	}
	if d.Held {
		info.Holders = []HolderInfo{{ID: d.LockID, Owner: info.Owner, AcquiredAt: d.AcquiredAt, ExpiresAt: d.ExpiresAt, FencingToken: d.FencingToken, Units: 1}}
	}
	return info
}

func (d slotsDoc) info() LockInfo {
	info := LockInfo{Name: d.Name, Kind: d.Kind, FencingToken: d.FencingToken, Waiting: d.Waiting,
		WriterWaiting: d.WriterWaiting, ServerTime: d.Now, Claim: claimAt(d.WaitingProcess, d.WaitingSince, d.WaitingUntil, d.Now)}
	if d.Kind == KindSemaphore {
		info.N = d.N
	}
	return info.withHolders(d.holders(d.Kind == KindRWLock))
}

// withHolders returns info, of a semaphore or an RWLock, with its live
// holders hs and what they say of Held, AcquiredAt and ExpiresAt.
func (info LockInfo) withHolders(hs []HolderInfo) LockInfo {
	info.Holders = hs
	for _, h := range hs {
		info.Held = true
		info.AcquiredAt = h.AcquiredAt // the newest: acquisitions append
		if h.ExpiresAt.After(info.ExpiresAt) {
			info.ExpiresAt = h.ExpiresAt
		}
	}
	return info
}

// HolderInfo is one live acquisition of a lock, an election, a Semaphore's
// slot or an RWLock.
type HolderInfo struct {
	// ID is the acquisition's (a lock's lockId, a slot's id): what
	// ForceReleaseHolder takes.
	ID string
	// Owner is the holder's (WithOwner; by default host/pid); "" for a
	// DistributedLock.MongoDB holder.
	Owner string
	// Write reports whether the holder holds an RWLock for writing (false:
	// for reading). It is false for the other kinds.
	Write bool
	// Upgradeable reports whether the holder is an RWLock's upgradeable
	// reader (RWLock.Upgradeable), which reads.
	Upgradeable bool
	// AcquiredAt is when the holder acquired, ExpiresAt when its lease
	// ends unless extended, in server time.
	AcquiredAt, ExpiresAt time.Time
	// FencingToken is the acquisition's token.
	FencingToken int64
	// Units is how many of a Semaphore's slots the holder holds
	// (Semaphore.Units); 1 for every other holder.
	Units int
}

// slotsDoc is what semInspectPipeline returns; a slot's take-over's reply
// is read into it too.
type slotsDoc struct {
	Name    string `bson:"_id"`
	Kind    Kind   `bson:"kind"`
	N       int    `bson:"n"`
	Holders []struct {
		ID         string    `bson:"id"`
		Owner      string    `bson:"owner"`
		Mode       string    `bson:"mode"`
		AcquiredAt time.Time `bson:"acquiredAt"`
		ExpiresAt  time.Time `bson:"expiresAt"`
		Token      int64     `bson:"token"`
	} `bson:"holders"`
	FencingToken  int64     `bson:"fencingToken"`
	Waiting       bool      `bson:"waiting"`
	WriterWaiting bool      `bson:"writerWaiting"`
	Now           time.Time `bson:"now"`

	WaitingProcess string    `bson:"waitingProcess"`
	WaitingSince   int64     `bson:"waitingSince"`
	WaitingUntil   time.Time `bson:"waitingUntil"`
}

// inspectSlots reads the state of l, a Semaphore's or an RWLock's (semInspectPipeline).
func (l *Lock) inspectSlots(ctx context.Context) (slotsDoc, error) {
	var doc slotsDoc
	found, decodeErr := false, error(nil)
	err := checkName(l.name)
	if err == nil {
		err = l.p.ensureCollection(ctx, &l.p.slots)
	}
	if err == nil {
		err = l.p.slots.store.aggregate(ctx, semInspectPipeline(acquireFilter(l.name)), 0, func(raw bson.Raw) bool {
			found, decodeErr = true, bson.Unmarshal(raw, &doc)
			return false // the filter matches one _id at most
		})
	}
	switch err = cmp.Or(err, decodeErr); {
	case err != nil:
		return slotsDoc{}, l.errorf("inspect", err)
	case !found:
		return slotsDoc{}, l.errorf("inspect", ErrNoLock)
	}
	return doc, nil
}

// holders returns d's holders; of an RWLock if rw, where a holder without
// a mode (a Semaphore's) counts as a writer, as acquisitions count it. The
// entries of one holder of several units are one HolderInfo.
func (d slotsDoc) holders(rw bool) []HolderInfo {
	var hs []HolderInfo
	at := map[string]int{}
	for _, h := range d.Holders {
		if i, ok := at[h.ID]; ok {
			hs[i].Units++
			continue
		}
		at[h.ID] = len(hs)
		reads := h.Mode == string(readMode) || h.Mode == string(upgradeMode)
		hs = append(hs, HolderInfo{ID: h.ID, Owner: h.Owner, Write: rw && !reads, Upgradeable: rw && h.Mode == string(upgradeMode),
			AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt, FencingToken: h.Token, Units: 1})
	}
	return hs
}
