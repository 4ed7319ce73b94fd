package main

import (
	"slices"
	"strings"
	"testing"
)

// run --json says how it ended in one JSON object on stderr: the lock, its
// token, whether it was lost, the status, and the error if any.
func TestRunJSONSaysHowItEnded(t *testing.T) {
	t.Parallel()
	conn := server(t)
	dir := t.TempDir()
	type report struct {
		Name         string `json:"name"`
		Acquired     bool   `json:"acquired"`
		FencingToken int64  `json:"fencingToken"`
		Lost         bool   `json:"lost"`
		Status       int    `json:"status"`
		Error        string `json:"error"`
	}
	r := invoke(t, "", run(conn, append([]string{"--json", "--try", "reported", "--"}, helperCmd(t, "env", dir+"/env", "3")...)...)...)
	requireCode(t, r, 3, "run --json of a command that exits with 3")
	got := jsonLines[report](t, r.stderr)
	if len(got) != 1 || got[0].Name != "reported" || !got[0].Acquired || got[0].FencingToken <= 0 || got[0].Lost || got[0].Status != 3 || got[0].Error != "" {
		t.Errorf("run --json: stderr %q", r.stderr)
	}

	heldOf(t, invoke(t, "", append(slices.Clone(conn), "acquire", "--expiry", "1m", "reported")...), "acquire")
	r = invoke(t, "", run(conn, "--json", "--try", "reported", "true")...)
	requireCode(t, r, exitNotAcquired, "run --json --try of a held lock")
	got = jsonLines[report](t, r.stderr)
	if len(got) != 1 || got[0].Acquired || got[0].FencingToken != 0 || got[0].Status != exitNotAcquired || r.stdout != "" {
		t.Errorf("run --json --try of a held lock: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	r = invoke(t, "", run(conn, "--json", "--try", "reported", "/no/such/command")...)
	requireCode(t, r, exitNotFound, "run --json of no command")
	if got = jsonLines[report](t, r.stderr); len(got) != 1 || got[0].Status != exitNotFound || !strings.Contains(got[0].Error, "/no/such/command") {
		t.Errorf("run --json of no command: stderr %q", r.stderr)
	}
}

// release --json prints each lock it released, with the holders it
// ended, as list has them; by a ticket, the holder it took over.
func TestReleaseJSONSaysWhatItReleased(t *testing.T) {
	t.Parallel()
	conn := server(t)
	type released struct {
		Name    string       `json:"name"`
		Kind    string       `json:"kind"`
		Holders []holderJSON `json:"holders"`
	}
	first := heldOf(t, invoke(t, "", append(slices.Clone(conn), "acquire", "--owner", "ops-1", "--expiry", "1m", "freed")...), "acquire")
	r := invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", "--json", "freed")...)
	requireCode(t, r, 0, "release --force --json")
	got := jsonLines[released](t, r.stdout)
	if len(got) != 1 || got[0].Name != "freed" || got[0].Kind != "lock" || len(got[0].Holders) != 1 ||
		got[0].Holders[0].Owner != "ops-1" || got[0].Holders[0].FencingToken != first.token || got[0].Holders[0].ID == "" {
		t.Errorf("release --force --json: %q", r.stdout)
	}

	second := heldOf(t, invoke(t, "", append(slices.Clone(conn), "acquire", "--owner", "ops-2", "--expiry", "1m", "freed")...), "acquire")
	r = invoke(t, "", append(slices.Clone(conn), "release", "--json", "--ticket", second.ticket)...)
	requireCode(t, r, 0, "release --ticket --json")
	got = jsonLines[released](t, r.stdout)
	if len(got) != 1 || got[0].Name != "freed" || len(got[0].Holders) != 1 || got[0].Holders[0].FencingToken <= second.token {
		t.Errorf("release --ticket --json: %q", r.stdout)
	}
}
