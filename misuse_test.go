package mongolock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Misuse (issue 5): what the other tests leave out. Covered elsewhere: nil
// ctx everywhere (TestNilContextIsAnErrorNotAPanic), Release twice
// (TestReleaseIsIdempotent), after loss, and after the client was
// disconnected (TestReleaseAfterTheClientIsDisconnectedReturnsPromptly).

// Every operation on a client that was disconnected fails at once with an
// error that says so: it is not retried as an outage until ctx ends, not
// reported as contention, and fn never runs.
func TestOperationsOnADisconnectedClientFailAtOnceSayingSo(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c := testdb.NewClient(t)
	db := c.Database(testdb.Database(t).Name())
	// A short lease: the handle held when the client goes away is lost at
	// its next extension, which finds the client disconnected.
	p := newProvider(t, db, mongolock.WithExpiry(time.Second))
	h, err := p.Lock("before").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))

	after := newProvider(t, db) // does no I/O: fine
	// Acquire of "before" first waits, in this process's line, for the
	// handle that holds it here: until its next extension (1/3 s).
	for _, l := range []*mongolock.Lock{p.Lock("x"), after.Lock("x"), after.Lock("before")} {
		start := time.Now()
		_, errTry := l.TryAcquire(ctx)
		_, errAcq := l.Acquire(ctx)
		errDo := l.Do(ctx, func(context.Context) error {
			t.Error("fn ran on a disconnected client")
			return nil
		})
		for label, err := range map[string]error{"TryAcquire": errTry, "Acquire": errAcq, "Do": errDo} {
			require.ErrorIs(t, err, mongo.ErrClientDisconnected, label)
			require.NotErrorIs(t, err, mongolock.ErrNotAcquired, label)
			var le *mongolock.Error
			require.ErrorAs(t, err, &le, label)
			require.Equal(t, l.Name(), le.Name, label)
		}
		require.NoError(t, ctx.Err())
		require.Less(t, time.Since(start), 5*time.Second, "retried a closed client")
	}
	// The handle held when the client went away reports the loss, then
	// Release says so: the lock will expire on the server.
	select {
	case <-h.Lost():
	case <-ctx.Done():
		t.Fatal("a handle of a disconnected client was never reported lost")
	}
	require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
	err = h.Release(ctx)
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	require.ErrorIs(t, err, mongo.ErrClientDisconnected, "the loss does not say why")
	require.NoError(t, h.Release(ctx))
}

// A handle after Release: its accessors still answer, its Context is done
// as released (not lost), Lost stays open, and every later Release, with
// a nil ctx too, is an error or nil, never a panic and never a round trip
// that could free the next holder.
func TestAHandleAfterReleaseStaysReleased(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 20*time.Second)
	h, err := e.p.Lock("released").TryAcquire(ctx)
	require.NoError(t, err)
	token := h.FencingToken()
	require.NoError(t, h.Release(ctx))

	next, err := e.other.Lock("released").TryAcquire(ctx)
	require.NoError(t, err)
	releaseAtCleanup(t, next)

	var nilCtx context.Context
	require.Error(t, h.Release(nilCtx))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, h.Release(cancelled))
	require.Equal(t, "released", h.Name())
	require.Equal(t, token, h.FencingToken())
	require.True(t, closedNow(h.Context().Done()))
	require.ErrorIs(t, context.Cause(h.Context()), context.Canceled)
	require.False(t, closedNow(h.Lost()))
	require.True(t, closedNow(mongolock.LeaseUnkept(h)))

	_, err = e.p.Lock("released").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the old handle freed the next holder")
	require.NoError(t, next.Release(ctx))
}

// Do with a nil function is an error, before anything is acquired.
func TestDoWithANilFunctionIsAnError(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 20*time.Second)
	l := e.p.Lock("nil-fn")
	err := l.Do(ctx, nil)
	require.ErrorContains(t, err, "nil function")
	var le *mongolock.Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, "do", le.Op)
	h, err := l.TryAcquire(ctx) // nothing was left held
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}
