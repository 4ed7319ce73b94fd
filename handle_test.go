package mongolock_test

// What a handle answers when its owner asks whether it still holds: once
// its lease's local deadline has passed, every look reports the loss,
// whether or not the timer that signals it has run. A process stopped
// past its lease (SIGSTOP, a frozen cgroup, a long GC pause, a starved
// CPU) runs again with its monotonic clock past the deadline and its
// timers overdue; the fake clocks' Stop makes that moment in simulated
// time, over the in-memory store.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// stoppedExpiry is the lease of the stopped holders, and stoppedFor how
// long they are stopped: well past it.
const stoppedExpiry, stoppedFor = 2 * time.Second, 5 * time.Second

// held is what a Handle and a CompositeHandle answer through.
type held interface {
	Context() context.Context
	Lost() <-chan struct{}
	Release(ctx context.Context) error
}

// A heldKind acquires one holder of a kind, free, through p.
type heldKind struct {
	kind    string
	opts    []mongolock.Option // beside WithExpiry(stoppedExpiry)
	acquire func(ctx context.Context, p *mongolock.Provider) (held, error)
}

// heldKinds are the guarantee suite's kinds, a scheduled job's hold and a
// composite.
func heldKinds() []heldKind {
	var ks []heldKind
	for _, r := range kindRows {
		ks = append(ks, heldKind{kind: r.kind, acquire: func(ctx context.Context, p *mongolock.Provider) (held, error) {
			return r.this(p, "stopped").acquire(ctx)
		}})
	}
	return append(ks,
		heldKind{kind: "scheduled hold", opts: []mongolock.Option{mongolock.WithHoldAtLeast(time.Second), mongolock.WithHoldAtMost(3 * time.Second)},
			acquire: func(ctx context.Context, p *mongolock.Provider) (held, error) { return p.Lock("stopped").Acquire(ctx) }},
		heldKind{kind: "composite", acquire: func(ctx context.Context, p *mongolock.Provider) (held, error) {
			c, err := mongolock.NewComposite(p.Lock("stopped"), p.Semaphore("stopped-slots", 2), p.RWLock("stopped-rw").Writer())
			if err != nil {
				return nil, err
			}
			return c.Acquire(ctx)
		}},
	)
}

// A look is one way of asking, and what the answer of a lost holder is.
type look struct {
	name string
	lost func(t *testing.T, h held)
}

var looks = []look{
	{"Err", func(t *testing.T, h held) {
		require.ErrorIs(t, h.Context().Err(), context.Canceled, "Context's Err")
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	}},
	{"Done", func(t *testing.T, h held) {
		require.True(t, closedNow(h.Context().Done()), "Context's Done is open")
		require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	}},
	{"Lost", func(t *testing.T, h held) {
		require.True(t, closedNow(h.Lost()), "Lost is open")
	}},
	{"Release", func(t *testing.T, h held) {
		require.ErrorIs(t, h.Release(t.Context()), mongolock.ErrLockLost, "Release")
		require.True(t, closedNow(h.Lost()), "Lost is open after Release reported the loss")
	}},
}

// inBubble runs test in a synctest bubble with a provider over a store
// of its own, whose clocks the test moves, and closes the provider after
// it.
func inBubble(t *testing.T, opts []mongolock.Option, test func(t *testing.T, p *mongolock.Provider, clocks *mongolock.Clocks)) {
	synctest.Test(t, func(t *testing.T) {
		p, err := mongolocktest.NewStore().NewProvider(append([]mongolock.Option{mongolock.WithExpiry(stoppedExpiry)}, opts...)...)
		require.NoError(t, err)
		clocks := mongolock.FakeClocks(p, false)
		defer func() { // also after a failure: the bubble must end with nothing blocked
			require.NoError(t, p.Close(context.Background()))
			time.Sleep(time.Second) // simulated: the idle senders end
		}()
		test(t, p, clocks)
	})
}

// A holder stopped past its lease, of every kind: the first look after it
// runs again, whichever it is, reports the loss, though no timer of its
// provider has run since the stop.
func TestAHolderStoppedPastItsLeaseKnowsAtTheFirstLook(t *testing.T) {
	for _, k := range heldKinds() {
		for _, lk := range looks {
			t.Run(k.kind+"/"+lk.name, func(t *testing.T) {
				inBubble(t, k.opts, func(t *testing.T, p *mongolock.Provider, clocks *mongolock.Clocks) {
					h, err := k.acquire(t.Context(), p)
					require.NoError(t, err)
					require.NoError(t, h.Context().Err())
					done := h.Context().Done() // a select's, taken before the stop

					clocks.Stop(stoppedFor)
					lk.lost(t, h)
					require.True(t, closedNow(done), "a Done channel taken before the stop is open after the look")
					require.ErrorIs(t, h.Context().Err(), context.Canceled, "a later look")
					_ = h.Release(t.Context())
				})
			})
		}
	}
}

// A holder stopped past WithHoldAtMost's bound, extended until then: the
// first look reports the loss, as the bound's.
func TestAHolderStoppedPastItsHoldsBoundKnowsAtTheFirstLook(t *testing.T) {
	inBubble(t, []mongolock.Option{mongolock.WithHoldAtMost(3 * time.Second)}, func(t *testing.T, p *mongolock.Provider, clocks *mongolock.Clocks) {
		h := mustTryAcquire(t, t.Context(), p.Lock("bounded"))
		time.Sleep(1500 * time.Millisecond) // extended: the bound is the deadline now
		synctest.Wait()
		require.False(t, closedNow(h.Lost()))

		clocks.Stop(2 * time.Second)
		err := h.Release(t.Context())
		require.ErrorIs(t, err, mongolock.ErrLockLost)
		require.ErrorContains(t, err, "WithHoldAtMost")
	})
}

// A stop shorter than what is left of the lease ends nothing: the lease
// is extended as before, and the lock stays held.
func TestAHolderStoppedWithinItsLeaseStillHolds(t *testing.T) {
	inBubble(t, nil, func(t *testing.T, p *mongolock.Provider, clocks *mongolock.Clocks) {
		h := mustTryAcquire(t, t.Context(), p.Lock("napped"))
		clocks.Stop(stoppedExpiry / 2)
		require.NoError(t, h.Context().Err())
		require.False(t, closedNow(h.Lost()))

		end := h.LeaseEnd()
		time.Sleep(5 * stoppedExpiry)
		synctest.Wait()
		require.NoError(t, h.Context().Err())
		require.True(t, h.LeaseEnd().After(end), "not extended after the stop")
		require.NoError(t, h.Release(t.Context()))
	})
}

// A leader stopped past its lease proclaims nothing: the proclamation is
// refused with ErrLockLost before it is sent, though the server, whose
// clock the stop did not move, still has it lead.
func TestALeaderStoppedPastItsLeaseProclaimsNothing(t *testing.T) {
	inBubble(t, nil, func(t *testing.T, p *mongolock.Provider, clocks *mongolock.Clocks) {
		e := p.Election("stopped")
		l, err := e.Campaign(t.Context(), "before")
		require.NoError(t, err)

		clocks.Stop(stoppedFor)
		require.ErrorIs(t, l.Proclaim(t.Context(), "after"), mongolock.ErrLockLost)
		leader, err := e.Leader(t.Context())
		require.NoError(t, err)
		require.Equal(t, "before", leader.Value)
		require.ErrorIs(t, l.Release(t.Context()), mongolock.ErrLockLost)
	})
}
