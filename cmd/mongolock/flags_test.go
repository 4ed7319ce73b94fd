package main

import (
	"slices"
	"strings"
	"testing"
)

// A flag on the command line wins over one that only the environment
// sets, also over one it excludes: that one is left at its default. Two
// that exclude each other on the command line, or both from the
// environment, stay a usage error.
func TestCommandLineFlagWinsOverAnEnvironmentFlagItExcludes(t *testing.T) {
	t.Parallel()
	conn := server(t)
	for i, c := range []struct {
		env  string
		args []string
		kind string // what run held, as inspect says it: "lock", "semaphore", "read", "write"
	}{
		{"MONGOLOCK_WAIT=1m", []string{"--try"}, "lock"},
		{"MONGOLOCK_TRY=true", []string{"--wait", "1m"}, "lock"},
		{"MONGOLOCK_SEMAPHORE=3", []string{"--read"}, "read"},
		{"MONGOLOCK_SEMAPHORE=3", []string{"--write"}, "write"},
		{"MONGOLOCK_READ=true", []string{"--write"}, "write"},
		{"MONGOLOCK_WRITE=true", []string{"--read"}, "read"},
		{"MONGOLOCK_READ=true", []string{"--semaphore", "2"}, "semaphore"},
		{"MONGOLOCK_HOLD_AT_LEAST=1m", []string{"--semaphore", "2"}, "semaphore"},
		{"MONGOLOCK_HOLD_AT_MOST=10m", []string{"--write"}, "write"},
		{"MONGOLOCK_SEMAPHORE=2", []string{"--hold-at-least", "1ms"}, "lock"},
		{"MONGOLOCK_WRITE=true", []string{"--hold-at-most", "10m"}, "lock"},
	} {
		name := "excl-" + string(rune('a'+i))
		// The command run runs is mongolock inspect, which shows what it holds.
		args := append(append(slices.Clone(c.args), name, "--", binary, "inspect", "--json"), append(slices.Clone(conn), name)...)
		what := c.env + " mongolock run " + strings.Join(c.args, " ")
		r := invokeEnv(t, env(c.env), "", run(conn, args...)...)
		if r.code != 0 {
			t.Errorf("%s: status %d, want 0; stderr: %s", what, r.code, r.stderr)
			continue
		}
		objs := jsonLines[infoJSON](t, r.stdout)
		var got string
		switch {
		case len(objs) != 1 || len(objs[0].Holders) == 0 && objs[0].Kind != "lock":
			t.Errorf("%s: inspect said %s", what, r.stdout)
			continue
		case objs[0].Kind == "rwlock":
			got = objs[0].Holders[0].Mode
		default:
			got = string(objs[0].Kind)
		}
		if got != c.kind {
			t.Errorf("%s: held %s, want %s (inspect: %s)", what, got, c.kind, r.stdout)
		}
	}

	for _, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"MONGOLOCK_WAIT=1m"}, []string{"--try", "--wait", "1s"}},
		{nil, []string{"--semaphore", "2", "--read"}},
		{nil, []string{"--hold-at-least", "1s", "--write"}},
		{[]string{"MONGOLOCK_TRY=true", "MONGOLOCK_WAIT=1m"}, nil},
		{[]string{"MONGOLOCK_READ=true", "MONGOLOCK_WRITE=true"}, nil},
		{[]string{"MONGOLOCK_SEMAPHORE=2", "MONGOLOCK_HOLD_AT_MOST=10m"}, nil},
	} {
		what := strings.Join(c.env, " ") + " mongolock run " + strings.Join(c.args, " ")
		r := invokeEnv(t, env(c.env...), "", run(conn, append(slices.Clone(c.args), "excl", "true")...)...)
		if r.code != exitUsage {
			t.Errorf("%s: status %d, want %d; stderr: %s", what, r.code, exitUsage, r.stderr)
		}
		if !strings.Contains(r.stderr, "exclude each other") && !strings.Contains(r.stderr, "apply to a lock") {
			t.Errorf("%s: %q; want the flags that exclude each other named", what, r.stderr)
		}
	}
}
