package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/testdb"
)

// Result is what a soak run measured, read from the server at the end.
type Result struct {
	Trials  int64 // critical sections entered: acquisitions
	Writes  int64 // writes the fenced resources accepted
	Kills   int64 // child processes SIGKILLed
	Drops   int64 // clients closed under a held lock
	Fenced  int64 // writes refused after the holder learnt of its loss
	Losses  int64 // handles that reported a loss
	Timeout int64 // Acquire calls that gave up after 20 s
	Errors  int64 // other failed calls (a dropped client's are not counted)

	Overlap     int64 // an entrant found a live holder inside
	OutOfOrder  int64 // an entrant's token was not greater than the last accepted
	Displaced   int64 // a holder's write or exit found someone else inside
	Unsignalled int64 // a dropped client's handle did not report its loss in time
	LeftInside  int64 // a live holder still inside after every child ended

	ChildFailures int // children that exited with an error (not killed)
	Elapsed       time.Duration
}

// Faults is the number of faults injected.
func (r *Result) Faults() int64 { return r.Kills + r.Drops }

// Violations is the number of broken guarantees seen; it must be 0.
func (r *Result) Violations() int64 {
	return r.Overlap + r.OutOfOrder + r.Displaced + r.Unsignalled + r.LeftInside
}

func (r *Result) String() string {
	return fmt.Sprintf("trials %d (acquisitions), faults injected %d (%d SIGKILLs of a child process, %d clients closed under a held lock), violations %d"+
		" (overlaps %d, out-of-order tokens %d, displaced holders %d, unsignalled losses %d, left inside %d)\n"+
		"  also: %d writes accepted, %d refused after a loss, %d losses reported, %d acquire timeouts, %d errors, %d failed children, %v",
		r.Trials, r.Faults(), r.Kills, r.Drops, r.Violations(),
		r.Overlap, r.OutOfOrder, r.Displaced, r.Unsignalled, r.LeftInside,
		r.Writes, r.Fenced, r.Losses, r.Timeout, r.Errors, r.ChildFailures, r.Elapsed.Round(time.Millisecond))
}

type config struct {
	procs, goroutines, names int
	dur, expiry, hold        time.Duration
	killEvery, dropEvery     time.Duration
	db, uri                  string
	sabotage, keep           bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.procs, "p", 3, "processes")
	fs.IntVar(&c.goroutines, "g", 3, "goroutines per process")
	fs.IntVar(&c.names, "k", 4, "lock names (and fenced resources)")
	fs.DurationVar(&c.dur, "d", 15*time.Second, "how long to run")
	fs.DurationVar(&c.expiry, "expiry", 2*time.Second, "lock expiry (a killed holder blocks its lock this long)")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "longest sleep between a critical section's writes")
	fs.DurationVar(&c.killEvery, "kill-every", 5*time.Second, "SIGKILL a random child about this often (0: never)")
	fs.DurationVar(&c.dropEvery, "drop-every", 6*time.Second, "each child closes its client under a held lock about this often (0: never)")
	fs.StringVar(&c.db, "db", testdb.Prefix+"soak", "database (dropped before the run, and after it unless -keep); its name must begin with "+testdb.Prefix)
	fs.StringVar(&c.uri, "uri", "", "server (default: "+testdb.EnvURI+", else a test server of its own: testcontainers where Docker answers, else scripts/testdb)")
	fs.BoolVar(&c.sabotage, "sabotage", false, "children work after releasing: the run must report violations")
	fs.BoolVar(&c.keep, "keep", false, "keep the database after the run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.procs < 1 || c.goroutines < 1 || c.names < 1 || c.dur <= 0 {
		return c, fmt.Errorf("need -p, -g, -k >= 1 and -d > 0")
	}
	if !strings.HasPrefix(c.db, testdb.Prefix) {
		return c, fmt.Errorf("-db %q: the soak drops its database, so it takes only a name beginning with %q", c.db, testdb.Prefix)
	}
	return c, nil
}

// runParent runs a soak with the given flags, prints the result to stdout
// and the children's complaints to stderr.
func runParent(args []string, stdout, stderr io.Writer) (*Result, error) {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return nil, err
	}
	if cfg.uri == "" {
		cfg.uri = os.Getenv(testdb.EnvURI)
	}
	if cfg.uri == "" {
		s, _, err := testdb.Connect()
		if err != nil {
			return nil, err
		}
		defer testdb.Close()
		fmt.Fprintf(stdout, "%s is not set: using %s\n", testdb.EnvURI, s.Name())
		cfg.uri = s.URI
	}
	return soak(cfg, stdout, stderr)
}

// A proc is a running child process.
type proc struct {
	id    string
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed when it has exited
	err   error         // its exit, once done
}

func soak(cfg config, stdout, stderr io.Writer) (*Result, error) {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.uri))
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(cfg.db)
	if err := testdb.DropDatabase(ctx, db); err != nil {
		return nil, err
	}
	if !cfg.keep {
		defer func() { _ = testdb.DropDatabase(context.Background(), db) }()
	}
	resources := db.Collection("soak_resources")
	for k := range cfg.names {
		if _, err := resources.InsertOne(ctx, bson.D{{Key: "_id", Value: k}, {Key: fLast, Value: int64(0)}, {Key: fEntries, Value: 0}, {Key: fWrites, Value: 0}}); err != nil {
			return nil, err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}

	kills, drops := "no SIGKILLs", "no clients closed"
	if cfg.killEvery > 0 {
		kills = fmt.Sprintf("a SIGKILL about every %v", cfg.killEvery)
	}
	if cfg.dropEvery > 0 {
		drops = fmt.Sprintf("a client closed per process about every %v", cfg.dropEvery)
	}
	fmt.Fprintf(stdout, "soak: %d processes x %d goroutines over %d names for %v (expiry %v; %s, %s)\n",
		cfg.procs, cfg.goroutines, cfg.names, cfg.dur, cfg.expiry, kills, drops)
	start := time.Now()
	until := start.Add(cfg.dur)
	var (
		outMu   sync.Mutex // one child's line at a time
		seq     int
		running []*proc
		all     []*proc
	)
	spawn := func() error {
		seq++
		id := "c" + strconv.Itoa(seq)
		cmd := exec.Command(exe,
			"-id", id, "-db", cfg.db, "-g", strconv.Itoa(cfg.goroutines), "-k", strconv.Itoa(cfg.names),
			"-expiry", cfg.expiry.String(), "-hold", cfg.hold.String(), "-drop-every", cfg.dropEvery.String(),
			"-until", strconv.FormatInt(until.UnixNano(), 10), "-sabotage="+strconv.FormatBool(cfg.sabotage))
		cmd.Env = append(os.Environ(), childEnv+"=1", testdb.EnvURI+"="+cfg.uri)
		out := &lineWriter{mu: &outMu, w: stderr}
		cmd.Stdout, cmd.Stderr = out, out
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		p := &proc{id: id, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		go func() {
			p.err = cmd.Wait()
			_ = stdin.Close()
			close(p.done)
		}()
		running = append(running, p)
		all = append(all, p)
		return nil
	}
	defer func() { // on an early return: no child outlives the parent
		for _, p := range all {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}()
	for range cfg.procs {
		if err := spawn(); err != nil {
			return nil, err
		}
	}

	r := &Result{}
	// Kill a random child now and then, while there is time for its locks
	// to expire and be taken again before the end; start another.
	if cfg.killEvery > 0 {
		for {
			next := time.Now().Add(time.Duration(float64(cfg.killEvery) * (0.5 + rand.Float64())))
			if next.After(until.Add(-2 * cfg.expiry)) {
				break
			}
			time.Sleep(time.Until(next))
			i := rand.IntN(len(running))
			victim := running[i]
			running = append(running[:i], running[i+1:]...)
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return nil, fmt.Errorf("kill %s: %w", victim.id, err)
			}
			<-victim.done
			r.Kills++
			// The victim can write nothing more: whatever it was inside of,
			// it left dead.
			if _, err := resources.UpdateMany(ctx, bson.D{{Key: fInside + ".proc", Value: victim.id}},
				bson.D{{Key: "$set", Value: bson.D{{Key: fInside + ".dead", Value: true}}}}); err != nil {
				return nil, err
			}
			if err := spawn(); err != nil {
				return nil, err
			}
		}
	}

	// The children stop acquiring at until; a section in progress ends
	// within 2 expiries (a dropped client's loss) plus round trips.
	grace := time.NewTimer(time.Until(until) + 2*cfg.expiry + 30*time.Second)
	defer grace.Stop()
	for _, p := range running {
		select {
		case <-p.done:
		case <-grace.C:
			return nil, fmt.Errorf("child %s did not end within 30 s of the end of the run", p.id)
		}
		if p.err != nil {
			r.ChildFailures++
			fmt.Fprintf(stderr, "soak: child %s: %v\n", p.id, p.err)
		}
	}
	r.Elapsed = time.Since(start)
	if err := r.read(ctx, db); err != nil {
		return nil, err
	}
	fmt.Fprintln(stdout, r)
	if r.Violations() > 0 {
		fmt.Fprintln(stdout, "FAIL: violations")
	}
	return r, nil
}

// read sums the counts of the resource and stats documents.
func (r *Result) read(ctx context.Context, db *mongo.Database) error {
	cur, err := db.Collection("soak_resources").Find(ctx, bson.D{})
	if err != nil {
		return err
	}
	var docs []bson.M
	if err := cur.All(ctx, &docs); err != nil {
		return err
	}
	for _, d := range docs {
		r.Trials += num(d[fEntries])
		r.Writes += num(d[fWrites])
		r.Overlap += num(d[vOverlap])
		r.OutOfOrder += num(d[vOutOfOrder])
		r.Displaced += num(d[vDisplaced])
		r.Unsignalled += num(d[vUnsignalled])
		if in, ok := d[fInside].(bson.M); ok && in["dead"] != true {
			r.LeftInside++
		}
	}
	var stats bson.M
	err = db.Collection("soak_stats").FindOne(ctx, bson.D{{Key: "_id", Value: statsID}}).Decode(&stats)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return err
	}
	r.Drops, r.Fenced, r.Losses = num(stats[sDrops]), num(stats[sFenced]), num(stats[sLosses])
	r.Timeout, r.Errors = num(stats[sTimeouts]), num(stats[sErrors])
	return nil
}

func num(v any) int64 {
	switch n := v.(type) {
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

// lineWriter passes a child's output on whole lines at a time, so that
// lines of different children (sharing mu) do not interleave.
type lineWriter struct {
	mu  *sync.Mutex
	w   io.Writer
	buf []byte // exec writes from one goroutine per child
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if i := strings.LastIndexByte(string(l.buf), '\n'); i >= 0 {
		_, _ = l.w.Write(l.buf[:i+1])
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
	}
	return len(p), nil
}
