package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// --units K with --semaphore N holds K of N slots in one holder, which
// inspect shows with its units; K out of 1 to N, or without --semaphore,
// is a usage error.
func TestRunHoldsSeveralUnitsOfASemaphore(t *testing.T) {
	t.Parallel()
	conn := server(t)
	dir := t.TempDir()
	p := start(t, env(), run(conn, append([]string{"--semaphore", "4", "--units", "3", "--try", "--owner", "trainer", "gpus", "--"}, helperCmd(t, "hold", dir)...)...)...)
	waitForFile(t, filepath.Join(dir, "started"))

	requireCode(t, invoke(t, "", run(conn, "--semaphore", "4", "--units", "2", "--try", "gpus", "true")...), exitNotAcquired, "2 more units of 4 with 3 held")
	r := invoke(t, "", append(slices.Clone(conn), "inspect", "--json", "gpus")...)
	requireCode(t, r, 0, "inspect gpus")
	objs := jsonLines[infoJSON](t, r.stdout)
	if len(objs) != 1 || len(objs[0].Holders) != 1 || objs[0].Holders[0].Units != 3 || objs[0].Holders[0].Owner != "trainer" {
		t.Errorf("inspect --json gpus: %s", r.stdout)
	}
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "gpus")...)
	requireCode(t, r, 0, "inspect gpus")
	if !strings.Contains(r.stdout, "3/4 (3 units)") {
		t.Errorf("inspect gpus: %s", r.stdout)
	}
	requireCode(t, invoke(t, "", run(conn, "--semaphore", "4", "--try", "gpus", "true")...), 0, "the fourth unit")
	_ = p.stdin.Close()
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("holder: status %d: %s", code, p.stderr.String())
	}
	requireCode(t, invoke(t, "", run(conn, "--semaphore", "4", "--units", "4", "--try", "gpus", "true")...), 0, "all 4 units once released")

	for _, args := range [][]string{
		{"--semaphore", "4", "--units", "5", "x"},
		{"--semaphore", "4", "--units", "0", "x"},
		{"--units", "2", "x"},
	} {
		requireCode(t, invoke(t, "", run(conn, append(args, "--", "true")...)...), exitUsage, strings.Join(args, " "))
	}
}

// acquire --units K leaves K units held; extend by its ticket keeps them,
// and release by the new ticket frees them all.
func TestAcquireSeveralUnitsAcrossSteps(t *testing.T) {
	t.Parallel()
	conn := server(t)
	step := func(args ...string) result { return invoke(t, "", append(slices.Clone(conn), args...)...) }
	a := heldOf(t, step("acquire", "--semaphore", "3", "--units", "2", "--expiry", "1m", "gpus"), "2 units of 3")
	requireCode(t, step("acquire", "--semaphore", "3", "--units", "2", "--try", "gpus"), exitNotAcquired, "2 more of 3")
	requireCode(t, step("acquire", "--units", "2", "--try", "gpus"), exitUsage, "--units without --semaphore")
	b := heldOf(t, step("extend", "--ticket", a.ticket), "extend 2 units")
	if info := inspectOne(t, conn, "gpus"); len(info.Holders) != 1 || info.Holders[0].Units != 2 || info.Holders[0].FencingToken != b.token {
		t.Fatalf("after extend of 2 units: %+v", info)
	}
	requireCode(t, step("release", "--ticket", b.ticket), 0, "release 2 units")
	heldOf(t, step("acquire", "--semaphore", "3", "--units", "3", "--try", "gpus"), "all 3 units once released")
}
