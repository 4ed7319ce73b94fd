package gocronmongolock_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain runs the tests and the examples, and checks that no goroutine
// outlived them: the Electors' campaigns end with Close.
func TestMain(m *testing.M) { os.Exit(testdb.RunWithExamples(m)) }
