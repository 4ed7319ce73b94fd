package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/mongolock/mongolock"
)

// Workloads I and J: a resource that more than one may hold at once, a
// semaphore of n slots (I) or a reader-writer lock (J), against what a user
// would do with the library's mutex instead. Processes x workers loop as in
// A–E: pick an operation, acquire, hold, release, work outside. Every
// implementation is mongolock, one Provider per process.
type sharedWorkload struct {
	id, title      string
	procs, workers int // workers per process
	hold           time.Duration
	// slots is how many may hold the resource exclusively at once: I's n,
	// J's one writer.
	slots int
	kinds []opKind
	impls []sharedImpl
}

// An opKind is one kind of a workload's operations and its share of them.
type opKind struct {
	name  string
	share float64
}

// A sharedImpl is one way to hold a workload's resource: open returns one
// process's acquisitions, one per kind of operation.
type sharedImpl struct {
	name string
	open func(p *mongolock.Provider, w sharedWorkload) []acquirer
}

// An acquirer is one kind of acquisition; shared ones (readers) hold with
// each other, the others count against the workload's slots.
type acquirer struct {
	acquire func(ctx context.Context) (held, error)
	shared  bool
}

// semSlots is workload I's n.
const semSlots = 4

var sharedWorkloads = []sharedWorkload{
	{
		id: "I", title: fmt.Sprintf("semaphore of n = %d: 4 processes x 8 workers, 10 ms hold", semSlots),
		procs: 4, workers: 8, hold: 10 * time.Millisecond, slots: semSlots,
		kinds: []opKind{{"acquire", 1}},
		impls: []sharedImpl{
			{name: "semaphore", open: func(p *mongolock.Provider, w sharedWorkload) []acquirer {
				s := p.Semaphore("sem", w.slots)
				return []acquirer{{acquire: func(ctx context.Context) (held, error) { return fromHandle(s.Acquire(ctx)) }}}
			}},
			// What one would do without a semaphore: n mutexes, each
			// acquisition on one of them at random.
			{name: "mutexes", open: func(p *mongolock.Provider, w sharedWorkload) []acquirer {
				ls := make([]*mongolock.Lock, w.slots)
				for i := range ls {
					ls[i] = p.Lock(fmt.Sprintf("mutex-%d", i))
				}
				return []acquirer{{acquire: func(ctx context.Context) (held, error) {
					return fromHandle(ls[rand.N(len(ls))].Acquire(ctx))
				}}}
			}},
		},
	},
	{
		id: "J", title: "read-mostly: 4 processes x 8 workers, 90% reads, 10% writes, 10 ms hold",
		procs: 4, workers: 8, hold: 10 * time.Millisecond, slots: 1,
		kinds: []opKind{{"read", 0.9}, {"write", 0.1}},
		impls: []sharedImpl{
			{name: "rwlock", open: func(p *mongolock.Provider, _ sharedWorkload) []acquirer {
				rw := p.RWLock("rw")
				return []acquirer{
					{acquire: func(ctx context.Context) (held, error) { return fromHandle(rw.Reader().Acquire(ctx)) }, shared: true},
					{acquire: func(ctx context.Context) (held, error) { return fromHandle(rw.Writer().Acquire(ctx)) }},
				}
			}},
			// Without a reader-writer lock: one mutex, reads serialised.
			{name: "mutex", open: func(p *mongolock.Provider, _ sharedWorkload) []acquirer {
				l := p.Lock("rw")
				a := acquirer{acquire: func(ctx context.Context) (held, error) { return fromHandle(l.Acquire(ctx)) }}
				return []acquirer{a, a}
			}},
		},
	},
}

// sharedResult is what one run of workload I or J measured for one
// implementation.
type sharedResult struct {
	Workload  string      `json:"workload"`
	Impl      string      `json:"impl"`
	Processes int         `json:"processes"`
	Workers   int         `json:"workersPerProcess"`
	HoldMS    float64     `json:"holdMs"`
	Slots     int         `json:"slots"`
	Seconds   float64     `json:"seconds"`
	Kinds     []kindTally `json:"kinds"` // in the workload's order
	commands
	OpsPerAcq float64 `json:"opsPerAcquisition"` // all kinds
	// Over all kinds: each process's acquisitions, the smallest process's
	// share, and the workers with none.
	PerProcess     []int   `json:"acquisitionsPerProcess"`
	MinShare       float64 `json:"minProcessShare"`
	StarvedWorkers int     `json:"starvedWorkers"`
	// MostHolders is the most holders seen at once; Violations counts the
	// acquisitions that broke the resource's rule (guard).
	MostHolders    int    `json:"mostHoldersAtOnce"`
	Violations     int    `json:"violations"`
	FirstViolation string `json:"firstViolation,omitempty"`
}

// kindTally is the tally of one kind of operation; Shared if the
// implementation holds it shared (a reader).
type kindTally struct {
	Kind   string `json:"kind"`
	Shared bool   `json:"shared,omitempty"`
	tally
}

// acquisitions is the run's acquisitions of every kind.
func (r *sharedResult) acquisitions() (n int, perSec float64) {
	for _, k := range r.Kinds {
		n, perSec = n+k.Acquisitions, perSec+k.AcqPerSec
	}
	return n, perSec
}

// ofBound is the exclusive acquisitions per second over the most any
// implementation could give: slots / hold.
func (r *sharedResult) ofBound() float64 {
	var excl float64
	for _, k := range r.Kinds {
		if !k.Shared {
			excl += k.AcqPerSec
		}
	}
	return excl / r.bound()
}

// bound is slots / hold, per second.
func (r *sharedResult) bound() float64 { return float64(r.Slots) * 1000 / r.HoldMS }

// A guard counts the holders of a run's resource, from each Acquire's
// return to its Release call, a part of the server's hold: a count over the
// rule is a real violation. The rule: at most slots exclusive holders, and
// none with a shared one.
type guard struct {
	mu                sync.Mutex
	slots             int
	shared, exclusive int
	most              int
	violations        int
	first             string
}

func (g *guard) enter(shared bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if shared {
		g.shared++
	} else {
		g.exclusive++
	}
	g.most = max(g.most, g.shared+g.exclusive)
	if g.exclusive > g.slots || g.exclusive > 0 && g.shared > 0 {
		g.violations++
		if g.first == "" {
			g.first = fmt.Sprintf("%d exclusive and %d shared holders at once (allowed: %d exclusive, or shared ones alone)",
				g.exclusive, g.shared, g.slots)
		}
	}
}

func (g *guard) leave(shared bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if shared {
		g.shared--
	} else {
		g.exclusive--
	}
}

// around is a's acquisition counted by g.
func (g *guard) around(a acquirer) func(ctx context.Context) (held, error) {
	return func(ctx context.Context) (held, error) {
		h, err := a.acquire(ctx)
		if err != nil {
			return h, err
		}
		g.enter(a.shared)
		release := h.release
		h.release = func(ctx context.Context) error {
			g.leave(a.shared)
			return release(ctx)
		}
		return h, nil
	}
}

// runShared runs w for im for d, in one window: processes start at once,
// each with its own client and Provider, on a collection of the run's own.
func runShared(ctx context.Context, e env, w sharedWorkload, im sharedImpl, d time.Duration) (sharedResult, error) {
	r := sharedResult{Workload: w.id, Impl: im.name, Processes: w.procs, Workers: w.workers, HoldMS: ms(w.hold),
		Slots: w.slots, Seconds: d.Seconds()}
	var ps []*process
	defer func() { closeProcesses(ps) }()
	g := &guard{slots: w.slots}
	acqs := make([][]func(ctx context.Context) (held, error), w.procs)
	var shared []bool // per kind
	for pi := range acqs {
		client, ops, err := connect(ctx, e)
		if err != nil {
			return r, err
		}
		ps = append(ps, &process{client: client, ops: ops})
		p, err := mongolock.NewProvider(client.Database(e.db), mongolock.WithCollection(collection(w.id, im.name)))
		if err != nil {
			return r, err
		}
		shared = shared[:0]
		for _, a := range im.open(p, w) {
			acqs[pi] = append(acqs[pi], g.around(a))
			shared = append(shared, a.shared)
		}
	}

	stats := make([][][]workerStats, len(w.kinds)) // per kind, process, worker
	for k := range stats {
		stats[k] = make([][]workerStats, w.procs)
		for pi := range stats[k] {
			stats[k][pi] = make([]workerStats, w.workers)
		}
	}
	end := time.Now().Add(d)
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for pi := range w.procs {
		for wi := range w.workers {
			next := func() attempt {
				k := pick(w.kinds)
				return attempt{acqs[pi][k], &stats[k][pi][wi]}
			}
			wg.Go(func() { work(rctx, end, next, w.hold) })
		}
	}
	wg.Wait()

	for k, kind := range w.kinds {
		r.Kinds = append(r.Kinds, kindTally{Kind: kind.name, Shared: shared[k], tally: tallyOf(stats[k], d)})
	}
	r.commands = countCommands(sumOps(ps), d)
	r.PerProcess = make([]int, w.procs)
	for pi := range w.procs {
		for wi := range w.workers {
			n := 0
			for k := range w.kinds {
				n += stats[k][pi][wi].acquired
			}
			r.PerProcess[pi] += n
			if n == 0 {
				r.StarvedWorkers++
			}
		}
	}
	if n, _ := r.acquisitions(); n > 0 {
		r.OpsPerAcq = float64(r.Ops) / float64(n)
		r.MinShare = float64(slices.Min(r.PerProcess)) / float64(n)
	}
	r.MostHolders, r.Violations, r.FirstViolation = g.most, g.violations, g.first
	return r, ctx.Err()
}

// pick draws a kind of operation by the kinds' shares.
func pick(kinds []opKind) int {
	x := rand.Float64()
	for i, k := range kinds {
		if x -= k.share; x < 0 {
			return i
		}
	}
	return len(kinds) - 1
}
