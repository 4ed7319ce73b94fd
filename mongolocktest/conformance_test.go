package mongolocktest_test

import (
	"testing"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/mongolocktest"
)

// TestConformance runs the suite that the root package's tests run against
// the server: the in-memory providers behave as the server's do, here in
// simulated time.
func TestConformance(t *testing.T) {
	conformance.RunSimulated(t, func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error) {
		return mongolocktest.NewStore().NewProvider
	})
}
