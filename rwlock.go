package mongolock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Reader-writer locks.
//
// An RWLock is held by any number of readers at once or by one writer, in
// this process and in others, by the server's clock. It is a semaphore-like
// document whose holders carry a mode, and its Handles are a Semaphore's in
// every way (createRWDoc creates it; a slot's statements acquire, hand
// over, release and extend), but that an upgradeable reader's can upgrade
// (upgradePipeline, undone by upgradeTagFilter when it gives up) and
// downgrade again (holderModeUpdate).

// An RWLock is a distributed reader-writer lock, named as Lock's are: its
// Reader is held by any number of holders at once, its Writer by one, and
// never together.
//
// RWLocks live in the collection "<collection>_semaphores" with the
// Semaphores: a Semaphore's acquisition under an RWLock's name, or the
// other way round, fails at once with an error (not ErrNotAcquired). Its
// Reader and its Writer are Locks of the same name. Acquire, TryAcquire and Do are a Lock's, with these rules. A writer that
// waits blocks new readers, as with sync.RWMutex: once a Writer().Acquire
// is refused, readers are refused until the writer has acquired (or
// stopped asking), so a stream of readers cannot starve writers. A reader
// refused while a writer holds claims the next turn for its process, which
// keeps writers of other processes out until it has read, so writers
// cannot starve readers either. Between processes, the claim goes to the
// one that has waited longest. Calls of one process, for reading and for
// writing, wait in one line, first come first served. Every acquisition,
// read or write, takes the next fencing token of the lock: a writer's
// token is greater than that of every reader before it, and a reader's
// greater than that of every writer before it. Its Upgradeable reader can
// become the writer (UpgradeableHandle.Upgrade), and a reader again
// (UpgradeableHandle.Downgrade), without another writer getting in
// between. An RWLock is safe for concurrent use.
//
// Readers are not counted against a limit, but they share the lock's one
// document: each live reader takes at most 400 bytes of it (with an owner
// of MaxOwnerLen bytes), so the server's 16 MB hold about 40,000 readers at
// once. Past that the server refuses the acquisition, and the error is
// returned. Where more may read at once, a Semaphore of at most
// MaxSemaphoreSlots slots bounds them.
type RWLock struct {
	r, w *Lock
	u    *UpgradeableLock
}

// RWLock returns the reader-writer lock called name.
func (p *Provider) RWLock(name string) *RWLock {
	mode := func(rw rwMode) *Lock { return &Lock{p: p, name: name, kind: rwDriver{semDriver{n: 1}, rw}} }
	return &RWLock{r: mode(readMode), w: mode(writeMode), u: &UpgradeableLock{mode(upgradeMode)}}
}

// Name returns the lock's name, exactly as given.
func (rw *RWLock) Name() string { return rw.r.name }

// Reader returns the lock held for reading: its TryAcquire is refused
// (ErrNotAcquired) if a writer holds the lock or waits for it, an
// upgrading reader's Upgrade included.
func (rw *RWLock) Reader() *Lock { return rw.r }

// Writer returns the lock held for writing: its TryAcquire is refused if
// anyone holds the lock, or a reader of another process waits for it.
//
// A refused TryAcquire does not block readers. While its Acquire waits, new
// readers are refused; current readers keep the lock until they release it
// or lose it. An Acquire that ends without the lock withdraws its claim,
// and readers are let in again.
func (rw *RWLock) Writer() *Lock { return rw.w }

// Upgradeable returns the lock held by an upgradeable reader: a reader that
// can become the writer (UpgradeableHandle.Upgrade) without another writer
// getting in between.
func (rw *RWLock) Upgradeable() *UpgradeableLock { return rw.u }

// An UpgradeableLock is an RWLock held by an upgradeable reader, whose
// handles can become the writer and a reader again (UpgradeableHandle).
//
// It can be a Part of a Composite: the composite's Handle of it upgrades
// as UpgradeableHandle{Handle: h}.
//
// It shares the lock with readers, but excludes writers and other
// upgradeable readers: at most one holds it at a time, so two upgrades can
// never wait for each other. Acquire, TryAcquire and Do are a Lock's, with
// that rule; an Acquire that waits holds off writers of other processes,
// as a reader's does, and other processes' upgradeable readers. It is safe
// for concurrent use.
type UpgradeableLock struct {
	lock *Lock
}

// Name returns the lock's name, exactly as given.
func (u *UpgradeableLock) Name() string { return u.lock.name }

// Acquire waits until it holds the lock as its upgradeable reader, or ctx
// ends, as Lock.Acquire waits, with its errors.
func (u *UpgradeableLock) Acquire(ctx context.Context) (*UpgradeableHandle, error) {
	return upgradeable(u.lock.Acquire(ctx))
}

// TryAcquire makes one attempt to hold the lock as its upgradeable reader,
// as Lock.TryAcquire does: ErrNotAcquired if a writer or another
// upgradeable reader holds it, or a writer waits for it.
func (u *UpgradeableLock) TryAcquire(ctx context.Context) (*UpgradeableHandle, error) {
	return upgradeable(u.lock.TryAcquire(ctx))
}

// Do acquires the lock (waiting, as Acquire), runs fn with its handle, and
// releases it, as Lock.Do does, with its errors; fn may upgrade the
// handle, and need not downgrade it.
func (u *UpgradeableLock) Do(ctx context.Context, fn func(ctx context.Context, h *UpgradeableHandle) error) error {
	switch {
	case ctx == nil:
		return u.lock.errorf("do", errNilContext)
	case fn == nil:
		return u.lock.errorf("do", errNilFunction)
	}
	h, err := u.Acquire(ctx)
	if err != nil {
		return renamed("do", err)
	}
	return do(ctx, h, func(ctx context.Context) error { return fn(ctx, h) })
}

// upgradeable is an upgradeable reader's acquisition's outcome, as its
// handle's type.
func upgradeable(h *Handle, err error) (*UpgradeableHandle, error) {
	if err != nil {
		return nil, err
	}
	return &UpgradeableHandle{h}, nil
}

// An UpgradeableHandle is an upgradeable reader's acquisition of an
// RWLock, which Upgrade makes the writer and Downgrade an upgradeable
// reader again, as often as needed.
//
// It is one Handle throughout, its lease and owner going on.
//
// UpgradeableLock's Acquire, TryAcquire and Do give one. A Handle of an
// upgradeable reader that comes as a Handle (a Composite's part's,
// Provider.TakeOver's) becomes one as UpgradeableHandle{Handle: h}. Of
// any other Handle, Upgrade and Downgrade are ErrMismatch.
type UpgradeableHandle struct {
	*Handle
}

// Upgrade makes u, an upgradeable reader, the writer of its lock, with no
// moment in which another writer could get in: the same handle, its lease
// going on, with a new fencing token greater than every earlier one.
//
// New readers are refused from its first round trip on; it waits until
// the other readers have released (or lost) the lock, polling as a
// claimant of the next turn does, at least as often as the longest sleep
// (WithBusyWaitSleep). It waits beside its process's line: what wakes the
// line's head (a release in its process, or a release event where the
// server has change streams) wakes it at once. If no other reader holds,
// it takes one round trip.
//
// An Upgrade that waits for a reader of the same lock that its own caller
// holds, or that the caller needs to release, waits until ctx ends: a
// plain reader cannot upgrade for that reason (two readers, each waiting
// for the other to leave, would wait for ever).
//
// When ctx ends first, the error satisfies errors.Is(err, ctx.Err()), and
// also errors.Is(err, ErrNotAcquired) if other readers held the lock the
// whole time. u then stays an upgradeable reader, and readers are let in
// again: its hold on them is withdrawn in the background at once, and
// lapses by itself soon after if that fails. A loss of the lock, before or
// while it waits, is the handle's loss (Lost, Context), and Upgrade returns
// an error wrapping ErrLockLost. A handle that is the writer already is
// ErrMismatch; a nil one, ErrInvalidArgument.
func (u *UpgradeableHandle) Upgrade(ctx context.Context) error {
	const op = "upgrade"
	h := u.held()
	if h == nil {
		return &Error{Op: op, Err: errNilHandle}
	}
	l, p := h.lock, h.lock.p
	if err := h.beginSwitch(ctx, upgradeMode); err != nil {
		return l.errorf(op, err)
	}
	defer h.changing.Store(false)
	if !p.enter() {
		return l.errorf(op, ErrClosed)
	}
	defer p.calls.Done()
	w := &upgradeWait{waitLoop: waitLoop{l: l, op: op, w: l.collection().lines.join(l, true), ended: h.ctx.Done()}, h: h, start: time.Now()}
	defer w.leave()
	err := w.run(ctx, w.try)
	switch {
	case err == errHandleEnded:
		return h.noHolder(ctx, op)
	case err != nil && w.marked != "":
		h.undoUpgrade(w.marked, afterReply) // readers are let in again
	}
	return err
}

// held returns u's acquisition, nil for a nil or zero UpgradeableHandle.
func (u *UpgradeableHandle) held() *acquisition { return u.handle().held() }

// An UpgradeableHandle's methods of its Handle, each the Handle's, so that
// a nil *UpgradeableHandle (a failed Acquire's) answers as a nil Handle
// does rather than panic: Release returns nil, Context is done, Lost
// closed, the accessors zero values.

// handle returns u's Handle, nil for a nil UpgradeableHandle.
func (u *UpgradeableHandle) handle() *Handle {
	if u == nil {
		return nil
	}
	return u.Handle
}

// Name is the Handle's: the RWLock's name.
func (u *UpgradeableHandle) Name() string { return u.handle().Name() }

// FencingToken is the Handle's: a new one at each Upgrade.
func (u *UpgradeableHandle) FencingToken() int64 { return u.handle().FencingToken() }

// AcquiredAt is the Handle's.
func (u *UpgradeableHandle) AcquiredAt() time.Time { return u.handle().AcquiredAt() }

// Owner is the Handle's.
func (u *UpgradeableHandle) Owner() string { return u.handle().Owner() }

// LeaseEnd is the Handle's.
func (u *UpgradeableHandle) LeaseEnd() time.Time { return u.handle().LeaseEnd() }

// Context is the Handle's: done when the lock is lost (cause ErrLockLost)
// or released.
func (u *UpgradeableHandle) Context() context.Context { return u.handle().Context() }

// Lost is the Handle's: closed when the lock is lost.
func (u *UpgradeableHandle) Lost() <-chan struct{} { return u.handle().Lost() }

// Release is the Handle's.
func (u *UpgradeableHandle) Release(ctx context.Context) error { return u.handle().Release(ctx) }

// Ticket is the Handle's: a ticket of the acquisition, in its mode now.
func (u *UpgradeableHandle) Ticket() (string, error) { return u.handle().Ticket() }

// An upgradeWait is an Upgrade's wait, an Acquire's but for one
// difference: its try is a poll of its own handle, which holds the lock
// already, so it waits beside its process's line rather than in it, and
// until the handle ends.
type upgradeWait struct {
	waitLoop
	h      *acquisition
	start  time.Time
	marked string // the tag of the last poll seen holding readers off
}

// try sends one poll: h is the writer, or holds new readers off while
// other readers hold. Its polls are paced as a slot's claimant's; while
// release events arrive, one wakes it, and it looks as a notified
// claimant does.
func (u *upgradeWait) try(ctx context.Context) (afterTry, <-chan time.Time, error) {
	tag, o := newLockID(), u.l.p.opts
	token, err := u.h.upgradePoll(ctx, tag)
	switch {
	case err == nil && token != 0:
		u.h.token.Store(token)
		u.h.mode.Store(uint32(writeMode))
		u.l.collection().lines.setExclusive(u.h, true)
		return waitOver, nil, nil
	case err == nil:
		u.marked, u.lastErr = tag, nil // contended since the last error
		u.refused()
	case isNoMatch(err):
		return waitOver, nil, errHandleEnded
	case ctx.Err() != nil || endedByDeadline(ctx, err): // cut short by ctx
		u.cutShort(err)
	case isTransient(err):
		u.failed(err)
	default:
		return waitOver, nil, u.l.errorf(u.op, err)
	}
	if u.l.collection().notify.isOpen() {
		return sleepThenTry, time.After(o.notifiedClaimantSleep()), nil
	}
	return sleepThenTry, time.After(o.slotClaimantSleep(time.Since(u.start))), nil
}

// upgradePoll sends one poll of an Upgrade (upgradePipeline), tagged tag,
// and returns h's new fencing token if h is the writer now, else 0. A poll
// whose reply nobody waits for, or that may have been applied though it
// failed, is undone in the background.
func (h *acquisition) upgradePoll(ctx context.Context, tag string) (int64, error) {
	l, p := h.lock, h.lock.p
	send := func(ctx context.Context) (int64, error) {
		var doc struct {
			Holders []struct {
				Mode    string `bson:"mode"`
				Token   int64  `bson:"token"`
				Upgrade string `bson:"upgrade"`
			} `bson:"holders"`
		}
		raw, err := l.collection().store.findOneAndUpdate(ctx, semHolderFilter(l.name, h.lockID),
			upgradePipeline(h.lockID, tag, p.opts.claimLifetime()), upgradeReplyFields(h.lockID))
		if err == nil {
			err = bson.Unmarshal(raw, &doc)
		}
		if isAmbiguous(err) {
			h.undoUpgrade(tag, undoSchedule(err))
		}
		if err != nil || len(doc.Holders) != 1 || doc.Holders[0].Mode != string(writeMode) || doc.Holders[0].Upgrade != tag {
			return 0, err
		}
		return doc.Holders[0].Token, nil
	}
	return roundTrip(ctx, p, send, func(_ int64, err error) {
		if err == nil {
			h.undoUpgrade(tag, afterReply)
		}
	})
}

// undoUpgrade undoes, in the background, what the Upgrade poll tagged tag
// did: h is an upgradeable reader again, holding no reader off.
func (h *acquisition) undoUpgrade(tag string, schedule []time.Duration) {
	l := h.lock
	// Every try of schedule: a poll still on its way may arrive after one.
	l.updateInBackground(upgradeTagFilter(l.name, h.lockID, tag), holderModeUpdate(h.lockID, upgradeMode), schedule, func() bool { return false })
}

// Downgrade makes u, upgraded, an upgradeable reader again, in one
// owner-checked round trip bounded by ctx, without a moment in which a
// writer could get in.
//
// It is the same handle, its lease and fencing token going on, and it can
// upgrade again.
//
// Readers can enter at once, unless a writer of another process claimed
// the next turn first, as with any writer's release. If the round trip
// fails, u is a reader all the same, and the downgrade is retried in the
// background: stop writing either way. A loss of the lock is the handle's
// loss, and Downgrade returns an error wrapping ErrLockLost. A handle that
// is not the writer is ErrMismatch; a nil one, ErrInvalidArgument.
func (u *UpgradeableHandle) Downgrade(ctx context.Context) error {
	const op = "downgrade"
	h := u.held()
	if h == nil {
		return &Error{Op: op, Err: errNilHandle}
	}
	l := h.lock
	if err := h.beginSwitch(ctx, writeMode); err != nil {
		return l.errorf(op, err)
	}
	defer h.changing.Store(false)
	h.mode.Store(uint32(upgradeMode)) // a reader from now on, whatever the round trip does
	l.collection().lines.setExclusive(h, false)
	filter, update := semHolderFilter(l.name, h.lockID), holderModeUpdate(h.lockID, upgradeMode)
	err := ctx.Err()
	if err == nil {
		var matched int64
		if matched, _, err = l.collection().store.updateOne(ctx, filter, update); err == nil && matched == 0 {
			return h.noHolder(ctx, op)
		}
	}
	if err != nil {
		l.updateInBackground(filter, update, undoSchedule(err), func() bool { return true })
		return l.errorf(op, err)
	}
	return nil
}

// errSwitching reports an Upgrade or Downgrade of a handle while another
// of it is under way.
var errSwitching = errors.New("another Upgrade or Downgrade of the handle is under way")

// beginSwitch starts an Upgrade or Downgrade of h, which needs h in mode,
// and returns why it cannot.
func (h *acquisition) beginSwitch(ctx context.Context, mode rwMode) error {
	switch {
	case ctx == nil:
		return errNilContext
	case h.released.Load():
		return ErrReleased
	case h.lossError() != nil:
		return h.lossError()
	case h.lock.kind.describe().mode != upgradeMode: // a Handle of another kind, made an UpgradeableHandle
		return notInMode(upgradeMode)
	case rwMode(h.mode.Load()) != mode:
		return notInMode(mode)
	case !h.changing.CompareAndSwap(false, true):
		return errSwitching
	}
	return nil
}

// notInMode reports an Upgrade or Downgrade of a handle not in mode, the
// one it needs.
func notInMode(mode rwMode) error {
	return fmt.Errorf("%w: the handle is not %s's", ErrMismatch, modeNames[mode].a)
}

// noHolder is the error of op when h's holder is gone, or h ended while
// op waited: a release, or a loss, signalled now if it was not yet (as a
// take-over by its ticket if the document records one).
func (h *acquisition) noHolder(ctx context.Context, op string) error {
	if h.released.Load() {
		return h.lock.errorf(op, ErrReleased)
	}
	h.loseUnmatched(ctx, fmt.Errorf("%w: someone else holds it, or its document was deleted", ErrLockLost))
	return h.lock.errorf(op, cmp.Or(h.lossError(), ErrLockLost))
}

// RWLockInfo is the state of an RWLock as the server saw it at ServerTime.
type RWLockInfo struct {
	// Name is the lock's name, exactly as given.
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

// Inspect returns the lock's state in one round trip, judged by the
// server's clock: a holder whose lease has ended is not listed. Errors are
// as Semaphore.Inspect's: ErrNoLock if the lock has no document.
func (rw *RWLock) Inspect(ctx context.Context) (RWLockInfo, error) {
	d, err := rw.w.inspectSlots(ctx)
	return RWLockInfo{Name: d.Name, Holders: d.holders(true), FencingToken: d.FencingToken, WriterWaiting: d.WriterWaiting, ServerTime: d.Now}, err
}

// rwDriver is an RWLock's kind in one mode: a semaphore's of one slot, in
// a document of its own kind.
type rwDriver struct {
	semDriver
	mode rwMode
}

func (rwDriver) create(name string) bson.D { return createRWDoc(name) }

func (d rwDriver) acquire(ctx context.Context, p *Provider, name string, a attempt) (reply, error) {
	return acquireSlot(ctx, p, name, a, slotAttempt{n: 1, rw: d.mode})
}

// limit: readers share, an upgradeable reader with them; a writer keeps
// every other holder out. A writer whose process reads still asks the
// database, to claim the lock and hold other processes' readers off.
func (d rwDriver) limit() (int, bool) { return 0, d.mode == writeMode }

func (d rwDriver) describe() kindInfo {
	n := modeNames[d.mode]
	return kindInfo{kind: KindRWLock, mode: d.mode, modeName: n.mode, modePart: "RWLock " + n.part}
}

// modeNames name the modes: in telemetry, and as a composite's part, alone
// and with its article.
var modeNames = map[rwMode]struct{ mode, part, a string }{
	readMode:    {"read", "reader", "a reader"},
	writeMode:   {"write", "writer", "a writer"},
	upgradeMode: {"upgradeable", "upgradeable reader", "an upgradeable reader"},
}
