package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

// Workload K, cost per holder: what one acquisition and one release of a
// semaphore's slot cost when its document already lists n-1 live holders
// (and a refused try when it lists n), for each n of holderSizes. One
// process (a client and Provider of its own) holds the n-1 slots; another
// times TryAcquire+Release pairs, one at a time, in rounds over the sizes.
var holderSizes = []int{4, 64, 512}

// holderPerRound is how many pairs, and then refused tries, each size gets
// in a round of workload K.
const holderPerRound = 20

// holderExpiry is the filling process's lease: long, so that no extension
// of its holders runs while the pairs are timed.
const holderExpiry = 10 * time.Minute

func holderTitle() string {
	return fmt.Sprintf("a semaphore already held by n-1 holders of another process: TryAcquire + Release, one at a time, n = %v", holderSizes)
}

// holderRun is what workload K measured.
type holderRun struct {
	Rounds    int     `json:"rounds"`    // over every size, rotating which goes first
	PerRound  int     `json:"perRound"`  // pairs (and refused tries) per size and round
	PingP50US float64 `json:"pingP50Us"` // a ping's command time: the transport's part of a command
	Sizes     []holderCost
}

// holderCost is workload K's figures for one n.
type holderCost struct {
	N          int    `json:"n"`
	ReplyBytes int    `json:"acquireReplyBytes"` // the acquisition's reply, p50
	Acquire    timing `json:"acquire"`           // TryAcquire taking the last free slot
	Release    timing `json:"release"`
	Refused    timing `json:"refused"` // TryAcquire with every slot held
}

// timing is one call's time, p50 and p90 of its samples.
type timing struct {
	Samples int `json:"samples"`
	// Call is the library call as its caller sees it; Command is its one
	// command from the request's sending to the reply's reading (the
	// driver's command monitor): the server's work and the transport.
	CallP50US    float64 `json:"callP50Us"`
	CallP90US    float64 `json:"callP90Us"`
	CommandP50US float64 `json:"commandP50Us"`
	CommandP90US float64 `json:"commandP90Us"`
}

func timingOf(calls, cmds []time.Duration) timing {
	return timing{Samples: len(calls), CallP50US: us(percentile(calls, 50)), CallP90US: us(percentile(calls, 90)),
		CommandP50US: us(percentile(cmds, 50)), CommandP90US: us(percentile(cmds, 90))}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// commandLog keeps the commands a client's monitor saw succeed.
type commandLog struct {
	mu   sync.Mutex
	done []*event.CommandSucceededEvent
}

func (l *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		l.mu.Lock()
		l.done = append(l.done, e)
		l.mu.Unlock()
	}}
}

// timed runs f, a call that sends one command called name, and returns how
// long the call took and that command's event.
func (l *commandLog) timed(name string, f func() error) (time.Duration, *event.CommandSucceededEvent, error) {
	l.mu.Lock()
	l.done = nil
	l.mu.Unlock()
	t0 := time.Now()
	err := f()
	took := time.Since(t0)
	if err != nil {
		return took, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.done) - 1; i >= 0; i-- {
		if l.done[i].CommandName == name {
			return took, l.done[i], nil
		}
	}
	return took, nil, fmt.Errorf("no %s command seen", name)
}

// holderSamples are the samples of one n.
type holderSamples struct {
	acq, acqCmd, rel, relCmd, ref, refCmd []time.Duration
	reply                                 []int // the acquisition's reply, bytes
}

// runHolderCost runs workload K: rounds rounds of perRound pairs per size,
// then as many refused tries.
func runHolderCost(ctx context.Context, e env, rounds, perRound int) (holderRun, error) {
	run := holderRun{Rounds: rounds, PerRound: perRound}
	coll := collection("K", "mongolock")
	filler, _, err := connect(ctx, e)
	if err != nil {
		return run, err
	}
	defer closeProcesses([]*process{{client: filler}})
	fp, err := mongolock.NewProvider(filler.Database(e.db), mongolock.WithCollection(coll), mongolock.WithExpiry(holderExpiry))
	if err != nil {
		return run, err
	}
	log := &commandLog{}
	tc, err := mongo.Connect(options.Client().ApplyURI(e.uri).SetMonitor(log.monitor()))
	if err != nil {
		return run, err
	}
	defer closeProcesses([]*process{{client: tc}})
	tp, err := mongolock.NewProvider(tc.Database(e.db), mongolock.WithCollection(coll))
	if err != nil {
		return run, err
	}

	hb := &holderBench{ctx: ctx, log: log, tc: tc, filler: fp, timer: tp, rounds: rounds, perRound: perRound,
		samples: make([]holderSamples, len(holderSizes))}
	defer func() { releaseAll(hb.fills) }()
	// Fill each semaphore with n-1 holders, one at a time; time the pairs;
	// fill the last slot; time the refused tries.
	for _, n := range holderSizes {
		if err := hb.fill(n, n-1); err != nil {
			return run, err
		}
	}
	if err := hb.rotate(hb.pair); err != nil {
		return run, err
	}
	for _, n := range holderSizes {
		if err := hb.fill(n, 1); err != nil {
			return run, err
		}
	}
	if err := hb.rotate(hb.refused); err != nil {
		return run, err
	}

	run.PingP50US = us(percentile(hb.pings, 50))
	for i, n := range holderSizes {
		sm := hb.samples[i]
		run.Sizes = append(run.Sizes, holderCost{N: n, ReplyBytes: percentile(sm.reply, 50),
			Acquire: timingOf(sm.acq, sm.acqCmd), Release: timingOf(sm.rel, sm.relCmd), Refused: timingOf(sm.ref, sm.refCmd)})
	}
	return run, nil
}

// A holderBench is workload K in progress: the filling process's
// provider and what it holds, the timed process's provider and client,
// whose commands log sees, and the samples so far.
type holderBench struct {
	ctx              context.Context
	log              *commandLog
	tc               *mongo.Client
	filler, timer    *mongolock.Provider
	rounds, perRound int
	fills            []*mongolock.Handle
	samples          []holderSamples // by index of holderSizes
	pings            []time.Duration
}

// fill takes count slots of the semaphore of n for the filling process.
func (hb *holderBench) fill(n, count int) error {
	s := hb.filler.Semaphore(holderName(n), n)
	for range count {
		cctx, cancel := context.WithTimeout(hb.ctx, 10*time.Second)
		h, err := s.TryAcquire(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("filling the semaphore of n=%d: %w", n, err)
		}
		hb.fills = append(hb.fills, h)
	}
	return nil
}

// pair times a TryAcquire of the last free slot of the i-th size and its
// Release, recording them if record.
func (hb *holderBench) pair(i int, record bool) error {
	n := holderSizes[i]
	s, sm := hb.timer.Semaphore(holderName(n), n), &hb.samples[i]
	cctx, cancel := context.WithTimeout(hb.ctx, 10*time.Second)
	defer cancel()
	var h *mongolock.Handle
	acq, acqCmd, err := hb.log.timed("findAndModify", func() (err error) {
		h, err = s.TryAcquire(cctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("n=%d: TryAcquire with %d of %d slots held: %w", n, n-1, n, err)
	}
	rel, relCmd, err := hb.log.timed("update", func() error { return h.Release(cctx) })
	if err != nil {
		return fmt.Errorf("n=%d: Release: %w", n, err)
	}
	if record {
		sm.acq, sm.acqCmd = append(sm.acq, acq), append(sm.acqCmd, acqCmd.Duration)
		sm.rel, sm.relCmd = append(sm.rel, rel), append(sm.relCmd, relCmd.Duration)
		sm.reply = append(sm.reply, len(acqCmd.Reply))
	}
	return nil
}

// refused times a TryAcquire of the i-th size with every slot held,
// recording it if record.
func (hb *holderBench) refused(i int, record bool) error {
	n := holderSizes[i]
	s, sm := hb.timer.Semaphore(holderName(n), n), &hb.samples[i]
	cctx, cancel := context.WithTimeout(hb.ctx, 10*time.Second)
	defer cancel()
	try, cmd, err := hb.log.timed("findAndModify", func() error {
		h, err := s.TryAcquire(cctx)
		switch {
		case err == nil:
			_ = h.Release(cctx)
			return errors.New("took a slot")
		case errors.Is(err, mongolock.ErrNotAcquired):
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("n=%d: TryAcquire with all %d slots held: %w", n, n, err)
	}
	if record {
		sm.ref, sm.refCmd = append(sm.ref, try), append(sm.refCmd, cmd.Duration)
	}
	return nil
}

// rotate runs f once per size to warm up, then perRound times per size in
// each round, rotating which size goes first, with a ping timed after
// each round.
func (hb *holderBench) rotate(f func(i int, record bool) error) error {
	for i := range holderSizes { // warm-up: the index, the connections
		if err := f(i, false); err != nil {
			return err
		}
	}
	for round := range hb.rounds {
		for k := range holderSizes {
			i := (k + round) % len(holderSizes)
			for range hb.perRound {
				if err := f(i, true); err != nil {
					return err
				}
			}
		}
		_, cmd, err := hb.log.timed("ping", func() error { return hb.tc.Ping(hb.ctx, nil) })
		if err != nil {
			return err
		}
		hb.pings = append(hb.pings, cmd.Duration)
	}
	return hb.ctx.Err()
}

func holderName(n int) string { return fmt.Sprintf("sem-%d", n) }

// releaseAll releases hs, holdConcurrency at a time.
func releaseAll(hs []*mongolock.Handle) {
	each(len(hs), func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = hs[i].Release(ctx)
	})
}

// slope is how much fig grows per holder from the first size to the last
// (at least two).
func (r *holderRun) slope(fig func(holderCost) float64) float64 {
	a, b := r.Sizes[0], r.Sizes[len(r.Sizes)-1]
	return (fig(b) - fig(a)) / float64(b.N-a.N)
}
