package conformance

import (
	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// semaphoreUnits: a holder of k units is one holder, shown with its units;
// the units held never exceed n, a request of too many is refused at
// once, and a release frees all k for a waiter of another process.
func semaphoreUnits(e *Env) {
	p, other := e.provider(), e.provider()
	three, err := p.Semaphore("u", 4).Units(3).TryAcquire(e.Ctx)
	require.NoError(e.T, err)
	_, err = other.Semaphore("u", 4).Units(2).TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrNotAcquired, "5 of 4 units")
	one, err := other.Semaphore("u", 4).TryAcquire(e.Ctx)
	require.NoError(e.T, err, "the fourth unit")
	_, err = other.Semaphore("u", 4).Units(5).TryAcquire(e.Ctx)
	require.ErrorIs(e.T, err, mongolock.ErrInvalidArgument)

	info, err := other.Inspect(e.Ctx, "u")
	require.NoError(e.T, err)
	require.Len(e.T, info.Holders, 2)
	require.Equal(e.T, []int{3, 1}, []int{info.Holders[0].Units, info.Holders[1].Units})
	require.Equal(e.T, three.FencingToken(), info.Holders[0].FencingToken)

	waiting := start(func() (*mongolock.Handle, error) { return other.Semaphore("u", 4).Units(3).Acquire(e.Ctx) })
	e.notYet(waiting, "Acquire of 3 units while 4 are held")
	e.release(three)
	got := e.receive(waiting)
	require.Greater(e.T, got.FencingToken(), one.FencingToken())
	e.notLost(got, "3 units of 4, with one held beside")
	e.release(got)
	e.release(one)
}
