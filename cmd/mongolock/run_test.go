package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/faultproxy"
)

// run returns the arguments of a mongolock run: the connection flags, then
// "run", then args.
func run(conn []string, args ...string) []string {
	return append(append(slices.Clone(conn), "run"), args...)
}

// jsonLines decodes each line of s as a T.
func jsonLines[T any](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	for line := range strings.Lines(s) {
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON object: %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

// inspectLock returns inspect --json's object for the lock name.
func inspectLock(t *testing.T, conn []string, name string) infoJSON {
	t.Helper()
	r := invoke(t, "", append(slices.Clone(conn), "inspect", "--json", name)...)
	requireCode(t, r, 0, "inspect "+name)
	return jsonLines[infoJSON](t, r.stdout)[0]
}

// run acquires the lock, gives the command the lock's name and fencing
// token, exits with its status, says nothing of its own without --verbose,
// and releases the lock.
func TestRunGivesTheCommandTheLockAndItsStatusBack(t *testing.T) {
	t.Parallel()
	conn := server(t)
	file := filepath.Join(t.TempDir(), "env")
	r := invoke(t, "", run(conn, "nightly", "--")...)
	requireCode(t, r, exitUsage, "run with no command after --")

	r = invoke(t, "", run(conn, append([]string{"nightly", "--"}, helperCmd(t, "env", file, "7")...)...)...)
	requireCode(t, r, 7, "run a command that exits with 7")
	if r.stderr != "" || r.stdout != "" {
		t.Errorf("run without --verbose said %q, %q; want nothing", r.stdout, r.stderr)
	}
	got := strings.Fields(waitForFile(t, file))
	info := inspectLock(t, conn, "nightly")
	if got[0] != "nightly" || got[1] != strconv.FormatInt(info.FencingToken, 10) {
		t.Errorf("the command saw MONGOLOCK_NAME, MONGOLOCK_FENCING_TOKEN = %q; want nightly and the lock's token %d", got, info.FencingToken)
	}
	if info.Held {
		t.Errorf("the lock is held after run exited: %+v", info)
	}

	// Without "--", and with --verbose; flags after the name.
	r = invoke(t, "", run(conn, append([]string{"nightly", "--verbose", "--owner", "ops/1"}, helperCmd(t, "env", file, "0")...)...)...)
	requireCode(t, r, 0, "run --verbose")
	second, _ := strconv.ParseInt(strings.Fields(waitForFile(t, file))[1], 10, 64)
	if second <= info.FencingToken {
		t.Errorf("second run's token %d; want more than %d", second, info.FencingToken)
	}
	if want := fmt.Sprintf("mongolock: run: acquired \"nightly\", fencing token %d\nmongolock: run: released \"nightly\"\n", second); r.stderr != want {
		t.Errorf("run --verbose said %q; want %q", r.stderr, want)
	}
}

// Contenders' commands never overlap: each section a command appends to a
// shared file is whole (begin, end) before the next begins, and the
// fencing tokens increase from one to the next.
func TestRunContendersNeverOverlap(t *testing.T) {
	t.Parallel()
	conn := server(t)
	file := filepath.Join(t.TempDir(), "sections")
	const contenders, runs = 3, 3
	section := helperCmd(t, "section", file, "50ms")
	var wg sync.WaitGroup
	errs := make(chan string, contenders*runs)
	began := time.Now()
	for range contenders {
		wg.Go(func() {
			for range runs {
				p, err := launch(env(), run(conn, append([]string{"--expiry", "2s", "shared", "--"}, section...)...)...)
				if err != nil {
					errs <- err.Error()
					return
				}
				_ = p.stdin.Close()
				select {
				case <-p.done:
					if p.code != 0 {
						errs <- fmt.Sprintf("status %d: %s", p.code, p.stderr.String())
					}
				case <-time.After(time.Minute):
					_ = p.cmd.Process.Kill()
					<-p.done
					errs <- "still running after a minute"
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error("a contender:", e)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*contenders*runs {
		t.Fatalf("%d lines; want %d:\n%s", len(lines), 2*contenders*runs, b)
	}
	var last int64
	for i := 0; i < len(lines); i += 2 {
		begin, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		token, _ := strconv.ParseInt(begin[1], 10, 64)
		if begin[0] != "begin" || end[0] != "end" || begin[1] != end[1] || token <= last {
			t.Fatalf("sections overlap or tokens go back at line %d:\n%s", i+1, b)
		}
		last = token
	}
	t.Logf("%d sections of 50ms by %d contenders, none overlapping, in %v", contenders*runs, contenders, time.Since(began).Round(time.Millisecond))
}

// --try on a held lock exits with 75 at once, without running its command;
// --wait gives up after its wait; once the holder is gone, --try runs.
func TestRunTryOnAHeldLockExitsNotAcquiredAtOnce(t *testing.T) {
	t.Parallel()
	conn := server(t)
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	holder := start(t, env(), run(conn, append([]string{"busy", "--"}, helperCmd(t, "hold", dir)...)...)...)
	waitForFile(t, filepath.Join(dir, "started"))
	ran := helperCmd(t, "started", marker)

	r := invoke(t, "", run(conn, append([]string{"--try", "busy"}, ran...)...)...)
	requireCode(t, r, exitNotAcquired, "run --try on a held lock")
	if r.stderr != "" {
		t.Errorf("run --try on a held lock said %q; want nothing (the status says it)", r.stderr)
	}
	if r.took > 3*time.Second {
		t.Errorf("run --try on a held lock took %v; want an answer at once", r.took)
	}
	t.Logf("run --try on a held lock: status 75 after %v (process, connection and one attempt)", r.took.Round(time.Millisecond))

	r = invoke(t, "", run(conn, append([]string{"--try", "--verbose", "busy"}, ran...)...)...)
	requireCode(t, r, exitNotAcquired, "run --try --verbose on a held lock")
	if !strings.Contains(r.stderr, `try acquire "busy": not acquired`) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("run --try --verbose said %q; want one line that says it was not acquired", r.stderr)
	}

	r = invoke(t, "", run(conn, append([]string{"--wait", "300ms", "busy"}, ran...)...)...)
	requireCode(t, r, exitNotAcquired, "run --wait 300ms on a held lock")
	if r.took < 300*time.Millisecond || r.took > 5*time.Second {
		t.Errorf("run --wait 300ms gave up after %v", r.took)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused run ran its command")
	}

	_ = holder.stdin.Close()
	if code := holder.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("holder: status %d: %s", code, holder.stderr.String())
	}
	r = invoke(t, "", run(conn, append([]string{"--try", "busy"}, ran...)...)...)
	requireCode(t, r, 0, "run --try on the released lock")
	waitForFile(t, marker)
}

// A run cut off from the server by a partition learns it lost the lock
// before the server lets anyone else take it: its command gets SIGTERM
// (and SIGKILL after --grace if it ignores it) before a rival run starts its
// own command.
func TestPartitionedRunStopsItsCommandBeforeARivalStartsIts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		ignoreTerm bool
	}{
		{"the command ends on SIGTERM", false},
		{"the command ignores SIGTERM and gets SIGKILL", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn := server(t)
			u, err := url.Parse(conn[1])
			if err != nil || u.Scheme != "mongodb" || strings.Contains(u.Host, ",") {
				t.Skipf("needs a single-host mongodb:// URI to put a proxy in front of; the tests' is %s", conn[1])
			}
			proxy, err := faultproxy.New(u.Host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			q := u.Query()
			q.Set("directConnection", "true")
			q.Del("replicaSet")
			u.Host, u.RawQuery = proxy.Addr(), q.Encode()

			dir, rivalFile := t.TempDir(), filepath.Join(t.TempDir(), "rival")
			hold := helperCmd(t, "hold", dir)
			if c.ignoreTerm {
				hold = append(hold, "ignore-term")
			}
			holder := start(t, env(), append([]string{"--uri", u.String(), "--db", conn[3], "--timeout", "2s",
				"run", "--expiry", "3s", "--grace", "100ms", "cut", "--"}, hold...)...)
			waitForFile(t, filepath.Join(dir, "started"))
			rival := start(t, env(), run(conn, append([]string{"--expiry", "3s", "cut", "--"}, helperCmd(t, "started", rivalFile)...)...)...)

			proxy.Blackhole()
			cut := time.Now()
			if code := holder.wait(t, 20*time.Second); code != exitLost {
				t.Fatalf("holder: status %d, want %d: %s", code, exitLost, holder.stderr.String())
			}
			says := holder.stderr.String()
			if !strings.Contains(says, `mongolock: run: lost "cut"`) || !strings.Contains(says, "sent it SIGTERM") ||
				c.ignoreTerm != strings.Contains(says, "sent it SIGKILL") {
				t.Errorf("holder said %q", says)
			}
			if code := rival.wait(t, 20*time.Second); code != 0 {
				t.Fatalf("rival: status %d: %s", code, rival.stderr.String())
			}
			term := unixNano(t, waitForFile(t, filepath.Join(dir, "term")))
			last := lastBeat(t, dir)
			rivalStart := unixNano(t, waitForFile(t, rivalFile))
			if !term.Before(rivalStart) || !last.Before(rivalStart) {
				t.Fatalf("the rival's command started %v after the holder's got SIGTERM and %v after it was last seen running; want both after",
					rivalStart.Sub(term), rivalStart.Sub(last))
			}
			t.Logf("SIGTERM %v after the partition; the holder's command last seen running %v after SIGTERM; the rival's started %v after that",
				term.Sub(cut).Round(time.Millisecond), last.Sub(term).Round(time.Millisecond), rivalStart.Sub(last).Round(time.Millisecond))
		})
	}
}

// A force release that run learns of only at its release, once its
// command has exited, is still a loss: run exits with 76 and says so, not
// with the command's status, even 0.
func TestRunWhoseLockWasForceReleasedBeforeItsCommandExitedExitsLost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		code int // the command's status
	}{
		{"the command exits with 0", 0},
		{"the command exits with 3", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn := server(t)
			dir := t.TempDir()
			cmd := helperCmd(t, "hold", dir)
			if c.code != 0 {
				cmd = append([]string{"sh", "-c", `"$@" && exit ` + strconv.Itoa(c.code), "sh"}, cmd...)
			}
			// With --expiry 1m the first extension, which would find the
			// loss while the command runs, is 20s away: the command ends
			// long before, so the release is where run finds the loss.
			holder := start(t, env(), run(conn, append([]string{"--expiry", "1m", "taken", "--"}, cmd...)...)...)
			token := strings.Fields(waitForFile(t, filepath.Join(dir, "started")))[1]
			requireCode(t, invoke(t, "", append(slices.Clone(conn), "release", "--force", "--yes", "taken")...), 0, "release --force")
			_ = holder.stdin.Close() // the command's stdin ends: it exits

			if code := holder.wait(t, 15*time.Second); code != exitLost {
				t.Fatalf("status %d, want %d: %s", code, exitLost, holder.stderr.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "term")); err == nil {
				t.Fatal("the command got a signal: run found the loss while it ran, not at the release this test is about")
			}
			want := fmt.Sprintf("exited with status %d, but the lock \"taken\" (fencing token %s) was lost before its release: ", c.code, token)
			if says := holder.stderr.String(); !strings.HasPrefix(says, "mongolock: run: ") || !strings.Contains(says, want) || strings.Count(says, "\n") != 1 {
				t.Errorf("run said %q; want one line with %q", says, want)
			}
		})
	}
}

// SIGTERM or SIGINT to mongolock reaches its command, and what the
// command started; mongolock releases the lock once the command exits (a
// rival gets it at once, not after the 30 s expiry) and exits with the
// command's status.
func TestSignalsToRunReachTheCommandAndTheLockIsReleased(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sig   syscall.Signal
		shell bool // the helper runs under a shell that gets the signal too
	}{
		{syscall.SIGTERM, false},
		{syscall.SIGINT, false},
		{syscall.SIGTERM, true},
	} {
		sig := c.sig
		name := sig.String()
		if c.shell {
			name += " through a shell"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn := server(t)
			dir := t.TempDir()
			cmd := helperCmd(t, "hold", dir)
			if c.shell {
				cmd = append([]string{"sh", "-c", `"$@"; exit $?`, "sh"}, cmd...)
			}
			holder := start(t, env(), run(conn, append([]string{"signalled", "--"}, cmd...)...)...)
			waitForFile(t, filepath.Join(dir, "started"))
			if err := holder.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := holder.wait(t, 15*time.Second); code != 128+int(sig) {
				t.Fatalf("status %d; want the command's, %d: %s", code, 128+int(sig), holder.stderr.String())
			}
			if got := waitForFile(t, filepath.Join(dir, "term")); !strings.HasSuffix(got, sig.String()) {
				t.Errorf("the command got %q; want %v", got, sig)
			}
			r := invoke(t, "", run(conn, "--try", "signalled", "true")...)
			requireCode(t, r, 0, "run --try after the signalled run exited")
		})
	}
}

// --semaphore N holds one of N slots; --read and --write hold a
// reader-writer lock. They are separate from the lock of the same name.
func TestRunHoldsSemaphoreSlotsAndReaderWriterLocks(t *testing.T) {
	t.Parallel()
	conn := server(t)
	holders := func(kind string, args ...string) []*proc {
		var ps []*proc
		for i := range 2 {
			dir := t.TempDir()
			owner := fmt.Sprintf("%s-%d", kind, i+1)
			ps = append(ps, start(t, env(), run(conn, append(append(slices.Clone(args), "--owner", owner, "--"), helperCmd(t, "hold", dir)...)...)...))
			waitForFile(t, filepath.Join(dir, "started"))
		}
		return ps
	}
	release := func(ps []*proc) {
		for _, p := range ps {
			_ = p.stdin.Close()
			if code := p.wait(t, 15*time.Second); code != 0 {
				t.Fatalf("holder: status %d: %s", code, p.stderr.String())
			}
		}
	}

	slots := holders("slot", "--semaphore", "2", "--try", "jobs")
	requireCode(t, invoke(t, "", run(conn, "--semaphore", "2", "--try", "jobs", "true")...), exitNotAcquired, "a third slot of 2")
	r := invoke(t, "", run(conn, "--semaphore", "3", "--try", "jobs", "true")...)
	requireCode(t, r, exitFailed, "a semaphore held with 2 slots, asked for with 3")
	if !strings.Contains(r.stderr, "it has 2 slots, not 3") {
		t.Errorf("--semaphore 3 on a semaphore of 2 said %q", r.stderr)
	}
	requireCode(t, invoke(t, "", run(conn, "--try", "jobs", "true")...), 0, "the lock named as the semaphore")
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "--json", "jobs")...)
	requireCode(t, r, 0, "inspect jobs")
	objs := jsonLines[infoJSON](t, r.stdout)
	if len(objs) != 2 || objs[0].Kind != "lock" || objs[1].Kind != "semaphore" || objs[1].N != 2 || len(objs[1].Holders) != 2 ||
		objs[1].Holders[0].Owner != "slot-1" || objs[1].Holders[1].Owner != "slot-2" {
		t.Errorf("inspect --json jobs: %s", r.stdout)
	}
	release(slots)

	readers := holders("reader", "--read", "--try", "catalog")
	requireCode(t, invoke(t, "", run(conn, "--write", "--try", "catalog", "true")...), exitNotAcquired, "a writer while readers hold")
	r = invoke(t, "", append(slices.Clone(conn), "inspect", "--json", "catalog")...)
	requireCode(t, r, 0, "inspect catalog")
	objs = jsonLines[infoJSON](t, r.stdout)
	if len(objs) != 1 || objs[0].Kind != "rwlock" || len(objs[0].Holders) != 2 || objs[0].Holders[0].Mode != "read" ||
		objs[0].Holders[1].Owner != "reader-2" || objs[0].WriterWaiting == nil || *objs[0].WriterWaiting {
		t.Errorf("inspect --json catalog: %s", r.stdout)
	}
	release(readers)
	requireCode(t, invoke(t, "", run(conn, "--write", "--try", "catalog", "true")...), 0, "a writer once the readers are gone")
}

// --hold-at-least keeps the lock held after run exited, until that long
// after its acquisition by the server's clock: a --try run meanwhile skips
// the period (75), the first after it runs. --hold-at-most stops a command
// that holds the lock longer, as a loss (76).
func TestRunHoldAtLeastSkipsTheRestOfThePeriodAndHoldAtMostStopsAStuckCommand(t *testing.T) {
	t.Parallel()
	conn := server(t)
	const hold = 2 * time.Second
	dir := t.TempDir()
	runs := 0
	cron := func() result { // one replica's cron firing
		runs++
		file := filepath.Join(dir, strconv.Itoa(runs))
		return invoke(t, "", run(conn, append([]string{"--try", "--hold-at-least", hold.String(), "hourly", "--"}, helperCmd(t, "env", file, "0")...)...)...)
	}
	requireCode(t, cron(), 0, "the period's first run")
	first := inspectLock(t, conn, "hourly")
	requireCode(t, cron(), exitNotAcquired, "a run within the hold")
	deadline := time.Now().Add(hold + 15*time.Second)
	for r := cron(); r.code != 0; r = cron() {
		requireCode(t, r, exitNotAcquired, "a run while the hold lasts")
		if time.Now().After(deadline) {
			t.Fatalf("the lock stayed held %v after the hold's end", time.Since(first.AcquiredAt.Add(hold)))
		}
	}
	if next := inspectLock(t, conn, "hourly"); next.AcquiredAt.Before(first.AcquiredAt.Add(hold)) {
		t.Errorf("the next run acquired at %v, before the hold's end %v", next.AcquiredAt, first.AcquiredAt.Add(hold))
	}

	// The command is told to stop 1.3 s after it starts. Under load a
	// command may not have set up its signal handler by then (it says when
	// it has, in "started"), and dies of the signal unseen: try again.
	for try := 1; ; try++ {
		stuck := t.TempDir()
		p := start(t, env(), run(conn, append([]string{"--expiry", "500ms", "--hold-at-most", "1500ms", "stuck", "--"}, helperCmd(t, "hold", stuck)...)...)...)
		if code := p.wait(t, 20*time.Second); code != exitLost {
			t.Fatalf("status %d, want %d: %s", code, exitLost, p.stderr.String())
		}
		if says := p.stderr.String(); !strings.Contains(says, `lost "stuck"`) || !strings.Contains(says, "WithHoldAtMost: 1.5s") {
			t.Errorf("run said %q", says)
		}
		if _, err := os.Stat(filepath.Join(stuck, "started")); err == nil || try == 3 {
			waitForFile(t, filepath.Join(stuck, "term"))
			break
		}
		t.Logf("try %d: the command was stopped before it was ready", try)
	}

	for _, args := range [][]string{
		{"--hold-at-most", "1s", "x"},                                            // under the default expiry
		{"--expiry", "1s", "--hold-at-least", "2s", "--hold-at-most", "1s", "x"}, // under the hold at least
		{"--hold-at-least", "-1s", "x"},
		{"--hold-at-least", "1s", "--semaphore", "2", "x"},
		{"--hold-at-most", "1m", "--read", "x"},
	} {
		requireCode(t, invoke(t, "", run(conn, append(args, "--", "true")...)...), exitUsage, strings.Join(args, " "))
	}
}

// A command that cannot start (found and executable, but no program the
// system can run) never ran: run frees the lock at once, --hold-at-least
// or not, so that the next run of the period is not skipped for it.
func TestRunWhoseCommandCannotStartLeavesNoHold(t *testing.T) {
	t.Parallel()
	conn := server(t)
	bad := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bad, []byte("\x00\x01\x02 neither a binary nor a script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	requireCode(t, invoke(t, "", run(conn, "--try", "--hold-at-least", "1h", "nightly", "--", bad)...), exitNoExec, "a command that cannot start")
	requireCode(t, invoke(t, "", run(conn, "--try", "nightly", "--", "true")...), 0, "a run right after the one whose command could not start")
}
