package mongolock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Fencing tokens (guarantee 4 in PROTOCOL.md): per name, every acquisition's
// token is greater than every earlier one, whatever happened in between.

// tokenLog records the tokens of successive acquisitions of one name and
// checks that each one outranks all before it.
type tokenLog struct {
	t      *testing.T
	tokens []int64
}

func (l *tokenLog) add(token int64, how string) {
	l.t.Helper()
	if n := len(l.tokens); n > 0 {
		require.Greater(l.t, token, l.tokens[n-1], "the token after %s does not outrank the one before (all so far: %v)", how, l.tokens)
	}
	l.tokens = append(l.tokens, token)
}

// requireTokenInDocument checks that the document holds h's acquisition with
// h's token, stored as an int64.
func requireTokenInDocument(t *testing.T, e *lockEnv, h *mongolock.Handle) {
	t.Helper()
	doc := rawLockDoc(t, e.coll, h.Name())
	v := doc.Lookup("fencingToken")
	require.Equal(t, bson.TypeInt64, v.Type, "fencingToken is stored as %v", v.Type)
	require.Equal(t, h.FencingToken(), v.Int64())
}

func TestFencingTokenIncreasesAfterReleaseAndReacquire(t *testing.T) {
	e := newLockEnv(t)
	ctx := boundedCtx(t, 30*time.Second)
	log := &tokenLog{t: t}
	for i := range 5 {
		p := e.p
		if i%2 == 1 {
			p = e.other
		}
		h, err := p.Lock("reacquired").TryAcquire(ctx)
		require.NoError(t, err)
		requireTokenInDocument(t, e, h)
		log.add(h.FencingToken(), "a release")
		require.NoError(t, h.Release(ctx))

		// Release keeps the document and its token; it only ends the lease.
		doc := rawLockDoc(t, e.coll, "reacquired")
		require.Equal(t, h.FencingToken(), doc.Lookup("fencingToken").Int64())
		_, hasHolder := doc.Lookup("lockId").StringValueOK()
		require.False(t, hasHolder, "the released document still names a holder: %v", doc)
	}
}

func TestFencingTokenIncreasesAfterAnExpiryTakeover(t *testing.T) {
	t.Run("lease set to the past", func(t *testing.T) {
		e := newLockEnv(t, mongolock.WithExpiry(30*time.Second))
		ctx := boundedCtx(t, 30*time.Second)
		log := &tokenLog{t: t}
		h1, err := e.p.Lock("expired").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h1.FencingToken(), "the first acquisition")

		// As if h1 had stalled past its lease: expiresAt is in the past.
		_, err = e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "expired"}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: time.Now().Add(-time.Hour)}}}})
		require.NoError(t, err)
		h2, err := e.other.Lock("expired").TryAcquire(ctx)
		require.NoError(t, err, "an expired lease was not taken over")
		log.add(h2.FencingToken(), "an expiry takeover")
		requireTokenInDocument(t, e, h2)

		require.ErrorIs(t, h1.Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, h2.Release(ctx))
	})

	t.Run("holder stopped extending", func(t *testing.T) {
		e := newLockEnv(t, mongolock.WithExpiry(shortExpiry), mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
		ctx := boundedCtx(t, 30*time.Second)
		log := &tokenLog{t: t}
		c := testdb.NewClient(t)
		holder := newProvider(t, c.Database(e.db.Name()), mongolock.WithExpiry(shortExpiry))
		h1, err := holder.Lock("abandoned").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h1.FencingToken(), "the first acquisition")

		// The holder's process goes away: it cannot extend any more.
		require.NoError(t, c.Disconnect(ctx))
		h2, err := e.other.Lock("abandoned").Acquire(ctx)
		require.NoError(t, err)
		log.add(h2.FencingToken(), "an expiry takeover")
		requireTokenInDocument(t, e, h2)

		require.ErrorIs(t, h1.Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, h2.Release(ctx))
	})
}

// The floor toLong($$NOW) * 1024 is what makes a re-created document outrank
// the deleted one. $$NOW has millisecond resolution, so the floor can only
// outrank acquisitions made in an earlier millisecond: a document deleted
// and re-created within the millisecond of its last acquisition can give
// the same token again (seen here: about 1 in 20 tight acquire, delete,
// acquire sequences without -race). Every deletion that happens outside a
// test is at least that late (the TTL monitor deletes only documents whose
// lease of at least 100ms has ended), so the tests below let a millisecond
// pass, on the client's clock, between an acquisition and the deletion of
// its document.
func afterTheMillisecondOf(acquired time.Time) {
	time.Sleep(time.Until(acquired.Add(2 * time.Millisecond)))
}

func TestFencingTokenIncreasesAfterTheDocumentIsDeleted(t *testing.T) {
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	ctx := boundedCtx(t, 30*time.Second)
	log := &tokenLog{t: t}
	deleteDoc := func() {
		t.Helper()
		res, err := e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "deleted"}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.DeletedCount)
	}

	// Build up a few tokens by +1 steps first, so that a reset to a floor
	// that is merely close to the old tokens would show.
	for range 10 {
		h, err := e.p.Lock("deleted").TryAcquire(ctx)
		require.NoError(t, err)
		log.add(h.FencingToken(), "a release")
		require.NoError(t, h.Release(ctx))
	}

	for i := range 20 {
		p := e.p
		if i%2 == 1 {
			p = e.other
		}
		h, err := p.Lock("deleted").TryAcquire(ctx)
		require.NoError(t, err)
		acquired := time.Now()
		log.add(h.FencingToken(), "a deletion of the free document")
		requireTokenInDocument(t, e, h)
		if i%4 == 0 {
			// Deleted while held: the holder loses it.
			afterTheMillisecondOf(acquired)
			deleteDoc()
			awaitClosed(t, h.Lost(), lossDetectionBound, "Lost after the document was deleted")
			require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
			continue
		}
		require.NoError(t, h.Release(ctx))
		afterTheMillisecondOf(acquired)
		deleteDoc()
	}
}

func TestFencingTokensStrictlyIncreaseAcrossProvidersOnSeparateClients(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	opts := []mongolock.Option{mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond)}
	var providers []*mongolock.Provider
	for range 2 {
		providers = append(providers, newProvider(t, ownClient(t, db, nil), opts...))
	}

	const perProvider = 25
	var (
		mu      sync.Mutex
		tokens  []int64 // in the order the lock was held
		holders atomic.Int32
		wg      sync.WaitGroup
		errs    = make(chan error, len(providers))
	)
	for _, p := range providers {
		wg.Add(1)
		go func(l *mongolock.Lock) {
			defer wg.Done()
			for range perProvider {
				h, err := l.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				if holders.Add(1) != 1 {
					t.Error("two holders at once")
				}
				mu.Lock()
				tokens = append(tokens, h.FencingToken())
				mu.Unlock()
				holders.Add(-1)
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(p.Lock("shared"))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, p := range providers {
		mongolock.WaitBackground(p)
	}

	require.Len(t, tokens, len(providers)*perProvider)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "acquisition %d of %v", i, tokens)
	}
	doc := rawLockDoc(t, db.Collection(mongolock.DefaultCollection), "shared")
	require.Equal(t, tokens[len(tokens)-1], doc.Lookup("fencingToken").Int64())
}
