package conformance

import (
	"context"
	"slices"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// Take-over by ticket.

// takeOverEveryKind: each kind, taken over by its ticket, is the taker's,
// with a token above the holder's; the holder is lost, taken over, and its
// Release frees nothing and returns nil.
func takeOverEveryKind(e *Env) {
	holder, taker := e.provider(slices.Concat(StallProof, []mongolock.Option{mongolock.WithOwner("holder")})...), e.provider(slices.Concat(StallProof, []mongolock.Option{mongolock.WithOwner("taker")})...)
	for _, k := range []struct {
		name  string
		take  func(p *mongolock.Provider) (*mongolock.Handle, error)
		write bool // a writer's: another reader is kept out
	}{
		{"lock", func(p *mongolock.Provider) (*mongolock.Handle, error) { return p.Lock("a").TryAcquire(e.Ctx) }, true},
		{"election", func(p *mongolock.Provider) (*mongolock.Handle, error) {
			l, err := p.Election("e").Campaign(e.Ctx, "v")
			if err != nil {
				return nil, err
			}
			return l.Handle, nil
		}, true},
		{"semaphore", func(p *mongolock.Provider) (*mongolock.Handle, error) { return p.Semaphore("s", 1).TryAcquire(e.Ctx) }, true},
		{"reader", func(p *mongolock.Provider) (*mongolock.Handle, error) {
			return p.RWLock("r").Reader().TryAcquire(e.Ctx)
		}, false},
		{"writer", func(p *mongolock.Provider) (*mongolock.Handle, error) {
			return p.RWLock("w").Writer().TryAcquire(e.Ctx)
		}, true},
	} {
		old, err := k.take(holder)
		require.NoError(e.T, err, k.name)
		ticket, err := old.Ticket()
		require.NoError(e.T, err, k.name)
		h, err := taker.TakeOver(e.Ctx, ticket)
		require.NoError(e.T, err, k.name)
		require.Equal(e.T, old.Name(), h.Name())
		require.Equal(e.T, "taker", h.Owner())
		require.Greater(e.T, h.FencingToken(), old.FencingToken(), k.name)
		e.await(old.Lost(), "the holder of a "+k.name+" taken over is lost")
		require.ErrorIs(e.T, context.Cause(old.Context()), mongolock.ErrTakenOver)
		require.ErrorIs(e.T, context.Cause(old.Context()), mongolock.ErrLockLost)
		require.NoError(e.T, old.Release(e.Ctx), "a hand-off is not a failure")
		info, err := holder.Inspect(e.Ctx, h.Name())
		require.NoError(e.T, err)
		require.Len(e.T, info.Holders, 1, "%s: %+v", k.name, info)
		require.Equal(e.T, "taker", info.Holders[0].Owner, k.name)
		require.Equal(e.T, h.FencingToken(), info.Holders[0].FencingToken, k.name)
		if k.name == "reader" || k.name == "writer" {
			r, err := holder.RWLock(h.Name()).Reader().TryAcquire(e.Ctx)
			if k.write {
				require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "a reader beside a writer taken over")
			} else {
				require.NoError(e.T, err, "a reader kept out by a reader taken over")
				e.release(r)
			}
		}
		e.notLost(h, "the taker lost the "+k.name)
		e.release(h)
	}
	e.requireFree(holder.Lock("a"), "the taker's release frees the lock")
}

// The take-over cases hold a StallProof lease: a ticket of a lease that ran
// out in a stall is rightly stale.
// ticketWorksOnce: a ticket taken, or of an acquisition released, is
// ErrStaleTicket, and leaves the lock as it was.
func ticketWorksOnce(e *Env) {
	holder, taker := e.provider(StallProof...), e.provider(StallProof...)
	old := e.acquire(holder.Lock("a"))
	ticket, err := old.Ticket()
	require.NoError(e.T, err)
	h, err := taker.TakeOver(e.Ctx, ticket)
	require.NoError(e.T, err)
	before := e.inspectLock(holder, "a")
	_, err = holder.TakeOver(e.Ctx, ticket)
	require.ErrorIs(e.T, err, mongolock.ErrStaleTicket)
	requireOp(e.T, err, "take over")
	require.Equal(e.T, before, e.inspectLock(holder, "a"), "a ticket taken twice changed the lock")
	e.notLost(h, "a ticket taken twice took it")

	ticket, err = h.Ticket()
	require.NoError(e.T, err)
	e.release(h)
	before = e.inspectLock(holder, "a")
	_, err = holder.TakeOver(e.Ctx, ticket)
	require.ErrorIs(e.T, err, mongolock.ErrStaleTicket)
	require.Equal(e.T, before, e.inspectLock(holder, "a"), "the ticket of a released lock changed it")
	_, err = h.Ticket()
	require.Error(e.T, err, "a released handle's ticket")
	_, err = taker.TakeOver(e.Ctx, "not a ticket")
	require.ErrorIs(e.T, err, mongolock.ErrInvalidArgument)
}

// inspectLock is name's state through p, but for the server's clock,
// which moves on.
func (e *Env) inspectLock(p *mongolock.Provider, name string) mongolock.LockInfo {
	e.T.Helper()
	info, err := p.Inspect(e.Ctx, name)
	require.NoError(e.T, err)
	info.ServerTime = time.Time{}
	return info
}

// electionTakeOver: a successor leads with its value from the take-over
// on; the old leader is lost, and cannot proclaim.
func electionTakeOver(e *Env) {
	old, next := e.provider(slices.Concat(StallProof, []mongolock.Option{mongolock.WithOwner("v1")})...), e.provider(slices.Concat(StallProof, []mongolock.Option{mongolock.WithOwner("v2")})...)
	l, err := old.Election("e").Campaign(e.Ctx, "http://v1")
	require.NoError(e.T, err)
	ticket, err := l.Ticket()
	require.NoError(e.T, err)
	successor, err := next.Election("e").TakeOver(e.Ctx, ticket, "http://v2")
	require.NoError(e.T, err)
	got, err := old.Election("e").Leader(e.Ctx)
	require.NoError(e.T, err)
	require.Equal(e.T, mongolock.Leader{Value: "http://v2", Owner: "v2", FencingToken: successor.FencingToken(), Since: got.Since}, got)
	require.Greater(e.T, got.FencingToken, l.FencingToken())
	e.await(l.Lost(), "the old leader is lost")
	require.ErrorIs(e.T, l.Proclaim(e.Ctx, "http://v1/again"), mongolock.ErrLockLost)
	_, err = next.Election("other").TakeOver(e.Ctx, ticket, "v")
	require.ErrorIs(e.T, err, mongolock.ErrInvalidArgument)
	require.NoError(e.T, successor.Release(e.Ctx))
}
