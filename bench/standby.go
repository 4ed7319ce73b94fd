package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Workload G, standby: the shape of leader election. P processes (one
// client and locker each) loop on one name: acquire, hold standbyHold,
// release, stay away standbyAway. While one holds, the other P-1 wait, and
// what they cost the server while waiting (commands/s) and how soon one of
// them takes over after a release (takeover delay) are what G measures.
const (
	standbyHold = 3 * time.Second
	standbyAway = 1 * time.Second
	// standbyWarmup runs before the window opens: every process starts at
	// once, and its first commands (the name's document, the index, the
	// first attempts of all P) are not the standby's steady state.
	standbyWarmup = 2 * time.Second
	// standbyGrace is how long after the window the run goes on so that the
	// window's last release is followed by its takeover; a release with no
	// takeover by then counts with its length up to then.
	standbyGrace = 10 * time.Second
	standbyName  = "leader"
)

// standbySizes are G's process counts: 8 and 32 processes waiting while one
// holds. evaluate compares the first two.
var standbySizes = []int{9, 33}

func standbyTitle() string {
	return fmt.Sprintf("P processes x 1 worker on one name, each holding it %v and staying away %v",
		standbyHold, standbyAway)
}

// standbyResult is what one run of workload G measured for one
// implementation and P.
type standbyResult struct {
	Impl      string  `json:"impl"`
	Processes int     `json:"processes"`
	Seconds   float64 `json:"seconds"` // the window, after the warm-up
	commands          // sent by all clients in the window
	// Acquisitions are the Acquire returns in the window.
	Acquisitions int   `json:"acquisitions"`
	PerProcess   []int `json:"acquisitionsPerProcess"`
	// Takeovers are the releases that returned in the window; the delay of
	// each is from its Release's return to the next acquisition's Acquire
	// return (0 if that returned first).
	Takeovers     int     `json:"takeovers"`
	TakeoverP50MS float64 `json:"takeoverP50Ms"`
	TakeoverP90MS float64 `json:"takeoverP90Ms"`
	TakeoverMaxMS float64 `json:"takeoverMaxMs"`
	// UnfinishedTakeovers are releases of the window that no acquisition
	// followed within standbyGrace; they count with their length so far.
	UnfinishedTakeovers int `json:"unfinishedTakeovers"`
	Lost                int `json:"lost"` // holds signalled lost (Handle.Lost) before their release
	errorCount
}

// standbyLog records every acquisition of a run in the order the Acquire
// calls returned: with one name and 3 s holds that is the order in which
// the lock was held.
type standbyLog struct {
	mu   sync.Mutex
	acqs []standbyAcq
	lost int
	errorCount
}

type standbyAcq struct {
	proc     int
	acquired time.Time // Acquire's return
	released time.Time // Release's return; zero until then
}

func (l *standbyLog) acquired(proc int, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acqs = append(l.acqs, standbyAcq{proc: proc, acquired: at})
	return len(l.acqs) - 1
}

func (l *standbyLog) released(i int, at time.Time, lost bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acqs[i].released = at
	switch {
	case lost:
		l.lost++
	case err != nil:
		l.add(err)
	}
}

func (l *standbyLog) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(err)
}

// followed reports whether every release that returned in [from, to] has
// been followed by an acquisition.
func (l *standbyLog) followed(from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.acqs) - 1; i >= 0; i-- {
		r := l.acqs[i].released
		if !r.IsZero() && !r.Before(from) && !r.After(to) {
			return i+1 < len(l.acqs)
		}
	}
	return true
}

// standby is one process's loop until ctx ends.
func standby(ctx context.Context, lk locker, proc int, log *standbyLog) {
	for ctx.Err() == nil {
		h, err := lk.acquire(ctx, standbyName)
		if err != nil {
			if ctx.Err() == nil {
				log.failed(err)
				pause(ctx, 10*time.Millisecond)
			}
			continue
		}
		i := log.acquired(proc, time.Now())
		pause(ctx, standbyHold)
		lost := h.isLost()
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err = h.release(rctx)
		cancel()
		log.released(i, time.Now(), lost, err)
		pause(ctx, standbyAway)
	}
}

// runStandby runs workload G for im with procs processes: a warm-up, the
// window d, then until the window's last release has been followed by an
// acquisition (at most standbyGrace).
func runStandby(ctx context.Context, e env, im impl, procs int, d time.Duration) (standbyResult, error) {
	r := standbyResult{Impl: im.name, Processes: procs, Seconds: d.Seconds()}
	ps, err := startProcesses(ctx, e, im, collection(fmt.Sprintf("G%d", procs), im.name), defaultExpiry, procs)
	if err != nil {
		return r, err
	}
	defer closeProcesses(ps)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := &standbyLog{}
	var wg sync.WaitGroup
	for pi, p := range ps {
		wg.Go(func() { standby(rctx, p.lk, pi, log) })
	}
	pause(ctx, standbyWarmup)
	ops0, from := sumOps(ps), time.Now()
	pause(ctx, d)
	ops1, to := sumOps(ps), time.Now()
	giveUp := to.Add(standbyGrace)
	for ctx.Err() == nil && !log.followed(from, to) && time.Now().Before(giveUp) {
		pause(ctx, 20*time.Millisecond)
	}
	cut := time.Now()
	cancel()
	wg.Wait()

	window := to.Sub(from)
	r.Seconds = window.Seconds()
	r.commands = countCommands(diff(ops1, ops0), window)
	r.PerProcess = make([]int, procs)
	var delays []time.Duration
	for i, a := range log.acqs {
		if !a.acquired.Before(from) && !a.acquired.After(to) {
			r.Acquisitions++
			r.PerProcess[a.proc]++
		}
		if a.released.IsZero() || a.released.Before(from) || a.released.After(to) {
			continue
		}
		if i+1 < len(log.acqs) {
			delays = append(delays, max(log.acqs[i+1].acquired.Sub(a.released), 0))
		} else {
			r.UnfinishedTakeovers++
			delays = append(delays, cut.Sub(a.released))
		}
	}
	r.Takeovers = len(delays)
	r.TakeoverP50MS = ms(percentile(delays, 50))
	r.TakeoverP90MS = ms(percentile(delays, 90))
	r.TakeoverMaxMS = ms(percentile(delays, 100))
	r.Lost, r.errorCount = log.lost, log.errorCount
	return r, ctx.Err()
}

// opsList formats commands by name, most first: "findAndModify 120, delete 9".
func opsList(ops map[string]int) string {
	names := slices.Collect(maps.Keys(ops))
	sort.Slice(names, func(i, j int) bool {
		if ops[names[i]] != ops[names[j]] {
			return ops[names[i]] > ops[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, ops[n])
	}
	return strings.Join(parts, ", ")
}
