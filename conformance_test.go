package mongolock_test

import (
	"testing"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/testdb"
)

// TestConformance runs the suite that mongolocktest's in-memory providers
// also pass against the server: what code using the library can observe
// is the same over both.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error) {
		db := testdb.Database(t)
		return func(opts ...mongolock.Option) (*mongolock.Provider, error) { return mongolock.NewProvider(db, opts...) }
	})
}
