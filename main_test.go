package mongolock_test

import (
	"flag"
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
	flag.Parse()
	if os.Getenv(testdb.EnvURI) == "" {
		uri, err := testdb.URI()
		switch {
		case err != nil && testdb.Required():
			fmt.Fprintln(os.Stderr, "mongolock tests: no server for the examples:", err)
			os.Exit(1)
		case err != nil:
			// The tests skip one by one; examples cannot skip, so they are
			// left out.
			testdb.NoteSkip(err)
			skip := "^Example"
			if s := flag.Lookup("test.skip").Value.String(); s != "" {
				skip = s + "|" + skip
			}
			if err := flag.Set("test.skip", skip); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				os.Exit(1)
			}
		default:
			if err := os.Setenv(testdb.EnvURI, uri); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				os.Exit(1)
			}
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
