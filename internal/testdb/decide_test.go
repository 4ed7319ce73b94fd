package testdb

import (
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Where the tests find their server, for each environment they run in.
func TestDecideWhereTheServerComesFrom(t *testing.T) {
	const uri = "mongodb://db.example:27017/"
	for _, c := range []struct {
		name string
		env  environ
		want plan
	}{
		// make test sets MONGOLOCK_TEST_REQUIRED=1 and nothing else.
		{"make test", environ{required: true, own: true}, plan{start: true, strict: true}},
		{"make test, a server named", environ{uri: uri, required: true, own: true}, plan{uri: uri, strict: true}},
		{"CI=true go test in a clone", environ{ci: true, own: true}, plan{start: true, strict: true}},
		{"CI=true go test in a clone, a server named", environ{uri: uri, ci: true, own: true}, plan{uri: uri, strict: true}},
		{"go test in a clone", environ{own: true}, plan{running: true}},
		{"go test in a clone, a server named", environ{uri: uri, own: true}, plan{uri: uri}},
		// An application's `go test all`, CI or not: nothing is started
		// and nothing fails for want of a server.
		{"go test all in an application", environ{}, plan{}},
		{"go test all in an application's CI", environ{ci: true}, plan{}},
		{"go test all in an application, a server named", environ{uri: uri, ci: true}, plan{uri: uri}},
		{"an application that requires a server", environ{required: true}, plan{start: true, strict: true}},
	} {
		require.Equal(t, c.want, decide(c.env), c.name)
	}
}

func TestOwnModuleIsMongolockBuiltFromSource(t *testing.T) {
	for _, c := range []struct {
		path, version string
		own           bool
	}{
		{modulePath, "(devel)", true},
		{modulePath + "/bench", "(devel)", true},
		{modulePath, "v0.3.0", false},                             // from the module cache
		{modulePath, "v0.0.0", false},                             // an application's replace
		{modulePath, "v0.0.0-20260101000000-0123456789ab", false}, // a pseudo-version
		{"example.com/app", "(devel)", false},
		{modulePath + "x", "(devel)", false},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: c.path, Version: c.version}}
		require.Equal(t, c.own, ownModule(bi), "%s@%s", c.path, c.version)
	}
	require.False(t, ownModule(nil))
}

// Without a server, a test fails where the run requires one and skips
// elsewhere, saying in one line how to give it one.
func TestMissingServerFailsOnlyWhereRequired(t *testing.T) {
	setShort(t, false)
	own := currentEnv().own
	for _, c := range []struct {
		ci, required string
		fails        bool
	}{
		{"", "1", true},
		{"true", "1", true},
		{"", "", false},
		{"true", "", own}, // CI=true counts only in mongolock's own module
	} {
		t.Setenv("CI", c.ci)
		t.Setenv(EnvRequired, c.required)
		msg, strict := missing(errNoServer)
		what := fmt.Sprintf("CI=%q %s=%q", c.ci, EnvRequired, c.required)
		require.Equal(t, c.fails, strict, what)
		require.Contains(t, msg, "no test server", what)
		require.NotContains(t, msg, "\n", what)
		if !c.fails {
			require.True(t, strings.HasPrefix(msg, "mongolock tests: no test server"), what)
			require.Contains(t, msg, "server tier", what)
			require.Contains(t, msg, EnvURI+"=mongodb://", what)
			require.Contains(t, msg, "make test", what)
		}
	}
}

// Under -short no server is looked for, none is required, and the tests
// that need one skip, saying in one line that -short left them out.
func TestShortSkipsTheServerTierEvenWhereAServerIsRequired(t *testing.T) {
	setShort(t, true)
	t.Setenv(EnvRequired, "1")
	t.Setenv(EnvURI, "mongodb://db.example:27017/")

	require.False(t, Required())
	_, _, err := connect()
	require.ErrorIs(t, err, errShort)
	msg, strict := missing(err)
	require.False(t, strict)
	require.NotContains(t, msg, "\n")
	require.True(t, strings.HasPrefix(msg, "mongolock tests: -short: skipping the server tier"), msg)
	require.Contains(t, msg, "without -short")
}

// setShort sets -short for the rest of the test.
func setShort(t *testing.T, on bool) {
	short := flag.Lookup("test.short").Value
	was := short.String()
	require.NoError(t, short.Set(fmt.Sprint(on)))
	t.Cleanup(func() { require.NoError(t, short.Set(was)) })
}
