package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv, in mongolock's environment and so in its command's, makes this
// test binary a helper command: os.Args[1] is the mode.
const helperEnv = "MONGOLOCK_CLI_TEST_HELPER"

// helperCmd is the command line that runs this test binary as a helper.
func helperCmd(t *testing.T, mode string, args ...string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{self, mode}, args...)
}

// helper runs one mode and returns its exit status. Times are Unix
// nanoseconds; files appear whole (written, then renamed).
//
//   - section FILE HOLD: appends "begin TOKEN", works for HOLD, appends
//     "end TOKEN".
//   - hold DIR [ignore-term]: writes DIR/started ("PID TOKEN"), then appends
//     the time to DIR/beats every few milliseconds until stdin ends (status
//     0) or a SIGTERM or SIGINT comes; the signal's time and name go to
//     DIR/term, and it exits with 128+N, or beats on with ignore-term.
//   - started FILE: writes "TIME TOKEN" to FILE.
//   - env FILE CODE: writes "NAME TOKEN" to FILE and exits with CODE.
//   - migrate DIR TARGET: a migration tool (migrateHelper).
func helper(args []string) int {
	token := os.Getenv("MONGOLOCK_FENCING_TOKEN")
	switch args[0] {
	case "section":
		hold, err := time.ParseDuration(args[2])
		if err != nil {
			return helperFail(err)
		}
		if err := appendLine(args[1], "begin "+token); err != nil {
			return helperFail(err)
		}
		time.Sleep(hold) // the work
		if err := appendLine(args[1], "end "+token); err != nil {
			return helperFail(err)
		}
		return 0
	case "hold":
		return hold(args[1], len(args) > 2 && args[2] == "ignore-term", token)
	case "started":
		return helperFail(writeWhole(args[1], fmt.Sprintf("%d %s", time.Now().UnixNano(), token)))
	case "migrate":
		return helperFail(migrateHelper(args[1], args[2], token))
	case "env":
		code, err := strconv.Atoi(args[2])
		if err != nil {
			return helperFail(err)
		}
		if err := writeWhole(args[1], os.Getenv("MONGOLOCK_NAME")+" "+token); err != nil {
			return helperFail(err)
		}
		return code
	}
	return helperFail(fmt.Errorf("unknown helper mode %q", args[0]))
}

func hold(dir string, ignoreTerm bool, token string) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	beats, err := os.OpenFile(filepath.Join(dir, "beats"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return helperFail(err)
	}
	// A first beat before "started": a test that kills the command as soon
	// as it started still finds when it last ran.
	fmt.Fprintln(beats, time.Now().UnixNano())
	if err := writeWhole(filepath.Join(dir, "started"), fmt.Sprintf("%d %s", os.Getpid(), token)); err != nil {
		return helperFail(err)
	}
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	tick := time.NewTicker(2 * time.Millisecond)
	for {
		select {
		case <-tick.C:
			fmt.Fprintln(beats, time.Now().UnixNano())
		case sig := <-sigs:
			if err := writeWhole(filepath.Join(dir, "term"), fmt.Sprintf("%d %s", time.Now().UnixNano(), sig)); err != nil {
				return helperFail(err)
			}
			if !ignoreTerm {
				return 128 + int(sig.(syscall.Signal))
			}
		case <-eof:
			return 0
		}
	}
}

func helperFail(err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "helper:", err)
	return 99
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	return errors.Join(err, f.Close())
}

// writeWhole writes s to path so that readers see all of it or nothing.
func writeWhole(path, s string) error {
	if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// unixNano reads the first field of a helper's file as a time.
func unixNano(t *testing.T, s string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(strings.Fields(s)[0], 10, 64)
	if err != nil {
		t.Fatalf("not a time: %q", s)
	}
	return time.Unix(0, n)
}

// lastBeat is the last time a holding helper in dir was seen running.
func lastBeat(t *testing.T, dir string) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "beats"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) == 0 {
		t.Fatalf("%s/beats: empty", dir)
	}
	return unixNano(t, lines[len(lines)-1])
}
