package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A holder whose lease runs out while release --force waits for its
// answer is ended by nobody: the command says so, and fails.
func TestForceReleaseOfALeaseThatRanOutDuringThePromptReleasesNothing(t *testing.T) {
	t.Parallel()
	conn := server(t)
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Client(t).Database(conn[3])
	if _, ok, err := dotnet.TryAcquire(ctx, db.Collection(mongolock.DefaultCollection), "brief", dotnet.NewLockID(), time.Second); err != nil || !ok {
		t.Fatalf("DistributedLock.MongoDB's acquisition: %v, %v", ok, err)
	}
	p := start(t, env(), append(slices.Clone(conn), "release", "--force", "brief")...)
	locks, err := mongolock.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.stderr.String(), "[y/N]") || heldNow(t, locks, "brief"); {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt, or the lease did not run out: %q", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // a poll until the deadline
	}
	if _, err := io.WriteString(p.stdin, "y\n"); err != nil {
		t.Fatal(err)
	}
	_ = p.stdin.Close()
	if code := p.wait(t, time.Minute); code != exitFailed || p.stdout.String() != "" {
		t.Fatalf("status %d, stdout %q; want %d and nothing released", code, p.stdout.String(), exitFailed)
	}
	if !strings.HasSuffix(p.stderr.String(), "mongolock: release: \"brief\" is held no more (released, or its lease ran out, meanwhile): nothing released\n") {
		t.Errorf("release --force said %q", p.stderr.String())
	}
}

func heldNow(t *testing.T, locks *mongolock.Provider, name string) bool {
	t.Helper()
	info, err := locks.Inspect(boundedCtx(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	return info.Held
}
