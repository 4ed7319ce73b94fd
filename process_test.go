package mongolock_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// The child process's environment: TestHelperProcess runs only when
// childEnvFlag is "1".
const (
	childEnvFlag = "MONGOLOCK_HELPER"
	childEnvURI  = "MONGOLOCK_HELPER_URI"
	childEnvDB   = "MONGOLOCK_HELPER_DB"
	childEnvLock = "MONGOLOCK_HELPER_LOCK"

	childExpiry = 2 * time.Second
)

// TestHelperProcess is not a test: it is the child process of
// TestKilledHolderProcessIsTakenOverAfterItsLeaseExpires, which re-executes
// the test binary to run only this function. It acquires the lock with a
// short expiry, prints "acquired <token>", and keeps holding it (extending
// its lease) until it is killed, or until its stdin closes because the
// parent is gone, so that it never outlives a parent that died.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(childEnvFlag) != "1" {
		t.Skip("the child process of TestKilledHolderProcessIsTakenOverAfterItsLeaseExpires; runs only when started by it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(childEnvURI)))
	require.NoError(t, err)
	defer func() { _ = client.Disconnect(context.Background()) }()
	l, err := mongolock.New(client.Database(os.Getenv(childEnvDB)), os.Getenv(childEnvLock), mongolock.WithExpiry(childExpiry))
	require.NoError(t, err)
	h, err := l.Acquire(ctx)
	require.NoError(t, err)
	defer func() { _ = h.Release(context.Background()) }()
	fmt.Printf("acquired %d\n", h.FencingToken())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills us or goes away
}

// A holder process that dies (SIGKILL: no release, no cleanup) stops
// extending its lease; another process can take the lock once the lease
// has expired on the server, not before, and then within the expiry plus
// the waiter's longest sleep (issue 5, scenario 4), with a greater fencing
// token. Several children are killed at once, each at a random point of
// its extension cycle.
func TestKilledHolderProcessIsTakenOverAfterItsLeaseExpires(t *testing.T) {
	const trials = 4
	for i := range trials {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			killedHolderTrial(t, fmt.Sprintf("nightly-job-%d", i))
		})
	}
}

// killWaitMax is the longest sleep of the process waiting to take over.
const killWaitMax = 50 * time.Millisecond

// killSlack covers the round trips and scheduling delays (under -race, on a
// busy machine) on top of the expiry and the longest sleep.
const killSlack = 300 * time.Millisecond

func killedHolderTrial(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.Database(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(),
		childEnvFlag+"=1",
		childEnvURI+"="+testdb.Info(t).URI,
		childEnvDB+"="+db.Name(),
		childEnvLock+"="+name,
		"MONGODB_URI="+testdb.Info(t).URI, // so that the child's TestMain looks for no server
	)
	var output lockedBuffer // the child's stdout and stderr, for failure messages
	cmd.Stderr = &output
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	// The reader forwards the "acquired" line, keeps every line for failure
	// messages, and drains stdout to EOF, which cmd.Wait requires before it
	// is called.
	acquiredLine := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(acquiredLine)
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = fmt.Fprintln(&output, line)
			if !sent && strings.HasPrefix(line, "acquired ") {
				acquiredLine <- line
				sent = true
			}
		}
	}()
	var reapOnce sync.Once
	var waitErr error
	reap := func() {
		reapOnce.Do(func() {
			_ = cmd.Process.Kill()
			<-readDone
			waitErr = cmd.Wait()
			_ = stdin.Close()
		})
	}
	t.Cleanup(reap) // also when the test fails: the child never outlives it

	var childToken int64
	select {
	case line, ok := <-acquiredLine:
		require.True(t, ok, "the child exited without acquiring; its output:\n%s", output.String())
		childToken, err = strconv.ParseInt(strings.TrimPrefix(line, "acquired "), 10, 64)
		require.NoError(t, err, "line %q", line)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the child did not acquire within 30s", "its output:\n%s", output.String())
	}

	// Kill the child only once it has extended its lease: it is alive and
	// keeping the lock, which then frees itself only because the child died.
	first, found := readInteropDoc(ctx, t, db, name)
	require.True(t, found)
	pollUntil(t, 2*childExpiry, "the child extending its lease", func() bool {
		doc, found := readInteropDoc(ctx, t, db, name)
		require.True(t, found)
		return doc.ExpiresAt.After(first.ExpiresAt)
	})

	// Then kill it at a random point of its extension cycle (this wait
	// chooses the phase; it synchronises nothing).
	time.Sleep(time.Duration(rand.Int64N(int64(childExpiry / 3))))

	l, err := mongolock.New(db, name, mongolock.WithBusyWaitSleep(5*time.Millisecond, killWaitMax))
	require.NoError(t, err)
	h, err := l.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the child holds the lock")
	require.Nil(t, h)

	killedAt := time.Now()
	reap()
	var exitErr *exec.ExitError
	require.ErrorAs(t, waitErr, &exitErr, "the child must have been killed, not have exited on its own")

	// Whatever lease the child last wrote is what the server must honour.
	leased, found := readInteropDoc(ctx, t, db, name)
	require.True(t, found)

	actx, acancel := context.WithTimeout(ctx, 4*childExpiry)
	defer acancel()
	h, err = l.Acquire(actx)
	require.NoError(t, err, "the lock must be free once the killed child's lease has expired")
	took := time.Since(killedAt)
	t.Cleanup(func() { _ = h.Release(context.Background()) }) // on failure below

	taken, found := readInteropDoc(ctx, t, db, name)
	require.True(t, found)
	require.False(t, taken.AcquiredAt.Before(leased.ExpiresAt),
		"taken over at %v (server time), before the child's lease ended at %v", taken.AcquiredAt, leased.ExpiresAt)
	require.Greater(t, h.FencingToken(), childToken)
	require.Less(t, took, childExpiry+killWaitMax+killSlack,
		"taken over %v after SIGKILL; the expiry is %v and the longest sleep %v", took, childExpiry, killWaitMax)
	require.Less(t, taken.AcquiredAt.Sub(leased.ExpiresAt), killWaitMax+killSlack,
		"taken over %v after the child's lease ended (server time)", taken.AcquiredAt.Sub(leased.ExpiresAt))
	require.NoError(t, h.Release(ctx))
	t.Logf("acquired %v after SIGKILL (expiry %v), %v after the child's lease ended (server time); tokens: child %d, parent %d (+%d)",
		took.Round(time.Millisecond), childExpiry, taken.AcquiredAt.Sub(leased.ExpiresAt),
		childToken, h.FencingToken(), h.FencingToken()-childToken)
}

// lockedBuffer collects a child's output for failure messages; exec writes
// stderr from a goroutine of its own.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
