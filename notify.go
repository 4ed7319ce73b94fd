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
// Waiters poll to learn that another process released a lock. Where the
// server has change streams, one stream per collection also wakes the head
// of a name's line at each release (releaseEvents), and polling is only a
// safety net, at the standby sleep (WithStandbySleep) at most. The stream
// opens when a waiter first finds the lock held by another process, and
// closes notifyLinger after the last such waiter, so that processes taking
// turns do not reopen it at each turn.
//
// A server without change streams (a standalone server, FerretDB) refuses
// the first open with an error that retrying cannot fix: the collection is
// remembered as having none, and waiters poll. A stream that ends, or that
// cannot open for a transient error, is opened again as streamRetry says;
// what it missed meanwhile, the polls find.

// notifyLinger is how long a collection's change stream stays open after
// its last waiter.
const notifyLinger = time.Second

// notifyRetry is the least time between a stream's end and the next open;
// notifyRetryMax the most, reached by streams that end soon after opening.
const (
	notifyRetry    = time.Second
	notifyRetryMax = time.Minute
)

// streamRetry is the policy for reopening a change stream that ended, a
// collection's release events' (notifier) and those of keepWatching: a refusal to open one that retrying cannot fix is
// final; after any other end, the next open comes no sooner than
// notifyRetry after it, doubling while streams keep ending (or failing to
// open) within notifyRetryMax of opening, up to notifyRetryMax. The zero
// value is ready; it is not safe for concurrent use.
type streamRetry struct {
	next time.Duration // the wait after the next end; 0: notifyRetry
}

// ended records the end of a stream: opened is when it opened (the zero
// time: it never did), err why it ended. It returns how long to wait
// before the next open, or final if none is to be tried.
func (r *streamRetry) ended(opened time.Time, err error) (wait time.Duration, final bool) {
	if opened.IsZero() && err != nil && !isTransient(err) {
		return 0, true
	}
	if r.next == 0 || !opened.IsZero() && time.Since(opened) >= notifyRetryMax {
		r.next = notifyRetry
	}
	wait, r.next = r.next, min(2*r.next, notifyRetryMax)
	return wait, false
}

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

// keepWatching runs change streams of st's events that match pipeline
// until ctx ends, or until the server refuses one for good: each stream
// calls ready once open and event per event's name, and ended once over;
// an ended stream is reopened as streamRetry says. ready and ended may be
// nil.
func keepWatching(ctx context.Context, st store, pipeline mongo.Pipeline, ready func(), event func(name string), ended func()) {
	var retry streamRetry
	for {
		var opened time.Time
		err := watchNames(ctx, st, pipeline, func() {
			opened = time.Now()
			if ready != nil {
				ready()
			}
		}, event)
		if ended != nil {
			ended()
		}
		wait, final := retry.ended(opened, err)
		if ctx.Err() != nil || final {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// notifier runs a collection's release source while it has waiters.
type notifier struct {
	mu      sync.Mutex
	source  releaseSource // change streams (watchReleases), or a test's
	none    bool          // the source was refused: poll only, do not ask again
	retryAt time.Time     // a source ended: none started before then
	retry   streamRetry   // when the next source may start
	waiters int
	run     *sourceRun  // the running source, if any
	linger  *time.Timer // pending stop after the last waiter
	reopen  *time.Timer // pending start of a source that ended under waiters
	// What a source runs with, as the waiters give it (the same for every
	// waiter of a collection), while there are waiters:
	st   store
	wake func(name string)
	bg   *sync.WaitGroup
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
	stopTimer(&n.linger)
	n.st, n.wake, n.bg = st, wake, bg
	n.startLocked()
}

// startLocked starts the source unless it runs already, was refused, or
// the policy says to wait; n.mu is held.
func (n *notifier) startLocked() {
	if n.run != nil || n.none || time.Now().Before(n.retryAt) {
		return
	}
	stopTimer(&n.reopen)
	source, st, wake := n.source, n.st, n.wake
	ctx, stop := context.WithCancel(context.Background())
	run := &sourceRun{stop: stop}
	n.run = run
	n.bg.Go(func() {
		defer stop()
		var opened time.Time
		err := source(ctx, st, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			run.open, opened = true, time.Now()
		}, wake)
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.run == run {
			n.run = nil
		}
		// Polling never stopped; only the wake-ups end here. Unless it was
		// stopped after the last waiter, it is opened again when the
		// policy lets it, for the waiters still counted then.
		if ctx.Err() != nil {
			return
		}
		wait, final := n.retry.ended(opened, err)
		n.none = n.none || final
		n.retryAt = time.Now().Add(wait)
		if !final && n.waiters > 0 {
			var reopen *time.Timer
			reopen = time.AfterFunc(wait, func() {
				n.mu.Lock()
				defer n.mu.Unlock()
				if n.reopen != reopen {
					return // stopped by the last waiter's leaving, or a join started it
				}
				n.reopen = nil
				n.startLocked()
			})
			n.reopen = reopen
		}
	})
}

// leave uncounts a waiter; the source stops notifyLinger after the last one.
func (n *notifier) leave() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters--
	if n.waiters > 0 {
		return
	}
	stopTimer(&n.reopen) // nobody is left to wake
	// The state of a collection is kept per client while the client is
	// reachable: it must not keep the client reachable itself.
	n.st, n.wake, n.bg = nil, nil, nil
	if n.run == nil {
		return
	}
	run := n.run
	n.linger = time.AfterFunc(notifyLinger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.stopIdleLocked(run)
	})
}

// stopIdle stops the source now if no waiter is counted, rather than
// notifyLinger after the last one: a Provider that closes leaves nothing
// running for waiters that are gone. Another Provider's next waiter opens
// it again.
func (n *notifier) stopIdle() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopIdleLocked(n.run)
}

// stopIdleLocked stops run if it is still the source and no waiter is
// counted; n.mu is held.
func (n *notifier) stopIdleLocked(run *sourceRun) {
	if n.waiters > 0 || run == nil || n.run != run {
		return
	}
	stopTimer(&n.linger) // called by the linger itself too, whose Stop then does nothing
	run.stop()
	n.run = nil
}

// stopTimer stops *t, if set, and forgets it.
func stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// isOpen reports whether release events are arriving: the source runs and
// is ready.
func (n *notifier) isOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.run != nil && n.run.open
}
