package mongolock_test

// Fault injection on the wire: a TCP proxy the test controls
// (internal/faultproxy) between a holder's driver and the server adds
// latency, drops bytes (a partition), or resets connections, while a rival
// on a direct connection tries to take the lock. What the library decides
// under each fault is tested over the model, each fault at chosen instants
// (lease_test.go, release_test.go); here a few trials of each show the
// same with the real driver's errors and timeouts. Each asserts the
// guarantee in every trial and logs its figures: trials, faults injected,
// violations (always 0, or the test fails), and how long before the rival
// could acquire the holder was told of the loss.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/faultproxy"
	"github.com/mongolock/mongolock/internal/testdb"
)

// faultExpiry is the lease of the loss scenarios: the default cadence is a
// third of it and the safety margin a tenth (100ms).
const faultExpiry = time.Second

// lossRace is one trial's outcome: a holder was cut off, and a rival on a
// direct connection polled until it got the lock.
type lossRace struct {
	cutToLost     time.Duration // from the cut to Lost closing
	cutToAcquired time.Duration // from the cut to sending the rival's winning attempt
	margin        time.Duration // Lost closed this long before the server let the rival in (its acquiredAt)
	beforeExpiry  time.Duration // Lost closed this long before the document's expiresAt (server clock)
	violation     string        // not "": the guarantee was broken, and how
}

// raceLoss acquires name (whose document is in coll) with the holder's one
// attempt take, waits phase, calls cut (which keeps the holder from
// extending), then records when Lost closes and when the rival's first
// successful attempt rivalTake, which the holder keeps out, was sent and
// when the server let it in. Lost must close before the server let the
// rival in (by the wall clock, which the server on this host shares): a
// rival's attempt sent earlier may be on its way while the lease ends. It does not use t: trials run in goroutines.
func raceLoss(ctx context.Context, coll *mongo.Collection, name string,
	take, rivalTake func(context.Context) (*mongolock.Handle, error), phase time.Duration, cut func(),
) (r lossRace, err error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	h, err := take(ctx)
	if err != nil {
		return r, fmt.Errorf("holder's acquisition: %w", err)
	}
	defer func() {
		// After the loss, Release reports it without a round trip; on an
		// early return, it must not wait on the cut connection.
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		_ = h.Release(rctx)
	}()
	timer := time.NewTimer(phase) // chooses the phase of the extension cycle; synchronises nothing
	select {
	case <-timer.C:
	case <-ctx.Done():
		return r, ctx.Err()
	}
	if closedNow(h.Lost()) {
		return r, fmt.Errorf("lost %v after acquiring, before any fault (a false loss): %v", phase, context.Cause(h.Context()))
	}
	cut()
	cutAt := time.Now()

	// The watcher notes when Lost closes, then reads the lease the server
	// holds (with a cut-off holder, no later extension can arrive).
	type lostInfo struct {
		at        time.Time
		expiresAt time.Time
	}
	lostCh := make(chan lostInfo, 1)
	go func() {
		select {
		case <-h.Lost():
		case <-ctx.Done():
			return
		}
		li := lostInfo{at: time.Now()}
		var doc struct {
			ExpiresAt time.Time `bson:"expiresAt"`
		}
		if coll.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc) == nil {
			li.expiresAt = doc.ExpiresAt
		}
		lostCh <- li
	}()

	var sentAt, rivalIn time.Time
	for {
		if time.Since(cutAt) > 10*time.Second {
			return r, errors.New("the rival did not acquire within 10s of the cut")
		}
		sent := time.Now()
		h2, err := rivalTake(ctx)
		if err == nil {
			sentAt, rivalIn = sent, h2.AcquiredAt()
			if !closedNow(h.Lost()) {
				r.violation = fmt.Sprintf("the rival acquired (attempt sent %v after the cut) while the holder's Lost was still open", sent.Sub(cutAt))
			}
			if closedNow(h2.Lost()) {
				return r, errors.New("the rival's handle was lost at once")
			}
			if rerr := h2.Release(ctx); rerr != nil {
				return r, fmt.Errorf("rival's release: %w", rerr)
			}
			break
		}
		if !errors.Is(err, mongolock.ErrNotAcquired) {
			return r, fmt.Errorf("rival: %w", err)
		}
		// Polling pace: the server cannot free the lock much before the
		// holder's last extension plus the expiry; poll gently before
		// that, closely after.
		pace := 5 * time.Millisecond
		if time.Since(cutAt) < faultExpiry/2 {
			pace = 25 * time.Millisecond
		}
		time.Sleep(pace)
	}

	var li lostInfo
	select {
	case li = <-lostCh:
	case <-time.After(5 * time.Second):
		return r, fmt.Errorf("%sLost never closed", r.violation+"; ")
	}
	r.cutToLost, r.cutToAcquired, r.margin = li.at.Sub(cutAt), sentAt.Sub(cutAt), rivalIn.Sub(li.at.Round(0))
	if !li.expiresAt.IsZero() {
		r.beforeExpiry = li.expiresAt.Sub(li.at.Round(0)) // wall clocks: the server runs on this host
	}
	if r.violation == "" && !li.at.Round(0).Before(rivalIn) {
		r.violation = fmt.Sprintf("Lost closed %v after the cut, %v after the server let the rival in (its winning attempt was sent %v after the cut)", r.cutToLost, -r.margin, r.cutToAcquired)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, mongolock.ErrLockLost) {
		return r, fmt.Errorf("Context's cause after loss is %v, not ErrLockLost", cause)
	}
	// After the loss nothing keeps the lease, and Release reports the loss
	// at once, without waiting on the cut connection.
	select {
	case <-mongolock.LeaseUnkept(h):
	case <-time.After(time.Second):
		return r, errors.New("the lease was still kept 1s after the loss")
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	start := time.Now()
	if err := h.Release(rctx); !errors.Is(err, mongolock.ErrLockLost) {
		return r, fmt.Errorf("Release after the loss returned %v, not ErrLockLost", err)
	}
	if d := time.Since(start); d > time.Second {
		return r, fmt.Errorf("Release after the loss took %v", d)
	}
	return r, nil
}

// runTrials runs trials 0..n-1 on workers goroutines and returns the
// results in order; a trial's error fails the test.
func runTrials[R any](t *testing.T, n, workers int, trial func(i int) (R, error)) []R {
	t.Helper()
	results := make([]R, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = trial(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "trial %d", i)
	}
	return results
}

// spread describes durations: minimum, median, maximum.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("min %v, median %v, max %v", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

// dialProxied connects a client to the server at uri through a new fault
// proxy. closeAll ends every fault, disconnects the client and closes the
// proxy; it may be called more than once. It does not use
// t, so that trials running in goroutines can use it.
func dialProxied(uri string, opts ...*options.ClientOptions) (px *faultproxy.Proxy, c *mongo.Client, closeAll func(), err error) {
	target, err := firstHost(uri)
	if err != nil {
		return nil, nil, nil, err
	}
	px, err = faultproxy.New(target)
	if err != nil {
		return nil, nil, nil, err
	}
	all := append([]*options.ClientOptions{
		options.Client().ApplyURI(uri).SetHosts([]string{px.Addr()}).SetDirect(true).
			// Find the server again soon after a fault (the driver's
			// minimum; the default is 10s).
			SetHeartbeatInterval(500 * time.Millisecond),
	}, opts...)
	c, err = mongo.Connect(all...)
	if err != nil {
		_ = px.Close()
		return nil, nil, nil, err
	}
	closeAll = func() {
		// Disconnecting ends the client's sessions on the server: give it
		// fresh connections without faults for that (a blackholed one
		// would make it wait for its whole timeout), then close the proxy.
		px.Reset()
		_ = px.Restore()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
		_ = px.Close()
	}
	return px, c, closeAll, nil
}

// firstHost returns the first host of a connection string.
func firstHost(uri string) (string, error) {
	o := options.Client().ApplyURI(uri)
	if err := o.Validate(); err != nil {
		return "", err
	}
	if len(o.Hosts) == 0 {
		return "", errors.New("no host in the test server's URI")
	}
	return o.Hosts[0], nil
}

// proxied returns db on a client of its own behind a new fault proxy,
// both closed when the test ends.
func proxied(t *testing.T, db *mongo.Database, opts ...*options.ClientOptions) (*faultproxy.Proxy, *mongo.Database) {
	t.Helper()
	px, c, closeAll, err := dialProxied(testdb.Info(t).URI, opts...)
	require.NoError(t, err)
	t.Cleanup(closeAll)
	return px, c.Database(db.Name())
}

// lossTrials runs n loss races, each on a holder client of its own behind a
// fault proxy, cut off by fault, against one rival on a direct connection.
func lossTrials(t *testing.T, n, workers int, fault string, cut func(px *faultproxy.Proxy)) []lossRace {
	t.Helper()
	db := testdb.Database(t)
	coll := db.Collection(mongolock.DefaultCollection)
	rival := newProvider(t, db, mongolock.WithExpiry(faultExpiry))
	uri := testdb.Info(t).URI
	ctx := boundedCtx(t, 5*time.Minute)
	results := runTrials(t, n, workers, func(i int) (lossRace, error) {
		// A cleanup still selecting a server when the client is
		// disconnected ends only at the selection's timeout, or its own.
		px, c, closeAll, err := dialProxied(uri, options.Client().SetServerSelectionTimeout(time.Second))
		if err != nil {
			return lossRace{}, err
		}
		holder, err := mongolock.NewProvider(c.Database(db.Name()), mongolock.WithExpiry(faultExpiry))
		if err != nil {
			closeAll()
			return lossRace{}, err
		}
		phase := time.Duration(rand.Int64N(int64(2 * faultExpiry / 3)))
		name := fmt.Sprintf("%s-%d", fault, i)
		r, err := raceLoss(ctx, coll, name, holder.Lock(name).TryAcquire, rival.Lock(name).TryAcquire, phase, func() { cut(px) })
		// The lost acquisition's cleanup may hang on the cut connection:
		// cutting it and disconnecting ends it.
		closeAll()
		mongolock.WaitBackground(holder)
		return r, err
	})
	var margins, before, toLost []time.Duration
	violations := 0
	for i, r := range results {
		if r.violation != "" {
			violations++
			t.Errorf("trial %d (%s): %s", i, fault, r.violation)
		}
		margins = append(margins, r.margin)
		toLost = append(toLost, r.cutToLost)
		if r.beforeExpiry != 0 {
			before = append(before, r.beforeExpiry)
		}
	}
	t.Logf("%s: %d trials, %d faults injected, %d violations; Lost closed before the server let the rival in by %s; "+
		"before the server's expiresAt by %s; from the cut to Lost: %s (expiry %v, safety margin %v)",
		fault, n, n, violations, spread(margins), spread(before), spread(toLost), faultExpiry, mongolock.SafetyMargin(rival))
	return results
}

// A partition of the holder (its connection stays open, every
// byte is dropped). Its Lost must close before a client on a direct
// connection can acquire, in every trial.
func TestFaultPartitionedHolderIsToldBeforeARivalAcquires(t *testing.T) {
	lossTrials(t, 4, 4, "blackhole", func(px *faultproxy.Proxy) { px.Blackhole() })
}

// Extensions slower than the whole remaining lease
// (a second each way) must end in a loss signalled before a rival can
// acquire.
func TestFaultExtensionsSlowerThanTheLeaseSignalLossInTime(t *testing.T) {
	lossTrials(t, 4, 4, "latency 1s+1s", func(px *faultproxy.Proxy) { px.SetLatency(time.Second, time.Second) })
}

// holdUnderLatency holds a lock through a proxy with the given latency for
// hold, with a rival polling, and reports extensions seen and any loss.
func holdUnderLatency(ctx context.Context, coll *mongo.Collection, uri, dbName string, rival *mongolock.Provider,
	name string, up, down, hold time.Duration, opts ...mongolock.Option,
) (extensions int, err error) {
	px, c, closeAll, err := dialProxied(uri)
	if err != nil {
		return 0, err
	}
	defer closeAll()
	holder, err := mongolock.NewProvider(c.Database(dbName), opts...)
	if err != nil {
		return 0, err
	}
	defer mongolock.WaitBackground(holder)
	h, err := holder.Lock(name).TryAcquire(ctx)
	if err != nil {
		return 0, err
	}
	px.SetLatency(up, down)
	readExpiry := func() (time.Time, error) {
		var doc struct {
			ExpiresAt time.Time `bson:"expiresAt"`
		}
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc)
		return doc.ExpiresAt, err
	}
	last, err := readExpiry()
	if err != nil {
		return 0, err
	}
	end := time.Now().Add(hold)
	for time.Now().Before(end) {
		if closedNow(h.Lost()) {
			return extensions, fmt.Errorf("lost after %d extensions with latency %v+%v: %v",
				extensions, up, down, context.Cause(h.Context()))
		}
		if _, err := rival.Lock(name).TryAcquire(ctx); !errors.Is(err, mongolock.ErrNotAcquired) {
			return extensions, fmt.Errorf("the rival's attempt while the lock was held: %v", err)
		}
		exp, err := readExpiry()
		if err != nil {
			return extensions, err
		}
		if exp.After(last) {
			extensions++
			last = exp
		}
		time.Sleep(50 * time.Millisecond) // pace of the checks
	}
	px.SetLatency(0, 0)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := h.Release(rctx); err != nil {
		return extensions, fmt.Errorf("release: %w", err)
	}
	return extensions, nil
}

// No false loss: with latency below the safety margin, the lock is kept,
// extended, and refused to a rival throughout. Round trips up to the
// bound, (expiry - margin) / 2, are TestSlowExtensionsBelowTheLeaseKeepTheLock's,
// over the model: on the wire, whether one near the bound stays below it
// is up to the machine's load.
func TestFaultSlowExtensionsBelowTheLeaseKeepTheLock(t *testing.T) {
	db := testdb.Database(t)
	coll := db.Collection(mongolock.DefaultCollection)
	// A lease of seconds, extended often: a machine loaded with other test
	// runs may stall the holder for a second or two, which is no latency
	// of the wire.
	const expiry, cadence = conformance.StallProofExpiry, conformance.StallProofCadence
	rival := newProvider(t, db, mongolock.WithExpiry(expiry))
	uri := testdb.Info(t).URI
	ctx := boundedCtx(t, time.Minute)
	const hold = 8 * cadence
	cases := []struct{ up, down time.Duration }{
		{45 * time.Millisecond, 45 * time.Millisecond}, // below the safety margin
	}
	const perCase = 2
	exts := runTrials(t, len(cases)*perCase, len(cases)*perCase, func(i int) (int, error) {
		c := cases[i%len(cases)]
		return holdUnderLatency(ctx, coll, uri, db.Name(), rival, fmt.Sprintf("slow-%d", i), c.up, c.down, hold,
			mongolock.WithExpiry(expiry), mongolock.WithExtensionCadence(cadence))
	})
	for ci, c := range cases {
		total := 0
		for i := ci; i < len(exts); i += len(cases) {
			require.GreaterOrEqual(t, exts[i], 3, "holder %d (latency %v+%v) extended too rarely", i, c.up, c.down)
			total += exts[i]
		}
		t.Logf("latency %v+%v (expiry %v, cadence %v, safety margin %v): %d holders for %v each, %d extensions seen, 0 losses, 0 rival acquisitions",
			c.up, c.down, expiry, cadence, mongolock.SafetyMargin(rival), perCase, hold, total)
	}
}

// resetTrial is one trial of the reset scenario: the holder's connections
// were reset while it acquired or released.
type resetTrial struct {
	during     string        // "acquire", "try acquire" or "release"
	reset      bool          // the reset came while the operation ran
	failed     bool          // the operation (or the release after it) returned an error
	freedAfter time.Duration // from then until the rival got the lock
	violation  string
}

// resetExpiry is the lease in the reset scenario: a lock left held for it (an
// orphan) is far beyond resetCleanupBound.
const (
	resetExpiry       = 15 * time.Second
	resetCleanupBound = 6 * time.Second
)

// Connection resets (RST) while acquiring and while releasing. Whatever
// the operation returns, no acquisition is left held for a whole expiry
// (an attempt that may have succeeded is released in the background), a
// lock released without error is free at once, and
// there are never two holders: the rival is refused while the holder has a
// handle, and fencing tokens strictly increase. Over the model, lost
// replies and refusals meet each operation in turn; a reset on the wire
// may also leave a request on its way, applied after its caller saw the
// error, which the model cannot do.
func TestFaultResetsDuringAcquireAndReleaseLeaveNoOrphansAndNeverTwoHolders(t *testing.T) {
	const workers, perWorker = 4, 3 // 12 trials: a third each of Acquire, TryAcquire and Release
	db := testdb.Database(t)
	rival := newProvider(t, db, mongolock.WithExpiry(resetExpiry))
	uri := testdb.Info(t).URI
	ctx := boundedCtx(t, 3*time.Minute)
	var resets atomic.Int64
	batches := runTrials(t, workers, workers, func(w int) ([]resetTrial, error) {
		px, c, closeAll, err := dialProxied(uri)
		if err != nil {
			return nil, err
		}
		defer closeAll()
		holder, err := mongolock.NewProvider(c.Database(db.Name()), mongolock.WithExpiry(resetExpiry),
			mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
		if err != nil {
			return nil, err
		}
		defer mongolock.WaitBackground(holder)
		// A few milliseconds each way widen the window in which a reset
		// catches a request on its way or its reply.
		px.SetLatency(2*time.Millisecond, 2*time.Millisecond)
		rw := &resetWorker{ctx: ctx, px: px, holder: holder, rival: rival, name: fmt.Sprintf("reset-%d", w), resets: &resets}
		var trials []resetTrial
		for i := range perWorker {
			var tr resetTrial
			var err error
			switch i % 3 {
			case 0: // acquire, waiting, with a reset
				tr, err = rw.acquireTrial(i, true)
			case 1: // one attempt with a reset
				tr, err = rw.acquireTrial(i, false)
			case 2: // release with a reset
				tr, err = rw.releaseTrial(i)
			}
			if err != nil {
				return trials, err
			}
			trials = append(trials, tr)
		}
		return trials, nil
	})
	tallyResetTrials(t, batches)
	t.Logf("%d resets injected in %d trials", resets.Load(), workers*perWorker)
}

// A resetWorker runs reset trials on a lock name of its own: its holder
// reaches the server through px, which resets its connections, and its
// rival directly.
type resetWorker struct {
	ctx           context.Context
	px            *faultproxy.Proxy
	holder, rival *mongolock.Provider
	name          string
	lastToken     int64
	resets        *atomic.Int64 // resets injected, every worker's
}

// fence returns a violation unless token, who's, is above the last one
// seen.
func (rw *resetWorker) fence(who string, token int64) string {
	if token <= rw.lastToken {
		return fmt.Sprintf("%s got fencing token %d, not above the previous %d", who, token, rw.lastToken)
	}
	rw.lastToken = token
	return ""
}

// rivalTakes polls until the rival gets the lock (or bound passes),
// checks its token and releases it.
func (rw *resetWorker) rivalTakes(bound time.Duration) (time.Duration, string, error) {
	start := time.Now()
	for {
		h2, err := rw.rival.Lock(rw.name).TryAcquire(rw.ctx)
		if err == nil {
			v := rw.fence("the rival", h2.FencingToken())
			return time.Since(start), v, h2.Release(rw.ctx)
		}
		if !errors.Is(err, mongolock.ErrNotAcquired) {
			return 0, "", fmt.Errorf("rival: %w", err)
		}
		if time.Since(start) > bound {
			return time.Since(start), fmt.Sprintf("the lock was still held %v after the operation returned", bound), nil
		}
		time.Sleep(5 * time.Millisecond) // polling pace
	}
}

// withReset runs op and resets every connection of the holder after a
// random delay of up to 10ms.
func (rw *resetWorker) withReset(op func()) (reset bool) {
	done := make(chan struct{})
	go func() { defer close(done); op() }()
	timer := time.NewTimer(time.Duration(rand.Int64N(int64(10 * time.Millisecond))))
	select {
	case <-timer.C:
		rw.px.Reset()
		reset = true
		rw.resets.Add(1)
	case <-done:
		timer.Stop()
	}
	<-done
	return reset
}

// acquireTrial is trial i: an acquisition (Acquire if wait, else
// TryAcquire) with a reset, the rival's attempt while it holds, its
// release, and the rival's taking the lock after it.
func (rw *resetWorker) acquireTrial(i int, wait bool) (resetTrial, error) {
	tr := resetTrial{during: "acquire"}
	if !wait {
		tr.during = "try acquire"
	}
	var h *mongolock.Handle
	var err error
	tr.reset = rw.withReset(func() {
		actx, cancel := context.WithTimeout(rw.ctx, 10*time.Second)
		defer cancel()
		if wait {
			h, err = rw.holder.Lock(rw.name).Acquire(actx)
		} else {
			h, err = rw.holder.Lock(rw.name).TryAcquire(actx)
		}
	})
	if err != nil {
		tr.failed = true
		if wait {
			return tr, fmt.Errorf("trial %d: Acquire gave up after a reset: %w", i, err)
		}
	} else {
		tr.violation = rw.fence("the holder", h.FencingToken())
		if _, rerr := rw.rival.Lock(rw.name).TryAcquire(rw.ctx); !errors.Is(rerr, mongolock.ErrNotAcquired) {
			tr.violation = fmt.Sprintf("two holders: the rival's attempt while the holder had a handle returned %v", rerr)
		}
		// A reset that came just after the acquisition may have
		// left broken connections in the driver's pool, so
		// this Release can fail too: then it is cleaned up in
		// the background, like a release cut by a reset.
		if rerr := h.Release(rw.ctx); rerr != nil {
			tr.failed = true
		}
	}
	return rw.rivalAfter(tr, resetCleanupBound)
}

// releaseTrial is trial i: an acquisition without fault, its release with
// a reset, and the rival's taking the lock after it: at once if the
// release returned no error.
func (rw *resetWorker) releaseTrial(i int) (resetTrial, error) {
	tr := resetTrial{during: "release"}
	actx, cancel := context.WithTimeout(rw.ctx, 10*time.Second)
	h, err := rw.holder.Lock(rw.name).Acquire(actx)
	cancel()
	if err != nil {
		return tr, fmt.Errorf("trial %d: acquire without fault: %w", i, err)
	}
	tr.violation = rw.fence("the holder", h.FencingToken())
	var rerr error
	tr.reset = rw.withReset(func() {
		rctx, cancel := context.WithTimeout(rw.ctx, 10*time.Second)
		defer cancel()
		rerr = h.Release(rctx)
	})
	tr.failed = rerr != nil
	bound := resetCleanupBound
	if rerr == nil {
		bound = 0 // released: free at once
	}
	return rw.rivalAfter(tr, bound)
}

// rivalAfter completes tr with the rival's taking the lock within bound.
func (rw *resetWorker) rivalAfter(tr resetTrial, bound time.Duration) (resetTrial, error) {
	d, v, err := rw.rivalTakes(bound)
	if err != nil {
		return tr, err
	}
	tr.freedAfter = d
	if tr.violation == "" {
		tr.violation = v
	}
	return tr, nil
}

// tallyResetTrials fails t for each trial's violation and logs, per
// operation, the trials, the resets, the errors and how long the lock
// stayed held after an error.
func tallyResetTrials(t *testing.T, batches [][]resetTrial) {
	t.Helper()
	type tally struct {
		n, reset, failed, violations int
		freed                        []time.Duration
	}
	by := map[string]*tally{}
	for _, b := range batches {
		for i, tr := range b {
			tl := by[tr.during]
			if tl == nil {
				tl = &tally{}
				by[tr.during] = tl
			}
			tl.n++
			if tr.reset {
				tl.reset++
			}
			if tr.failed {
				tl.failed++
				tl.freed = append(tl.freed, tr.freedAfter)
			}
			if tr.violation != "" {
				tl.violations++
				t.Errorf("trial %d (reset during %s): %s", i, tr.during, tr.violation)
			}
		}
	}
	for _, op := range []string{"acquire", "try acquire", "release"} {
		tl := by[op]
		t.Logf("reset during %s: %d trials, %d resets while it ran, %d errors returned; %d violations; after an error the rival got the lock after %s (expiry %v)",
			op, tl.n, tl.reset, tl.failed, tl.violations, spread(tl.freed), resetExpiry)
	}
}

// Errors that may hide an applied write.

// How the error of an acquisition (or hand-over) round trip decides its
// cleanup. A reply with a write concern error, an unknown transaction
// history or a failed retry came after the write may have been applied:
// one owner-checked release frees it. A network error may leave the
// request on its way: the release is repeated. Only errors known to come
// before the request was sent, a reply that found no document and a
// duplicate key need no cleanup.
func TestAcquisitionErrorsThatMayHideAnAppliedWriteAreCleanedUp(t *testing.T) {
	netErr := mongo.CommandError{Labels: []string{"NetworkError", "RetryableWriteError"}, Wrapped: io.ErrUnexpectedEOF}
	for _, c := range []struct {
		label              string
		err                error
		ambiguous, replied bool
	}{
		{"write concern error 64 in a WriteException", wce(64), true, true},
		{"CommandError 64 WriteConcernFailed", mongo.CommandError{Code: 64, Name: "WriteConcernFailed"}, true, true},
		{"CommandError 79 UnknownReplWriteConcern", mongo.CommandError{Code: 79, Name: "UnknownReplWriteConcern"}, true, true},
		{"CommandError 100 UnsatisfiableWriteConcern", mongo.CommandError{Code: 100, Name: "UnsatisfiableWriteConcern"}, true, true},
		{"CommandError 217 IncompleteTransactionHistory", mongo.CommandError{Code: 217, Name: "IncompleteTransactionHistory"}, true, true},
		{"a failed retry: RetryableWriteError", mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Labels: []string{"RetryableWriteError"}}, true, true},
		{"a failed retry: RetryableWriteError, NoWritesPerformed", mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Labels: []string{"RetryableWriteError", "NoWritesPerformed"}}, true, true},
		{"network error", netErr, true, false},
		{"network error, wrapped", fmt.Errorf("findAndModify: %w", netErr), true, false},
		{"cut short by its context", context.Canceled, true, false},
		{"no document", mongo.ErrNoDocuments, false, false},
		{"FerretDB's no match", mongo.CommandError{Code: 1, Name: "InternalError", Message: "(FailedToParse) The $$NOW operator cannot be used within this specific context"}, false, true},
		{"duplicate key", mongo.CommandError{Code: 11000, Name: "DuplicateKey"}, false, true},
		{"FerretDB's duplicate key", mongo.CommandError{Code: 1, Name: "InternalError", Message: "duplicate key value violates unique constraint"}, false, true},
		{"server selection", topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}, false, false},
		{"no connection free", topology.WaitQueueTimeoutError{Wrapped: context.DeadlineExceeded}, false, false},
		{"too little time left to send", fmt.Errorf("findAndModify: %w", driver.ErrDeadlineWouldBeExceeded), false, false},
		{"client disconnected", mongo.ErrClientDisconnected, false, false},
		{"topology closed", topology.ErrTopologyClosed, false, false},
	} {
		ambiguous, replied := mongolock.CleanupOf(c.err)
		require.Equal(t, c.ambiguous, ambiguous, "%s: may have been applied", c.label)
		if ambiguous {
			require.Equal(t, c.replied, replied, "%s: the server answered", c.label)
		}
	}
}

// wce is a reply's write concern error with code.
func wce(code int) error {
	return mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: code, Message: "injected"}}
}

// replaceNextReply arms p so that its next acquisition round trip returns err
// once the real round trip is over, whatever that did on the server.
func replaceNextReply(p *mongolock.Provider) (arm func(err error)) {
	var next atomic.Pointer[error]
	mongolock.SetReplyError(p, func(err error) error {
		if e := next.Swap(nil); e != nil {
			return *e
		}
		return err
	})
	return func(err error) { next.Store(&err) }
}

// A background release that meets transient errors (here its connections
// are reset as each try is sent) tries again until it gets through, well
// before the orphan's lease would have ended, and then stops. After a
// reply, a try that matches nothing is the last.
func TestFaultOrphanReleaseRetriesTransientErrorsAndStopsOnAReply(t *testing.T) {
	const (
		expiry = 30 * time.Second
		bound  = 5 * time.Second // far below the expiry
		resets = 3
	)
	db := testdb.Database(t)
	ctx := boundedCtx(t, time.Minute)
	var px atomic.Pointer[faultproxy.Proxy]
	var toReset, updates atomic.Int64 // resets still to make; updates started
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" {
			updates.Add(1)
			if toReset.Add(-1) >= 0 {
				px.Load().Reset()
			}
		}
	}}
	proxy, pdb := proxied(t, db, options.Client().SetMonitor(monitor))
	px.Store(proxy)
	p := newProvider(t, pdb, mongolock.WithExpiry(expiry))
	rival := newProvider(t, db, mongolock.WithExpiry(expiry))
	arm := replaceNextReply(p)
	require.NoError(t, mustTryAcquire(t, ctx, rival.Lock("orphan")).Release(ctx)) // the document exists

	// The acquisition is applied, its caller sees a write concern error,
	// and the first tries of its release are cut off.
	mongolock.WaitBackground(p)
	updates.Store(0)
	toReset.Store(resets)
	arm(wce(64))
	h, err := p.Lock("orphan").TryAcquire(ctx)
	releaseAtCleanup(t, h)
	require.Error(t, err)
	pollUntil(t, bound, "the orphan released despite the resets", func() bool {
		h, err := rival.Lock("orphan").TryAcquire(ctx)
		return err == nil && h.Release(ctx) == nil
	})
	mongolock.WaitBackground(p)
	require.Equal(t, int64(resets+1), updates.Load(), "updates sent: %d cut off, then one that released", resets)
	t.Logf("released after %d connection resets; proxy: %+v", resets, proxy.Stats())

	// Refused (the rival holds the lock) and told of a write concern error:
	// one release is sent, matches nothing, and is the last.
	held := mustTryAcquire(t, ctx, rival.Lock("orphan"))
	updates.Store(0)
	arm(wce(64))
	_, err = p.Lock("orphan").TryAcquire(ctx)
	require.Error(t, err)
	mongolock.WaitBackground(p)
	require.Equal(t, int64(1), updates.Load(), "updates sent after a reply")
	require.NoError(t, held.Release(ctx), "the cleanup freed someone else's lock")
}

// A Release whose ctx ends in the middle of a hand-over to a local waiter
// (slow round trips through the proxy) leaves the lock neither held by an
// acquisition nobody has a handle for nor lost: the waiter gets it, and
// holds it, or the lock is free again soon. Here, unlike over the model,
// the request cut short may still reach the server after Release returned.
func TestFaultReleaseCutShortDuringAHandOverLeavesNoOrphan(t *testing.T) {
	const (
		expiry = time.Minute
		bound  = 15 * time.Second // far below the expiry; a stall only makes the test slower
		trials = 4
	)
	db := testdb.Database(t)
	ctx := boundedCtx(t, 2*time.Minute)
	rival := newProvider(t, db, mongolock.WithExpiry(expiry))
	px, pdb := proxied(t, db)
	p := newProvider(t, pdb, mongolock.WithExpiry(expiry),
		mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))
	l := p.Lock("cut-hand-over")
	px.SetLatency(30*time.Millisecond, 30*time.Millisecond)
	var handedOver, cut, waiterGotIt int
	for i := range trials {
		h := mustAcquire(t, ctx, l)
		got := make(chan *mongolock.Handle, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			w, _ := l.Acquire(wctx)
			got <- w
		}()
		awaitQueueLen(t, p, l.Name(), 1)
		// Cut at points spread over the round trip (60 ms and more).
		rctx, cancel := context.WithTimeout(ctx, time.Duration(i)*20*time.Millisecond+5*time.Millisecond)
		rerr := h.Release(rctx)
		cancel()
		if rerr == nil {
			handedOver++
		} else {
			require.ErrorIs(t, rerr, context.DeadlineExceeded, "trial %d", i)
			cut++
		}
		require.True(t, closedNow(h.Context().Done()), "trial %d: the released handle's Context", i)
		if w := <-got; w != nil {
			waiterGotIt++
			require.False(t, closedNow(w.Lost()), "trial %d: the waiter's handle was lost", i)
			_, err := rival.Lock(l.Name()).TryAcquire(ctx)
			require.ErrorIs(t, err, mongolock.ErrNotAcquired, "trial %d: the waiter's handle does not hold the lock", i)
			require.NoError(t, w.Release(ctx), "trial %d", i)
		}
		pollUntil(t, bound, "the lock free again", func() bool {
			r, err := rival.Lock(l.Name()).TryAcquire(ctx)
			return err == nil && r.Release(ctx) == nil
		})
	}
	t.Logf("%d trials: %d releases handed over, %d cut short; the waiter got the lock %d times", trials, handedOver, cut, waiterGotIt)
	require.NotZero(t, cut, "no Release was cut short: the test tested nothing")
}

// smallMessages is a dialer for the driver whose connections make every
// hello reply say that the server takes messages of at most max bytes: the
// driver then refuses a command past max, as it refuses one past the real
// 48 MB, without megabytes to send and store.
type smallMessages struct{ max int32 }

func (d smallMessages) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &smallMessagesConn{Conn: c, max: d.max}, nil
}

// maxMessageField is the start of hello's limit: an int32 element.
var maxMessageField = []byte("\x10maxMessageSizeBytes\x00")

// smallMessagesConn reads whole wire messages (their first four bytes are
// their length), patching the limit where a reply has it.
type smallMessagesConn struct {
	net.Conn
	max  int32
	next []byte // the rest of the message being read
}

func (c *smallMessagesConn) Read(p []byte) (int, error) {
	if len(c.next) == 0 {
		var head [4]byte
		if _, err := io.ReadFull(c.Conn, head[:]); err != nil {
			return 0, err
		}
		msg := make([]byte, max(binary.LittleEndian.Uint32(head[:]), 4))
		copy(msg, head[:])
		if _, err := io.ReadFull(c.Conn, msg[4:]); err != nil {
			return 0, err
		}
		if i := bytes.Index(msg, maxMessageField) + len(maxMessageField); i >= len(maxMessageField) && i+4 <= len(msg) {
			binary.LittleEndian.PutUint32(msg[i:], uint32(c.max))
		}
		c.next = msg
	}
	n := copy(p, c.next)
	c.next = c.next[n:]
	return n, nil
}
