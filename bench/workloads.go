package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A workload is one of the loops A–E: processes x workers, each
// worker acquiring, holding for the critical section, releasing, and working
// outside the lock for outsideWork, until the window ends.
type workload struct {
	id, title       string
	procs, workers  int           // workers per process
	shared          bool          // all workers on one name (else one name each)
	criticalSection time.Duration // how long each acquisition is held
	// rounds splits the window into this many slices, run for each
	// implementation in turn (rotating who goes first), so that drift in
	// the machine's load over the run falls on all implementations alike.
	// Only where nobody waits (A, E): a slice would cut the waits that
	// contention makes long, and so the wait figures of B-D.
	rounds int
}

// outsideWork is each worker's work between a release and its next acquire.
const outsideWork = 2 * time.Millisecond

// workloads are A–E; the issue gives A and E no critical section, so they
// release as soon as they hold.
var workloads = []workload{
	{id: "A", title: "1 worker, no contention", procs: 1, workers: 1, rounds: 5},
	{id: "B", title: "2 processes x 1 worker, 1 ms critical section (ping-pong)", procs: 2, workers: 1, shared: true, criticalSection: time.Millisecond},
	{id: "C", title: "1 process x 64 workers on one name, 10 ms critical section", procs: 1, workers: 64, shared: true, criticalSection: 10 * time.Millisecond},
	{id: "D", title: "4 processes x 16 workers on one name, 10 ms critical section", procs: 4, workers: 16, shared: true, criticalSection: 10 * time.Millisecond},
	{id: "E", title: "32 workers on distinct names (throughput)", procs: 1, workers: 32, rounds: 5},
}

// collection names the collection of one run, so that runs share no state.
func collection(workloadID, implName string) string {
	return "bench_" + workloadID + "_" + implName
}

// result is what one run of a workload A–E measured for one implementation.
type result struct {
	Workload          string  `json:"workload"`
	Impl              string  `json:"impl"`
	Processes         int     `json:"processes"`
	Workers           int     `json:"workersPerProcess"`
	CriticalSectionMS float64 `json:"criticalSectionMs"`
	Seconds           float64 `json:"seconds"`
	tally
	ClientCPUPerAcqUS float64 `json:"clientCpuPerAcquisitionUs"` // this OS process's CPU time / acquisitions
	commands
	OpsPerAcq float64 `json:"opsPerAcquisition"`
	FairFloor float64 `json:"fairFloor"` // 1/(2P)
}

// tally is what workers' records add up to, over a window.
type tally struct {
	Acquisitions   int     `json:"acquisitions"`
	AcqPerSec      float64 `json:"acquisitionsPerSecond"`
	WaitP50MS      float64 `json:"waitP50Ms"`  // acquire call to handle
	WaitP99MS      float64 `json:"waitP99Ms"`  // including waits cut by the window's end
	CycleP50MS     float64 `json:"cycleP50Ms"` // acquire + release call times
	CycleP99MS     float64 `json:"cycleP99Ms"`
	ReleaseP50MS   float64 `json:"releaseP50Ms"`
	ReleaseP99MS   float64 `json:"releaseP99Ms"`
	Unfinished     int     `json:"unfinishedWaits"` // waits still going at the end (counted up to it)
	PerProcess     []int   `json:"acquisitionsPerProcess"`
	MinShare       float64 `json:"minProcessShare"`
	MinWorker      int     `json:"minWorkerAcquisitions"`
	MaxWorker      int     `json:"maxWorkerAcquisitions"`
	StarvedWorkers int     `json:"starvedWorkers"` // workers with no acquisition
	errorCount
}

// errorCount counts a run's failed calls, keeping the first one's message.
type errorCount struct {
	Errors     int    `json:"errors"`
	FirstError string `json:"firstError,omitempty"`
}

func (c *errorCount) add(err error) {
	c.Errors++
	if c.FirstError == "" {
		c.FirstError = err.Error()
	}
}

func (c *errorCount) merge(o errorCount) {
	c.Errors += o.Errors
	if c.FirstError == "" {
		c.FirstError = o.FirstError
	}
}

// workerStats is one worker's record; each worker writes only its own.
type workerStats struct {
	acquired   int
	waits      []time.Duration
	cycles     []time.Duration
	releases   []time.Duration
	unfinished int
	errorCount
}

const releaseTimeout = 5 * time.Second

// An attempt is a worker's next acquisition, and the record it counts in.
type attempt struct {
	acquire func(ctx context.Context) (held, error)
	st      *workerStats
}

// work is one worker's loop until end, taking its attempts from next.
// Every acquisition that returned before end counts; a wait that end cuts
// short is counted in the wait figures with its length up to end, so that
// starving waiters show.
func work(ctx context.Context, end time.Time, next func() attempt, cs time.Duration) {
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			return
		}
		a := next()
		st := a.st
		h, err := a.acquire(ctx)
		t1 := time.Now()
		if err != nil {
			// The driver refuses an operation that the deadline would cut
			// short a moment before ctx reports it.
			if ctx.Err() != nil || !t1.Before(end) || errors.Is(err, context.DeadlineExceeded) {
				st.unfinished++
				st.waits = append(st.waits, end.Sub(t0))
				return
			}
			st.add(err)
			pause(ctx, 10*time.Millisecond)
			continue
		}
		if cs > 0 {
			time.Sleep(cs)
		}
		t2 := time.Now()
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err = h.release(rctx)
		cancel()
		t3 := time.Now()
		if err != nil {
			st.add(err)
		}
		if t1.Before(end) {
			st.acquired++
			st.waits = append(st.waits, t1.Sub(t0))
			st.cycles = append(st.cycles, t1.Sub(t0)+t3.Sub(t2))
			st.releases = append(st.releases, t3.Sub(t2))
		}
		pause(ctx, outsideWork)
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// window is what one run of a workload for one implementation recorded.
type window struct {
	stats [][]workerStats // per process, per worker
	ops   map[string]int
	cpu   time.Duration
}

// add merges o into w (the same workload and implementation).
func (w *window) add(o window) {
	if w.stats == nil {
		*w = o
		return
	}
	for pi := range w.stats {
		for wi := range w.stats[pi] {
			a, b := &w.stats[pi][wi], o.stats[pi][wi]
			a.acquired += b.acquired
			a.waits = append(a.waits, b.waits...)
			a.cycles = append(a.cycles, b.cycles...)
			a.releases = append(a.releases, b.releases...)
			a.unfinished += b.unfinished
			a.merge(b.errorCount)
		}
	}
	for k, n := range o.ops {
		w.ops[k] += n
	}
	w.cpu += o.cpu
}

// runWorkload runs w for every implementation for d each, in w.rounds
// interleaved slices, and hands each one's summary to record.
func runWorkload(ctx context.Context, e env, ims []impl, w workload, d time.Duration, record func(im impl, r result)) error {
	rounds := max(w.rounds, 1)
	acc := make([]window, len(ims))
	for round := range rounds {
		for k := range ims {
			i := (k + round) % len(ims)
			win, err := runWindow(ctx, e, ims[i], w, round, d/time.Duration(rounds))
			if err != nil {
				return fmt.Errorf("workload %s, %s: %w", w.id, ims[i].name, err)
			}
			acc[i].add(win)
			settle()
		}
	}
	for i, im := range ims {
		r := summarize(w, im, d, acc[i].stats, acc[i].ops)
		if r.Acquisitions > 0 {
			r.ClientCPUPerAcqUS = float64(acc[i].cpu) / float64(time.Microsecond) / float64(r.Acquisitions)
		}
		record(im, r)
	}
	return nil
}

// runWindow runs w for im for d. Each round uses names of its own: a lock
// that the end of the previous slice left held (an acquisition cut short,
// whose cleanup died with its client) must not stall the next.
func runWindow(ctx context.Context, e env, im impl, w workload, round int, d time.Duration) (window, error) {
	ps, err := startProcesses(ctx, e, im, collection(w.id, im.name), defaultExpiry, w.procs)
	if err != nil {
		return window{}, err
	}
	defer closeProcesses(ps)

	stats := make([][]workerStats, w.procs)
	cpu0 := cpuTime()
	start := time.Now()
	end := start.Add(d)
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for pi, p := range ps {
		stats[pi] = make([]workerStats, w.workers)
		for wi := range w.workers {
			name := fmt.Sprintf("shared-r%d", round)
			if !w.shared {
				name = fmt.Sprintf("p%d-w%d-r%d", pi, wi, round)
			}
			a := attempt{func(ctx context.Context) (held, error) { return p.lk.acquire(ctx, name) }, &stats[pi][wi]}
			wg.Go(func() { work(rctx, end, func() attempt { return a }, w.criticalSection) })
		}
	}
	wg.Wait()
	return window{stats: stats, ops: sumOps(ps), cpu: cpuTime() - cpu0}, ctx.Err()
}

func summarize(w workload, im impl, d time.Duration, stats [][]workerStats, ops map[string]int) result {
	r := result{
		Workload:          w.id,
		Impl:              im.name,
		Processes:         w.procs,
		Workers:           w.workers,
		CriticalSectionMS: ms(w.criticalSection),
		Seconds:           d.Seconds(),
		tally:             tallyOf(stats, d),
		commands:          countCommands(ops, d),
		FairFloor:         1 / float64(2*w.procs),
	}
	if r.Acquisitions > 0 {
		r.OpsPerAcq = float64(r.Ops) / float64(r.Acquisitions)
	}
	return r
}

// tallyOf adds up the records of every worker of every process over d.
func tallyOf(stats [][]workerStats, d time.Duration) tally {
	t := tally{MinWorker: -1}
	var waits, cycles, releases []time.Duration
	for _, proc := range stats {
		n := 0
		for _, s := range proc {
			n += s.acquired
			waits = append(waits, s.waits...)
			cycles = append(cycles, s.cycles...)
			releases = append(releases, s.releases...)
			t.Unfinished += s.unfinished
			t.merge(s.errorCount)
			if t.MinWorker < 0 || s.acquired < t.MinWorker {
				t.MinWorker = s.acquired
			}
			t.MaxWorker = max(t.MaxWorker, s.acquired)
			if s.acquired == 0 {
				t.StarvedWorkers++
			}
		}
		t.PerProcess = append(t.PerProcess, n)
		t.Acquisitions += n
	}
	t.AcqPerSec = float64(t.Acquisitions) / d.Seconds()
	t.WaitP50MS, t.WaitP99MS = ms(percentile(waits, 50)), ms(percentile(waits, 99))
	t.CycleP50MS, t.CycleP99MS = ms(percentile(cycles, 50)), ms(percentile(cycles, 99))
	t.ReleaseP50MS, t.ReleaseP99MS = ms(percentile(releases, 50)), ms(percentile(releases, 99))
	if t.Acquisitions > 0 {
		t.MinShare = 1
		for _, n := range t.PerProcess {
			t.MinShare = min(t.MinShare, float64(n)/float64(t.Acquisitions))
		}
	}
	return t
}

// percentile is the nearest-rank p-th percentile of xs (0 if empty).
func percentile[T cmp.Ordered](xs []T, p float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
