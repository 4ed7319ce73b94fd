package conformance

// Inspection and force release over every kind, and the scheduled jobs'
// holds.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// acquirer is what takes one kind: a *mongolock.Lock or a
// *mongolock.Semaphore.
type acquirer interface {
	Acquire(ctx context.Context) (*mongolock.Handle, error)
	TryAcquire(ctx context.Context) (*mongolock.Handle, error)
}

// try takes a at once, or fails the test.
func (e *Env) try(a acquirer) *mongolock.Handle {
	e.T.Helper()
	h, err := a.TryAcquire(e.Ctx)
	require.NoError(e.T, err)
	return h
}

func (e *Env) inspect(p *mongolock.Provider, name string) mongolock.LockInfo {
	e.T.Helper()
	info, err := p.Inspect(e.Ctx, name)
	require.NoError(e.T, err, name)
	require.Equal(e.T, name, info.Name)
	return info
}

// tokens returns the fencing tokens of hs, or of the holders of info.
func tokens(hs []*mongolock.Handle, info mongolock.LockInfo) []int64 {
	var ts []int64
	for _, h := range hs {
		ts = append(ts, h.FencingToken())
	}
	for _, h := range info.Holders {
		ts = append(ts, h.FencingToken)
	}
	return ts
}

func holderIDs(info mongolock.LockInfo) []string {
	ids := []string{}
	for _, h := range info.Holders {
		ids = append(ids, h.ID)
	}
	return ids
}

// A listedLock is what a listing and Inspect must show of a held name.
type listedLock struct {
	name    string
	kind    mongolock.Kind
	n       int
	owner   string // and value: the lock's and the election's
	value   string
	holders []*mongolock.Handle
	owners  []string
	write   bool
}

// checkListed requires info to show w. ids are the holders' IDs seen so
// far, each with its name and kind: an ID names one holder.
func checkListed(e *Env, ids map[string]string, info mongolock.LockInfo, w listedLock) {
	e.T.Helper()
	what := fmt.Sprintf("%s (%s)", w.name, w.kind)
	require.Equal(e.T, w.name, info.Name)
	require.Equal(e.T, w.kind, info.Kind, what)
	require.True(e.T, info.Held, what)
	require.Equal(e.T, w.n, info.N, what)
	require.Equal(e.T, w.owner, info.Owner, what)
	require.Equal(e.T, w.value, info.Value, what)
	require.Equal(e.T, tokens(w.holders, mongolock.LockInfo{}), tokens(nil, info), "%s: the holders, in the order they acquired", what)
	for i, h := range info.Holders {
		require.Equal(e.T, w.owners[i], h.Owner, what)
		require.Equal(e.T, w.write, h.Write, what)
		require.NotEmpty(e.T, h.ID, what)
		if seen, ok := ids[h.ID]; ok {
			require.Equal(e.T, what, seen, "one ID for two holders")
		}
		ids[h.ID] = what
		require.True(e.T, h.ExpiresAt.After(info.ServerTime), what)
	}
	newest := info.Holders[len(info.Holders)-1]
	require.Equal(e.T, newest.FencingToken, info.FencingToken, what)
	require.Equal(e.T, newest.AcquiredAt, info.AcquiredAt, "%s: the newest holder's acquisition", what)
	require.True(e.T, info.ExpiresAt.After(info.ServerTime), what)
	require.False(e.T, info.Waiting || info.WriterWaiting, what)
}

func locksListEveryKind(e *Env) {
	p, q := e.provider(mongolock.WithOwner("node-1")), e.provider(mongolock.WithOwner("node-2"))
	leader, err := p.Election("k/leader").Campaign(e.Ctx, "http://10.0.0.7:8080")
	require.NoError(e.T, err)
	wants := []listedLock{
		{"k/both", mongolock.KindLock, 0, "node-1", "", []*mongolock.Handle{e.try(p.Lock("k/both"))}, []string{"node-1"}, false},
		{"k/both", mongolock.KindSemaphore, 2, "", "", []*mongolock.Handle{e.try(q.Semaphore("k/both", 2))}, []string{"node-2"}, false},
		{"k/leader", mongolock.KindElection, 0, "node-1", "http://10.0.0.7:8080", []*mongolock.Handle{leader.Handle}, []string{"node-1"}, false},
		{"k/lock", mongolock.KindLock, 0, "node-1", "", []*mongolock.Handle{e.try(p.Lock("k/lock"))}, []string{"node-1"}, false},
		{"k/rw", mongolock.KindRWLock, 0, "", "", []*mongolock.Handle{e.try(p.RWLock("k/rw").Reader()), e.try(q.RWLock("k/rw").Reader())}, []string{"node-1", "node-2"}, false},
		{"k/rw-w", mongolock.KindRWLock, 0, "", "", []*mongolock.Handle{e.try(q.RWLock("k/rw-w").Writer())}, []string{"node-2"}, true},
		{"k/sem", mongolock.KindSemaphore, 3, "", "", []*mongolock.Handle{e.try(p.Semaphore("k/sem", 3)), e.try(q.Semaphore("k/sem", 3))}, []string{"node-1", "node-2"}, false},
	}
	e.try(p.Lock("other"))
	ids := map[string]string{} // a holder's ID: its name and kind
	listed := 0
	for info, err := range p.Locks(e.Ctx, "k/") {
		require.NoError(e.T, err)
		require.Less(e.T, listed, len(wants), "listed %s too", info.Name)
		checkListed(e, ids, info, wants[listed])
		listed++
	}
	require.Equal(e.T, len(wants), listed)
	for i, w := range wants {
		if i != 1 { // k/both: Inspect shows the lock's
			checkListed(e, ids, e.inspect(q, w.name), w)
		}
	}
	sem, err := q.Semaphore("k/both", 2).Inspect(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, "k/both (semaphore)", ids[sem.Holders[0].ID], "Semaphore.Inspect's ID is the listing's")
	_, err = p.Inspect(e.Ctx, "k/none")
	require.ErrorIs(e.T, err, mongolock.ErrNoLock)

	e.release(wants[6].holders[0])
	e.release(wants[6].holders[1])
	info := e.inspect(p, "k/sem")
	require.False(e.T, info.Held)
	require.Empty(e.T, info.Holders)
	require.Equal(e.T, mongolock.KindSemaphore, info.Kind)
	require.Equal(e.T, wants[6].holders[1].FencingToken(), info.FencingToken, "the token stays")
}

// takes is a kind: its holders' acquirer, and a waiter's, which the
// holders keep out.
type takes struct {
	kind           mongolock.Kind
	holder, waiter func(p *mongolock.Provider, name string) acquirer
}

// slotKinds are the kinds that several may hold at once.
var slotKinds = []takes{
	{mongolock.KindSemaphore,
		func(p *mongolock.Provider, name string) acquirer { return p.Semaphore(name, 2) },
		func(p *mongolock.Provider, name string) acquirer { return p.Semaphore(name, 2) }},
	{mongolock.KindRWLock,
		func(p *mongolock.Provider, name string) acquirer { return p.RWLock(name).Reader() },
		func(p *mongolock.Provider, name string) acquirer { return p.RWLock(name).Writer() }},
}

func forceReleaseFreesEverySlot(e *Env) {
	p, q := e.provider(), e.provider()
	for _, k := range slotKinds {
		name := string(k.kind)
		old := []*mongolock.Handle{e.try(k.holder(p, name)), e.try(k.holder(q, name))}
		waiting := start(func() (*mongolock.Handle, error) { return k.waiter(q, name).Acquire(e.Ctx) })
		e.notYet(waiting, "Acquire of a full "+name)
		ended, err := q.ForceRelease(e.Ctx, name)
		require.NoError(e.T, err)
		require.True(e.T, ended, name)
		next := e.receive(waiting)
		for _, h := range old {
			e.await(h.Lost(), "every holder's Lost closes after ForceRelease")
			require.ErrorIs(e.T, context.Cause(h.Context()), mongolock.ErrLockLost)
			require.ErrorIs(e.T, h.Release(e.Ctx), mongolock.ErrLockLost)
			require.Greater(e.T, next.FencingToken(), h.FencingToken())
		}
		require.Equal(e.T, []int64{next.FencingToken()}, tokens(nil, e.inspect(p, name)), "the waiter alone holds %s", name)
		e.release(next)
	}
}

func forceReleaseHolderEndsOne(e *Env) {
	p, q := e.provider(), e.provider()
	lock := func(p *mongolock.Provider, name string) acquirer { return p.Lock(name) }
	kinds := append([]takes{{mongolock.KindLock, lock, lock}}, slotKinds...)
	for _, k := range kinds {
		name := string(k.kind)
		hs := []*mongolock.Handle{e.try(k.holder(p, name))}
		if k.kind != mongolock.KindLock {
			hs = append(hs, e.try(k.holder(q, name)))
		}
		info := e.inspect(q, name)
		require.Equal(e.T, tokens(hs, mongolock.LockInfo{}), tokens(nil, info))
		released, err := q.ForceReleaseHolder(e.Ctx, name, "0123456789abcdef0123456789abcdef")
		require.NoError(e.T, err)
		require.False(e.T, released, "an id that holds nothing")
		_, err = q.ForceReleaseHolder(e.Ctx, name, "")
		require.ErrorIs(e.T, err, mongolock.ErrInvalidArgument)
		requireOp(e.T, err, "force release holder")

		released, err = q.ForceReleaseHolder(e.Ctx, name, info.Holders[0].ID)
		require.NoError(e.T, err)
		require.True(e.T, released, name)
		e.await(hs[0].Lost(), "the released holder's Lost closes")
		require.ErrorIs(e.T, hs[0].Release(e.Ctx), mongolock.ErrLockLost)
		require.Equal(e.T, holderIDs(info)[1:], holderIDs(e.inspect(q, name)), "%s: the other holders keep theirs", name)
		for _, h := range hs[1:] {
			require.NoError(e.T, h.Context().Err())
		}
		released, err = q.ForceReleaseHolder(e.Ctx, name, info.Holders[0].ID)
		require.NoError(e.T, err)
		require.False(e.T, released, "an ended holder is ended once")

		next := e.try(k.holder(q, name))
		for _, h := range hs {
			require.Greater(e.T, next.FencingToken(), h.FencingToken())
		}
		for _, h := range append(hs[1:], next) {
			e.release(h)
		}
	}
}

func holdAtLeastKeepsAReleasedLock(e *Env) {
	const hold = time.Second
	p, other := e.provider(mongolock.WithOwner("job-1"), mongolock.WithHoldAtLeast(hold)), e.provider()
	h := e.try(p.Lock("nightly"))
	waiting := start(func() (*mongolock.Handle, error) { return other.Lock("nightly").Acquire(e.Ctx) })
	e.release(h)
	require.ErrorIs(e.T, context.Cause(h.Context()), context.Canceled)
	e.notLost(h, "a release with a hold made the handle lost")
	info := e.inspect(other, "nightly")
	require.True(e.T, info.Held, "the hold shows the lock free")
	require.Equal(e.T, "job-1", info.Owner)
	require.Len(e.T, info.Holders, 1)
	require.Equal(e.T, h.FencingToken(), info.Holders[0].FencingToken)
	_, err := other.Lock("nightly").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "the lock is free during its hold")
	next := e.receive(waiting)
	require.False(e.T, next.AcquiredAt().Before(h.AcquiredAt().Add(hold)), "taken at %v, before the hold's end", next.AcquiredAt())
	require.Greater(e.T, next.FencingToken(), h.FencingToken())
	e.release(next)

	// ForceRelease and ForceReleaseHolder end a hold, Close writes one.
	for _, end := range []func(info mongolock.LockInfo) (bool, error){
		func(mongolock.LockInfo) (bool, error) { return other.ForceRelease(e.Ctx, "nightly") },
		func(info mongolock.LockInfo) (bool, error) {
			return other.ForceReleaseHolder(e.Ctx, "nightly", info.Holders[0].ID)
		},
	} {
		h := e.try(p.Lock("nightly"))
		e.release(h)
		released, err := end(e.inspect(other, "nightly"))
		require.NoError(e.T, err)
		require.True(e.T, released, "the hold was not seen as a holder")
		e.requireFree(other.Lock("nightly"), "a force release ends the hold")
	}
	closing := e.provider(mongolock.WithHoldAtLeast(time.Hour))
	e.try(closing.Lock("nightly"))
	require.NoError(e.T, closing.Close(e.Ctx))
	_, err = other.Lock("nightly").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "Close released without the hold")
	released, err := other.ForceRelease(e.Ctx, "nightly")
	require.NoError(e.T, err)
	require.True(e.T, released)
}

func holdAtMostLosesTheHandle(e *Env) {
	const expiry, most = 300 * time.Millisecond, 900 * time.Millisecond
	p, other := e.provider(mongolock.WithExpiry(expiry), mongolock.WithHoldAtMost(most)), e.provider()
	sent := time.Now()
	h := e.try(p.Lock("stuck"))
	_, err := other.Lock("stuck").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired)
	waiting := start(func() (*mongolock.Handle, error) { return other.Lock("stuck").Acquire(e.Ctx) })
	e.await(h.Lost(), "the handle is lost at its bound")
	// Lost at the bound, less at most a safety margin: the lease outlived
	// the expiry.
	require.GreaterOrEqual(e.T, time.Since(sent), most-expiry/10)
	require.ErrorIs(e.T, context.Cause(h.Context()), mongolock.ErrLockLost)
	err = h.Release(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrLockLost)
	require.ErrorContains(e.T, err, "WithHoldAtMost")
	next := e.receive(waiting)
	require.Greater(e.T, next.FencingToken(), h.FencingToken())
	e.release(next)
}

// A handle lost at WithHoldAtMost's bound (a safety margin before it) may
// still run its job: the lock stays held until the bound, unless its
// Release, once the job stopped, frees it at once. Two locks, taken
// together, show both: one released once lost, one left to its bound.
func holdAtMostKeepsTheLockUntilItsBound(e *Env) {
	// The first lease reaches the bound (the longest WithHoldAtMost allows
	// of it): a machine that stalls an extension cannot lose the handle by
	// its lease before its bound.
	const expiry, most = 2 * time.Second, 2 * time.Second
	p, other := e.provider(mongolock.WithExpiry(expiry), mongolock.WithHoldAtMost(most)), e.provider()
	left, released := e.try(p.Lock("left")), e.try(p.Lock("released"))
	take := func(name string) *mongolock.Handle {
		var next *mongolock.Handle
		e.pollUntil("the lock "+name+" frees", func() bool {
			var err error
			next, err = other.Lock(name).TryAcquire(e.Ctx)
			require.True(e.T, err == nil || errors.Is(err, mongolock.ErrNotAcquired), "TryAcquire: %v", err)
			return err == nil
		})
		return next
	}

	e.await(released.Lost(), "the handle is lost at its bound")
	_, err := other.Lock("released").TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "the lock was freed as its handle was lost")
	require.ErrorIs(e.T, released.Release(e.Ctx), mongolock.ErrLockLost)
	next := take("released")
	require.True(e.T, next.AcquiredAt().Before(released.AcquiredAt().Add(most)), "the release of the lost handle did not free the lock before the bound")
	e.release(next)

	e.await(left.Lost(), "the handle is lost at its bound")
	next = take("left")
	require.False(e.T, next.AcquiredAt().Before(left.AcquiredAt().Add(most)), "taken at %v, before the bound %v, while the lost job may still run",
		next.AcquiredAt(), left.AcquiredAt().Add(most))
	require.ErrorIs(e.T, left.Release(e.Ctx), mongolock.ErrLockLost)
	e.release(next)
}

func holdsApplyToLocksOnly(e *Env) {
	for i, opt := range []mongolock.Option{mongolock.WithHoldAtLeast(time.Minute), mongolock.WithHoldAtMost(time.Minute)} {
		p := e.provider(opt)
		for _, take := range []func() (*mongolock.Handle, error){
			func() (*mongolock.Handle, error) { return p.Semaphore("s", 2).TryAcquire(e.Ctx) },
			func() (*mongolock.Handle, error) { return p.RWLock("rw").Reader().Acquire(e.Ctx) },
			func() (*mongolock.Handle, error) { return p.RWLock("rw").Writer().TryAcquire(e.Ctx) },
			func() (*mongolock.Handle, error) {
				l, err := p.Election("leader").Campaign(e.Ctx, "v")
				if err != nil {
					return nil, err
				}
				return l.Handle, nil
			},
		} {
			_, err := take()
			require.ErrorIs(e.T, err, mongolock.ErrInvalidArgument)
			require.ErrorContains(e.T, err, "apply to locks only")
		}
		e.release(e.try(p.Lock(fmt.Sprint("lock", i)))) // a name of its own: the release may hold it
	}
}

// forceReleaseAfterTheLeaseEnded: once a released lock's hold has ended,
// or a lost holder's lease has run out at WithHoldAtMost's bound, nothing
// holds the lock: ForceRelease and ForceReleaseHolder end nothing, and
// say so, though the server's document may still name the old holder.
func forceReleaseAfterTheLeaseEnded(e *Env) {
	other := e.provider()
	free := func(name string) func() bool {
		return func() bool {
			info, err := other.Inspect(e.Ctx, name)
			if errors.Is(err, mongolock.ErrNoLock) {
				return true
			}
			require.NoError(e.T, err)
			return !info.Held
		}
	}
	endsNothing := func(name, id string) {
		e.T.Helper()
		released, err := other.ForceRelease(e.Ctx, name)
		require.NoError(e.T, err)
		require.False(e.T, released, "%s: ForceRelease reported a release of a lease that had ended", name)
		released, err = other.ForceReleaseHolder(e.Ctx, name, id)
		require.NoError(e.T, err)
		require.False(e.T, released, "%s: ForceReleaseHolder reported a release of a lease that had ended", name)
	}

	held := e.provider(mongolock.WithHoldAtLeast(300 * time.Millisecond))
	e.release(e.try(held.Lock("held")))
	info := e.inspect(other, "held")
	require.True(e.T, info.Held, "the hold")
	e.pollUntil("the hold ends", free("held"))
	endsNothing("held", info.Holders[0].ID)

	bounded := e.provider(mongolock.WithExpiry(300*time.Millisecond), mongolock.WithHoldAtMost(600*time.Millisecond))
	h := e.try(bounded.Lock("bounded"))
	id := e.inspect(other, "bounded").Holders[0].ID
	e.await(h.Lost(), "the handle is lost at its bound")
	e.pollUntil("the lease ends at the bound", free("bounded"))
	endsNothing("bounded", id)
	require.ErrorIs(e.T, h.Release(e.Ctx), mongolock.ErrLockLost)
	e.requireFree(other.Lock("bounded"), "the lock is free")
}
