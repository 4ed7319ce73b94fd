package mongolocktest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A semaphore's units are held, shown and lost as on a server: Lose of a
// holder of 3 units frees all 3.
func TestLoseOfAHolderOfUnitsFreesThemAll(t *testing.T) {
	ctx := bounded(t)
	p := newProvider(t, mongolocktest.NewStore())
	s := p.Semaphore("gpus", 4)
	three, err := s.Units(3).TryAcquire(ctx)
	require.NoError(t, err)
	one, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	_, err = s.Units(2).TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	info, err := s.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{3, 1}, []int{info.Holders[0].Units, info.Holders[1].Units})

	mongolocktest.Lose(three)
	require.ErrorIs(t, three.Release(ctx), mongolock.ErrLockLost)
	again, err := s.Units(3).TryAcquire(ctx)
	require.NoError(t, err, "the lost holder's 3 units")
	require.Greater(t, again.FencingToken(), one.FencingToken())
	require.NoError(t, again.Release(ctx))
	require.NoError(t, one.Release(ctx))
}
