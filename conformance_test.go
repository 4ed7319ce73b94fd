package mongolock_test

import (
	"testing"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// TestConformance runs the suite that mongolocktest's in-memory providers
// also pass against the server: what code using the library can observe
// is the same over both.
func TestConformance(t *testing.T) {
	testdb.Info(t) // the whole suite skips, or fails, for want of a server
	conformance.Run(t, func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error) {
		db := testdb.Database(t)
		return func(opts ...mongolock.Option) (*mongolock.Provider, error) { return mongolock.NewProvider(db, opts...) }
	})
}

// TestConformanceOverTheModel runs the same suite over the in-memory
// store in simulated time, each provider on a client of its own.
func TestConformanceOverTheModel(t *testing.T) {
	conformance.RunSimulated(t, func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error) {
		store := memdb.NewStore(memDBName, nil)
		return func(opts ...mongolock.Option) (*mongolock.Provider, error) {
			p, err := backend.NewProvider(store.Client(), memDBName, opts)
			return p.(*mongolock.Provider), err
		}
	})
}
