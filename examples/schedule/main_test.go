package main

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
)

// TestMain runs this test binary as the example's worker when the parent
// starts it with -worker, as the example's own binary would be.
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "-worker") {
		main()
		os.Exit(0)
	}
	code := m.Run()
	testdb.Close()
	os.Exit(code)
}

// The example against the tests' server: three worker processes whose
// clocks are off by up to 250 ms either way run the job exactly once per
// period, with increasing fencing tokens. Two periods, shorter than the
// example's, and the same hold: each skipping replica still finds the lock
// held for half a second past its clock's difference.
func TestEachPeriodRunsExactlyOnce(t *testing.T) {
	db := testdb.Database(t) // skips, or fails under CI, without a server
	t.Setenv("MONGODB_URI", testdb.Info(t).URI)
	var out syncbuf.Buffer
	const periods = 2
	c := config{db: db.Name(), workers: 3, periods: periods, period: 1500 * time.Millisecond,
		skew: 250 * time.Millisecond, hold: time.Second, job: 100 * time.Millisecond, stdout: &out, stderr: &out}
	runs, err := runParent(c)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != periods {
		t.Fatalf("%d runs, want one per period (%d)", len(runs), periods)
	}
	for i, r := range runs {
		if r.period != i || i > 0 && r.token <= runs[i-1].token {
			t.Errorf("run %d: %+v after %+v", i, r, runs[max(i-1, 0)])
		}
	}
}
