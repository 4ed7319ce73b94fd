package mongolocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// What is the in-memory store's own: Lose, and which providers share
// locks. The rest is the conformance suite's.

func newProvider(t *testing.T, s *mongolocktest.Store, opts ...mongolock.Option) *mongolock.Provider {
	t.Helper()
	p, err := s.NewProvider(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	return p
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLoseSignalsTheLossAndFreesTheLock(t *testing.T) {
	ctx := bounded(t)
	p := newProvider(t, mongolocktest.NewStore())
	h, err := p.Lock("a").Acquire(ctx)
	require.NoError(t, err)
	next := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := p.Lock("a").Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		next <- h
	}()
	mongolocktest.Lose(h)
	<-h.Lost()
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	n := <-next
	require.NotNil(t, n, "the waiting Acquire takes the lost lock")
	require.Greater(t, n.FencingToken(), h.FencingToken())
	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, n.Release(ctx))
	mongolocktest.Lose(n) // released already: left as it is
	select {
	case <-n.Lost():
		t.Fatal("Lose made a released handle lost")
	default:
	}
}

func TestLoseOfASlotFreesOnlyThatSlot(t *testing.T) {
	ctx := bounded(t)
	p := newProvider(t, mongolocktest.NewStore())
	s := p.Semaphore("s", 2)
	a, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	mongolocktest.Lose(a)
	info, err := s.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, b.FencingToken(), info.Holders[0].FencingToken)
	require.NoError(t, b.Context().Err(), "the other slot's holder keeps it")
}

func TestLoseOfALeaderEndsRunsFnAndRunCampaignsAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(bounded(t))
	defer cancel()
	p := newProvider(t, mongolocktest.NewStore())
	terms := make(chan *mongolock.Leadership)
	ended := make(chan error, 1)
	go func() {
		ended <- p.Election("leader").Run(ctx, "me", func(ctx context.Context, l *mongolock.Leadership) {
			terms <- l
			<-ctx.Done()
		})
	}()
	first := <-terms
	mongolocktest.Lose(first.Handle)
	second := <-terms
	require.Greater(t, second.FencingToken(), first.FencingToken())
	cancel()
	require.ErrorIs(t, <-ended, context.Canceled)
}

func TestLosePanicsOnAHandleOfAnotherProvider(t *testing.T) {
	require.Panics(t, func() { mongolocktest.Lose(&mongolock.Handle{}) })
	require.Panics(t, func() { mongolocktest.Lose(nil) })
}

func TestProvidersOfOneStoreShareLocksAndOthersDoNot(t *testing.T) {
	ctx := bounded(t)
	s := mongolocktest.NewStore()
	p, sibling := newProvider(t, s), newProvider(t, s)
	h, err := p.Lock("a").TryAcquire(ctx)
	require.NoError(t, err)
	_, err = sibling.Lock("a").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)

	otherColl := newProvider(t, s, mongolock.WithCollection("other"))
	o, err := otherColl.Lock("a").TryAcquire(ctx)
	require.NoError(t, err, "another collection, another lock")
	require.NoError(t, o.Release(ctx))

	alone, err := mongolocktest.NewProvider()
	require.NoError(t, err)
	a, err := alone.Lock("a").TryAcquire(ctx)
	require.NoError(t, err, "a provider of its own store shares nothing")
	require.NoError(t, alone.Close(ctx))
	require.Error(t, a.Context().Err(), "Close released it")
	require.NoError(t, h.Release(ctx))
}
