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

// The example against the tests' server: three worker processes share 12
// shards evenly, a killed one's shards move to the other two, and a
// leaver's to the last, each start with a token above the shard's last.
func TestShardsMoveWhenAWorkerIsKilledAndWhenOneLeaves(t *testing.T) {
	db := testdb.Database(t) // skips, or fails under CI, without a server
	t.Setenv("MONGODB_URI", testdb.Info(t).URI)
	var out syncbuf.Buffer
	c := config{uri: testdb.Info(t).URI, db: db.Name(), fleet: "fleet", workers: 3, shards: 12, expiry: time.Second, stdout: &out, stderr: &out}
	err := runParent(c)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
