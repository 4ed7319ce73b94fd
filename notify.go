package mongolock

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
)

// Release events.
//
// Waiters learn that a lock held by another process came free by polling.
// Where the server offers change streams (replica sets, sharded clusters),
// one change stream per collection also wakes the head of a name's local
// line as soon as that lock is released (its lockId removed, or its document
// deleted), in any process; while it runs, polling is only a safety net.
// The stream opens when a waiter first finds the lock held by another
// process and closes notifyLinger after the last such waiter is done, so
// that ping-pong between processes does not reopen it per turn.
//
// Where the server has none (a standalone server, FerretDB), the first
// attempt to open one fails with an error that retrying cannot fix; the
// collection is remembered as having none, and waiters keep polling,
// silently. A stream that breaks later with a transient error (the network,
// a failover) is reopened by the next waiter.

// notifyLinger is how long a collection's change stream stays open after
// its last waiter.
const notifyLinger = time.Second

// releaseSource delivers the names of released locks until ctx ends,
// calling ready once it sees every release from then on. It returns an
// error if it cannot (then the collection falls back to polling).
type releaseSource func(ctx context.Context, coll *mongo.Collection, ready func(), released func(name string)) error

// watchReleases is the change-stream releaseSource.
func watchReleases(ctx context.Context, coll *mongo.Collection, ready func(), released func(name string)) error {
	return watch(ctx, coll, releaseEvents, ready, released)
}

// watch runs a change stream of coll's events that match pipeline until
// ctx ends, calling ready once it is open and event with each event's
// document _id. It returns nil when ctx ends, else why the stream ended.
func watch(ctx context.Context, coll *mongo.Collection, pipeline mongo.Pipeline, ready func(), event func(name string)) error {
	// Change streams need read concern majority; the collection reads at local.
	cs, err := coll.Clone(options.Collection().SetReadConcern(readconcern.Majority())).Watch(ctx, pipeline)
	if err != nil {
		return err
	}
	ready()
	defer func() { _ = cs.Close(context.WithoutCancel(ctx)) }()
	for cs.Next(ctx) {
		if name, ok := cs.Current.Lookup("documentKey", "_id").StringValueOK(); ok {
			event(name)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return cs.Err()
}

// notifier runs a collection's release source while it has waiters.
type notifier struct {
	mu      sync.Mutex
	source  releaseSource // change streams (watchReleases), or a test's
	none    bool          // the source was refused: poll only, do not ask again
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
func (n *notifier) join(coll *mongo.Collection, wake func(name string), bg *sync.WaitGroup) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters++
	if n.linger != nil {
		n.linger.Stop()
		n.linger = nil
	}
	if n.run != nil || n.none {
		return
	}
	source := n.source
	ctx, stop := context.WithCancel(context.Background())
	run := &sourceRun{stop: stop}
	n.run = run
	bg.Go(func() {
		defer stop()
		err := source(ctx, coll, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			run.open = true
		}, wake)
		n.mu.Lock()
		defer n.mu.Unlock()
		// Polling never stopped; only the wake-ups end here.
		n.none = n.none || err != nil && ctx.Err() == nil && !isTransient(err)
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
