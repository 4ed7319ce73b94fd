package mongolock_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// What MongoDB's listCollections returns as the options of a collection
// created with {collation: {locale: "en", strength: 2}}: the collation
// with every field filled in. (FerretDB accepts a collation at creation,
// ignores it, and lists no options: its collections are all simple.)
var caseInsensitiveOptions = bson.D{{Key: "collation", Value: bson.D{
	{Key: "locale", Value: "en"}, {Key: "caseLevel", Value: false}, {Key: "caseFirst", Value: "off"},
	{Key: "strength", Value: int32(2)}, {Key: "numericOrdering", Value: false}, {Key: "alternate", Value: "non-ignorable"},
	{Key: "maxVariable", Value: "punct"}, {Key: "normalization", Value: false}, {Key: "backwards", Value: false},
	{Key: "version", Value: "57.1"},
}}}

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	require.NoError(t, err)
	return raw
}

// A default collation other than the simple one is refused, whatever its
// locale; no collation, or {locale: "simple"}, is not.
func TestALockCollectionWithANonSimpleCollationIsRefused(t *testing.T) {
	for _, c := range []struct {
		what    string
		opts    bson.D
		refused bool
	}{
		{"no options", bson.D{}, false},
		{"other options, no collation", bson.D{{Key: "validator", Value: bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$type", Value: "date"}}}}}}, false},
		{"the simple collation", bson.D{{Key: "collation", Value: bson.D{{Key: "locale", Value: "simple"}}}}, false},
		{"en, strength 2 (case-insensitive)", caseInsensitiveOptions, true},
		{"fr, strength 3 (accents and case count, yet not bytes)", bson.D{{Key: "collation", Value: bson.D{{Key: "locale", Value: "fr"}, {Key: "strength", Value: int32(3)}}}}, true},
	} {
		err := mongolock.CollationRefusal(mustRaw(t, c.opts))
		if !c.refused {
			require.NoError(t, err, c.what)
			continue
		}
		require.ErrorIs(t, err, mongolock.ErrCollation, c.what)
		require.ErrorContains(t, err, "db.coll", c.what)
	}
}

// The check costs one listCollections per collection and client, whatever
// the number of acquisitions, inspections and providers: acquisitions stay
// one round trip each.
func TestCollationIsCheckedOncePerCollectionPerProcess(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	count := &commandCounter{}
	db := ownClient(t, testdb.Database(t), count)
	for _, p := range []*mongolock.Provider{newProvider(t, db), newProvider(t, db)} {
		for range 5 {
			require.NoError(t, mustTryAcquire(t, ctx, p.Lock("job")).Release(ctx))
			h, err := p.Semaphore("pool", 2).TryAcquire(ctx)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
			_, err = p.Inspect(ctx, "job")
			require.NoError(t, err)
			for _, err := range p.Locks(ctx, "") {
				require.NoError(t, err)
			}
			_, err = p.ForceRelease(ctx, "job")
			require.NoError(t, err)
		}
	}
	require.EqualValues(t, 2, count.named("listCollections"), "one per collection: the locks' and the semaphores'")
}

// A refused collection makes every call that would send a statement to it
// return ErrCollation, at once and without retrying, and nothing but the
// check is sent.
func TestARefusedCollectionReceivesNoLockStatement(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	count := &commandCounter{}
	p := newProvider(t, ownClient(t, testdb.Database(t), count))
	checks := map[string]int{}
	mongolock.SetListCollections(p, func(coll string, _ []bson.Raw, err error) ([]bson.Raw, error) {
		checks[coll]++ // one at a time: the calls below are sequential
		return []bson.Raw{mustRaw(t, caseInsensitiveOptions)}, err
	})
	calls := map[string]func() error{
		"TryAcquire": func() error { _, err := p.Lock("Job").TryAcquire(ctx); return err },
		"Acquire":    func() error { _, err := p.Lock("Job").Acquire(ctx); return err },
		"Semaphore":  func() error { _, err := p.Semaphore("pool", 2).Acquire(ctx); return err },
		"Inspect":    func() error { _, err := p.Inspect(ctx, "Job"); return err },
		"Semaphore.Inspect": func() error {
			_, err := p.Semaphore("pool", 2).Inspect(ctx)
			return err
		},
		"Locks": func() error {
			for _, err := range p.Locks(ctx, "") {
				return err
			}
			return nil
		},
		"ForceRelease": func() error { _, err := p.ForceRelease(ctx, "Job"); return err },
		"Campaign":     func() error { _, err := p.Election("leader").Campaign(ctx, "v"); return err },
	}
	for what, call := range calls {
		err := call()
		require.ErrorIs(t, err, mongolock.ErrCollation, what)
		var me *mongolock.Error
		require.ErrorAs(t, err, &me, what)
		require.ErrorContains(t, err, mongolock.DefaultCollection, what)
	}
	require.Equal(t, map[string]int{mongolock.DefaultCollection: 1, mongolock.DefaultCollection + "_semaphores": 1}, checks, "decided once")
	mongolock.WaitBackground(p)
	count.mu.Lock()
	defer count.mu.Unlock()
	require.Equal(t, map[string]int64{"listCollections": 2}, count.byNames, "nothing but the check is sent")
}

// Without the privilege to list collections, the check is skipped, once:
// locking goes on. A transient failure decides nothing: the next call
// checks again.
func TestCollationCheckSkipsWithoutPrivilegeAndRetriesATransientError(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	for _, c := range []struct {
		what    string
		err     error
		checks  int32
		firstOK bool
	}{
		{"unauthorized", mongo.CommandError{Code: 13, Name: "Unauthorized", Message: "not authorized on db to execute command { listCollections: 1 }"}, 1, true},
		{"transient", mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Message: "The server is in quiesce mode and will shut down"}, 2, false},
	} {
		p := newProvider(t, ownClient(t, testdb.Database(t), nil))
		var checks atomic.Int32
		mongolock.SetListCollections(p, func(coll string, opts []bson.Raw, err error) ([]bson.Raw, error) {
			if checks.Add(1) == 1 {
				return nil, c.err
			}
			return opts, err
		})
		h, err := p.Lock("job").TryAcquire(ctx)
		if c.firstOK {
			require.NoError(t, err, c.what)
			require.NoError(t, h.Release(ctx))
		} else {
			var ce mongo.CommandError
			require.True(t, errors.As(err, &ce) && ce.Code == 91 && !errors.Is(err, mongolock.ErrCollation), "%s: %v", c.what, err)
		}
		for range 3 {
			require.NoError(t, mustAcquire(t, ctx, p.Lock("job")).Release(ctx), c.what)
		}
		require.Equal(t, c.checks, checks.Load(), c.what)
	}
}
