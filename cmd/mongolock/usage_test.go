package main

import (
	"strings"
	"testing"
)

// A usage error names what set the bad value, the flag or the variable of
// the environment, in the command's words (flags, never Go options), and a
// duration beyond its bound is refused with the bound said. None of these
// reaches the server.
func TestUsageErrorsNameWhatSetTheValue(t *testing.T) {
	t.Parallel()
	good := "mongodb://127.0.0.1:1/db" // never reached by these
	long := strings.Repeat("o", 257)
	for _, c := range []struct {
		env  []string
		args []string
		says string
	}{
		{[]string{"MONGOLOCK_EXPIRY=-1s"}, []string{"run", "x", "true"}, "run: MONGOLOCK_EXPIRY=-1s: the lease must be at least 100ms"},
		{nil, []string{"run", "--expiry", "-1s", "x", "true"}, "run: --expiry -1s: the lease must be at least 100ms"},
		{nil, []string{"run", "--expiry", "100000h", "x", "true"}, "run: --expiry 100000h0m0s: at most 24h0m0s"},
		{[]string{"MONGOLOCK_EXPIRY=100000h"}, []string{"acquire", "x"}, "acquire: MONGOLOCK_EXPIRY=100000h0m0s: at most 24h0m0s"},
		{nil, []string{"extend", "--expiry", "100000h", "--ticket", "mlt1_x"}, "extend: --expiry 100000h0m0s: at most 24h0m0s"},
		{nil, []string{"run", "--hold-at-least", "-1s", "x", "true"}, "run: --hold-at-least -1s: must not be negative"},
		{[]string{"MONGOLOCK_HOLD_AT_LEAST=-1s"}, []string{"run", "x", "true"}, "run: MONGOLOCK_HOLD_AT_LEAST=-1s: must not be negative"},
		{nil, []string{"run", "--grace", "-1s", "x", "true"}, "run: --grace -1s: must not be negative"},
		{nil, []string{"run", "--wait", "-1s", "x", "true"}, "run: --wait -1s: must not be negative"},
		{nil, []string{"run", "--wait", "1000h", "x", "true"}, "run: --wait 1000h0m0s: at most 744h0m0s"},
		{nil, []string{"run", "--hold-at-most", "1000h", "x", "true"}, "run: --hold-at-most 1000h0m0s: at most 744h0m0s"},
		{[]string{"MONGOLOCK_TIMEOUT=0s"}, []string{"list"}, "list: MONGOLOCK_TIMEOUT=0s: must be positive"},
		{nil, []string{"--timeout", "2h", "list"}, "list: --timeout 2h0m0s: at most 1h0m0s"},
		{nil, []string{"run", "--owner", long, "x", "true"}, "run: --owner: at most 256 bytes, not 257"},
		{[]string{"MONGOLOCK_OWNER=" + long}, []string{"acquire", "x"}, "acquire: MONGOLOCK_OWNER: at most 256 bytes, not 257"},
		{[]string{"MONGOLOCK_COLLECTION="}, []string{"list"}, "list: MONGOLOCK_COLLECTION: must not be empty"},
		{[]string{"MONGOLOCK_TRY=true", "MONGOLOCK_WAIT=1m"}, []string{"run", "x", "true"}, "run: MONGOLOCK_TRY and MONGOLOCK_WAIT exclude each other"},
		{[]string{"MONGOLOCK_SEMAPHORE=0"}, []string{"run", "x", "true"}, "run: MONGOLOCK_SEMAPHORE=0: a semaphore has at least 1 slot"},
		{[]string{"MONGOLOCK_EXPIRY=1m"}, []string{"run", "--hold-at-most", "30s", "x", "true"}, "run: --hold-at-most 30s: must be at least MONGOLOCK_EXPIRY (1m0s)"},
	} {
		r := invokeEnv(t, env(append([]string{"MONGOLOCK_URI=" + good, "MONGOLOCK_TIMEOUT=1s"}, c.env...)...), "", c.args...)
		what := strings.Join(c.env, " ") + " mongolock " + strings.Join(c.args, " ")
		if r.code != exitUsage {
			t.Errorf("%s: status %d, want %d; stderr %q", what, r.code, exitUsage, r.stderr)
			continue
		}
		if r.stderr != "mongolock: "+c.says+"\n" && !(strings.HasPrefix(r.stderr, "mongolock: "+c.says) && strings.Count(r.stderr, "\n") == 1) {
			t.Errorf("%s: stderr %q; want %q", what, r.stderr, "mongolock: "+c.says)
		}
		for _, goWord := range []string{"With", "--grace"} {
			if strings.Contains(r.stderr, goWord) && !strings.Contains(strings.Join(c.args, " "), goWord) {
				t.Errorf("%s: stderr %q speaks of %s", what, r.stderr, goWord)
			}
		}
	}
}
