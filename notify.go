package mongolock

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Release events.
//
// Waiters learn that a lock held by another process came free by polling.
// Where the server offers change streams (replica sets, sharded clusters),
// one change stream per collection also wakes the head of a name's local
// line as soon as that lock or a slot is released, in any process, in
// whatever shape the server reports the release (releaseEvents); while it
// runs, polling is only a safety net, at the standby sleep
// (WithStandbySleep) at most. The stream opens when a waiter first finds
// the lock held by another process and closes notifyLinger after the last
// such waiter is done, so that ping-pong between processes does not reopen
// it per turn.
//
// Where the server has none (a standalone server, FerretDB), the first
// attempt to open one fails with an error that retrying cannot fix; the
// collection is remembered as having none, and waiters keep polling,
// silently. Only that refusal is remembered: a stream that opened and
// ended later, whatever the error (the network, a failover, an event over
// 16 MB, history lost, an invalidate), is reopened by the next waiter, no
// sooner than notifyRetry after it ended, doubling while streams keep
// ending within notifyRetryMax of opening.

// notifyLinger is how long a collection's change stream stays open after
// its last waiter.
const notifyLinger = time.Second

// notifyRetry is the least time between a stream's end and the next open;
// notifyRetryMax the most, reached by streams that end soon after opening.
const (
	notifyRetry    = time.Second
	notifyRetryMax = time.Minute
)

// releaseSource delivers the names of released locks until ctx ends,
// calling ready once it sees every release from then on. It returns an
// error if it cannot (then the collection falls back to polling).
type releaseSource func(ctx context.Context, st store, ready func(), released func(name string)) error

// watchReleases is the change-stream releaseSource.
func watchReleases(ctx context.Context, st store, ready func(), released func(name string)) error {
	return watchNames(ctx, st, releaseEvents, ready, released)
}

// watchNames runs a change stream of the events of st that match pipeline until
// ctx ends, calling ready once it is open and event with the name of each
// event's document (a lock's _id is its name). It returns nil when ctx
// ends, else why the stream ended.
func watchNames(ctx context.Context, st store, pipeline mongo.Pipeline, ready func(), event func(name string)) error {
	return st.watch(ctx, pipeline, ready, func(id bson.RawValue) {
		if name, ok := id.StringValueOK(); ok {
			event(name)
		}
	})
}

// notifier runs a collection's release source while it has waiters.
type notifier struct {
	mu      sync.Mutex
	source  releaseSource // change streams (watchReleases), or a test's
	none    bool          // the source was refused: poll only, do not ask again
	retryAt time.Time     // an open source ended: none started before then
	retry   time.Duration // the next wait after an end; 0: notifyRetry
	waiters int
	run     *sourceRun  // the running source, if any
	linger  *time.Timer // pending stop after the last waiter
}

// sourceRun is one run of a release source.
type sourceRun struct {
	stop context.CancelFunc
	open bool // ready: it sees every release
}

// join counts a waiter; it starts the source unless it runs already.
func (n *notifier) join(st store, wake func(name string), bg *sync.WaitGroup) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters++
	if n.linger != nil {
		n.linger.Stop()
		n.linger = nil
	}
	if n.run != nil || n.none || time.Now().Before(n.retryAt) {
		return
	}
	source := n.source
	ctx, stop := context.WithCancel(context.Background())
	run := &sourceRun{stop: stop}
	n.run = run
	bg.Go(func() {
		defer stop()
		var opened time.Time
		err := source(ctx, st, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			run.open, opened = true, time.Now()
		}, wake)
		n.mu.Lock()
		defer n.mu.Unlock()
		// Polling never stopped; only the wake-ups end here.
		switch {
		case ctx.Err() != nil: // stopped after the last waiter
		case !run.open:
			// Refused: remembered unless retrying can fix it.
			n.none = n.none || err != nil && !isTransient(err)
		default:
			// It opened, then ended: the next waiter reopens it, after a
			// wait that grows while streams end soon after opening.
			if n.retry == 0 || time.Since(opened) >= notifyRetryMax {
				n.retry = notifyRetry
			}
			n.retryAt = time.Now().Add(n.retry)
			n.retry = min(2*n.retry, notifyRetryMax)
		}
		if n.run == run {
			n.run = nil
		}
	})
}

// leave uncounts a waiter; the source stops notifyLinger after the last one.
func (n *notifier) leave() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters--
	if n.waiters > 0 || n.run == nil {
		return
	}
	run := n.run
	n.linger = time.AfterFunc(notifyLinger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.waiters == 0 && n.run == run {
			run.stop()
			n.run, n.linger = nil, nil
		}
	})
}

// isOpen reports whether release events are arriving: the source runs and
// is ready.
func (n *notifier) isOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.run != nil && n.run.open
}
