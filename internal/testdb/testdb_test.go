package testdb_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/testdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testdb.Close()
	os.Exit(code)
}

func TestServerIsNamed(t *testing.T) {
	s := testdb.Info(t)
	require.NotEmpty(t, s.URI)
	require.NotEmpty(t, s.Version, "the server reports a version")
	require.Contains(t, []string{testdb.EnvURI, "container", "scripts/testdb"}, s.Source)
	t.Logf("server: %s (change streams: %v)", s.Name(), s.ChangeStreams)
}

func TestDatabaseWritesAndReadsADocument(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.Database(t)
	coll := db.Collection("docs")
	when := time.Now().UTC().Truncate(time.Millisecond)
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int64(42)}, {Key: "at", Value: when}})
	require.NoError(t, err)

	var got struct {
		ID string    `bson:"_id"`
		N  int64     `bson:"n"`
		At time.Time `bson:"at"`
	}
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got))
	require.Equal(t, "a", got.ID)
	require.Equal(t, int64(42), got.N)
	require.True(t, when.Equal(got.At), "stored %v, read %v", when, got.At)
}

func TestDatabasesAreDistinctPerTest(t *testing.T) {
	a, b := testdb.Database(t), testdb.Database(t)
	require.NotEqual(t, a.Name(), b.Name())
	require.LessOrEqual(t, len(a.Name()), 38)
	require.True(t, strings.HasPrefix(a.Name(), testdb.Prefix), a.Name())
}

func TestRequireSkipsNamingTheMissingCapability(t *testing.T) {
	s := testdb.Info(t)
	// A sub-test that requires change streams must run exactly when the
	// server has them; otherwise it must be skipped, not failed.
	ran := false
	ok := t.Run("needs change streams", func(t *testing.T) {
		testdb.Require(t, testdb.ChangeStreams)
		ran = true
	})
	require.True(t, ok)
	require.Equal(t, s.ChangeStreams, ran)
}
