package mongolock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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
// error; one that is not valid UTF-8 is ErrInvalidArgument. A sentinel lock is held throughout: a name that matched another
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
			require.Equal(t, !utf8.ValidString(name), errors.Is(err, mongolock.ErrInvalidArgument), "refused as not UTF-8: %v", err)
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

// optionSeed is one input of FuzzOptions.
type optionSeed struct {
	coll               string
	expiry, cadence    int64
	setCadence         bool
	sleepMin, sleepMax int64
	adaptive           bool
	label              string // for the log
}

// options returns the options s stands for, and whether the documented
// bounds call them valid in the database called db.
func (s optionSeed) options(db string) (opts []mongolock.Option, valid bool) {
	opts = []mongolock.Option{
		mongolock.WithCollection(s.coll),
		mongolock.WithExpiry(time.Duration(s.expiry)),
		mongolock.WithBusyWaitSleep(time.Duration(s.sleepMin), time.Duration(s.sleepMax)),
		mongolock.WithAdaptiveBackoff(s.adaptive),
	}
	if s.setCadence {
		opts = append(opts, mongolock.WithExtensionCadence(time.Duration(s.cadence)))
	}
	cadence := s.effectiveCadence()
	valid = validCollection(db, s.coll) && s.expiry >= int64(100*time.Millisecond) &&
		cadence >= s.expiry/100 && cadence <= (s.expiry-s.margin())/2 && s.sleepMin > 0 && s.sleepMin <= s.sleepMax
	return opts, valid
}

// validCollection reports whether WithCollection's documentation calls coll
// valid in the database called db.
func validCollection(db, coll string) bool {
	return coll != "" && utf8.ValidString(coll) && !strings.ContainsAny(coll, "$\x00") && !strings.HasPrefix(coll, "system.") &&
		len(db+"."+coll+"_semaphores") <= 255
}

// effectiveCadence is the extension cadence: the one set, else a third of
// the expiry.
func (s optionSeed) effectiveCadence() int64 {
	if !s.setCadence {
		return s.expiry / 3
	}
	return s.cadence
}

// margin is the documented safety margin: a tenth of the expiry, at most 1s.
func (s optionSeed) margin() int64 { return min(s.expiry/10, int64(time.Second)) }

const optMS = int64(time.Millisecond)

var optionSeeds = []optionSeed{
	{mongolock.DefaultCollection, int64(mongolock.DefaultExpiry), 0, false, 10 * optMS, 800 * optMS, false, "defaults"},
	{"locks", 100 * optMS, 0, false, 1, 1, true, "shortest expiry, 1ns sleeps"},
	{"locks", 100*optMS - 1, 0, false, 10 * optMS, 800 * optMS, false, "expiry too short"},
	{"locks", -1, 0, false, 10 * optMS, 800 * optMS, false, "negative expiry"},
	{"locks", math.MaxInt64, 0, false, 10 * optMS, 800 * optMS, false, "longest expiry"},
	{"locks", 1000 * optMS, 1000*optMS - 1, true, 10 * optMS, 800 * optMS, false, "cadence just below expiry"},
	{"locks", 1000 * optMS, 450 * optMS, true, 10 * optMS, 800 * optMS, false, "longest cadence"},
	{"locks", 1000 * optMS, 450*optMS + 1, true, 10 * optMS, 800 * optMS, false, "cadence just above the longest"},
	{"locks", 1000 * optMS, 10 * optMS, true, 10 * optMS, 800 * optMS, false, "shortest cadence"},
	{"locks", 1000 * optMS, 10*optMS - 1, true, 10 * optMS, 800 * optMS, false, "cadence just below the shortest"},
	{"locks", 1000 * optMS, 1000 * optMS, true, 10 * optMS, 800 * optMS, false, "cadence = expiry"},
	{"locks", 1000 * optMS, 0, true, 10 * optMS, 800 * optMS, false, "cadence 0"},
	{"locks", 1000 * optMS, -1, true, 10 * optMS, 800 * optMS, false, "negative cadence"},
	{"locks", 1000 * optMS, 0, false, 0, 800 * optMS, false, "sleep min 0"},
	{"locks", 1000 * optMS, 0, false, 20 * optMS, 10 * optMS, true, "sleep min > max"},
	{"locks", 1000 * optMS, 0, false, 10 * optMS, math.MaxInt64, true, "longest sleep max"},
	{"locks", 1000 * optMS, 0, false, math.MaxInt64, math.MaxInt64, false, "longest sleeps"},
	{"", 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "empty collection"},
	{"a.b", 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "dotted collection"},
	{"$locks", 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "collection with $"},
	{"lo\x00cks", 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "collection with NUL"},
	{"system.locks", 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "system collection"},
	{"\xff\xfe", 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "collection not UTF-8"},
	{strings.Repeat("c", 300), 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "300-byte collection"},
	{strings.Repeat("c", 255-len("mongolock_test_fuzz_options._semaphores")), 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "longest collection"},
	{strings.Repeat("c", 256-len("mongolock_test_fuzz_options._semaphores")), 1000 * optMS, 0, false, 10 * optMS, 800 * optMS, false, "collection a byte too long"},
}

// FuzzOptions: any option values are either refused by NewProvider, with an
// error naming the option, or satisfy the documented bounds; never a panic.
// Each valid set then works, over the model in simulated time: a process
// acquires, a second one with the same options waits (its sleeps, however
// long or short, end with its ctx) and is told the lock was held, the
// first releases and the second gets the lock. What a server makes of the
// same sets (the collection names it refuses):
// TestOptionsOfTheFuzzSeedsOnTheServer.
func FuzzOptions(f *testing.F) {
	labels := map[optionSeed]string{}
	for _, s := range optionSeeds {
		f.Add(s.coll, s.expiry, s.cadence, s.setCadence, s.sleepMin, s.sleepMax, s.adaptive)
		label := s.label
		s.label = ""
		labels[s] = label
	}
	// A client that never reaches a server: New and NewProvider only
	// validate.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?connect=direct"))
	require.NoError(f, err)
	f.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(testdb.Prefix + "fuzz_options")

	f.Fuzz(func(t *testing.T, coll string, expiry, cadence int64, setCadence bool, sleepMin, sleepMax int64, adaptive bool) {
		s := optionSeed{coll, expiry, cadence, setCadence, sleepMin, sleepMax, adaptive, ""}
		label := labels[s]
		opts, valid := s.options(db.Name())
		p, err := mongolock.NewProvider(db, opts...)
		_, errNew := mongolock.New(db, "x", opts...)
		require.Equal(t, err == nil, errNew == nil, "New and NewProvider disagree")
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
		require.Equal(t, time.Duration(s.margin()), m, "the margin: a tenth of the expiry, at most 1s")
		require.GreaterOrEqual(t, m, 10*time.Millisecond)
		require.LessOrEqual(t, 2*s.effectiveCadence(), expiry-s.margin(), "no room to extend twice within the lease")
		synctest.Test(t, func(t *testing.T) { optionsWork(t, opts) })
		if label != "" {
			t.Logf("%s: works", label)
		}
	})
}

// optionsWork checks, over the model, that two processes with opts
// exclude each other: the second one's Acquire, whose ctx ends while the
// first holds the lock, says it was held; once the first releases, the
// second gets the lock, with a greater token.
func optionsWork(t *testing.T, opts []mongolock.Option) {
	ctx := t.Context()
	d := newMemDB(t)
	p, net := d.process(opts...)
	other, otherNet := d.process(opts...)
	// Round trips take time, as a server's do: sleeps of 1ns do not spin
	// without end at one instant.
	net.Delay(time.Millisecond)
	otherNet.Delay(time.Millisecond)
	h := mustAcquire(t, ctx, p.Lock("fuzz"))
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := other.Lock("fuzz").Acquire(wctx)
	wcancel()
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, h.Release(ctx))
	h2 := mustAcquire(t, ctx, other.Lock("fuzz"))
	require.Greater(t, h2.FencingToken(), h.FencingToken())
	require.NoError(t, h2.Release(ctx))
}

// What the server makes of every valid set of FuzzOptions' seeds: a lease
// of its arithmetic that keeps a second client out until the release (for
// the leases that a stalled machine cannot outlast), or,
// for a collection name it refuses, a clear error at once rather than an
// Acquire that retries until its ctx ends. One attempt each: how the
// options wait is FuzzOptions', over the model.
func TestOptionsOfTheFuzzSeedsOnTheServer(t *testing.T) {
	db := testdb.Database(t)
	otherDB := ownClient(t, db, nil)
	for i, s := range optionSeeds {
		opts, valid := s.options(db.Name())
		if !valid {
			continue
		}
		t.Run(s.label, func(t *testing.T) {
			// A bound for failing only: a refusal comes at the first reply.
			ctx := boundedCtx(t, 20*time.Second)
			name := fmt.Sprintf("options-%d", i)
			h, err := newProvider(t, db, opts...).Lock(name).Acquire(ctx)
			if err != nil {
				require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
				require.NoError(t, ctx.Err(), "returned only when ctx ended: retried a refusal?")
				t.Logf("refused: %v", err)
				return
			}
			releaseAtCleanup(t, h)
			// A lease that a loaded machine's stall can outlast may end
			// before the second client asks, or before the release: such
			// a seed shows only that the server takes its options.
			long := time.Duration(s.expiry) >= 10*time.Second
			if long {
				_, err = newProvider(t, otherDB, opts...).Lock(name).TryAcquire(ctx)
				require.ErrorIs(t, err, mongolock.ErrNotAcquired, "a second client while held")
			}
			if err := h.Release(ctx); long || !errors.Is(err, mongolock.ErrLockLost) {
				require.NoError(t, err)
			}
			t.Logf("works (token %d)", h.FencingToken())
		})
	}
}
