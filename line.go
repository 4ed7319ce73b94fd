package mongolock

import (
	"slices"
	"sync"
	"time"
)

// The local line: Acquire calls of one process for the same lock (same
// client, database, collection and name) wait here, first come first
// served, and only the head talks to the database. While handles of this
// process hold all it can hold (the lock, a semaphore's n slots, an RWLock
// for writing) the head does not poll at all: it can only come free through
// those handles' releases or losses, and each wakes the head. A release
// hands the lock or slot to the head in its own round trip (Release).

// A line is the Acquire calls of one process for one lock name, first come
// first served.
type line struct {
	waiters   []*waiter // waiters[0] is the head
	upgrades  []*waiter // Upgrade calls: woken with the head, never its turn
	held      int       // handles of this process that hold the name
	exclusive int       // of which exclusive ones (a lock's, an RWLock's writer's)
	pace      pacer     // when the head attempts next
}

// A waiter is one Acquire call in line.
type waiter struct {
	// wake has room for one signal: "you are the head now", "the lock was
	// released", or "a hand-over to you ended". A signal is never lost.
	wake    chan struct{}
	lock    *Lock
	q       *line // its line; nil once it left
	upgrade bool  // an Upgrade's: beside the line, woken with its head

	// A hand-over, guarded by lines.mu: one under way, or one done whose
	// handle the waiter has not taken yet. Either stops another.
	offered    bool
	handedOver *Handle
}

func (w *waiter) signal() { signalTo(w.wake) }

// signalTo leaves a signal in ch, which has room for one, unless one is
// pending already.
func signalTo(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default: // a signal is pending already
	}
}

// lines holds the lines of one collection, by lock name. A line exists
// only while it has waiters or local holders; what its pacer learnt of
// the lock's pace is kept for paceMemory after, for the line that comes
// next (a process that takes a lock now and then has a line at a time).
type lines struct {
	mu     sync.Mutex
	byName map[string]*line
	paces  map[string]remembered // of names without a line
	swept  int                   // len(paces) after the last sweep
}

// remembered is a line's pace, as its line ended at.
type remembered struct {
	pace pacer
	at   time.Time
}

// paceMemory is how long a lock's pace is remembered without a line.
const paceMemory = time.Minute

func (qs *lines) get(name string) *line {
	q := qs.byName[name]
	if q == nil {
		q = &line{}
		if r, ok := qs.paces[name]; ok {
			if time.Since(r.at) <= paceMemory { // else not yet swept, and stale
				q.pace = r.pace
			}
			delete(qs.paces, name)
		}
		qs.byName[name] = q
	}
	return q
}

// drop forgets name's line once nobody waits or holds there, and
// remembers its pace. The memory is swept of old paces whenever it has
// doubled since the last sweep.
func (qs *lines) drop(name string, q *line) {
	if len(q.waiters) > 0 || len(q.upgrades) > 0 || q.held > 0 {
		return
	}
	delete(qs.byName, name)
	if qs.paces == nil {
		qs.paces = map[string]remembered{}
	}
	now := time.Now()
	qs.paces[name] = remembered{q.pace.learnt(), now}
	if len(qs.paces) > max(2*qs.swept, 64) {
		for n, r := range qs.paces {
			if now.Sub(r.at) > paceMemory {
				delete(qs.paces, n)
			}
		}
		qs.swept = len(qs.paces)
	}
}

// join appends a waiter for l. The head is signalled at once. An
// Upgrade's (upgrade) waits beside the line instead: its handle holds the
// name already, so it takes no turn, and the line's head goes on asking
// (a writer of its process claims the lock meanwhile); what wakes the head
// wakes it too, and it is never handed a lock.
func (qs *lines) join(l *Lock, upgrade bool) *waiter {
	qs.mu.Lock()
	w := &waiter{wake: make(chan struct{}, 1), lock: l, q: qs.get(l.name), upgrade: upgrade}
	switch {
	case upgrade:
		w.q.upgrades = append(w.q.upgrades, w)
		w.signal()
	case len(w.q.waiters) == 0:
		w.q.pace.begin() // a new wait
		w.signal()
		fallthrough
	default:
		w.q.waiters = append(w.q.waiters, w)
	}
	n := w.q.waiting()
	qs.mu.Unlock()
	l.p.tel.waiting(l, true, n)
	return w
}

// waiting is how many calls wait in q: its waiters, and Upgrade calls.
func (q *line) waiting() int { return len(q.waiters) + len(q.upgrades) }

// leave takes w out of its line and signals the next head if w was the
// head. It returns a handle handed over to w that w did not take.
func (qs *lines) leave(w *waiter) (handedOver *Handle) {
	qs.mu.Lock()
	q := w.q
	if w.upgrade {
		q.upgrades = slices.DeleteFunc(q.upgrades, func(u *waiter) bool { return u == w })
	} else {
		i := slices.Index(q.waiters, w)
		q.waiters = slices.Delete(q.waiters, i, i+1)
		if i == 0 && len(q.waiters) > 0 {
			q.waiters[0].signal()
		}
	}
	qs.drop(w.lock.name, q)
	handedOver, w.handedOver, w.q = w.handedOver, nil, nil
	n := q.waiting()
	qs.mu.Unlock()
	w.lock.p.tel.waiting(w.lock, false, n)
	return handedOver
}

// A standing is what a waiter may do now: take the handle handed over to
// it, if any; else ask the database, if it may (it is the head, no handle
// of this process holds the name, and no hand-over to it is under way),
// with its line's wait token, and the unclaimed statement first if nobody
// waited for the lock lately.
type standing struct {
	handedOver               *Handle
	mayAttempt, nobodyWaited bool
	waitToken                int64
}

// standing returns w's standing, taking a hand-over to it, if any.
func (qs *lines) standing(w *waiter) standing {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if h := w.handedOver; h != nil {
		w.handedOver = nil
		return standing{handedOver: h}
	}
	return standing{mayAttempt: w.q.waiters[0] == w && !w.q.full(w.lock) && !w.offered, waitToken: w.q.pace.waitToken(), nobodyWaited: w.q.pace.unclaimedFirst()}
}

// unclaimedRefused records that w's line found the lock held or reserved
// and claimed nothing: its next attempt claims.
func (qs *lines) unclaimedRefused(w *waiter) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	w.q.pace.unrefusedWaits = 0
}

// full reports whether this process's handles hold all of the name that l
// could take, by its kind's limit.
func (q *line) full(l *Lock) bool {
	n, _ := l.kind.limit()
	return q.exclusive > 0 || n > 0 && q.held >= n
}

// after returns when the next attempt of w is due, by its line's pacer:
// after a refusal that returned doc and took trip, or after a transient
// error (nil doc).
func (qs *lines) after(w *waiter, doc *reply, trip time.Duration) <-chan time.Time {
	p, lc := w.lock.p, w.lock.collection()
	notified := lc.notify.isOpen()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if doc == nil {
		return time.After(w.q.pace.failed(p.opts))
	}
	return time.After(w.q.pace.refused(p.opts, lc.process, *doc, time.Now(), trip, notified))
}

// hold records that a, an acquisition of this process, acquired its
// lock's name at now, exclusively if its kind's limit says so.
func (qs *lines) hold(a *acquisition, now time.Time) {
	l := a.lock
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.get(l.name)
	q.held++
	_, a.exclusive = l.kind.limit()
	if a.exclusive {
		q.exclusive++
	}
	a.heldLocally = true
	q.pace.acquired(now, l.p.opts.sleepMax)
}

// unhold records that a no longer holds its lock's name, and wakes the
// head to attempt at once.
func (qs *lines) unhold(a *acquisition) {
	l := a.lock
	qs.mu.Lock()
	q := qs.get(l.name)
	q.held--
	if a.exclusive {
		q.exclusive--
	}
	a.heldLocally = false
	q.pace.released(time.Now())
	qs.drop(l.name, q)
	qs.mu.Unlock()
	qs.wakeHead(l.name)
}

// setExclusive records that a, while it holds, holds its lock's name
// exclusively or not (an RWLock's handle that upgraded or downgraded).
// Shared again, it wakes the head to attempt at once.
func (qs *lines) setExclusive(a *acquisition, exclusive bool) {
	qs.mu.Lock()
	if a.heldLocally && a.exclusive != exclusive {
		a.exclusive = exclusive
		if exclusive {
			qs.byName[a.lock.name].exclusive++
		} else {
			qs.byName[a.lock.name].exclusive--
		}
	}
	qs.mu.Unlock()
	if !exclusive {
		qs.wakeHead(a.lock.name)
	}
}

// wakeHead wakes the head of name's line to attempt at once: the lock was
// released somewhere.
func (qs *lines) wakeHead(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[name]; q != nil {
		if len(q.waiters) > 0 {
			q.waiters[0].signal()
		}
		for _, w := range q.upgrades {
			w.signal()
		}
	}
}

// offer returns the head of name's line, marked as being handed the lock,
// or nil if nobody waits or the head has a hand-over under way or not yet
// taken.
func (qs *lines) offer(name string) *waiter {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.byName[name]
	if q == nil || len(q.waiters) == 0 || q.waiters[0].offered || q.waiters[0].handedOver != nil {
		return nil
	}
	q.waiters[0].offered = true
	return q.waiters[0]
}

// deliver ends the hand-over to w: h is the handle handed over, or nil if
// the lock was not handed over. It wakes w, and reports whether w still
// waits; if not, h is not delivered.
func (qs *lines) deliver(w *waiter, h *Handle) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	w.offered = false
	if w.q == nil {
		return false
	}
	if h != nil {
		w.handedOver = h
	}
	w.signal()
	return true
}
