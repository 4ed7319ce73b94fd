package mongolock_test

import (
	"testing"

	"github.com/mongolock/mongolock/internal/conformance"
)

// TestConformance runs the suite that mongolocktest's in-memory providers
// also pass against the server: what code using the library can observe
// is the same over both.
func TestConformance(t *testing.T) { conformance.Run(t) }

// TestConformanceOverTheModel runs the same suite over the in-memory
// store in simulated time, each provider on a client of its own.
func TestConformanceOverTheModel(t *testing.T) { conformance.RunOverModel(t) }
