package mongolock

import (
	"sync"
	"time"
)

// Local coordination: goroutines of one process waiting for the same lock
// (same client, database, collection and name) queue here, first come first
// served, and only the head of the queue talks to the database. While a
// handle of this process holds the lock, the head does not poll at all: the
// lock can only come free through that handle's release or loss, and both
// wake the head, which then attempts at once. Other processes are not seen
// here; the head polls the database for them as before.

// queue is the local wait queue of one lock name.
type queue struct {
	waiters []*waiter // FIFO; waiters[0] is the head
	held    int       // handles of this process that hold the name
	pace    pace      // what the heads' refused attempts saw (fair.go)
}

// A waiter is one Acquire call in a queue.
type waiter struct {
	// wake has room for one signal: "you are the head now" or "a handle of
	// this process released the lock". A signal is never lost, and a
	// waiter that is not waiting yet finds it when it looks.
	wake chan struct{}
	lock *Lock // what it acquires

	// A hand-over (handoff.go), guarded by queues.mu.
	offered bool    // a releasing handle is handing the lock to it
	handoff *Handle // the lock, handed over, not yet taken
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a signal is pending already
	}
}

// queues holds the queues of one collection, by lock name. A queue exists
// only while it has waiters or local holders.
type queues struct {
	mu     sync.Mutex
	byName map[string]*queue
}

func (qs *queues) get(name string) *queue {
	if qs.byName == nil {
		qs.byName = make(map[string]*queue)
	}
	q := qs.byName[name]
	if q == nil {
		q = &queue{}
		qs.byName[name] = q
	}
	return q
}

func (qs *queues) gc(name string, q *queue) {
	if len(q.waiters) == 0 && q.held == 0 {
		delete(qs.byName, name)
	}
}

// join appends a waiter for l to its queue. If it is the head, it is
// signalled at once.
func (qs *queues) join(l *Lock) *waiter {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.get(l.name)
	w := &waiter{wake: make(chan struct{}, 1), lock: l}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		w.signal()
	}
	return w
}

// leave removes w from name's queue (its Acquire returned, with or without
// a handle). If w was the head, the next waiter becomes the head and is
// signalled; the others keep their places. It returns how many still wait,
// and a handle handed over to w that it did not take (see takeHandoff).
func (qs *queues) leave(name string, w *waiter) (left int, untaken *Handle) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	untaken, w.handoff = w.handoff, nil
	q := qs.get(name)
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(q.waiters) > 0 {
				q.waiters[0].signal()
			}
			break
		}
	}
	left = len(q.waiters)
	qs.gc(name, q)
	return left, untaken
}

// state reports whether w is the head of name's queue and whether a handle
// of this process holds the name.
func (qs *queues) state(name string, w *waiter) (head, heldHere bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.get(name)
	return len(q.waiters) > 0 && q.waiters[0] == w, q.held > 0
}

// hold records that a handle of this process acquired name.
func (qs *queues) hold(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.get(name).held++
}

// unhold records that a handle of this process no longer holds name
// (released or lost), and wakes the head of the queue to attempt at once.
func (qs *queues) unhold(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.get(name)
	q.held--
	if len(q.waiters) > 0 {
		q.waiters[0].signal()
	}
	qs.gc(name, q)
}

// waiting returns how many Acquire calls wait in line for name.
func (qs *queues) waiting(name string) int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[name]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// wakeHead wakes the head of name's line, if any, to attempt at once (the
// lock was released somewhere: notify.go).
func (qs *queues) wakeHead(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[name]; q != nil && len(q.waiters) > 0 {
		q.waiters[0].signal()
	}
}

// observe records what a refused attempt of name's head saw, in the pace
// its line keeps across heads, and returns pace.observe's estimate.
func (qs *queues) observe(name string, t turn, now time.Time) (time.Duration, bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.get(name).pace.observe(t, now)
}
