package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// holdTitle describes workload F.
const holdTitle = "1 process holding N locks for three extension cadences"

// Workload F's settings: a short expiry, so that three cadences pass quickly.
const (
	holdExpiry   = 3 * time.Second
	holdCadences = 3
)

// holdResult is what workload F measured for one implementation and N.
type holdResult struct {
	Impl                 string         `json:"impl"`
	N                    int            `json:"n"`
	ExpiryS              float64        `json:"expirySeconds"`
	CadenceS             float64        `json:"cadenceSeconds"`
	Cadences             int            `json:"cadences"`
	Acquired             int            `json:"acquired"`       // of N, within holdAcquireLimit
	AcquireSeconds       float64        `json:"acquireSeconds"` // to acquire them
	AcquireOps           int            `json:"acquireOps"`
	HeldAtStart          int            `json:"heldAtHoldStart"` // acquired and not (yet) signalled lost
	LostByEnd            int            `json:"lostByHoldEnd"`   // signalled lost by the end of the hold
	HoldOps              map[string]int `json:"holdOpsByCommand"`
	ExtensionsPerCadence float64        `json:"extensionRoundTripsPerCadence"` // update commands during the hold / cadences
	SlowestExtensionMs   float64        `json:"slowestExtensionMs"`            // the slowest update reply during the hold
	GoroutinesBefore     int            `json:"goroutinesBefore"`
	GoroutinesDuring     int            `json:"goroutinesDuring"` // the most seen during the hold
	GoroutinesAfter      int            `json:"goroutinesAfter"`  // after releasing all
	HeapPerLockB         float64        `json:"heapPerLockBytes"`
	StackPerLockB        float64        `json:"stackPerLockBytes"`
	ReleaseErrors        int            `json:"releaseErrors"` // e.g. lost while held
	FirstError           string         `json:"firstError,omitempty"`
}

const (
	// holdConcurrency is how many goroutines acquire (and release) the N
	// locks of workload F; they have ended before the hold is measured.
	holdConcurrency = 32
	// holdAcquireLimit bounds F's acquisition phase: an implementation that
	// cannot take N locks by then is measured holding what it took.
	holdAcquireLimit = 30 * time.Second
)

// runHold is workload F: one process acquires n locks, holds them all for
// cadences extension cadences, and releases them.
func runHold(ctx context.Context, e env, im impl, n int, expiry time.Duration, cadences int) (holdResult, error) {
	cadence := expiry / 3 // mongolock's default cadence
	r := holdResult{Impl: im.name, N: n, ExpiryS: expiry.Seconds(), CadenceS: cadence.Seconds(), Cadences: cadences}
	p, err := startProcess(ctx, e, im, collection(fmt.Sprintf("F%d", n), im.name), expiry)
	if err != nil {
		return r, err
	}
	defer closeProcesses([]*process{p})

	before := memStats()
	r.GoroutinesBefore = runtime.NumGoroutine()
	hs := make([]held, n)
	start := time.Now()
	actx, cancel := context.WithDeadline(ctx, start.Add(holdAcquireLimit))
	var errs errList
	each(n, func(i int) {
		if actx.Err() != nil {
			return
		}
		h, err := p.lk.acquire(actx, fmt.Sprintf("held-%d", i))
		switch {
		case err == nil:
			hs[i] = h
		case actx.Err() == nil:
			errs.add(err)
		}
	})
	cancel()
	if err := errs.first(); err != nil {
		return r, fmt.Errorf("acquiring %d locks: %w", n, err)
	}
	r.AcquireSeconds = time.Since(start).Seconds()
	hs = slices.DeleteFunc(hs, func(h held) bool { return h.release == nil })
	r.Acquired = len(hs)
	atHold := p.ops.snapshot()
	p.ops.takeSlowest("update")
	for _, v := range atHold {
		r.AcquireOps += v
	}

	during := memStats()
	holdEnd := time.Now().Add(time.Duration(cadences) * cadence)
	r.HeldAtStart = len(hs) - countLost(hs)
	r.GoroutinesDuring = runtime.NumGoroutine()
	for time.Now().Before(holdEnd) {
		time.Sleep(50 * time.Millisecond)
		r.GoroutinesDuring = max(r.GoroutinesDuring, runtime.NumGoroutine())
	}
	r.HoldOps = diff(p.ops.snapshot(), atHold)
	r.LostByEnd = countLost(hs)
	r.ExtensionsPerCadence = float64(r.HoldOps["update"]) / float64(cadences)
	r.SlowestExtensionMs = float64(p.ops.takeSlowest("update")) / float64(time.Millisecond)
	if len(hs) > 0 {
		r.HeapPerLockB = float64(int64(during.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(hs))
		r.StackPerLockB = float64(int64(during.StackInuse)-int64(before.StackInuse)) / float64(len(hs))
	}

	var relErrs errList
	each(len(hs), func(i int) {
		rctx, cancel := context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
		if err := hs[i].release(rctx); err != nil {
			relErrs.add(err)
		}
	})
	r.ReleaseErrors = relErrs.count()
	if err := relErrs.first(); err != nil {
		r.FirstError = err.Error()
	}
	time.Sleep(100 * time.Millisecond) // let ended goroutines exit
	r.GoroutinesAfter = runtime.NumGoroutine()
	return r, ctx.Err()
}

func countLost(hs []held) int {
	n := 0
	for _, h := range hs {
		if h.isLost() {
			n++
		}
	}
	return n
}

// memStats returns the memory statistics after a full collection.
func memStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// each calls f(0..n-1) from holdConcurrency goroutines and waits for them.
func each(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(holdConcurrency, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

func diff(after, before map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

// errList collects errors from concurrent calls.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errList) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

func (l *errList) first() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 0 {
		return nil
	}
	return l.errs[0]
}
