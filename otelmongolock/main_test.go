package otelmongolock_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain runs the tests and the example against the test server, as
// mongolock's do, and checks that no goroutine outlived them.
func TestMain(m *testing.M) { os.Exit(testdb.RunWithExamples(m)) }
