package mongolock

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Work spread over a fleet of workers.
//
// A fleet's shard is the election "<name>/<i>", whose value is the id of
// the worker that holds it; a worker's membership is the election
// "<name>/workers/<id>", whose value is how many shards it holds. Both are
// leases as every lock's: extended in the provider's batch, lost before
// anyone else gets them, ended at a crashed worker's lease end. From a
// listing every worker computes the same targets, and each takes free
// shards up to its own and gives up those above it. A steady pass lists
// the memberships alone, whatever the number of shards.

// A Fleet spreads n shards over the workers that Run it, in this process
// and in others, evenly and sticking to where they run. It is safe for
// concurrent use.
type Fleet struct {
	p     *Provider
	name  string
	n     int
	drain time.Duration // 0: the provider's expiry
	err   error         // a bad argument, returned by Run
}

// Fleet returns the fleet called name of n shards, numbered 0 to n-1.
// Every worker of one fleet must give the same n; n < 1 makes Run fail.
func (p *Provider) Fleet(name string, n int) *Fleet {
	f := &Fleet{p: p, name: name, n: n}
	if n < 1 {
		f.err = invalidf("a fleet of %d shards: need at least 1", n)
	}
	return f
}

// Name returns the fleet's name, exactly as given.
func (f *Fleet) Name() string { return f.name }

// DrainTimeout returns the fleet with d as its drain timeout: how long a
// shard that must move waits for its function to return before it is
// released anyway. Default: the provider's expiry. d <= 0 makes Run fail.
//
// Past it, the shard may be worked on twice at once: fence its writes.
func (f *Fleet) DrainTimeout(d time.Duration) *Fleet {
	g := *f
	if g.err == nil && d <= 0 {
		g.err = invalidf("DrainTimeout(%v): must be positive", d)
	}
	g.drain = d
	return &g
}

// A Shard is one of a fleet's shards, as the worker that runs it holds it.
type Shard struct {
	// Index is the shard's number, 0 to n-1.
	Index int
	// Handle is the shard's acquisition: its fencing token, its Context
	// and Lost, for fenced writes. Run releases it: do not.
	Handle *Handle
}

// Run joins the fleet as a worker and runs fn for each shard the worker
// holds, each in a goroutine of its own, until ctx ends. It returns once
// every fn returned, or its drain timeout passed, and all is released.
//
// Once the fleet is stable, each live worker holds n/W shards, or one more
// (W workers). A worker that joins takes only what the balance needs; one
// whose ctx ends, or whose provider closes, gives its shards up at once; a
// crashed one loses them at its leases' end. A shard that must move has
// its fn's ctx ended and is released only after fn returned, so that no
// shard is worked on twice at once (up to the drain timeout).
//
// fn's ctx ends when the shard must move, when Run's ctx ends, or when the
// shard is lost (its cause is then ErrLockLost), before anyone else can
// hold it. When fn returns, its shard is released: one that returns nil
// early gives it back to the fleet, perhaps to this worker again; an error
// ends Run, which returns it after giving every shard up.
//
// Run returns an error satisfying errors.Is(err, ctx.Err()) when ctx ends,
// ErrClosed after the provider's Close, fn's error, or an error that
// taking part cannot fix (a nil ctx or fn, a bad n or drain timeout),
// at once. Failed round trips are retried.
func (f *Fleet) Run(ctx context.Context, fn func(ctx context.Context, s Shard) error) error {
	const op = "run"
	switch {
	case ctx == nil:
		return f.errorf(op, errNilContext)
	case fn == nil:
		return f.errorf(op, errNilFunction)
	case f.err != nil:
		return f.errorf(op, f.err)
	case checkName(f.name) != nil:
		return f.errorf(op, errNameNotUTF8)
	}
	if !f.p.enter() {
		return f.errorf(op, ErrClosed)
	}
	defer f.p.calls.Done()
	w := &worker{f: f, fn: fn, runCtx: ctx, id: newLockID()[:16], shards: map[int]*runningShard{},
		ended: make(chan *runningShard), gone: make(chan struct{})}
	w.membership = &Lock{p: f.p, name: f.name + "/workers/" + w.id, kind: electionDriver{value: "0"}}
	defer w.leave()
	switch err := w.run(ctx); {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return f.errorf(op, ctx.Err())
	}
	return f.errorf(op, ErrClosed)
}

func (f *Fleet) errorf(op string, err error) error { return f.p.Lock(f.name).errorf(op, err) }

// drainTimeout is f's drain timeout.
func (f *Fleet) drainTimeout() time.Duration { return cmp.Or(f.drain, f.p.opts.expiry) }

// shard returns the lock of f's shard i, as worker id takes it.
func (f *Fleet) shard(i int, id string) *Lock {
	return &Lock{p: f.p, name: f.name + "/" + strconv.Itoa(i), kind: electionDriver{value: id}}
}

// A worker is one Run of a fleet: its membership and the shards it runs.
type worker struct {
	f          *Fleet
	fn         func(ctx context.Context, s Shard) error
	runCtx     context.Context // Run's: fn's ctx keeps its values
	id         string
	membership *Lock
	member     *Handle // nil while not a member
	shards     map[int]*runningShard
	ended      chan *runningShard // each shard's, once fn returned and it was released
	gone       chan struct{}      // closed when Run no longer reads ended
	slept      time.Duration      // the last sleep between passes while unbalanced

	target     int // of the last pass
	proclaimed int // the count its membership's value says
}

// maxTakes bounds the shards a pass takes, so that a worker that finds
// many free reads the fleet again soon: others may have joined meanwhile.
const maxTakes = 64

// A runningShard is a shard a worker holds: its fn runs, or has been told
// to stop (moving) and must return by deadline.
type runningShard struct {
	index    int
	h        *Handle
	stop     context.CancelFunc
	moving   bool
	deadline time.Time
	err      error                    // fn's, read once ended delivers s
	told     atomic.Pointer[stopCall] // why and when it was told to stop
}

// A stopCall is why a shard's fn was told to stop, "moved" or "left"
// (ShardInfo.Reason), and when.
type stopCall struct {
	reason string
	at     time.Time
}

// run makes a pass over the fleet at once, then whenever one is due, until
// ctx ends, the provider closes, or a fn fails.
func (w *worker) run(ctx context.Context) error {
	next := time.NewTimer(0)
	defer next.Stop()
	wctx, stopWatching := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer watching.Wait()
	defer stopWatching()
	released := make(chan struct{}, 1)
	watching.Go(func() { w.watch(wctx, released) })
	for {
		var lost <-chan struct{}
		if w.member != nil {
			lost = w.member.Lost()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.f.p.done:
			return nil
		case s := <-w.ended:
			w.forget(s)
			if s.err != nil {
				return s.err
			}
			continue
		case <-lost:
			w.member = nil
		case <-released:
		case <-next.C:
		}
		next.Reset(w.pass(ctx))
	}
}

// watch signals released on each release of the fleet's documents, while
// a change stream runs, so that a taker passes at once; where the server
// has none, the passes find releases.
func (w *worker) watch(ctx context.Context, released chan<- struct{}) {
	prefix := w.f.name + "/"
	keepWatching(ctx, w.f.p.locks.store, releaseEvents, nil, func(name string) {
		if strings.HasPrefix(name, prefix) {
			signalTo(released)
		}
	}, nil)
}

// pass reads the fleet, takes or gives up shards toward this worker's
// target, and returns when the next pass is due: after a cadence once
// balanced, sooner while not.
func (w *worker) pass(ctx context.Context) time.Duration {
	w.releaseOverdue()
	if w.member == nil {
		if h, err := w.membership.TryAcquire(ctx); err == nil {
			w.member, w.proclaimed = h, 0
		}
	}
	defer w.proclaim(ctx)
	if w.steady(ctx) {
		return w.soon(true)
	}
	v, err := w.f.read(ctx, false)
	if err != nil {
		return w.soon(false)
	}
	if _, ok := v.members[w.id]; !ok {
		v.members[w.id] = len(w.shards) // it counts itself while it rejoins
	}
	targets := fleetTargets(w.f.n, v.members)
	w.target = targets[w.id]
	held := len(w.shards)
	switch active := w.active(); {
	case active > w.target:
		w.move(active - w.target)
	case active < w.target:
		w.take(ctx, v, targets, min(w.target-active, maxTakes))
	}
	// A shard left free is another's to take; but the targets of workers
	// that read before the others took theirs may not count it yet, so
	// each reads again soon until none is free.
	settled := len(v.free) == len(w.shards)-held
	balanced := w.active() == w.target && w.moving() == 0 && settled
	return min(w.soon(balanced), w.untilDeadline())
}

// steady reports whether the worker holds its target and every shard is
// held by a live worker, as a listing of the memberships alone shows (each
// says how many shards its worker holds): then nothing needs to move.
func (w *worker) steady(ctx context.Context) bool {
	if w.member == nil || w.moving() > 0 || w.active() != w.target {
		return false
	}
	v, err := w.f.read(ctx, true)
	if err != nil {
		return false
	}
	held := 0
	for _, n := range v.members {
		held += n
	}
	return held == w.f.n && fleetTargets(w.f.n, v.members)[w.id] == w.target
}

// proclaim sets the worker's membership's value to how many shards it
// holds, if that changed.
func (w *worker) proclaim(ctx context.Context) {
	if w.member != nil && len(w.shards) != w.proclaimed {
		if (&Leadership{w.member}).Proclaim(ctx, strconv.Itoa(len(w.shards))) == nil {
			w.proclaimed = len(w.shards)
		}
	}
}

// soon returns the wait before the next pass: the cadence when balanced,
// otherwise the busy-wait sleep, doubling while the fleet stays unbalanced.
func (w *worker) soon(balanced bool) time.Duration {
	o := w.f.p.opts
	if balanced {
		w.slept = 0
		return o.cadence
	}
	w.slept = min(max(2*w.slept, o.sleepMin), o.sleepMax, o.cadence)
	return w.slept
}

// untilDeadline is the time left to the earliest drain deadline.
func (w *worker) untilDeadline() time.Duration {
	left := time.Duration(1<<63 - 1)
	for _, s := range w.shards {
		if s.moving {
			left = min(left, time.Until(s.deadline))
		}
	}
	return max(left, 0)
}

// active is how many shards the worker runs that are not moving.
func (w *worker) active() int { return len(w.shards) - w.moving() }

func (w *worker) moving() int {
	n := 0
	for _, s := range w.shards {
		if s.moving {
			n++
		}
	}
	return n
}

// take tries to take want of the free shards of v. The takers split the
// free shards in the order of their ids, so that they seldom try the same.
func (w *worker) take(ctx context.Context, v fleetView, targets map[string]int, want int) {
	if len(v.free) == 0 {
		return
	}
	offset := 0
	for id, n := range v.members {
		if id < w.id {
			offset += max(targets[id]-n, 0)
		}
	}
	offset %= len(v.free)
	for _, i := range append(v.free[offset:], v.free[:offset]...) {
		if want == 0 || ctx.Err() != nil {
			return
		}
		h, err := w.f.shard(i, w.id).TryAcquire(ctx)
		switch {
		case err == nil:
			w.start(i, h)
			want--
		case !errors.Is(err, ErrNotAcquired):
			return // the next pass tries again
		}
	}
}

// start runs fn for shard i, held by h, in a goroutine that releases h
// once fn returned.
func (w *worker) start(i int, h *Handle) {
	fctx, cancel := context.WithCancelCause(context.WithoutCancel(w.runCtx))
	stopAfter := context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })
	s := &runningShard{index: i, h: h, stop: func() { cancel(nil) }}
	w.shards[i] = s
	tr := w.f.p.tel.trace
	if tr.ShardStarted != nil {
		tr.ShardStarted(w.shardInfo(s))
	}
	go func() {
		defer func() {
			stopAfter()
			cancel(nil)
			w.release(h)
			if tr.ShardStopped != nil {
				tr.ShardStopped(w.stopped(s))
			}
			select {
			case w.ended <- s:
			case <-w.gone: // a shard released at its drain timeout, after Run
			}
		}()
		s.err = w.fn(fctx, Shard{Index: i, Handle: h})
	}()
}

// move stops k of the worker's active shards, the highest numbered: they
// are released once their fn returned.
func (w *worker) move(k int) {
	idx := make([]int, 0, len(w.shards))
	for i, s := range w.shards {
		if !s.moving {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx[len(idx)-k:] {
		w.stop(w.shards[i], "moved")
	}
}

// stop tells s's fn to stop, for reason; it must return by the drain
// timeout.
func (w *worker) stop(s *runningShard, reason string) {
	if !s.moving {
		s.moving, s.deadline = true, time.Now().Add(w.f.drainTimeout())
		s.told.Store(&stopCall{reason, time.Now()})
		s.stop()
	}
}

// shardInfo is s as the Trace hooks see it.
func (w *worker) shardInfo(s *runningShard) ShardInfo {
	l := w.f.p.locks
	return ShardInfo{Fleet: shortName(w.f.name), Index: s.index, Database: l.db, Collection: l.name, FencingToken: s.h.FencingToken()}
}

// stopped is s, whose fn returned and which was released, as ShardStopped
// sees it.
func (w *worker) stopped(s *runningShard) ShardInfo {
	info := w.shardInfo(s)
	told := s.told.Load()
	switch {
	case errors.Is(context.Cause(s.h.Context()), ErrLockLost):
		info.Reason = "lost"
	case s.err != nil:
		info.Reason = "failed"
	case told != nil:
		info.Reason, info.Drained = told.reason, time.Since(told.at)
	default:
		info.Reason = "returned"
	}
	return info
}

// forget drops s, whose fn returned and which was released; a shard
// released at its drain timeout was forgotten already.
func (w *worker) forget(s *runningShard) {
	if w.shards[s.index] == s {
		delete(w.shards, s.index)
	}
}

// releaseOverdue releases the moving shards whose fn outlived the drain
// timeout, and forgets them.
func (w *worker) releaseOverdue() {
	now := time.Now()
	for i, s := range w.shards {
		if s.moving && !now.Before(s.deadline) {
			w.release(s.h)
			delete(w.shards, i)
		}
	}
}

// release releases h, even when Run's ctx is over; its error is a loss,
// or a release that goes on in the background.
func (w *worker) release(h *Handle) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.runCtx), cleanupTimeout)
	defer cancel()
	_ = h.Release(ctx)
}

// leave gives the worker's membership up first, so that the others count
// it out at once, then its shards, each once its fn returned.
func (w *worker) leave() {
	defer close(w.gone)
	if w.member != nil {
		w.release(w.member)
	}
	for _, s := range w.shards {
		w.stop(s, "left")
	}
	for len(w.shards) > 0 {
		t := time.NewTimer(w.untilDeadline())
		select {
		case s := <-w.ended:
			w.forget(s)
		case <-t.C:
			w.releaseOverdue()
		}
		t.Stop()
	}
}

// A fleetView is a fleet as one listing read it.
type fleetView struct {
	members map[string]int // each live worker's id, and how many shards it holds
	free    []int          // the shards nobody holds, in order
}

// read lists f's documents in one round trip (one per 1000 documents); if
// membersOnly, only the workers' memberships, whose counts their values say.
func (f *Fleet) read(ctx context.Context, membersOnly bool) (fleetView, error) {
	prefix := f.name + "/"
	list := prefix
	if membersOnly {
		list += "workers/"
	}
	v := fleetView{members: map[string]int{}}
	held := make([]bool, f.n)
	holders := map[string]int{}
	for info, err := range f.p.infos(ctx, &f.p.locks, "list", list, listPipeline(list)) {
		if err != nil {
			return fleetView{}, err
		}
		rest := info.Name[len(prefix):]
		if id, ok := strings.CutPrefix(rest, "workers/"); ok {
			if info.Held {
				v.members[id], _ = strconv.Atoi(info.Value)
			}
			continue
		}
		i, err := strconv.Atoi(rest)
		if err != nil || i < 0 || i >= f.n || strconv.Itoa(i) != rest || !info.Held {
			continue
		}
		held[i] = true
		holders[info.Value]++
	}
	if membersOnly {
		return v, nil
	}
	for id := range v.members {
		v.members[id] = holders[id]
	}
	for i, h := range held {
		if !h {
			v.free = append(v.free, i)
		}
	}
	return v, nil
}

// fleetTargets returns how many of n shards each member should hold, given
// how many each holds: n/W each, and one more for the n%W that hold the
// most (ties to the smaller id), so that as few shards as can be move. A
// hold above ceil(n/W) counts as ceil(n/W): it is coming down, and while
// workers give shards up at different moments, who keeps one more must
// not change, or one would take back what another just gave up.
func fleetTargets(n int, holds map[string]int) map[string]int {
	ids := make([]string, 0, len(holds))
	for id := range holds {
		ids = append(ids, id)
	}
	most := (n + len(ids) - 1) / max(len(ids), 1)
	held := func(id string) int { return min(holds[id], most) }
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(held(b), held(a)), strings.Compare(a, b)) })
	targets := make(map[string]int, len(ids))
	for rank, id := range ids {
		targets[id] = n / len(ids)
		if rank < n%len(ids) {
			targets[id]++
		}
	}
	return targets
}
