package testdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A service that imports mongolock has MONGODB_URI naming its own data, and
// `go test all` runs these tests there: they must not go near it.
func TestServerIsNeverTakenFromMONGODB_URI(t *testing.T) {
	t.Setenv("MONGODB_URI", "mongodb://users-own-data.invalid:27017/")
	t.Setenv(EnvURI, "")
	require.Empty(t, envURI(), "with %s unset the tests start a server of their own", EnvURI)

	t.Setenv(EnvURI, "mongodb://127.0.0.1:27999/")
	require.Equal(t, "mongodb://127.0.0.1:27999/", envURI())
}

func TestDatabaseNamesBeginWithThePrefix(t *testing.T) {
	for _, test := range []string{
		"", "T", "TestDatabasesAreDistinctPerTest", "TestX/sub test/#01",
		"admin", "../local", "ünïcödé$.\x00", strings.Repeat("a", 200),
	} {
		name := dbName(test)
		require.True(t, strings.HasPrefix(name, Prefix), "dbName(%q) = %q", test, name)
		require.LessOrEqual(t, len(name), maxDBName, "dbName(%q) = %q", test, name)
		require.Regexp(t, `^[A-Za-z0-9_]+$`, name, "dbName(%q)", test)
	}
}

func TestDropDatabaseRefusesNamesWithoutThePrefix(t *testing.T) {
	// A client that never reaches a server: a refusal must not need one.
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?connect=direct").SetServerSelectionTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	for _, name := range []string{"admin", "local", "myapp", "mongolock_bench", "ml_Test_0123abcd", "mongolock_tes", "x" + Prefix} {
		err := DropDatabase(context.Background(), c.Database(name))
		require.ErrorContains(t, err, "refusing to drop", "DropDatabase(%q)", name)
	}
	// A prefixed name goes to the server, which this client cannot reach.
	err = DropDatabase(context.Background(), c.Database(Prefix+"x"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "refusing")
}
