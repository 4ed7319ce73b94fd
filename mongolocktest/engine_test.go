package mongolocktest_test

import (
	"testing"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
)

// TestConformanceOfTheEngineOverMemory runs the suite over providers whose
// engine is the one that runs over MongoDB, its statements applied to a
// database in process memory: what code using the library observes is
// the server's.
func TestConformanceOfTheEngineOverMemory(t *testing.T) {
	conformance.Run(t, func(t *testing.T) func(opts ...mongolock.Option) (*mongolock.Provider, error) {
		s := memdb.NewStore("mongolocktest", nil)
		return func(opts ...mongolock.Option) (*mongolock.Provider, error) {
			p, err := backend.NewEngineProvider(s, "mongolocktest", opts)
			if err != nil {
				return nil, err
			}
			return p.(*mongolock.Provider), nil
		}
	})
}
