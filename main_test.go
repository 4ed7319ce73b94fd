package mongolock_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain disconnects the shared client after the tests, then checks that
// no goroutine outlived them: every extension loop and background cleanup
// has an end.
func TestMain(m *testing.M) {
	code := m.Run()
	testdb.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
