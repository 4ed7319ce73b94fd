package mongolock_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain runs the tests and examples against the test server, and checks
// that no goroutine outlived them (testdb.RunWithExamples).
func TestMain(m *testing.M) { os.Exit(testdb.RunWithExamples(m)) }
