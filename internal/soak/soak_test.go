package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain runs the test binary as a soak child when the parent started it
// as one; otherwise it runs the tests and checks that no goroutine outlived
// them.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := runChild(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "soak child:", err)
			os.Exit(2)
		}
		os.Exit(0)
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

func runSoak(t *testing.T, args ...string) (*Result, string) {
	t.Helper()
	var stdout, stderr syncbuf.Buffer
	args = append([]string{"-uri", testdb.Info(t).URI, "-db", testdb.Database(t).Name()}, args...)
	start := time.Now()
	r, err := runParent(args, &stdout, &stderr)
	t.Logf("soak %s: %v\n%s", strings.Join(args[4:], " "), time.Since(start).Round(time.Millisecond), stdout.String())
	if err != nil {
		t.Fatalf("soak: %v\nchildren said:\n%s", err, stderr.String())
	}
	return r, stderr.String()
}

// TestSoak is the short form of make soak: 3 processes x 3 goroutines over
// 4 mutexes, a semaphore of 3 slots, 2 reader-writer locks and 2 elections
// for 12 s, with SIGKILLed holder processes and clients closed under held
// handles; processes of a 1 s expiry (extended every 50 ms) and of a 6 s
// one (every 2.5 s: the longest it may) share the names, a long holder per
// process holds the first semaphore's slots and rwlock's read locks, and
// documents are deleted as soon as their expiresAt passes, beside a TTL
// index of 0 s. The server must see no overlap (for a semaphore, no n+1
// holders; for an rwlock, no writer with anyone else), no token out of
// order, no holder that the lock's document stopped showing before it was
// told of a loss, and every dropped holder must learn of its loss before
// the next one comes in.
func TestSoak(t *testing.T) {
	// Every run must show no violation. What the faults and the random
	// mix reach in 12 s is chance, and make test's load (beside the root
	// package's -race tests) makes a run's trials and drops few: up to three
	// runs, until each thing the checks must have seen was seen in one.
	seen := map[string]bool{}
	for run := 0; run < 3 && (run == 0 || len(unseen(seen)) > 0); run++ {
		r, children := runSoak(t, "-d", "12s", "-p", "3", "-g", "3", "-k", "4", "-ks", "1", "-n", "3", "-kr", "2", "-ke", "2",
			"-expiries", "1s/50ms,6s/2.5s", "-kill-every", "4s", "-drop-every", "1s")
		if r.Violations() != 0 || r.ChildFailures != 0 {
			t.Fatalf("%v\nchildren said:\n%s", r, children)
		}
		if r.Writes < r.Trials() {
			t.Fatalf("%d writes accepted for %d trials: every trial writes at least once", r.Writes, r.Trials())
		}
		for what, ok := range soakCoverage(r) {
			seen[what] = seen[what] || ok
		}
	}
	for _, what := range unseen(seen) {
		t.Errorf("in 3 runs, never %s", what)
	}
}

// unseen returns what seen says was never seen, sorted.
func unseen(seen map[string]bool) []string {
	var never []string
	for _, what := range slices.Sorted(maps.Keys(seen)) {
		if !seen[what] {
			never = append(never, what)
		}
	}
	return never
}

// soakCoverage says, of each thing a run of TestSoak should reach, whether
// r reached it.
func soakCoverage(r *Result) map[string]bool {
	rw := r.Per[rwlock]
	covered := map[string]bool{
		// A lock's or an election's document is deleted once released:
		// the acquisitions after it create it again.
		"a document of " + libraryCollections[0] + " swept once its expiresAt had passed": r.Swept[libraryCollections[0]] > 0,
		// The checks bite only where holders meet: a full semaphore,
		// readers side by side.
		"a semaphore full":                 r.Per[semaphore].Peak == 3,
		"an rwlock's writer":               rw.WriteTrials > 0,
		"an rwlock's reader upgraded":      rw.Upgrades > 0,
		"an rwlock's readers side by side": rw.WriteTrials < rw.Trials && rw.Peak >= 2,
		"a child SIGKILLed":                r.Kills > 0,
	}
	for kd := range numKinds {
		c := r.Per[kd]
		// Enough for the checks to have seen each kind change hands under
		// faults; throughput is the benchmark's to measure, not this test's.
		covered[fmt.Sprintf("%v: 8 trials", kd)] = c.Trials >= 8
		covered[fmt.Sprintf("%v: a client closed under a holder", kd)] = c.Dropped > 0
		covered[fmt.Sprintf("%v: a longest wait recorded", kd)] = c.MaxWait > 0
	}
	return covered
}

// The checks must see broken locks: children that go on working after
// releasing overlap with the next holders: of a mutex, of the n+1st slot
// of a semaphore, of a writer and readers of an rwlock, of an election's
// leader.
func TestSoakReportsWorkAfterReleaseAsViolations(t *testing.T) {
	// Whether a sabotaged holder's work after its release meets the next
	// holder's is chance, and a loaded machine makes a kind's trials few:
	// up to three runs, and each kind must show its overlaps in one.
	var overlapped [numKinds]bool
	displaced := false
	var runs []string
	for range 3 {
		r, _ := runSoak(t, "-d", "3s", "-p", "2", "-g", "6", "-k", "1", "-ks", "1", "-n", "2", "-kr", "1", "-ke", "1", "-hold", "20ms", "-long-hold", "0",
			"-kill-every", "0", "-drop-every", "0", "-sabotage")
		runs = append(runs, r.String())
		all := true
		for kd := range numKinds {
			overlapped[kd] = overlapped[kd] || r.Per[kd].Overlap > 0
			all = all && overlapped[kd]
		}
		if displaced = displaced || r.Per[mutex].Displaced > 0; all && displaced {
			return
		}
	}
	for kd := range numKinds {
		if !overlapped[kd] {
			t.Errorf("sabotaged runs: no %v overlaps in any; want some", kd)
		}
	}
	if !displaced {
		t.Errorf("sabotaged runs: no displaced mutex holders in any; want some")
	}
	t.Logf("the runs:\n%s", strings.Join(runs, "\n"))
}

// The soak drops its database: it refuses, before it connects, any name
// without the tests' prefix.
func TestSoakRefusesADatabaseWithoutTheTestPrefix(t *testing.T) {
	var stderr syncbuf.Buffer
	_, err := runParent([]string{"-uri", "mongodb://127.0.0.1:1/", "-db", "myapp", "-d", "1s"}, &stderr, &stderr)
	if err == nil || !strings.Contains(err.Error(), testdb.Prefix) {
		t.Fatalf("-db myapp: got %v; want a refusal naming the prefix %q", err, testdb.Prefix)
	}
}
