package main

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testdb.Close()
	os.Exit(code)
}

// The service takes the lock, does the job with it held, and releases it.
func TestRunDoesTheJobUnderTheLockAndReleasesIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Database(t)
	require.NoError(t, run(ctx, testdb.Info(t).URI, db.Name()))

	var doc bson.M
	require.NoError(t, db.Collection(mongolock.DefaultCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "nightly-report"}}).Decode(&doc))
	require.NotContains(t, doc, "lockId", "released: no acquisition holds it")
	require.Positive(t, doc["fencingToken"], "it was acquired")
	info, err := must(mongolock.NewProvider(db)).Inspect(ctx, "nightly-report")
	require.NoError(t, err)
	require.False(t, info.Held)
}

// While another instance holds the lock, the service waits, and does
// nothing if it is stopped meanwhile.
func TestRunWaitsWhileAnotherInstanceHoldsTheLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Database(t)
	other := must(mongolock.NewProvider(db, mongolock.WithOwner("other-instance")))
	defer func() { _ = other.Close(context.Background()) }()
	h, err := other.Lock("nightly-report").Acquire(ctx)
	require.NoError(t, err)

	stopping, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	err = run(stopping, testdb.Info(t).URI, db.Name())
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "held by the other instance the whole time")
	require.True(t, errors.Is(err, context.DeadlineExceeded))

	info, err := other.Inspect(ctx, "nightly-report")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, "other-instance", info.Owner, "the holder keeps its lock")
	require.Equal(t, h.FencingToken(), info.FencingToken)
	require.NoError(t, h.Release(ctx))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
