package mongolocktest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that nothing of the in-memory providers outlives the
// tests: Observe's goroutine ends with its ctx or its provider.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
