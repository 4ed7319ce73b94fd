package mongolock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

func TestHostileNamesAreLocksOfTheirOwnOrAClearError(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	// A short lease: the locks are held past several expiries below, so
	// extensions (batched by $in over the names) must match each name.
	const expiry = 300 * time.Millisecond
	e := newLockEnv(t, mongolock.WithExpiry(expiry), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))

	handles := map[string]*mongolock.Handle{}
	var refused []string
	for _, n := range hostileNames {
		h, err := e.p.Lock(n.name).TryAcquire(ctx)
		if err != nil {
			// Allowed only as a clear error of its own, at once: never as
			// contention (which would mean it matched another lock).
			require.NotErrorIs(t, err, mongolock.ErrNotAcquired, "%s: taken for another lock", n.label)
			var le *mongolock.Error
			require.ErrorAs(t, err, &le, n.label)
			require.Less(t, len(err.Error()), 2000, "%s: the error repeats the name", n.label)
			t.Logf("%s: refused: %v", n.label, err)
			refused = append(refused, n.label)
			continue
		}
		releaseAtCleanup(t, h)
		handles[n.name] = h
		require.Equal(t, n.name, h.Name(), n.label)
	}
	t.Logf("%d of %d hostile names work on %s; refused: %q", len(handles), len(hostileNames), testdb.Info(t).Name(), refused)

	// All held at once, each by its own document, _id byte for byte.
	count, err := e.coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, len(handles), count, "one document per name")
	for _, n := range hostileNames {
		if handles[n.name] == nil {
			continue
		}
		raw := rawLockDoc(t, e.coll, n.name)
		require.Equal(t, n.name, raw.Lookup("_id").StringValue(), "%s: _id as stored", n.label)
	}

	// Held past several expiries: the extensions matched every name.
	held := time.NewTimer(4 * expiry)
	defer held.Stop()
	<-held.C
	for _, n := range hostileNames {
		if h := handles[n.name]; h != nil {
			require.False(t, closedNow(h.Lost()), "%s: lost while held: an extension did not match it", n.label)
		}
	}

	// Nobody else gets any of them: not with one attempt, and not by
	// waiting (which writes the name into the line of waiting processes).
	for _, n := range hostileNames {
		if handles[n.name] == nil {
			continue
		}
		_, err := e.other.Lock(n.name).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "%s: a second holder", n.label)
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = e.other.Lock(n.name).Acquire(wctx)
		cancel()
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "%s: a second holder, waiting", n.label)
		require.ErrorIs(t, err, context.DeadlineExceeded, n.label)
	}

	// Released, each is free for the next holder, and only it: the next
	// token outranks the last.
	for _, n := range hostileNames {
		h := handles[n.name]
		if h == nil {
			continue
		}
		require.NoError(t, h.Release(ctx), n.label)
		var next int64
		require.NoError(t, e.other.Lock(n.name).Do(ctx, func(context.Context) error {
			// Do's handle is not exposed; read the token the server gave it.
			next = rawLockDoc(t, e.coll, n.name).Lookup("fencingToken").Int64()
			return nil
		}), n.label)
		require.Greater(t, next, h.FencingToken(), n.label)
	}
}

// Do with a name the server cannot store returns the error at once, without
// running fn, and leaves nothing behind (TryAcquire and Acquire:
// TestNameTooLargeForTheServerReturnsAClearErrorAtOnce).
func TestDoWithANameTheServerRefusesFailsClearlyWithoutRunningFn(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	e := newLockEnv(t)
	err := e.p.Lock(strings.Repeat("x", 17<<20)).Do(ctx, func(context.Context) error { // more than a BSON document holds
		t.Error("fn ran for a name the server refused")
		return nil
	})
	require.Error(t, err)
	require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, ctx.Err(), "returned only when ctx ended")
	var le *mongolock.Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, strings.Repeat("x", 61)+"...", le.Name)
	require.Less(t, len(err.Error()), 2000)
	t.Logf("Do: %v", err)
	n, err := e.coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "a refused name left a document")
}
