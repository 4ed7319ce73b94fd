package mongolock_test

// The options (options.go): what New and NewProvider refuse and accept,
// and what they set.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Options: New and NewProvider validate them without I/O, so these tests
// use a client of an address where no server answers.

// optionConstructors are New and NewProvider, which validate the same way.
// build reports the error and whether a lock or provider came back with it.
var optionConstructors = []struct {
	label, op string
	build     func(*mongo.Database, ...mongolock.Option) (bool, error)
}{
	{"New", "new", func(db *mongo.Database, opts ...mongolock.Option) (bool, error) {
		l, err := mongolock.New(db, "x", opts...)
		return l != nil, err
	}},
	{"NewProvider", "new provider", func(db *mongo.Database, opts ...mongolock.Option) (bool, error) {
		p, err := mongolock.NewProvider(db, opts...)
		return p != nil, err
	}},
}

func TestNilDatabaseIsAnError(t *testing.T) {
	for _, c := range optionConstructors {
		var (
			got bool
			err error
		)
		require.NotPanics(t, func() { got, err = c.build(nil) }, c.label)
		require.Error(t, err, c.label)
		require.False(t, got, c.label)
		require.Contains(t, err.Error(), "nil *mongo.Database", c.label)
		requireInvalid(t, err, c.op)
	}
}

func TestInvalidOptionsAreRefusedNamingTheOptionAndValue(t *testing.T) {
	db := offlineDatabase(t)
	for _, tc := range []struct {
		label string
		opts  []mongolock.Option
		want  []string // each must appear in the error message
	}{
		{"empty collection", []mongolock.Option{mongolock.WithCollection("")}, []string{`WithCollection("")`}},
		{"collection with $", []mongolock.Option{mongolock.WithCollection("$bad")}, []string{`WithCollection("$bad")`, `"$"`}},
		{"collection with NUL", []mongolock.Option{mongolock.WithCollection("lo\x00cks")}, []string{`WithCollection("lo\x00cks")`, "NUL"}},
		{"system collection", []mongolock.Option{mongolock.WithCollection("system.foo")}, []string{`WithCollection("system.foo")`, `"system."`}},
		{"collection not UTF-8", []mongolock.Option{mongolock.WithCollection("lo\xffcks")}, []string{`WithCollection("lo\xffcks")`, "UTF-8"}},
		{"collection of 300 bytes", []mongolock.Option{mongolock.WithCollection(strings.Repeat("c", 300))},
			[]string{`WithCollection("ccc`, "...", "_semaphores", "255"}},
		{"collection a byte too long for the semaphores' namespace", []mongolock.Option{mongolock.WithCollection(strings.Repeat("c", 256-len(offlineDBName+"._semaphores")))},
			[]string{`WithCollection("ccc`, "256 bytes", "255"}},
		{"owner not UTF-8", []mongolock.Option{mongolock.WithOwner("\xff")}, []string{`WithOwner("\xff")`, "UTF-8"}},
		{"expiry zero", []mongolock.Option{mongolock.WithExpiry(0)}, []string{"WithExpiry(0s)", "100ms"}},
		{"expiry negative", []mongolock.Option{mongolock.WithExpiry(-time.Second)}, []string{"WithExpiry(-1s)"}},
		{"expiry just under 100ms", []mongolock.Option{mongolock.WithExpiry(99 * time.Millisecond)}, []string{"WithExpiry(99ms)", "100ms"}},
		{"cadence zero", []mongolock.Option{mongolock.WithExtensionCadence(0)}, []string{"WithExtensionCadence(0s)"}},
		{"cadence negative", []mongolock.Option{mongolock.WithExtensionCadence(-5 * time.Millisecond)}, []string{"WithExtensionCadence(-5ms)"}},
		{"cadence equal to expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(time.Second)},
			[]string{"WithExtensionCadence(1s)", "expiry (1s)"}},
		{"cadence above the default expiry", []mongolock.Option{mongolock.WithExtensionCadence(31 * time.Second)},
			[]string{"WithExtensionCadence(31s)", "expiry (30s)"}},
		{"cadence set before a shorter expiry", []mongolock.Option{mongolock.WithExtensionCadence(200 * time.Millisecond), mongolock.WithExpiry(150 * time.Millisecond)},
			[]string{"WithExtensionCadence(200ms)", "expiry (150ms)"}},
		{"cadence of 1ns", []mongolock.Option{mongolock.WithExtensionCadence(time.Nanosecond)},
			[]string{"WithExtensionCadence(1ns)", "at least 300ms", "expiry (30s)"}},
		{"cadence just under a hundredth of the expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(10*time.Millisecond - 1)},
			[]string{"WithExtensionCadence(9.999999ms)", "at least 10ms"}},
		{"cadence just under the expiry", []mongolock.Option{mongolock.WithExtensionCadence(29990 * time.Millisecond)},
			[]string{"WithExtensionCadence(29.99s)", "at most 14.5s", "expiry (30s)"}},
		{"cadence half the expiry", []mongolock.Option{mongolock.WithExtensionCadence(15 * time.Second)},
			[]string{"WithExtensionCadence(15s)", "at most 14.5s"}},
		{"cadence 0.6 of the expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(600 * time.Millisecond)},
			[]string{"WithExtensionCadence(600ms)", "at most 450ms", "expiry (1s)"}},
		{"cadence just over the longest", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(450*time.Millisecond + 1)},
			[]string{"WithExtensionCadence(450.000001ms)", "at most 450ms"}},
		{"cadence just over the longest at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond), mongolock.WithExtensionCadence(45*time.Millisecond + 1)},
			[]string{"WithExtensionCadence(45.000001ms)", "at most 45ms", "expiry (100ms)"}},
		{"busy-wait min zero", []mongolock.Option{mongolock.WithBusyWaitSleep(0, time.Second)}, []string{"WithBusyWaitSleep(0s, 1s)"}},
		{"busy-wait min negative", []mongolock.Option{mongolock.WithBusyWaitSleep(-time.Millisecond, time.Second)}, []string{"WithBusyWaitSleep(-1ms, 1s)"}},
		{"busy-wait both zero", []mongolock.Option{mongolock.WithBusyWaitSleep(0, 0)}, []string{"WithBusyWaitSleep(0s, 0s)"}},
		{"busy-wait min above max", []mongolock.Option{mongolock.WithBusyWaitSleep(2*time.Second, time.Second)}, []string{"WithBusyWaitSleep(2s, 1s)"}},
		{"standby under the busy-wait max", []mongolock.Option{mongolock.WithStandbySleep(799 * time.Millisecond)}, []string{"WithStandbySleep(799ms)", "800ms"}},
		{"standby negative", []mongolock.Option{mongolock.WithStandbySleep(-time.Second)}, []string{"WithStandbySleep(-1s)"}},
		{"nil option", []mongolock.Option{mongolock.WithExpiry(time.Second), nil}, []string{"nil Option"}},
		{"empty owner", []mongolock.Option{mongolock.WithOwner("")}, []string{`WithOwner("")`, "1 to 256 bytes"}},
		{"owner too long", []mongolock.Option{mongolock.WithOwner(strings.Repeat("o", mongolock.MaxOwnerLen+1))},
			[]string{`WithOwner("ooo`, "...", "1 to 256 bytes"}},
		{"hold at least negative", []mongolock.Option{mongolock.WithHoldAtLeast(-time.Second)}, []string{"WithHoldAtLeast(-1s)", "negative"}},
		{"hold at most zero", []mongolock.Option{mongolock.WithHoldAtMost(0)}, []string{"WithHoldAtMost(0s)", "expiry (30s)"}},
		{"hold at most negative", []mongolock.Option{mongolock.WithHoldAtMost(-time.Minute)}, []string{"WithHoldAtMost(-1m0s)"}},
		{"hold at most under the expiry", []mongolock.Option{mongolock.WithExpiry(time.Minute), mongolock.WithHoldAtMost(59 * time.Second)},
			[]string{"WithHoldAtMost(59s)", "expiry (1m0s)"}},
		{"hold at most under the hold at least", []mongolock.Option{mongolock.WithHoldAtLeast(2 * time.Minute), mongolock.WithHoldAtMost(time.Minute)},
			[]string{"WithHoldAtMost(1m0s)", "WithHoldAtLeast's (2m0s)"}},
		{"max clock skew negative", []mongolock.Option{mongolock.WithMaxClockSkew(-time.Millisecond)}, []string{"WithMaxClockSkew(-1ms)", "negative"}},
		{"max clock skew all the lease leaves", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithMaxClockSkew(900 * time.Millisecond)},
			[]string{"WithMaxClockSkew(900ms)", "expiry (1s)", "safety margin (100ms)"}},
		{"max clock skew past the lease", []mongolock.Option{mongolock.WithMaxClockSkew(time.Hour)}, []string{"WithMaxClockSkew(1h0m0s)", "expiry (30s)"}},
		{"max clock skew that leaves the default cadence no room", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithMaxClockSkew(300 * time.Millisecond)},
			[]string{"WithMaxClockSkew(300ms)", "cadence (333.333333ms)", "at most 300ms", "WithExtensionCadence"}},
		{"max clock skew just past the default cadence's room", []mongolock.Option{mongolock.WithMaxClockSkew(9*time.Second + time.Millisecond)},
			[]string{"WithMaxClockSkew(9.001s)", "cadence (10s)", "at most 9.9995s"}},
		{"max clock skew that leaves the longest cadence no room", []mongolock.Option{mongolock.WithExtensionCadence(14500 * time.Millisecond), mongolock.WithMaxClockSkew(time.Millisecond)},
			[]string{"WithMaxClockSkew(1ms)", "cadence (14.5s)", "at most 14.4995s"}},
	} {
		for _, c := range optionConstructors {
			t.Run(tc.label+"/"+c.label, func(t *testing.T) {
				got, err := c.build(db, tc.opts...)
				require.Error(t, err)
				require.False(t, got, "a value returned with the error")
				for _, w := range tc.want {
					require.Contains(t, err.Error(), w)
				}
				require.True(t, strings.HasPrefix(err.Error(), "mongolock: "+c.op), "error %q lacks the package prefix and operation", err)
				requireInvalid(t, err, c.op)
			})
		}
	}
}

func TestValidEdgeOptionsAreAccepted(t *testing.T) {
	db := offlineDatabase(t)
	for _, tc := range []struct {
		label string
		opts  []mongolock.Option
	}{
		{"no options", nil},
		{"the longest collection", []mongolock.Option{mongolock.WithCollection(strings.Repeat("c", 255-len(offlineDBName+"._semaphores")))}},
		{"a dotted collection", []mongolock.Option{mongolock.WithCollection("a.b")}},
		{"a collection of spaces, unicode and backslashes", []mongolock.Option{mongolock.WithCollection(" lö\\cks ")}},
		{"expiry exactly 100ms", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond)}},
		{"the default cadence at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond)}},
		{"the shortest cadence", []mongolock.Option{mongolock.WithExtensionCadence(300 * time.Millisecond)}},
		{"the longest cadence", []mongolock.Option{mongolock.WithExtensionCadence(14500 * time.Millisecond)}},
		{"the shortest cadence at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond), mongolock.WithExtensionCadence(time.Millisecond)}},
		{"the longest cadence at the shortest expiry", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond), mongolock.WithExtensionCadence(45 * time.Millisecond)}},
		{"the longest cadence of a 1s expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(450 * time.Millisecond)}},
		{"an expiry with a fraction of a millisecond", []mongolock.Option{mongolock.WithExpiry(1500700 * time.Microsecond)}},
		{"busy-wait min equal to max", []mongolock.Option{mongolock.WithBusyWaitSleep(5*time.Millisecond, 5*time.Millisecond)}},
		{"standby equal to the busy-wait max", []mongolock.Option{mongolock.WithStandbySleep(mongolock.DefaultBusyWaitMax)}},
		{"busy-wait of 1ns", []mongolock.Option{mongolock.WithBusyWaitSleep(time.Nanosecond, time.Nanosecond)}},
		{"a later option overrides an earlier one", []mongolock.Option{mongolock.WithExpiry(time.Millisecond), mongolock.WithExpiry(time.Second)}},
		{"hold at least alone", []mongolock.Option{mongolock.WithHoldAtLeast(time.Hour)}},
		{"hold at least zero", []mongolock.Option{mongolock.WithHoldAtLeast(0)}},
		{"hold at most equal to the expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithHoldAtMost(time.Second)}},
		{"holds at least and at most equal", []mongolock.Option{mongolock.WithHoldAtLeast(time.Minute), mongolock.WithHoldAtMost(time.Minute)}},
		{"max clock skew zero", []mongolock.Option{mongolock.WithMaxClockSkew(0)}},
		{"the most max clock skew the default cadence leaves", []mongolock.Option{mongolock.WithMaxClockSkew(9 * time.Second)}},
		{"max clock skew with a cadence that leaves it room", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(10 * time.Millisecond),
			mongolock.WithMaxClockSkew(880 * time.Millisecond)}},
		{"everything", []mongolock.Option{
			mongolock.WithCollection("locks"),
			mongolock.WithExpiry(2 * time.Second),
			mongolock.WithExtensionCadence(500 * time.Millisecond),
			mongolock.WithBusyWaitSleep(time.Millisecond, time.Second),
			mongolock.WithAdaptiveBackoff(true),
		}},
	} {
		for _, c := range optionConstructors {
			t.Run(tc.label+"/"+c.label, func(t *testing.T) {
				got, err := c.build(db, tc.opts...)
				require.NoError(t, err)
				require.True(t, got)
			})
		}
	}
}

// The server adds the expiry to $$NOW in whole milliseconds: the client's
// lease is counted from those, less the safety margin.
func TestTheClientsLeaseIsCountedInTheServersWholeMilliseconds(t *testing.T) {
	p := newProvider(t, offlineDatabase(t), mongolock.WithExpiry(1500700*time.Microsecond))
	require.Equal(t, 150070*time.Microsecond, mongolock.SafetyMargin(p))
	sent := time.Now()
	deadline := mongolock.KeptDeadline(p.Lock("ms"), sent)
	require.Equal(t, 1500*time.Millisecond-mongolock.SafetyMargin(p), deadline.Sub(sent), "the client's lease")
}

func TestWithCollectionSetsTheProvidersCollection(t *testing.T) {
	db := offlineDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	require.Equal(t, mongolock.DefaultCollection, mongolock.CollectionName(p))
	p, err = mongolock.NewProvider(db, mongolock.WithCollection("my locks"))
	require.NoError(t, err)
	require.Equal(t, "my locks", mongolock.CollectionName(p))
}

func TestWithCollectionPutsDocumentsInThatCollection(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, db, mongolock.WithCollection("custom"))
	require.Equal(t, "custom", mongolock.CollectionName(p))

	h := releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("elsewhere")))
	raw, err := db.Collection("custom").FindOne(ctx, bson.D{{Key: "_id", Value: "elsewhere"}}).Raw()
	require.NoError(t, err)
	require.Equal(t, h.FencingToken(), raw.Lookup("fencingToken").Int64())
	n, err := db.Collection(mongolock.DefaultCollection).CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "documents in the default collection")

	// The default collection's lock of the same name is another lock.
	def := releaseAtCleanup(t, mustTryAcquire(t, ctx, newProvider(t, db).Lock("elsewhere")))
	require.NoError(t, def.Release(ctx))
	require.NoError(t, h.Release(ctx))
}

// offlineDBName is offlineDatabase's name.
var offlineDBName = testdb.Prefix + "offline"

// A database name that MongoDB refuses on some platform (empty, 64 bytes
// or more, not UTF-8, or with one of /\. "$*<>:|?, a space or NUL) is
// refused by NewProvider and New, naming it, before anything is sent; one
// at the limits is accepted.
func TestDatabaseNamesMongoDBRefusesAreRefused(t *testing.T) {
	client := offlineDatabase(t).Client()
	for _, name := range []string{"", strings.Repeat("d", 64), "a/b", "a\\b", "a.b", "a b", `a"b`, "$db", "a*b", "a<b", "a>b", "a:b", "a|b", "a?b", "a\x00b", "d\xff"} {
		for _, c := range optionConstructors {
			t.Run(fmt.Sprintf("%q/%s", name, c.label), func(t *testing.T) {
				got, err := c.build(client.Database(name))
				require.False(t, got)
				require.ErrorContains(t, err, fmt.Sprintf("the database name %q", name))
				requireInvalid(t, err, c.op)
			})
		}
	}
	for _, name := range []string{strings.Repeat("d", 63), "mongolock-test_ö", "D"} {
		for _, c := range optionConstructors {
			got, err := c.build(client.Database(name))
			require.NoError(t, err, "%q", name)
			require.True(t, got)
		}
	}
}
