package simulate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/soakcheck"
)

// The defaults are make test's small form; make simulate sets -simulate.n.
var (
	flagN        = flag.Int("simulate.n", defaultN, "stop once this many critical sections have been entered, in all worlds together")
	flagSeed     = flag.Uint64("simulate.seed", 0, "the seed of every random choice (0: one from the clock, printed); world i has seed+i")
	flagWorlds   = flag.Int("simulate.worlds", runtime.GOMAXPROCS(0), "independent simulations run side by side, one per core, each with its own store, processes and clock")
	flagD        = flag.Duration("simulate.d", 0, "the simulated time a world may take to enter its share of -simulate.n (0: 10m, plus 400ms for each critical section of its share)")
	flagP        = flag.Int("simulate.p", 4, "processes")
	flagG        = flag.Int("simulate.g", 4, "goroutines per process, besides its long holder")
	flagExpiries = flag.String("simulate.expiries", "1s/50ms,20s,3s", "lease expiries[/extension cadence], comma-separated: process i has the (i mod count)-th")
	flagEvents   = flag.String("simulate.events", "8.0,4.4", "the forms of the store's change events, by the MongoDB version that reports them so (8.0, 4.4), comma-separated: world i has the (i mod count)-th")
	flagHistory  = flag.String("simulate.history", "1024,4", "how many change events the store keeps, comma-separated: world i has the (i mod count)-th")
)

type (
	kind = soakcheck.Kind
)

const (
	mutex     = soakcheck.Mutex
	semaphore = soakcheck.Semaphore
	rwlock    = soakcheck.RWLock
	election  = soakcheck.Election
	numKinds  = soakcheck.NumKinds
)

// config is a simulation's shape; the seed fixes every choice made
// within it.
type config struct {
	seed                 uint64
	worlds               int           // side by side; world i has seed+i and n/worlds
	n                    int           // critical sections to enter
	d                    time.Duration // simulated time at most, in a world (0: limit's default)
	procs, goroutines    int
	names                [numKinds]int
	slots                int // a semaphore's
	expiries             []lease
	events               []memdb.Events // world i's store has the (i mod count)-th
	history              []int          // the change events a store keeps: world i's the (i mod count)-th
	hold, longHold       time.Duration
	faultEvery           time.Duration // a network fault on a process's client (0: none)
	dropEvery, killEvery time.Duration // a client closed under a holder; a process dying (0: none)
	sabotage             bool          // work after release: the checks must see it
	stuck                bool          // every client partitioned from the store: nothing is entered
	members              []int         // world i's database: one server (1) or a replica set, the (i mod count)-th
	failoverEvery        time.Duration // a replica set's failover (0: none)
	skew, ahead          time.Duration // a member's clock ahead of the first's: up to skew, plus ahead times its index
	w1                   bool          // the library writes at w: 1: the checks must see it
	cutPrimaries         bool          // every failover cuts the primary off
	untilViolation       bool          // stop at the first violation
}

// A lease is a process's expiry and extension cadence (0: the library's
// default, a third of the expiry).
type lease struct{ expiry, cadence time.Duration }

func (l lease) String() string {
	if l.cadence == 0 {
		return l.expiry.String()
	}
	return l.expiry.String() + "/" + l.cadence.String()
}

// parseList parses the comma-separated values of the flag -simulate.name,
// s, each with parse.
func parseList[T any](name, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for part := range strings.SplitSeq(s, ",") {
		v, err := parse(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("-simulate.%s %q: %w", name, s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseLease parses an expiry[/extension cadence].
func parseLease(s string) (l lease, err error) {
	exp, cad, _ := strings.Cut(s, "/")
	if l.expiry, err = time.ParseDuration(exp); err == nil && cad != "" {
		l.cadence, err = time.ParseDuration(cad)
	}
	return l, err
}

// parseEvents parses a form of change events.
func parseEvents(s string) (memdb.Events, error) {
	for _, e := range []memdb.Events{memdb.Events8, memdb.Events44} {
		if e.String() == s {
			return e, nil
		}
	}
	return 0, fmt.Errorf("%q is neither 8.0 nor 4.4", s)
}

// parseHistory parses a history's size.
func parseHistory(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n < 1 {
		err = fmt.Errorf("%d: a history keeps one event at least", n)
	}
	return n, err
}

func defaultConfig(t *testing.T) config {
	expiries, err := parseList("expiries", *flagExpiries, parseLease)
	if err != nil {
		t.Fatal(err)
	}
	events, err := parseList("events", *flagEvents, parseEvents)
	if err != nil {
		t.Fatal(err)
	}
	history, err := parseList("history", *flagHistory, parseHistory)
	if err != nil {
		t.Fatal(err)
	}
	members, err := parseList("members", *flagMembers, parseMembers)
	if err != nil {
		t.Fatal(err)
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return config{
		seed: seed, worlds: max(1, *flagWorlds), n: *flagN, d: *flagD, procs: *flagP, goroutines: *flagG,
		names: [numKinds]int{mutex: 4, semaphore: 1, rwlock: 2, election: 2}, slots: 3,
		expiries: expiries, events: events, history: history, hold: 5 * time.Millisecond, longHold: 3 * time.Second,
		faultEvery: 50 * time.Millisecond, dropEvery: time.Second, killEvery: 4 * time.Second,
		members: members, failoverEvery: *flagFailover, skew: *flagSkew,
	}
}

// replay is the command that runs cfg again.
func (c config) replay() string {
	d := ""
	if c.d > 0 {
		d = " -simulate.d=" + c.d.String()
	}
	return fmt.Sprintf("go test -run 'TestSimulate$' ./internal/simulate -v -simulate.seed=%d -simulate.worlds=%d -simulate.n=%d%s -simulate.p=%d -simulate.g=%d -simulate.expiries=%s -simulate.events=%s -simulate.history=%s -simulate.members=%s -simulate.failover=%v -simulate.skew=%v",
		c.seed, c.worlds, c.n, d, c.procs, c.goroutines, join(c.expiries, ","), join(c.events, ","), join(c.history, ","), join(c.members, ","), c.failoverEvery, c.skew)
}

// join joins the values of xs, as fmt.Sprint says them, with sep.
func join[T any](xs []T, sep string) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprint(x))
	}
	return strings.Join(out, sep)
}

// nth is the value of a per-world list that world i has, as a list of
// one.
func nth[T any](xs []T, i int) []T { return xs[i%len(xs) : i%len(xs)+1] }

// world returns the config of world i of c: a simulation of its own.
func (c config) world(i int) config {
	w := c
	w.seed, w.worlds, w.n = c.seed+uint64(i), 1, c.share()
	w.events, w.history, w.members = nth(c.events, i), nth(c.history, i), nth(c.members, i)
	return w
}

// share is the critical sections each world of c enters.
func (c config) share() int { return (c.n + c.worlds - 1) / c.worlds }

// A world enters about ten critical sections a second of simulated time;
// its time is limited to four times that, so that a world that slows
// down fails, and a long run is not cut short.
const (
	perSection = 400 * time.Millisecond
	startup    = 10 * time.Minute // besides, for a small run
)

// limit is the simulated time a world of c may take to enter its share:
// -simulate.d, or else in proportion to the share.
func (c config) limit() time.Duration {
	if c.d > 0 {
		return c.d
	}
	return startup + time.Duration(c.share())*perSection
}

// stallAfter is how long a world may go without entering a critical
// section: it has stopped making progress, and ends at once rather than
// at its limit, which for a long run is days of simulated time. An
// acquisition gives up after giveUp; a holder of a dead process blocks
// its name for its expiry, but not the other names.
func (c config) stallAfter() time.Duration { return max(startup, 2*c.giveUp()) }

// TestSimulate runs the soak's checks over the in-memory store in
// simulated time (see the package's documentation). It prints the seed
// first and the soak's summary lines at the end; a violation fails it
// with the command that replays the seed, and so does a world that falls
// short or a heap that grows with the run's length (from a quarter of its
// critical sections to nine tenths).
func TestSimulate(t *testing.T) {
	cfg := defaultConfig(t)
	fmt.Printf("simulate: seed %d (%d worlds side by side, seeds %d to %d): %s\n", cfg.seed, cfg.worlds, cfg.seed, cfg.seed+uint64(cfg.worlds)-1, cfg.replay())
	// The simulation allocates much and keeps little: collect less often.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	start := time.Now()
	results := make([]*result, cfg.worlds)
	boards := make([]*soakcheck.Board, cfg.worlds)
	for i := range boards {
		boards[i] = soakcheck.NewBoard(cfg.slots)
	}
	defer progress(boards, 30*time.Second)()
	done := make(chan struct{})
	early, late := liveHeapAt(boards, int64(cfg.n)/4, done), liveHeapAt(boards, int64(cfg.n)*9/10, done)
	t.Run("worlds", func(t *testing.T) {
		for i := range cfg.worlds {
			w := cfg.world(i)
			t.Run(fmt.Sprint(w.seed), func(t *testing.T) {
				t.Parallel()
				r := run(t, w, boards[i])
				results[i] = r
				if r.violations() > 0 {
					t.Errorf("violations in world %d; replay it alone: %s\nthe first said:\n  %s", w.seed, w.replay(), strings.Join(r.reports, "\n  "))
				}
				if short := r.shortfall(); short != "" {
					t.Errorf("%s; replay: %s", short, w.replay())
				}
			})
		}
	})
	total := &result{cfg: cfg}
	for _, r := range results {
		if r != nil {
			total.add(r)
		}
	}
	total.wall = time.Since(start)
	fmt.Println(total)
	close(done)
	if a, b := <-early, <-late; b.entries > 0 {
		t.Logf("live heap %d kB after %d critical sections, %d kB after %d", a.heap>>10, a.entries, b.heap>>10, b.entries)
		// A store that kept every change event for a change stream
		// nobody read (one opened by an operation whose reply was lost)
		// grew with every section, and a long run slowed down as the
		// collector scanned it all.
		if most := a.heap + uint64(cfg.worlds)<<20 + uint64(b.entries-a.entries)<<10; b.heap > most {
			t.Errorf("the live heap grew from %d kB after %d critical sections to %d kB after %d; want at most %d kB: a megabyte a world (what is in flight, the stores' histories filling up) and a kilobyte a section",
				a.heap>>10, a.entries, b.heap>>10, b.entries, most>>10)
		}
	}
	if t.Failed() {
		t.Errorf("seed %d; replay: %s", cfg.seed, cfg.replay())
	}
}

// progress prints, every interval of wall time until the returned
// function is called, the critical sections entered so far in the worlds
// of boards together, how many a second over the last interval, and the
// live heap: a long run shows whether it slows down as it goes on, and
// why.
func progress(boards []*soakcheck.Board, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		start, last, lastAt := time.Now(), int64(0), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				n := entries(boards)
				fmt.Printf("simulate: %d critical sections after %v: %.0f a second over the last %v; live heap %d MB\n",
					n, now.Sub(start).Round(time.Second), float64(n-last)/now.Sub(lastAt).Seconds(), now.Sub(lastAt).Round(time.Second), liveHeap()>>20)
				last, lastAt = n, now
			}
		}
	}()
	return func() { close(done); <-ended }
}

// result is what a simulation measured.
type result struct {
	cfg                                 config
	per                                 [numKinds]soakcheck.Counts
	entries, writes                     int64
	kills, drops                        int64
	delays, lostReplies, refusals, cuts int64
	fenced, losses, errs                int64
	takeOvers                           int64 // acquisitions taken over by ticket
	weighted                            int64 // semaphore sections of several units
	ops                                 int64 // operations the store applied
	failovers, rollbacks                int64 // a replica set's elections, and its members' rollbacks
	reports                             []string
	simulated, wall                     time.Duration
	stalled                             bool          // it entered no critical section for stallAfter
	lastEntry                           time.Duration // the simulated time of its last entry, if it stalled
}

// add adds o, a world's result, to r.
func (r *result) add(o *result) {
	for kd := range numKinds {
		a, b := &r.per[kd], &o.per[kd]
		a.Trials += b.Trials
		a.WriteTrials += b.WriteTrials
		a.Upgrades += b.Upgrades
		a.Peak = max(a.Peak, b.Peak)
		a.Killed += b.Killed
		a.Dropped += b.Dropped
		a.MaxWait, a.MaxWaitW, a.MaxUnfin = max(a.MaxWait, b.MaxWait), max(a.MaxWaitW, b.MaxWaitW), max(a.MaxUnfin, b.MaxUnfin)
		a.GaveUp += b.GaveUp
		a.Overlap += b.Overlap
		a.OutOfOrder += b.OutOfOrder
		a.Displaced += b.Displaced
		a.Unsignalled += b.Unsignalled
		a.Vanished += b.Vanished
		a.LeftInside += b.LeftInside
	}
	r.entries += o.entries
	r.writes += o.writes
	r.kills += o.kills
	r.drops += o.drops
	r.delays += o.delays
	r.lostReplies += o.lostReplies
	r.refusals += o.refusals
	r.cuts += o.cuts
	r.fenced += o.fenced
	r.losses += o.losses
	r.errs += o.errs
	r.takeOvers += o.takeOvers
	r.weighted += o.weighted
	r.ops += o.ops
	r.failovers += o.failovers
	r.rollbacks += o.rollbacks
	r.simulated += o.simulated
	r.reports = append(r.reports, o.reports...)
}

// shortfall says why a world entered fewer critical sections than its
// share: it stalled, or ran out of simulated time ("" if it did not).
func (r *result) shortfall() string {
	switch {
	case r.entries >= int64(r.cfg.n):
	case r.stalled:
		return fmt.Sprintf("%d critical sections entered, want %d: none for %v from %v of simulated time on", r.entries, r.cfg.n, r.cfg.stallAfter(), r.lastEntry.Round(time.Millisecond))
	default:
		return fmt.Sprintf("%d critical sections entered in %v of simulated time, want %d", r.entries, r.cfg.limit(), r.cfg.n)
	}
	return ""
}

func (r *result) violations() (n int64) {
	for _, c := range r.per {
		n += c.Violations()
	}
	return n
}

func (r *result) String() string {
	faults := fmt.Sprintf("faults injected %d (%d process deaths, %d clients closed under a held handle, %d delays, %d lost replies, %d refusals, %d partitions)",
		r.kills+r.drops+r.delays+r.lostReplies+r.refusals+r.cuts, r.kills, r.drops, r.delays, r.lostReplies, r.refusals, r.cuts)
	var b strings.Builder
	if r.failovers+r.rollbacks > 0 {
		faults += fmt.Sprintf("; in the replica sets, %d failovers and %d rollbacks", r.failovers, r.rollbacks)
	}
	b.WriteString(soakcheck.Summary(&r.per, r.cfg.slots, r.cfg.giveUp(), faults))
	fmt.Fprintf(&b, "\n  also: %d writes accepted, %d refused after a loss, %d losses reported, %d take-overs by ticket, %d semaphore sections of %d units, %d errors, %d operations applied by the store; %v simulated in %v of wall time (seed %d, %d worlds, change events of MongoDB %s, histories of %s events)",
		r.writes, r.fenced, r.losses, r.takeOvers, r.weighted, weightedUnits, r.errs, r.ops, r.simulated.Round(time.Millisecond), r.wall.Round(time.Millisecond), r.cfg.seed, r.cfg.worlds,
		join(r.cfg.events[:min(len(r.cfg.events), r.cfg.worlds)], " and "), join(r.cfg.history[:min(len(r.cfg.history), r.cfg.worlds)], " and "))
	return b.String()
}

// giveUp is how long an acquisition waits before it gives up: long enough
// to wait out the lease of a dead holder of the longest expiry.
func (c config) giveUp() time.Duration {
	longest := time.Duration(0)
	for _, l := range c.expiries {
		longest = max(longest, l.expiry)
	}
	return 20*time.Second + longest
}

// sim is one simulation: processes over one store, in a synctest bubble.
type sim struct {
	cfg   config
	db    database
	board *soakcheck.Board
	ctx   context.Context // ends when the run does
	wg    sync.WaitGroup  // every goroutine the simulation starts

	mu    sync.Mutex
	procs []*proc // the live ones
	seq   int

	cutting                                           atomic.Bool // a replica set's member is cut off
	kills, drops, delays, lostReplies, refusals, cuts atomic.Int64
	fenced, losses, errs, takeOvers, weighted         atomic.Int64
	errLogged                                         atomic.Int64
	stalled                                           bool          // set by chaos, read once it ended
	lastEntry                                         time.Duration // since the start, as chaos last saw the entries grow
}

// A proc is a process: a provider over a client of its own to the store,
// and its goroutines. It dies at once: its client is cut off for ever,
// its goroutines stop and it writes nothing more, and its provider is
// closed without releasing anything.
type proc struct {
	id      string
	nth     int
	lease   lease
	seed    uint64
	ctx     context.Context
	cancel  context.CancelFunc
	gen     atomic.Pointer[generation]
	dead    atomic.Bool
	dropDue atomic.Bool // the next holder of one of its goroutines closes its client under it
	workers sync.WaitGroup
}

// A generation is the client a process's locks use, until it is closed.
type generation struct {
	client memdb.Conn
	faults *memdb.Faults // its network's
	locks  *mongolock.Provider
	ctx    context.Context // ends when the client is closed
	cancel context.CancelFunc
	users  sync.WaitGroup // the goroutines using its locks: acquiring, or holding a handle
	mu     sync.Mutex     // orders the faults' changes with the cut
	cut    bool           // closed: partitioned for ever
}

// cutOff partitions g's client for ever and ends its calls in progress.
func (g *generation) cutOff() {
	g.mu.Lock()
	g.cut = true
	g.faults.Partition()
	g.mu.Unlock()
	g.cancel()
}

// fault changes g's client's faults, unless it was closed.
func (g *generation) fault(f func(*memdb.Faults)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.cut {
		f(g.faults)
	}
	return !g.cut
}

// run runs the simulation cfg, whose fenced resources are board's.
func run(t *testing.T, cfg config, board *soakcheck.Board) *result {
	r := &result{cfg: cfg}
	wallStart := time.Now()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, stop := context.WithTimeout(context.Background(), cfg.limit())
		defer stop()
		s := &sim{cfg: cfg, db: newDatabase(cfg), board: board, ctx: ctx}
		s.board.Explain = s.explain
		for nth := range cfg.procs {
			if err := s.spawn(nth); err != nil {
				t.Fatal(err)
			}
		}
		s.wg.Go(func() { s.chaos(stop) })
		<-ctx.Done()
		s.wg.Wait() // the workers, the chaos, the faults' ends and the closing providers
		// The live processes end: their providers release what they hold.
		for _, p := range s.procs {
			g := p.gen.Load()
			g.fault((*memdb.Faults).Heal)
			g.fault(func(f *memdb.Faults) { f.Delay(0); f.Refuse(0); f.LoseReplies(0) })
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := g.locks.Close(cctx); err != nil {
				s.errs.Add(1)
				t.Logf("%s: close: %v", p.id, err)
			}
			cancel()
		}
		r.simulated = time.Since(start)
		r.ops = s.db.ops()
		r.failovers, r.rollbacks = s.db.failovers()
		lingerAfterClose()
		r.per, r.writes, r.reports = s.board.End()
		r.entries = 0
		for _, c := range r.per {
			r.entries += c.Trials
		}
		r.kills, r.drops, r.delays, r.lostReplies, r.refusals, r.cuts = s.kills.Load(), s.drops.Load(), s.delays.Load(), s.lostReplies.Load(), s.refusals.Load(), s.cuts.Load()
		r.fenced, r.losses, r.errs, r.takeOvers, r.weighted = s.fenced.Load(), s.losses.Load(), s.errs.Load(), s.takeOvers.Load(), s.weighted.Load()
		r.stalled, r.lastEntry = s.stalled, s.lastEntry
	})
	r.wall = time.Since(wallStart)
	return r
}

// spawn starts the nth process (or a replacement of the nth), with a
// seed of its own drawn from the run's.
func (s *sim) spawn(nth int) error {
	s.mu.Lock()
	s.seq++
	p := &proc{id: fmt.Sprintf("p%d", s.seq), nth: nth, lease: s.cfg.expiries[nth%len(s.cfg.expiries)], seed: s.cfg.seed ^ uint64(s.seq)*0x9e3779b97f4a7c15}
	s.mu.Unlock()
	p.ctx, p.cancel = context.WithCancel(s.ctx)
	g, err := s.connect(p)
	if err != nil {
		return err
	}
	p.gen.Store(g)
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	for i := range s.cfg.goroutines + 1 {
		long := i == s.cfg.goroutines
		if long && s.cfg.names[semaphore]+s.cfg.names[rwlock] == 0 {
			break
		}
		rng := rand.New(rand.NewPCG(p.seed, uint64(i)))
		p.workers.Add(1)
		s.wg.Go(func() {
			defer p.workers.Done()
			s.work(p, rng, long)
		})
	}
	return nil
}

func (s *sim) connect(p *proc) (*generation, error) {
	opts := []mongolock.Option{mongolock.WithExpiry(p.lease.expiry), mongolock.WithOwner(p.id)}
	if _, ok := s.db.(replicaSet); ok {
		opts = append(opts, mongolock.WithMaxClockSkew(s.cfg.skew)) // the members' bound
	}
	if p.lease.cadence != 0 {
		opts = append(opts, mongolock.WithExtensionCadence(p.lease.cadence))
	}
	client, faults := s.db.connect()
	if s.cfg.stuck {
		faults.Partition()
	}
	prov, err := backend.NewProvider(client, "mongolock_simulate", opts)
	if err != nil {
		return nil, err
	}
	g := &generation{client: client, faults: faults, locks: prov.(*mongolock.Provider)}
	g.ctx, g.cancel = context.WithCancel(p.ctx)
	return g, nil
}

// closeLater closes g's provider in the background once its users are
// done with their handles (Close releases the handles of its provider:
// under a holder, its Context would end but it would not be told of a
// loss): with its client cut off, it releases nothing.
func (s *sim) closeLater(g *generation) {
	s.wg.Go(func() {
		g.users.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = g.locks.Close(ctx)
	})
}

// chaos injects the faults until the run ends: a network fault on a
// process's client about every faultEvery, a client closed under a holder
// about every dropEvery, a process's death about every killEvery (while
// twice its expiry remains, so that its leases run out and are taken
// again). It ends the run once enough critical sections were entered.
func (s *sim) chaos(stop context.CancelFunc) {
	rng := rand.New(rand.NewPCG(s.cfg.seed, 1<<32))
	var hits [numKinds]int64
	now := time.Now()
	next := func(every time.Duration) time.Time {
		if every <= 0 {
			return time.Time{} // never
		}
		return now.Add(s.jitter(rng, every))
	}
	nextFault, nextDrop, nextKill := next(s.cfg.faultEvery), next(s.cfg.dropEvery), next(s.cfg.killEvery)
	var nextFailover time.Time
	if _, ok := s.db.(replicaSet); ok {
		nextFailover = next(s.cfg.failoverEvery)
	}
	deadline, _ := s.ctx.Deadline()
	start, entered, enteredAt := now, int64(0), now
	for {
		soakcheck.Sleep(s.ctx, 10*time.Millisecond) // the count is read this often
		if s.ctx.Err() != nil {
			return
		}
		n := s.board.Entries()
		if n >= int64(s.cfg.n) || s.cfg.untilViolation && s.board.Violations() > 0 {
			stop()
			return
		}
		now = time.Now()
		if n > entered {
			entered, enteredAt = n, now
		} else if now.Sub(enteredAt) >= s.cfg.stallAfter() {
			s.stalled, s.lastEntry = true, enteredAt.Sub(start)
			stop()
			return
		}
		s.mu.Lock()
		procs := slices.Clone(s.procs)
		s.mu.Unlock()
		if !nextFault.IsZero() && !now.Before(nextFault) {
			nextFault = next(s.cfg.faultEvery)
			s.fault(rng, procs[rng.IntN(len(procs))])
		}
		if !nextFailover.IsZero() && !now.Before(nextFailover) {
			nextFailover = next(s.cfg.failoverEvery)
			s.failover(rng)
		}
		if !nextDrop.IsZero() && !now.Before(nextDrop) {
			nextDrop = next(s.cfg.dropEvery)
			procs[rng.IntN(len(procs))].dropDue.Store(true)
		}
		if !nextKill.IsZero() && !now.Before(nextKill) {
			nextKill = next(s.cfg.killEvery)
			var candidates []*proc
			for _, p := range procs {
				if deadline.Sub(now) > 2*p.lease.expiry {
					candidates = append(candidates, p)
				}
			}
			if len(candidates) > 0 {
				s.kill(s.victim(rng, candidates, hits), &hits)
			}
		}
	}
}

// jitter is d times a random factor in [0.5, 1.5).
func (s *sim) jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rng.Float64()))
}

// fault injects one network fault on p's client: a delay of every reply
// for a while, lost replies of applied operations, refused operations, or
// a partition for up to twice its expiry.
func (s *sim) fault(rng *rand.Rand, p *proc) {
	g := p.gen.Load()
	switch rng.IntN(4) {
	case 0:
		d := time.Duration(rng.Int64N(int64(p.lease.expiry / 3)))
		if g.fault(func(f *memdb.Faults) { f.Delay(d) }) {
			s.delays.Add(1)
			s.later(dur(rng, 2*p.lease.expiry), func() { g.fault(func(f *memdb.Faults) { f.Delay(0) }) })
		}
	case 1:
		if n := 1 + rng.IntN(3); g.fault(func(f *memdb.Faults) { f.LoseReplies(n) }) {
			s.lostReplies.Add(int64(n))
		}
	case 2:
		if n := 1 + rng.IntN(3); g.fault(func(f *memdb.Faults) { f.Refuse(n) }) {
			s.refusals.Add(int64(n))
		}
	case 3:
		if g.fault((*memdb.Faults).Partition) {
			s.cuts.Add(1)
			s.later(dur(rng, 2*p.lease.expiry), func() { g.fault((*memdb.Faults).Heal) })
		}
	}
}

// later runs f after d, or at the end of the run.
func (s *sim) later(d time.Duration, f func()) {
	s.wg.Go(func() {
		soakcheck.Sleep(s.ctx, d)
		f()
	})
}

// victim returns the process to kill: one with a live holder inside a
// resource of a kind whose holders were killed least so far, else of any
// kind, else any.
func (s *sim) victim(rng *rand.Rand, candidates []*proc, hits [numKinds]int64) *proc {
	every := []kind{mutex, semaphore, rwlock, election}
	for _, kinds := range [][]kind{soakcheck.LeastHit(hits, s.cfg.names), every} {
		var inside []*proc
		for _, id := range s.board.Inside(kinds) {
			if i := slices.IndexFunc(candidates, func(p *proc) bool { return p.id == id }); i >= 0 {
				inside = append(inside, candidates[i])
			}
		}
		if len(inside) > 0 {
			return inside[rng.IntN(len(inside))]
		}
	}
	return candidates[rng.IntN(len(candidates))]
}

// kill makes p die, and starts another process in its place.
func (s *sim) kill(p *proc, hits *[numKinds]int64) {
	p.dead.Store(true)
	g := p.gen.Load()
	g.cutOff()
	for kd, n := range s.board.Kill(p.id) {
		hits[kd] += n
	}
	p.cancel()
	s.kills.Add(1)
	s.mu.Lock()
	s.procs = slices.DeleteFunc(s.procs, func(q *proc) bool { return q == p })
	s.mu.Unlock()
	s.wg.Go(func() {
		p.workers.Wait()
		// A generation replaced meanwhile is closing already; the last is
		// closed here.
		s.closeLater(p.gen.Load())
	})
	if err := s.spawn(p.nth); err != nil {
		panic(err) // options that worked before
	}
}

// drop closes p's client under the held handle h of t (and under every
// other handle of p), then waits for h to report the loss, which must come
// before the store lets the next holder in. p's other goroutines move to a
// new client at once.
func (s *sim) drop(p *proc, t target, h *mongolock.Handle, g *generation) {
	next, err := s.connect(p)
	if err != nil {
		panic(err)
	}
	p.gen.Store(next)
	g.cutOff()
	s.closeLater(g)
	s.drops.Add(1)
	s.board.Dropped(t.kind)
	wait := time.NewTimer(2 * p.lease.expiry)
	defer wait.Stop()
	select {
	case <-h.Lost():
	case <-wait.C:
		if !p.dead.Load() {
			s.board.Violation(t.kind, "unsignalled", "token %d of %s: no loss signalled %v after its client was closed", h.FencingToken(), p.id, 2*p.lease.expiry)
		}
	case <-p.ctx.Done(): // died, or the run ended
	}
}

// A target is what one trial acquires: name k of a kind, for writing (an
// RWLock's writer), with a loop of Try calls or with the waiting call, for
// a long critical section or not.
type target struct {
	kind    kind
	k       int
	write   bool
	upgrade bool // the writer is an upgradeable reader that Upgrade made the writer
	units   int  // a semaphore's units; 0: one
	try     bool
	long    bool
}

func (t target) name() string {
	switch t.kind {
	case semaphore:
		return fmt.Sprintf("sim-sem-%d", t.k)
	case rwlock:
		return fmt.Sprintf("sim-rw-%d", t.k)
	case election:
		return fmt.Sprintf("sim-el-%d", t.k)
	}
	return fmt.Sprintf("sim-%d", t.k)
}

// pick chooses the next trial, as the soak's children do: a kind, then
// one of its names; an rwlock's holder writes one time in three (half of
// the writers as an upgradeable reader that upgrades), a semaphore's
// holder takes two units one time in four, and one acquisition in four
// loops on the Try call (an election campaigns). A long holder's is a
// slot of the first semaphore or a read lock of the first rwlock.
func (s *sim) pick(rng *rand.Rand, long bool) target {
	var ks []kind
	for kd := range numKinds {
		if s.cfg.names[kd] > 0 && (!long || !kd.Single()) {
			ks = append(ks, kd)
		}
	}
	kd := ks[rng.IntN(len(ks))]
	if long {
		return target{kind: kd, long: true}
	}
	write := kd == rwlock && rng.IntN(3) == 0
	units := 1
	if kd == semaphore && rng.IntN(4) == 0 {
		units = weightedUnits
	}
	return target{kind: kd, k: rng.IntN(s.cfg.names[kd]), write: write, upgrade: write && rng.IntN(2) == 0, units: units, try: kd != election && rng.IntN(4) == 0}
}

// weightedUnits: the units of one semaphore acquisition in four.
const weightedUnits = 2

// acquire takes t with g's provider, waiting until ctx ends; an
// election's leadership is returned too.
func (s *sim) acquire(ctx context.Context, rng *rand.Rand, p *proc, g *generation, t target) (*mongolock.Handle, *mongolock.Leadership, error) {
	tr := soakcheck.Trial{Kind: t.kind, Name: t.name(), Write: t.write, Upgrade: t.upgrade, Units: t.units, Try: t.try}
	return soakcheck.Acquire(ctx, g.locks, tr, p.id, s.cfg.slots, func() time.Duration { return 10*time.Millisecond + dur(rng, 20*time.Millisecond) })
}

// work acquires random targets and runs critical sections until p dies or
// the run ends.
func (s *sim) work(p *proc, rng *rand.Rand, long bool) {
	for p.ctx.Err() == nil {
		g := p.gen.Load()
		g.users.Add(1)
		more := s.trial(p, rng, long, g)
		g.users.Done()
		if !more {
			return
		}
	}
}

// trial is one acquisition with g and, if it gets its handle, its
// critical section and release. It reports false once p is to stop.
func (s *sim) trial(p *proc, rng *rand.Rand, long bool, g *generation) bool {
	t := s.pick(rng, long)
	{
		actx, cancel := context.WithTimeout(g.ctx, s.cfg.giveUp())
		var floor int64
		if t.kind == semaphore {
			floor = s.board.Floor(t.kind, t.name())
		}
		start := time.Now()
		h, lead, err := s.acquire(actx, rng, p, g, t)
		waited := time.Since(start)
		cancel()
		switch {
		case err == nil:
		case p.ctx.Err() != nil:
			s.board.Unfinished(t.kind, waited, false)
			return false // died, or the run is over
		case g.ctx.Err() != nil:
			return true // its client was closed: the next try takes the new one
		case errors.Is(err, context.DeadlineExceeded):
			s.board.Unfinished(t.kind, waited, true)
			return true
		default:
			s.errs.Add(1)
			if s.errLogged.Add(1) <= 3 {
				fmt.Fprintf(os.Stderr, "simulate: %s: acquire %s: %v\n", p.id, t.name(), err)
			}
			soakcheck.Sleep(p.ctx, 20*time.Millisecond)
			return true
		}
		dropped := s.section(p, rng, t, floor, waited, h, lead, g)
		if !dropped && !t.long && rng.IntN(takeOverOdds) == 0 {
			s.takeOver(p, rng, t, h)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = h.Release(rctx)
		rcancel()
		switch {
		case soakcheck.Closed(h.Lost()):
			s.losses.Add(1)
		case err != nil && !dropped && p.gen.Load() == g && !p.dead.Load():
			s.errs.Add(1)
			if s.errLogged.Add(1) <= 3 {
				fmt.Fprintf(os.Stderr, "simulate: %s: release %s: %v\n", p.id, t.name(), err)
			}
		}
	}
	return true
}

// takeOverOdds: one critical section in this many (not a long holder's)
// passes its acquisition by ticket when it ends.
const takeOverOdds = 8

// takeOver passes h, whose critical section ended, by its ticket to a
// successor of p: a process apart from the chaos (a provider over a client
// of its own) that takes it over, runs a critical section under it and
// releases it. h must be lost by the time the take-over returns, as it is
// of this program; a ticket whose acquisition ended meanwhile (h lost) is
// stale.
func (s *sim) takeOver(p *proc, rng *rand.Rand, t target, h *mongolock.Handle) {
	ticket, err := h.Ticket()
	if err != nil {
		return // lost meanwhile
	}
	succ := &proc{id: p.id + "-successor", nth: p.nth, lease: p.lease, ctx: p.ctx}
	g, err := s.connect(succ)
	if err != nil {
		panic(err) // options that worked before
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = g.locks.Close(ctx)
	}()
	var floor int64
	if t.kind == semaphore {
		floor = s.board.Floor(t.kind, t.name())
	}
	taken, err := g.locks.TakeOver(p.ctx, ticket)
	switch {
	case errors.Is(err, mongolock.ErrStaleTicket) && soakcheck.Closed(h.Lost()):
		return
	case err != nil:
		if p.ctx.Err() == nil {
			s.errs.Add(1)
			if s.errLogged.Add(1) <= 3 {
				fmt.Fprintf(os.Stderr, "simulate: %s: take over %s: %v\n", succ.id, t.name(), err)
			}
		}
		return
	case !soakcheck.Closed(h.Lost()):
		s.board.Violation(t.kind, "unsignalled", "token %d of %s: not lost when token %d took it over", h.FencingToken(), p.id, taken.FencingToken())
	}
	s.takeOvers.Add(1)
	var lead *mongolock.Leadership
	if t.kind == election {
		lead = &mongolock.Leadership{Handle: taken}
	}
	s.section(succ, rng, t, floor, 0, taken, lead, g)
	_ = taken.Release(context.Background())
}

// section is one critical section on t's resource under h: enter, write a
// few times, exit, each checked by the board at that instant of simulated
// time, as the soak's children's by the server. A long holder's lasts from
// half longHold to longHold and reads the lock's own document before each
// write; an election's leader proclaims and reads the leader back before
// its first. It reports whether it closed the client under h.
func (s *sim) section(p *proc, rng *rand.Rand, t target, floor int64, waited time.Duration, h *mongolock.Handle, lead *mongolock.Leadership, g *generation) (dropped bool) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	sec := soakcheck.Section{Kind: t.kind, Name: t.name(), Tok: h.FencingToken(), Proc: p.id, Write: t.write, Upgrade: t.upgrade, Units: t.units,
		Note: fmt.Sprintf("expiry %v, acquired at %s after %v, lease end %s%s%s", p.lease, clock(h.AcquiredAt()), waited, clock(h.LeaseEnd()),
			map[bool]string{true: ", upgraded"}[t.upgrade], map[bool]string{true: ", long"}[t.long])}
	if t.units > 1 {
		s.weighted.Add(1)
	}
	var phase atomic.Pointer[string]
	at := func(what string) { what += " since " + clock(time.Now()); phase.Store(&what) }
	at("entering")
	sec.State = func() string {
		told := "not told of a loss"
		if soakcheck.Closed(h.Lost()) {
			told = "told of a loss"
		}
		return fmt.Sprintf("%s, %s, lease end %s, client cut off %v", *phase.Load(), told, clock(h.LeaseEnd()), g.ctx.Err() != nil)
	}
	if soakcheck.Closed(h.Lost()) {
		s.board.Waited(t.kind, t.write, waited) // lost before it began
		return false
	}
	if s.cfg.sabotage && rng.IntN(2) == 0 {
		_ = h.Release(ctx) // work after release: the bug the checks exist to catch
	}
	if !s.board.Enter(sec, floor, waited) {
		return false // dead
	}
	displaced := false
	writes, pause, end := 1+rng.IntN(3), s.cfg.hold, time.Time{}
	if t.long {
		end = time.Now().Add(s.cfg.longHold/2 + dur(rng, s.cfg.longHold/2+1))
		pause = 100 * time.Millisecond
	}
	for i := 0; i < writes || time.Now().Before(end); i++ {
		if p.dropDue.CompareAndSwap(true, false) {
			dropped = true
			at("closing its client")
			s.drop(p, t, h, g)
		}
		at("pausing")
		select {
		case <-time.After(dur(rng, pause+1)):
		case <-h.Lost():
		case <-ctx.Done():
		}
		if soakcheck.Closed(h.Lost()) || ctx.Err() != nil {
			break // stop work at once: the next holder may come in soon
		}
		at("checking the lock")
		if i == 0 && s.check(ctx, p, sec, h, lead, g, t) || i > 0 && t.long && s.check(ctx, p, sec, h, nil, g, t) || soakcheck.Closed(h.Lost()) {
			break // a violation counted, or told of a loss meanwhile
		}
		at("writing")
		if !s.board.Write(sec) {
			if soakcheck.Closed(h.Lost()) {
				s.fenced.Add(1)
			} else {
				displaced = true
				s.board.Violation(t.kind, "displaced", "token %d of %s: a write found someone else inside", sec.Tok, p.id)
			}
			break
		}
	}
	at("exiting")
	if (!displaced || !t.kind.Single()) && !s.board.Exit(sec) && !displaced {
		s.board.Violation(t.kind, "displaced", "token %d of %s: at exit, someone else was inside", sec.Tok, p.id)
	}
	return dropped
}

// check runs a holder's checks of the lock's own document before a write:
// a leader's (lead, before its first) and a long holder's. It reports
// whether it counted a violation. Their calls end with h (its Context),
// as an application's work under a lock does: a holder told of its loss
// while it waits for a reply stops at once, rather than staying inside
// until the reply comes, after the next holder came in.
func (s *sim) check(ctx context.Context, p *proc, sec soakcheck.Section, h *mongolock.Handle, lead *mongolock.Leadership, g *generation, t target) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.Context(), cancel)()
	return lead != nil && s.leaderDisplaced(ctx, p, sec, lead, g) || t.long && s.vanished(ctx, p, sec, h, g)
}

// leaderDisplaced proclaims a value of this term and reads the leader
// back: until the leadership is lost, the store must show this leader
// with that value.
func (s *sim) leaderDisplaced(ctx context.Context, p *proc, sec soakcheck.Section, l *mongolock.Leadership, g *generation) bool {
	value := fmt.Sprintf("%s/%d", p.id, sec.Tok)
	if err := l.Proclaim(ctx, value); err != nil {
		return false // lost (Proclaim says so), or unreachable: the write tells
	}
	ld, err := g.locks.Election(sec.Name).Leader(ctx)
	switch {
	case soakcheck.Closed(l.Lost()) || p.dead.Load():
		return false
	case errors.Is(err, mongolock.ErrNoLeader):
		s.board.Violation(election, "displaced", "token %d of %s leads, but the election has no leader", sec.Tok, p.id)
		return true
	case err != nil:
		return false
	case ld.FencingToken != sec.Tok || ld.Value != value:
		s.board.Violation(election, "displaced", "token %d of %s leads with %q, but the election shows token %d with %q", sec.Tok, p.id, value, ld.FencingToken, ld.Value)
		return true
	}
	return false
}

// vanished reads a long holder's semaphore or rwlock as the library shows
// it: it must show h's token holding until h is told of a loss.
func (s *sim) vanished(ctx context.Context, p *proc, sec soakcheck.Section, h *mongolock.Handle, g *generation) bool {
	var (
		holders []mongolock.HolderInfo
		err     error
	)
	if sec.Kind == semaphore {
		var info mongolock.SemaphoreInfo
		info, err = g.locks.Semaphore(sec.Name, s.cfg.slots).Inspect(ctx)
		holders = info.Holders
	} else {
		var info mongolock.RWLockInfo
		info, err = g.locks.RWLock(sec.Name).Inspect(ctx)
		holders = info.Holders
	}
	var held []int64
	for _, in := range holders {
		held = append(held, in.FencingToken)
	}
	switch {
	case soakcheck.Closed(h.Lost()) || p.dead.Load():
		return false
	case err != nil && !errors.Is(err, mongolock.ErrNoLock):
		return false
	case !slices.Contains(held, sec.Tok):
		s.board.Violation(sec.Kind, "vanished", "token %d of %s (expiry %v) was not told of a loss, but the lock showed tokens %v (%v)", sec.Tok, p.id, p.lease.expiry, held, err)
		return true
	}
	return false
}

// explain returns the lock documents of name as the store has them now,
// and the simulated time.
func (s *sim) explain(name string) string {
	var docs []string
	for _, coll := range []string{mongolock.DefaultCollection, mongolock.DefaultCollection + "_semaphores"} {
		for _, d := range s.db.docs(coll) {
			if d.Lookup("_id").StringValue() == name {
				docs = append(docs, d.String())
			}
		}
	}
	return fmt.Sprintf("at %s the store had: %s", clock(time.Now()), strings.Join(docs, "; "))
}

// clock is t in the simulation's clock, which starts at midnight
// 2000-01-01 UTC.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// lingerAfterClose lets the goroutines that closed Providers leave behind
// end: idle senders and change streams linger for up to a second after
// Close. The bubble's clock moves only while its first goroutine is alive,
// so that one waits for them.
func lingerAfterClose() { time.Sleep(2 * time.Second) }

// dur is a random duration in [0, d).
func dur(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d)))
}

// A holder that goes on working after its release is what the checks
// exist to catch: with half of the critical sections run after Release,
// the board must count overlaps of every kind.
func TestSimulateSeesWorkAfterRelease(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.worlds, cfg.n, cfg.sabotage = 1, 1000, true
	cfg.dropEvery, cfg.killEvery, cfg.faultEvery = 0, 0, 0 // the sabotage alone
	t.Logf("seed %d", cfg.seed)
	r := run(t, cfg, soakcheck.NewBoard(cfg.slots))
	t.Log(r)
	for kd := range numKinds {
		if r.per[kd].Overlap == 0 {
			t.Errorf("%v: no overlap seen in %d trials of work after release (seed %d)", kd, r.per[kd].Trials, cfg.seed)
		}
	}
}

// A world that stops entering critical sections fails at once, not at
// the end of its simulated time, which a long run's share makes days.
func TestSimulateEndsAWorldThatStalls(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.worlds, cfg.n, cfg.procs, cfg.goroutines, cfg.stuck = 1, 1_000_000, 1, 1, true
	cfg.dropEvery, cfg.killEvery, cfg.faultEvery = 0, 0, 0
	r := run(t, cfg, soakcheck.NewBoard(cfg.slots))
	if !r.stalled || r.entries != 0 || r.simulated >= cfg.limit()/2 {
		t.Errorf("stalled %v after %v of simulated time with %d critical sections entered; want it stalled with none, after %v, well before its limit %v",
			r.stalled, r.simulated, r.entries, cfg.stallAfter(), cfg.limit())
	}
	if short := r.shortfall(); !strings.Contains(short, "none for") {
		t.Errorf("the shortfall says %q; want it to say that none were entered for a while", short)
	}
}

// A heapSample is the live heap once a world had entered entries
// critical sections.
type heapSample struct {
	entries int64
	heap    uint64
}

// liveHeapAt returns the live heap once the worlds of boards have
// entered n critical sections together, collected then (the zero sample
// if done is closed first).
func liveHeapAt(boards []*soakcheck.Board, n int64, done <-chan struct{}) <-chan heapSample {
	out := make(chan heapSample, 1)
	go func() {
		defer close(out)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for entries(boards) < n {
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
		runtime.GC()
		out <- heapSample{entries(boards), liveHeap()}
	}()
	return out
}

// entries is the critical sections entered in the worlds of boards.
func entries(boards []*soakcheck.Board) (n int64) {
	for _, b := range boards {
		n += b.Entries()
	}
	return n
}

// liveHeap is the heap marked live by the last collection.
func liveHeap() uint64 {
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	return live[0].Value.Uint64()
}

// A holder's checks inside its critical section (a long holder's Inspect,
// a leader's Proclaim and Leader) end when it is told of its loss, however
// slow the replies: a holder that waits past its loss for a reply is
// still inside when the next one enters. Seed 100's world (make simulate)
// met it: a long semaphore holder waiting for a delayed Inspect reply was
// inside while three others held the slots.
func TestSimulatedHolderStopsCheckingAtItsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig(t)
		s := &sim{cfg: cfg, db: oneServer{memdb.NewStore("mongolock_simulate", nil)}, board: soakcheck.NewBoard(cfg.slots), ctx: t.Context()}
		p := &proc{id: "p1", lease: lease{expiry: time.Second}}
		p.ctx, p.cancel = context.WithCancel(s.ctx)
		g, err := s.connect(p)
		if err != nil {
			t.Fatal(err)
		}
		tgt := target{kind: semaphore, long: true}
		h, err := g.locks.Semaphore(tgt.name(), cfg.slots).Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		sec := soakcheck.Section{Kind: semaphore, Name: tgt.name(), Tok: h.FencingToken(), Proc: p.id}
		g.faults.Delay(3 * time.Second) // every reply, the extensions' too
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.check(context.Background(), p, sec, h, nil, g, tgt)
		}()
		<-h.Lost()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("the holder was still waiting for its check's reply after it was told of its loss")
		}
		g.faults.Delay(0)
		_ = h.Release(context.Background())
		if err := g.locks.Close(context.Background()); err != nil {
			t.Error(err)
		}
		lingerAfterClose()
	})
}
