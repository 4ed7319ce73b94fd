package testdb

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"
)

// RunWithExamples runs the tests and examples of m and returns the exit
// code, for a TestMain. The examples connect as applications do, to
// MONGODB_URI and the database MONGODB_DATABASE: it points them at the
// test server (EnvURI's, whatever MONGODB_URI said before) and at this
// binary's ExamplesDatabase. Where there is no server and none is
// required, it leaves the examples out (they cannot skip). After the
// tests it drops the examples' database and disconnects the shared
// client, then checks that no goroutine outlived them: every extension
// loop and background cleanup has an end.
func RunWithExamples(m *testing.M) int {
	flag.Parse()
	// MONGODB_URI may name real data: nothing here reads it, and the
	// examples get the test server's in its place, or run not at all.
	if err := os.Unsetenv(ExampleEnvURI); err != nil {
		fmt.Fprintln(os.Stderr, "mongolock tests:", err)
		return 1
	}
	if os.Getenv(EnvURI) == "" {
		uri, err := URI()
		switch {
		case err != nil && Required():
			fmt.Fprintln(os.Stderr, "mongolock tests: no server for the examples:", err)
			return 1
		case err != nil:
			NoteSkip(err)
			skip := "^Example"
			if s := flag.Lookup("test.skip").Value.String(); s != "" {
				skip = s + "|" + skip
			}
			if err := flag.Set("test.skip", skip); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				return 1
			}
		default:
			if err := os.Setenv(EnvURI, uri); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				return 1
			}
		}
	}
	if uri := os.Getenv(EnvURI); uri != "" {
		for k, v := range map[string]string{ExampleEnvURI: uri, ExampleEnvDatabase: ExamplesDatabase()} {
			if err := os.Setenv(k, v); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				return 1
			}
		}
	}
	code := m.Run()
	dropExamplesDatabase()
	Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// The variables the examples read, as an application would: the
// connection string and the database.
const (
	ExampleEnvURI      = "MONGODB_URI"
	ExampleEnvDatabase = "MONGODB_DATABASE"
)

// examples is the database of this test binary's examples.
var examples struct {
	once sync.Once
	name string
	used atomic.Bool
}

// ExamplesDatabase is the name of the database the examples of this test
// binary share, with a random suffix: two runs against one server (two
// make test beside each other, two CI jobs) then never drop each other's
// collections under a holder. RunWithExamples drops it after the run.
func ExamplesDatabase() string {
	examples.once.Do(func() { examples.name = dbName("examples") })
	examples.used.Store(true)
	return examples.name
}

// dropExamplesDatabase drops the examples' database, if they made one.
func dropExamplesDatabase() {
	if !examples.used.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI(envURI()))
	if err != nil {
		return
	}
	defer func() { _ = c.Disconnect(ctx) }()
	if err := DropDatabase(ctx, c.Database(examples.name)); err != nil {
		fmt.Fprintln(os.Stderr, "mongolock tests: examples' database:", err)
	}
}
