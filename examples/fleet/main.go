// Command fleet shows a fleet of workers sharing shards: it starts three
// worker processes that run one fleet of 12 shards, kills one, and watches
// its shards move to the other two once its leases end; then one of them
// leaves gracefully, and the last takes its shards at once.
//
//	MONGODB_URI=mongodb://localhost:27017 go run ./examples/fleet
//	MONGODB_URI=mongodb://... go run ./examples/fleet -shards 64 -workers 5
//
// Each worker prints the shards it starts, with their fencing tokens, and
// those it stops. It writes the fleet's documents in database
// mongolock_demo (-db), and drops nothing. Each worker is this same
// program, started again with -worker; it leaves the fleet when its
// standard input closes.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

// config is what the parent and its workers share.
type config struct {
	uri, db, fleet string
	workers        int
	shards         int
	expiry         time.Duration
	stdout, stderr io.Writer
}

func main() {
	c := config{stdout: os.Stdout, stderr: os.Stderr}
	flag.StringVar(&c.db, "db", "mongolock_demo", "the database of the fleet's documents")
	flag.StringVar(&c.fleet, "fleet", "fleet-demo", "the fleet's name")
	flag.IntVar(&c.workers, "workers", 3, "worker processes, at least 3")
	flag.IntVar(&c.shards, "shards", 12, "the fleet's shards")
	flag.DurationVar(&c.expiry, "expiry", 2*time.Second, "the workers' leases (WithExpiry): how long a killed worker's shards wait")
	worker := flag.Int("worker", 0, "internal: run as worker number N")
	flag.Parse()

	c.uri = os.Getenv("MONGODB_URI")
	if c.uri == "" {
		fmt.Fprintln(os.Stderr, "fleet: MONGODB_URI is not set: set it to your server's connection string, "+
			"e.g. MONGODB_URI=mongodb://localhost:27017")
		os.Exit(2)
	}
	var err error
	if *worker > 0 {
		err = runWorker(c)
	} else {
		err = runParent(c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// runWorker runs the fleet until its standard input closes, printing
// "start SHARD TOKEN" and "stop SHARD" for the parent.
func runWorker(c config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // the parent says leave
	client, err := mongo.Connect(options.Client().ApplyURI(c.uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	locks, err := mongolock.NewProvider(client.Database(c.db), mongolock.WithExpiry(c.expiry))
	if err != nil {
		return err
	}
	defer func() { _ = locks.Close(context.Background()) }()

	var out sync.Mutex // one line at a time
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(c.stdout, format+"\n", args...)
	}
	err = locks.Fleet(c.fleet, c.shards).Run(ctx, func(ctx context.Context, s mongolock.Shard) error {
		say("start %d %d", s.Index, s.Handle.FencingToken())
		<-ctx.Done() // ... the shard's work, fenced by s.Handle ...
		say("stop %d", s.Index)
		return nil
	})
	if errors.Is(err, context.Canceled) {
		return nil // left, as asked
	}
	return err
}

// A proc is a worker process as the parent sees it.
type proc struct {
	n     int
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed once its output ended
}

// A board is who runs which shard, from the workers' lines.
type board struct {
	mu      sync.Mutex
	c       config
	start   time.Time
	running map[int]int   // shard: the worker that runs it
	tokens  map[int]int64 // shard: its last token
	errs    []error
	changed chan struct{} // signalled on each line
}

// line records one line of worker w.
func (b *board) line(w int, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := strings.Fields(text)
	at := time.Since(b.start).Round(time.Millisecond)
	switch {
	case len(f) == 3 && f[0] == "start":
		shard, _ := strconv.Atoi(f[1])
		token, _ := strconv.ParseInt(f[2], 10, 64)
		if token <= b.tokens[shard] {
			b.errs = append(b.errs, fmt.Errorf("shard %d's token %d followed %d", shard, token, b.tokens[shard]))
		}
		b.running[shard], b.tokens[shard] = w, token
		fmt.Fprintf(b.c.stdout, "%8v  worker %d starts shard %2d, fencing token %d\n", at, w, shard, token)
	case len(f) == 2 && f[0] == "stop":
		shard, _ := strconv.Atoi(f[1])
		if b.running[shard] == w {
			delete(b.running, shard)
		}
		fmt.Fprintf(b.c.stdout, "%8v  worker %d stops shard %2d\n", at, w, shard)
	default:
		fmt.Fprintf(b.c.stdout, "%8v  worker %d: %s\n", at, w, text)
	}
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// forget drops the shards of worker w, which was killed: it prints nothing more.
func (b *board) forget(w int) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var had []int
	for shard, by := range b.running {
		if by == w {
			had = append(had, shard)
			delete(b.running, shard)
		}
	}
	slices.Sort(had)
	return had
}

// balanced reports whether every shard runs, spread evenly over workers.
func (b *board) balanced(workers ...int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	count := map[int]int{}
	for _, w := range b.running {
		count[w]++
	}
	if len(b.running) != b.c.shards {
		return false
	}
	for _, w := range workers {
		if n := count[w]; n != b.c.shards/len(workers) && n != b.c.shards/len(workers)+1 {
			return false
		}
	}
	return true
}

// await waits until the fleet is balanced over workers; past within, it
// fails.
func (b *board) await(within time.Duration, what string, workers ...int) error {
	deadline := time.After(within)
	for !b.balanced(workers...) {
		select {
		case <-b.changed:
		case <-deadline:
			return fmt.Errorf("not within %v: %s", within, what)
		}
	}
	return nil
}

// runParent starts the workers, kills the last once the fleet is
// balanced, has the first leave once the rest are, and checks that the
// shards moved each time, with fencing tokens that increase per shard.
func runParent(c config) error {
	if c.workers < 3 {
		return fmt.Errorf("-workers %d: at least 3", c.workers)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	b := &board{c: c, start: time.Now(), running: map[int]int{}, tokens: map[int]int64{}, changed: make(chan struct{}, 1)}
	fmt.Fprintf(c.stdout, "%d workers share a fleet of %d shards; leases of %v\n\n", c.workers, c.shards, c.expiry)
	var procs []*proc
	defer func() {
		for _, p := range procs {
			_ = p.stdin.Close()
			<-p.done
		}
	}()
	for w := 1; w <= c.workers; w++ {
		cmd := exec.Command(exe, "-worker", strconv.Itoa(w), "-db", c.db, "-fleet", c.fleet,
			"-shards", strconv.Itoa(c.shards), "-expiry", c.expiry.String())
		cmd.Stderr = c.stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		p := &proc{n: w, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		procs = append(procs, p)
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				b.line(w, sc.Text())
			}
			_ = cmd.Wait()
		}()
	}
	all := make([]int, c.workers)
	for i := range all {
		all[i] = i + 1
	}
	enough := 10*c.expiry + 10*time.Second // a cold start's connections, and a loaded machine
	if err := b.await(enough, "every shard held, evenly", all...); err != nil {
		return err
	}

	victim := procs[len(procs)-1]
	_ = victim.cmd.Process.Kill()
	<-victim.done
	killed := time.Now()
	procs = procs[:len(procs)-1]
	fmt.Fprintf(c.stdout, "\nkilled worker %d, which ran shards %v: they move once its leases end\n\n", victim.n, b.forget(victim.n))
	if err := b.await(enough, "the killed worker's shards held again", all[:len(all)-1]...); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\nevery shard held again %v after the kill\n\n", time.Since(killed).Round(time.Millisecond))

	leaver := procs[0]
	_ = leaver.stdin.Close()
	left := time.Now()
	fmt.Fprintf(c.stdout, "\nworker %d leaves: it stops its shards and releases them\n\n", leaver.n)
	<-leaver.done
	procs = procs[1:]
	if err := b.await(enough, "the leaver's shards held again", all[1:len(all)-1]...); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\nevery shard held again %v after the leave began\n", time.Since(left).Round(time.Millisecond))
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(b.errs...)
}
