package main

import (
	"context"
	"maps"
	"runtime"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// opCounter counts the commands one client sends, by command name, from the
// driver's command monitor (Started events), and keeps the slowest reply
// of each (Succeeded events).
type opCounter struct {
	mu      sync.Mutex
	n       map[string]int
	slowest map[string]time.Duration
}

func (c *opCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		c.n[e.CommandName]++
		c.mu.Unlock()
	}, Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		c.mu.Lock()
		c.slowest[e.CommandName] = max(c.slowest[e.CommandName], e.Duration)
		c.mu.Unlock()
	}}
}

// takeSlowest returns the slowest reply to a command called name since the
// last call, and forgets it.
func (c *opCounter) takeSlowest(name string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.slowest[name]
	delete(c.slowest, name)
	return d
}

func (c *opCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// commands is what the clients of a run sent in a window, by the command
// monitor (Started events).
type commands struct {
	Ops          int            `json:"ops"`
	OpsByCommand map[string]int `json:"opsByCommand"`
	OpsPerSec    float64        `json:"commandsPerSecond"`
}

// countCommands is ops, sent over d.
func countCommands(ops map[string]int, d time.Duration) commands {
	c := commands{OpsByCommand: ops}
	for _, n := range ops {
		c.Ops += n
	}
	c.OpsPerSec = float64(c.Ops) / d.Seconds()
	return c
}

// env is where the workloads run: one server, one database.
type env struct {
	uri string
	db  string
}

// A process is what the issue calls a process: a client of its own, with its
// own command counter and its own locker (Provider, for mongolock).
type process struct {
	client *mongo.Client
	ops    *opCounter
	lk     locker
}

func startProcess(ctx context.Context, e env, im impl, coll string, expiry time.Duration) (*process, error) {
	client, ops, err := connect(ctx, e)
	if err != nil {
		return nil, err
	}
	lk, err := im.open(client.Database(e.db), coll, expiry)
	if err != nil {
		_ = client.Disconnect(ctx)
		return nil, err
	}
	return &process{client: client, ops: ops, lk: lk}, nil
}

// connect opens a process's client, with a counter of its commands.
func connect(ctx context.Context, e env) (*mongo.Client, *opCounter, error) {
	ops := &opCounter{n: map[string]int{}, slowest: map[string]time.Duration{}}
	client, err := mongo.Connect(options.Client().ApplyURI(e.uri).SetMonitor(ops.monitor()))
	if err != nil {
		return nil, nil, err
	}
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(ctx)
		return nil, nil, err
	}
	delete(ops.n, "ping") // ops of the run only: the ping above is ours
	return client, ops, nil
}

func startProcesses(ctx context.Context, e env, im impl, coll string, expiry time.Duration, n int) ([]*process, error) {
	var ps []*process
	for range n {
		p, err := startProcess(ctx, e, im, coll, expiry)
		if err != nil {
			closeProcesses(ps)
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func closeProcesses(ps []*process) {
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = p.client.Disconnect(ctx)
		cancel()
	}
}

func sumOps(ps []*process) map[string]int {
	total := map[string]int{}
	for _, p := range ps {
		for k, v := range p.ops.snapshot() {
			total[k] += v
		}
	}
	return total
}

// cpuTime is the CPU time (user and system) this OS process has used: every
// "process" of a run, with its driver and locker, and the workers.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settle gives the server and the runtime a moment between runs.
func settle() {
	runtime.GC()
	time.Sleep(300 * time.Millisecond)
}
