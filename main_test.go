package mongolock_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain points MONGOLOCK_TEST_URI (testdb.EnvURI) at the test server for
// the examples, which connect as applications do; after the tests it disconnects the shared
// client, then checks that no goroutine outlived them: every extension loop
// and background cleanup has an end.
func TestMain(m *testing.M) {
	if os.Getenv(testdb.EnvURI) == "" {
		uri, err := testdb.URI()
		if err != nil {
			// Tests skip without a server (fail under CI=true), but examples
			// cannot skip: they will fail, and this says why.
			fmt.Fprintln(os.Stderr, "mongolock tests: no server for the examples:", err)
			if os.Getenv("CI") == "true" {
				os.Exit(1)
			}
		} else if err := os.Setenv(testdb.EnvURI, uri); err != nil {
			fmt.Fprintln(os.Stderr, "mongolock tests:", err)
			os.Exit(1)
		}
	}
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
