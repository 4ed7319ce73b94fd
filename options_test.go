package mongolock_test

// Option validation by New and NewProvider. Validation does no I/O, so these
// tests use a client of an address where no server answers.

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
)

// optionConstructors are New and NewProvider, which validate the same way. build
// reports the error and whether a lock or provider came back with it.
var optionConstructors = []struct {
	label string
	build func(*mongo.Database, ...mongolock.Option) (bool, error)
}{
	{"New", func(db *mongo.Database, opts ...mongolock.Option) (bool, error) {
		l, err := mongolock.New(db, "x", opts...)
		return l != nil, err
	}},
	{"NewProvider", func(db *mongo.Database, opts ...mongolock.Option) (bool, error) {
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
		{"busy-wait min zero", []mongolock.Option{mongolock.WithBusyWaitSleep(0, time.Second)}, []string{"WithBusyWaitSleep(0s, 1s)"}},
		{"busy-wait min negative", []mongolock.Option{mongolock.WithBusyWaitSleep(-time.Millisecond, time.Second)}, []string{"WithBusyWaitSleep(-1ms, 1s)"}},
		{"busy-wait both zero", []mongolock.Option{mongolock.WithBusyWaitSleep(0, 0)}, []string{"WithBusyWaitSleep(0s, 0s)"}},
		{"busy-wait min above max", []mongolock.Option{mongolock.WithBusyWaitSleep(2*time.Second, time.Second)}, []string{"WithBusyWaitSleep(2s, 1s)"}},
		{"nil option", []mongolock.Option{mongolock.WithExpiry(time.Second), nil}, []string{"nil Option"}},
	} {
		for _, c := range optionConstructors {
			t.Run(tc.label+"/"+c.label, func(t *testing.T) {
				got, err := c.build(db, tc.opts...)
				require.Error(t, err)
				require.False(t, got, "a value returned with the error")
				for _, w := range tc.want {
					require.Contains(t, err.Error(), w)
				}
				require.True(t, strings.HasPrefix(err.Error(), "mongolock: "), "error %q lacks the package prefix", err)
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
		{"expiry exactly 100ms", []mongolock.Option{mongolock.WithExpiry(100 * time.Millisecond)}},
		{"cadence just under expiry", []mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithExtensionCadence(time.Second - time.Millisecond)}},
		{"cadence of 1ns", []mongolock.Option{mongolock.WithExtensionCadence(time.Nanosecond)}},
		{"busy-wait min equal to max", []mongolock.Option{mongolock.WithBusyWaitSleep(5*time.Millisecond, 5*time.Millisecond)}},
		{"busy-wait of 1ns", []mongolock.Option{mongolock.WithBusyWaitSleep(time.Nanosecond, time.Nanosecond)}},
		{"a later option overrides an earlier one", []mongolock.Option{mongolock.WithExpiry(time.Millisecond), mongolock.WithExpiry(time.Second)}},
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

func TestWithCollectionSetsTheProvidersCollection(t *testing.T) {
	db := offlineDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	require.Equal(t, mongolock.DefaultCollection, mongolock.CollectionName(p))
	p, err = mongolock.NewProvider(db, mongolock.WithCollection("my locks"))
	require.NoError(t, err)
	require.Equal(t, "my locks", mongolock.CollectionName(p))
}

func TestLockNameIsReturnedExactly(t *testing.T) {
	db := offlineDatabase(t)
	p, err := mongolock.NewProvider(db)
	require.NoError(t, err)
	names := []string{"reports", "Reports", "a/b.c$d", "\xff\xfe not UTF-8"}
	for _, n := range unusualNames {
		names = append(names, n.name)
	}
	for _, n := range names {
		require.Equal(t, n, p.Lock(n).Name())
		l, err := mongolock.New(db, n)
		require.NoError(t, err)
		require.Equal(t, n, l.Name())
	}
}
