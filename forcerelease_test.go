package mongolock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A holder that crashed (its process stopped extending, and released
// nothing) holds nothing once its lease has run out, though its document
// still names it: ForceRelease and ForceReleaseHolder end nothing, and say
// so, for every kind.
func TestForceReleaseOfACrashedHolderEndsNothing(t *testing.T) {
	forEachKind(t, func(t *testing.T, r kindRow) {
		ctx := boundedCtx(t, 30*time.Second)
		db := testdb.Database(t)
		crashed := ownClient(t, db, nil)
		p := newProvider(t, crashed, mongolock.WithExpiry(shortExpiry))
		other := newProvider(t, ownClient(t, db, nil))
		name := "crashed-" + r.kind
		h, err := r.this(p, name).try(ctx)
		require.NoError(t, err)
		info, err := other.Inspect(ctx, name)
		require.NoError(t, err)
		require.Len(t, info.Holders, 1)
		id := info.Holders[0].ID

		require.NoError(t, crashed.Client().Disconnect(ctx)) // the process crashes: nothing more is sent
		pollUntil(t, 5*time.Second, "the crashed holder's lease runs out", func() bool {
			info, err := other.Inspect(ctx, name)
			require.NoError(t, err)
			return !info.Held
		})
		released, err := other.ForceRelease(ctx, name)
		require.NoError(t, err)
		require.False(t, released, "ForceRelease reported a release of a lease that had run out")
		released, err = other.ForceReleaseHolder(ctx, name, id)
		require.NoError(t, err)
		require.False(t, released, "ForceReleaseHolder reported a release of a lease that had run out")
		require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	})
}
