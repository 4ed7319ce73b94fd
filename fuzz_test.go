package mongolock_test

import (
	"context"
	"errors"
	"flag"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Fuzz tests. Their seed corpora run with every go test; to fuzz:
//
//	go test -run '^$' -fuzz FuzzLockName -fuzztime 2m .
//	go test -run '^$' -fuzz FuzzOptions -fuzztime 2m .

// fuzzing reports whether this process is fuzzing (a coordinator or a
// worker) rather than running the seed corpus.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// FuzzLockName: any string is a lock of its own on the server, or a clear
// error. A sentinel lock is held throughout: a name that matched another
// lock's document would find it held (ErrNotAcquired). No call leaves a
// goroutine behind.
func FuzzLockName(f *testing.F) {
	for _, n := range hostileNames {
		f.Add(n.name)
	}
	for _, n := range unusualNames {
		f.Add(n.name)
	}
	ctx := context.Background()
	db := testdb.Database(f)
	p := newProvider(f, db)
	other := newProvider(f, ownClient(f, db, nil))
	const sentinel = "fuzz: held throughout"
	held, err := p.Lock(sentinel).TryAcquire(ctx)
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, held.Release(ctx)) })
	// Every goroutine running now (the clients', the sentinel's lease)
	// may stay, and the fuzzing engine's signal handler; none that a call
	// starts may.
	before := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("os/signal.NotifyContext.func1")}
	// The seed corpus is checked once, after its last input: a goroutine
	// an input left behind is still there. Each fuzzed input on its own.
	if !fuzzing() {
		f.Cleanup(func() { goleak.VerifyNone(f, before...) })
	}

	f.Fuzz(func(t *testing.T, name string) {
		if name == sentinel {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l := p.Lock(name)
		require.Equal(t, name, l.Name())
		h, err := l.TryAcquire(ctx)
		if err != nil {
			require.NotErrorIs(t, err, mongolock.ErrNotAcquired, "a free name was taken for another lock")
			var le *mongolock.Error
			require.ErrorAs(t, err, &le)
			require.LessOrEqual(t, len(le.Name), 64)
			return
		}
		require.Equal(t, name, h.Name())
		_, err = other.Lock(name).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a second holder")
		require.NoError(t, h.Release(ctx))
		require.NoError(t, h.Release(ctx), "a second Release")
		h2, err := other.Lock(name).TryAcquire(ctx)
		require.NoError(t, err, "released, yet not free")
		require.Greater(t, h2.FencingToken(), h.FencingToken())
		require.NoError(t, h2.Release(ctx))
		<-mongolock.LeaseUnkept(h)
		<-mongolock.LeaseUnkept(h2)
		mongolock.WaitBackground(p)
		mongolock.WaitBackground(other)
		if fuzzing() {
			goleak.VerifyNone(t, before...)
		}
	})
}

// FuzzOptions: any option values are either refused by NewProvider, with an
// error naming the option, or satisfy the documented bounds; never a panic.
// The seed corpus also uses each valid set against the server (fuzzing does
// not, so as not to create a collection per input): acquire, wait, release,
// or, for a collection name the server refuses, a clear error at once.
func FuzzOptions(f *testing.F) {
	const ms = int64(time.Millisecond)
	type seed struct {
		coll               string
		expiry, cadence    int64
		setCadence         bool
		sleepMin, sleepMax int64
		adaptive           bool
		label              string // for the log
	}
	seeds := []seed{
		{mongolock.DefaultCollection, int64(mongolock.DefaultExpiry), 0, false, 10 * ms, 800 * ms, false, "defaults"},
		{"locks", 100 * ms, 0, false, 1, 1, true, "shortest expiry, 1ns sleeps"},
		{"locks", 100*ms - 1, 0, false, 10 * ms, 800 * ms, false, "expiry too short"},
		{"locks", -1, 0, false, 10 * ms, 800 * ms, false, "negative expiry"},
		{"locks", math.MaxInt64, 0, false, 10 * ms, 800 * ms, false, "longest expiry"},
		{"locks", 1000 * ms, 1000*ms - 1, true, 10 * ms, 800 * ms, false, "cadence just below expiry"},
		{"locks", 1000 * ms, 450 * ms, true, 10 * ms, 800 * ms, false, "longest cadence"},
		{"locks", 1000 * ms, 450*ms + 1, true, 10 * ms, 800 * ms, false, "cadence just above the longest"},
		{"locks", 1000 * ms, 10 * ms, true, 10 * ms, 800 * ms, false, "shortest cadence"},
		{"locks", 1000 * ms, 10*ms - 1, true, 10 * ms, 800 * ms, false, "cadence just below the shortest"},
		{"locks", 1000 * ms, 1000 * ms, true, 10 * ms, 800 * ms, false, "cadence = expiry"},
		{"locks", 1000 * ms, 0, true, 10 * ms, 800 * ms, false, "cadence 0"},
		{"locks", 1000 * ms, -1, true, 10 * ms, 800 * ms, false, "negative cadence"},
		{"locks", 1000 * ms, 0, false, 0, 800 * ms, false, "sleep min 0"},
		{"locks", 1000 * ms, 0, false, 20 * ms, 10 * ms, true, "sleep min > max"},
		{"locks", 1000 * ms, 0, false, 10 * ms, math.MaxInt64, true, "longest sleep max"},
		{"locks", 1000 * ms, 0, false, math.MaxInt64, math.MaxInt64, false, "longest sleeps"},
		{"", 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "empty collection"},
		{"a.b", 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "dotted collection"},
		{"$locks", 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "collection with $"},
		{"lo\x00cks", 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "collection with NUL"},
		{"system.locks", 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "system collection"},
		{"\xff\xfe", 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "collection not UTF-8"},
		{strings.Repeat("c", 300), 1000 * ms, 0, false, 10 * ms, 800 * ms, false, "300-byte collection"},
	}
	labels := map[string]string{}
	for _, s := range seeds {
		f.Add(s.coll, s.expiry, s.cadence, s.setCadence, s.sleepMin, s.sleepMax, s.adaptive)
		labels[s.coll+"|"+time.Duration(s.expiry).String()+"|"+time.Duration(s.cadence).String()+"|"+time.Duration(s.sleepMin).String()+"|"+time.Duration(s.sleepMax).String()] = s.label
	}
	useServer := !fuzzing()
	var db, otherDB = testdb.Database(f), testdb.Database(f)
	if useServer {
		otherDB = ownClient(f, db, nil)
	}

	f.Fuzz(func(t *testing.T, coll string, expiry, cadence int64, setCadence bool, sleepMin, sleepMax int64, adaptive bool) {
		label := labels[coll+"|"+time.Duration(expiry).String()+"|"+time.Duration(cadence).String()+"|"+time.Duration(sleepMin).String()+"|"+time.Duration(sleepMax).String()]
		opts := []mongolock.Option{
			mongolock.WithCollection(coll),
			mongolock.WithExpiry(time.Duration(expiry)),
			mongolock.WithBusyWaitSleep(time.Duration(sleepMin), time.Duration(sleepMax)),
			mongolock.WithAdaptiveBackoff(adaptive),
		}
		if setCadence {
			opts = append(opts, mongolock.WithExtensionCadence(time.Duration(cadence)))
		}
		p, err := mongolock.NewProvider(db, opts...)
		_, errNew := mongolock.New(db, "x", opts...)
		require.Equal(t, err == nil, errNew == nil, "New and NewProvider disagree")
		if !setCadence {
			cadence = expiry / 3
		}
		margin := min(expiry/10, int64(time.Second))
		valid := coll != "" && expiry >= int64(100*time.Millisecond) &&
			cadence >= expiry/100 && cadence <= (expiry-margin)/2 && sleepMin > 0 && sleepMin <= sleepMax
		if err != nil {
			require.Nil(t, p)
			require.False(t, valid, "documented-valid options refused: %v", err)
			require.True(t, strings.HasPrefix(err.Error(), "mongolock: new provider: With"), "the error names the option: %v", err)
			require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
			if label != "" {
				t.Logf("%s: refused: %v", label, err)
			}
			return
		}
		require.True(t, valid, "documented-invalid options accepted")
		require.Equal(t, coll, mongolock.CollectionName(p))
		m := mongolock.SafetyMargin(p)
		require.Equal(t, time.Duration(margin), m, "the margin: a tenth of the expiry, at most 1s")
		require.GreaterOrEqual(t, m, 10*time.Millisecond)
		require.LessOrEqual(t, 2*cadence, expiry-margin, "no room to extend twice within the lease")
		if !useServer {
			return
		}

		// On the server: acquire, be refused to a second client with the
		// same options (its sleeps, however long or short, end with ctx),
		// release.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		other := newProvider(t, otherDB, opts...)
		defer mongolock.WaitBackground(p)
		start := time.Now()
		h, err := p.Lock("fuzz").Acquire(ctx)
		if err != nil {
			// A collection the server refuses: at once, clearly.
			require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
			require.NoError(t, ctx.Err(), "%s: returned only when ctx ended: retried a refusal?", label)
			require.Less(t, time.Since(start), 5*time.Second)
			t.Logf("%s: on the server: %v", label, err)
			return
		}
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = other.Lock("fuzz").Acquire(wctx)
		wcancel()
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		require.NoError(t, h.Release(ctx))
		if label != "" {
			t.Logf("%s: works (token %d)", label, h.FencingToken())
		}
	})
}
