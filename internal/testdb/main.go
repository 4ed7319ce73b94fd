package testdb

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunWithExamples runs the tests and examples of m and returns the exit
// code, for a TestMain. It points EnvURI at the test server for the
// examples, which connect as applications do; where there is none and none
// is required, it leaves the examples out (they cannot skip). After the
// tests it disconnects the shared client, then checks that no goroutine
// outlived them: every extension loop and background cleanup has an end.
func RunWithExamples(m *testing.M) int {
	flag.Parse()
	if os.Getenv(EnvURI) == "" {
		uri, err := URI()
		switch {
		case err != nil && Required():
			fmt.Fprintln(os.Stderr, "mongolock tests: no server for the examples:", err)
			return 1
		case err != nil:
			NoteSkip(err)
			skip := "^Example"
			if s := flag.Lookup("test.skip").Value.String(); s != "" {
				skip = s + "|" + skip
			}
			if err := flag.Set("test.skip", skip); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				return 1
			}
		default:
			if err := os.Setenv(EnvURI, uri); err != nil {
				fmt.Fprintln(os.Stderr, "mongolock tests:", err)
				return 1
			}
		}
	}
	code := m.Run()
	Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
