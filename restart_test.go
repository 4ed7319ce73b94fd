package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// The server restarts (FerretDB, and separately PostgreSQL under it) while
// locks are held and others wait for them. Every holder either keeps its
// lock (its extensions resume within the lease) or signals the loss; the
// waiters resume and acquire; there are never two holders, and fencing
// tokens keep increasing.
//
// The test restarts a server of its own (a named instance of
// scripts/testdb), never the one the other tests share.
func TestFaultFerretDBStoppedWhileHeldAndAwaited(t *testing.T) {
	// FerretDB serves open connections for a few seconds after it is told
	// to stop.
	restartTrials(t, []restartFault{{"FerretDB-stopped", "stop-ferretdb", restartExpiry / 4}})
}

// A crash of FerretDB: every connection drops at once; down longer than the
// lease, so the holders lose their locks.
func TestFaultFerretDBKilledWhileHeldAndAwaited(t *testing.T) {
	restartTrials(t, []restartFault{{"FerretDB-killed-longer-than-the-lease", "kill-ferretdb", restartExpiry + restartExpiry/4}})
}

// PostgreSQL, under FerretDB, stopped and started again, shorter and longer
// than the lease. Each of these tests has an instance of its own, so that
// none runs long.
func TestFaultPostgreSQLStoppedWhileHeldAndAwaited(t *testing.T) {
	restartTrials(t, []restartFault{
		{"PostgreSQL-stopped", "stop-postgres", restartExpiry / 4},
		{"PostgreSQL-stopped-longer-than-the-lease", "stop-postgres", restartExpiry + restartExpiry/4},
	})
}

// restartFault is one way the server goes down: the scripts/testdb command
// that stops it, and how long it stays stopped on top of the stop and the
// start.
type restartFault struct {
	name, stop string
	downFor    time.Duration
}

// restartTrials runs a trial of each fault on an instance of scripts/testdb
// of the test's own.
func restartTrials(t *testing.T, faults []restartFault) {
	if s := testdb.Info(t); s.Source != "scripts/testdb" {
		t.Skipf("restarts FerretDB and PostgreSQL with scripts/testdb, which can only do that for its own servers; "+
			"the tests' server comes from %s (%s)", s.Source, s.Name())
	}
	in := testdb.StartInstance(t)
	for _, fault := range faults {
		t.Run(fault.name, func(t *testing.T) { restartTrial(t, in, fault.name, fault.stop, fault.downFor) })
	}
}

// acquireRetriesFerretDBInternalErrors: Acquire retries FerretDB's
// "(InternalError) terminating connection due to administrator command"
// (and the other code-1 errors FerretDB sends while its PostgreSQL is down
// or starting) as the transient errors they are (transient server errors
// while waiting are retried), so such an error returned by Acquire fails
// the test.
const acquireRetriesFerretDBInternalErrors = true

// ferretDBInternalError reports whether err is a code-1 InternalError, as
// FerretDB sends when it cannot reach PostgreSQL.
func ferretDBInternalError(err error) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && ce.Code == 1 && ce.Name == "InternalError"
}

// restartExpiry is the lease in the restart scenario: a restart of a few
// seconds may or may not outlast it.
const restartExpiry = 2 * time.Second

// ledger follows the holders of one lock name as the test sees them: an
// acquisition while the previous holder neither released (as far as the
// test knows: it marks a release before calling Release) nor was told of
// its loss is two holders.
type ledger struct {
	mu           sync.Mutex
	cur          *mongolock.Handle
	curReleased  bool
	maxToken     int64
	acquisitions int
	violations   []string
}

func (l *ledger) acquired(who string, h *mongolock.Handle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil && !l.curReleased && !closedNow(l.cur.Lost()) {
		l.violations = append(l.violations, fmt.Sprintf("%s acquired %q while its previous holder was neither released nor told of a loss", who, h.Name()))
	}
	if h.FencingToken() <= l.maxToken {
		l.violations = append(l.violations, fmt.Sprintf("%s got token %d, not above %d", who, h.FencingToken(), l.maxToken))
	}
	l.cur, l.curReleased, l.maxToken = h, false, max(l.maxToken, h.FencingToken())
	l.acquisitions++
}

func (l *ledger) releasing(h *mongolock.Handle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == h {
		l.curReleased = true
	}
}

// restartTrial holds names lock names, each with waiters of two other
// processes, while the fault stop stops a process of the server for
// downFor and it starts again; it checks that the holders release, the
// waiters all acquire, and the ledgers see no two holders at once.
func restartTrial(t *testing.T, in *testdb.Instance, what, stop string, downFor time.Duration) {
	const names, waitersPerName = 4, 2
	ctx := boundedCtx(t, 2*time.Minute)
	connect := func() *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI(in.URI).SetHeartbeatInterval(500 * time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Disconnect(dctx)
		})
		return c
	}
	const dbName = testdb.Prefix + "restart"
	opts := []mongolock.Option{mongolock.WithExpiry(restartExpiry), mongolock.WithBusyWaitSleep(10*time.Millisecond, 100*time.Millisecond)}
	newProvider := func() *mongolock.Provider {
		return newProvider(t, connect().Database(dbName), opts...)
	}
	// Three processes, as far as the server can tell: the holders', and
	// two of waiters.
	holders := newProvider()
	waiters := []*mongolock.Provider{newProvider(), newProvider()}
	raw := connect().Database(dbName).Collection(mongolock.DefaultCollection)

	ledgers := make([]*ledger, names)
	held := make([]*mongolock.Handle, names)
	lockName := func(i int) string { return fmt.Sprintf("%s-%d", what, i) }
	for i := range names {
		ledgers[i] = &ledger{}
		h, err := holders.Lock(lockName(i)).TryAcquire(ctx)
		require.NoError(t, err)
		ledgers[i].acquired("the holder", h)
		held[i] = h
	}

	// The waiters: each acquires, holds a moment, releases.
	results := make(chan waited, names*waitersPerName)
	var gaveUp atomic.Int64 // Acquire calls that returned a FerretDB InternalError
	var wg sync.WaitGroup
	for i := range names {
		for w := range waitersPerName {
			wg.Go(func() {
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				h, err := waiters[w].Lock(lockName(i)).Acquire(actx)
				for err != nil && !acquireRetriesFerretDBInternalErrors && ferretDBInternalError(err) && actx.Err() == nil {
					gaveUp.Add(1)
					pace := time.NewTimer(20 * time.Millisecond) // the retry Acquire should have made
					<-pace.C
					h, err = waiters[w].Lock(lockName(i)).Acquire(actx)
				}
				if err != nil {
					results <- waited{err: fmt.Errorf("waiter %d of %q: %w", w, lockName(i), err)}
					return
				}
				ledgers[i].acquired(fmt.Sprintf("waiter %d", w), h)
				hold := time.NewTimer(20 * time.Millisecond) // work under the lock
				<-hold.C
				ledgers[i].releasing(h)
				err = h.Release(actx)
				if errors.Is(err, mongolock.ErrLockLost) {
					err = nil // lost while held: allowed, the ledger judged it
				}
				results <- waited{err: err, endedAt: time.Now()}
			})
		}
	}
	defer wg.Wait()

	// Wait until both waiting processes wait for every lock: each is in
	// Acquire, and one of them has reached the server and claimed the next
	// turn.
	pollUntil(t, 20*time.Second, "both waiting processes waiting for every lock, one claiming its next turn", func() bool {
		for i := range names {
			var doc struct {
				WaitingProcess string `bson:"waitingProcess"`
			}
			if raw.FindOne(ctx, bson.D{{Key: "_id", Value: lockName(i)}}).Decode(&doc) != nil ||
				doc.WaitingProcess != mongolock.Process(waiters[0]) && doc.WaitingProcess != mongolock.Process(waiters[1]) {
				return false
			}
			for _, w := range waiters {
				if mongolock.QueueLen(w, lockName(i)) == 0 {
					return false
				}
			}
		}
		return true
	})

	// The fault: stop one process of the server, start it again.
	down := time.Now()
	require.NoError(t, in.Run(stop))
	stopped := time.Since(down)
	pause := time.NewTimer(downFor) // the length of the outage, not synchronisation
	<-pause.C
	require.NoError(t, in.Run("start"))
	up := time.Now()

	kept, lost := releaseAfterRestart(ctx, t, held, ledgers, up)
	lastEnd := awaitWaiters(ctx, t, results, names*waitersPerName)
	violations, acquisitions := judgeLedgers(t, ledgers)
	t.Logf("%s: the stop took %v, down %v more, running again %v after the stop began; %d holders (expiry %v): %d kept their lock, %d were told of its loss; "+
		"%d waiters all acquired, the last done %v after the start command returned (negative: before); %d acquisitions, %d violations; "+
		"%d Acquire calls returned a FerretDB InternalError instead of retrying",
		what, stopped.Round(time.Millisecond), downFor, up.Sub(down).Round(time.Millisecond), names, restartExpiry, kept, lost,
		names*waitersPerName, lastEnd.Sub(up).Round(time.Millisecond), acquisitions, violations, gaveUp.Load())
}

// A waited is how a restart trial's waiter ended.
type waited struct {
	err     error
	endedAt time.Time
}

// releaseAfterRestart releases the holders, each once it has kept its lock
// if its extensions resumed: by a whole lease after the restart (up), it
// has either been told of a loss or extended. It returns how many kept
// their lock and how many were told of its loss.
func releaseAfterRestart(ctx context.Context, t *testing.T, held []*mongolock.Handle, ledgers []*ledger, up time.Time) (kept, lost int) {
	t.Helper()
	for i, h := range held {
		deadline := time.NewTimer(time.Until(up.Add(restartExpiry + restartExpiry/3)))
		select {
		case <-h.Lost():
		case <-deadline.C:
		}
		deadline.Stop()
		ledgers[i].releasing(h)
		err := h.Release(ctx)
		switch {
		case closedNow(h.Lost()):
			lost++
			require.ErrorIs(t, err, mongolock.ErrLockLost)
			require.ErrorIs(t, context.Cause(h.Context()), mongolock.ErrLockLost)
		default:
			kept++
			require.NoError(t, err, "a holder that was not told of a loss released")
		}
	}
	return kept, lost
}

// awaitWaiters requires n waiters' results without an error before ctx
// ends, and returns when the last ended.
func awaitWaiters(ctx context.Context, t *testing.T, results <-chan waited, n int) (lastEnd time.Time) {
	t.Helper()
	for range n {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			if r.endedAt.After(lastEnd) {
				lastEnd = r.endedAt
			}
		case <-ctx.Done():
			require.FailNow(t, "the waiters did not all acquire in time")
		}
	}
	return lastEnd
}

// judgeLedgers fails t for each violation the ledgers saw, and returns
// their violations and acquisitions.
func judgeLedgers(t *testing.T, ledgers []*ledger) (violations, acquisitions int) {
	t.Helper()
	for _, l := range ledgers {
		for _, v := range l.violations {
			t.Error(v)
		}
		violations += len(l.violations)
		acquisitions += l.acquisitions
	}
	return violations, acquisitions
}
