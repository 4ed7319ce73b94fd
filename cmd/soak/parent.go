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
	"slices"
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
	Per     [numKinds]Counts // by kind: mutex, semaphore, rwlock
	N       int              // a semaphore's slots
	Writes  int64            // writes the fenced resources accepted
	Kills   int64            // child processes SIGKILLed
	Fenced  int64            // writes refused after the holder learnt of its loss
	Losses  int64            // handles that reported a loss
	Timeout int64            // Acquire calls that gave up after 20 s
	Errors  int64            // other failed calls (a dropped client's are not counted)

	ChildFailures int // children that exited with an error (not killed)
	Elapsed       time.Duration
}

// Counts are one kind's trials, faults and violations.
type Counts struct {
	Trials      int64 // critical sections entered: acquisitions
	WriteTrials int64 // of an rwlock's trials, the writers'
	Peak        int64 // a semaphore's or rwlock's: the most holders inside at once
	Killed      int64 // holders inside a SIGKILLed child process
	Dropped     int64 // holders whose client was closed under them

	Overlap     int64 // an entrant found a conflicting live holder inside (n of them, for a semaphore)
	OutOfOrder  int64 // an entrant's token was not greater than one it must outrank
	Displaced   int64 // a holder's write or exit found that someone had entered who must not have
	Unsignalled int64 // a dropped client's handle did not report its loss in time
	LeftInside  int64 // a live holder still inside after every child ended
}

// Violations is the number of broken guarantees seen; it must be 0.
func (c *Counts) Violations() int64 {
	return c.Overlap + c.OutOfOrder + c.Displaced + c.Unsignalled + c.LeftInside
}

// Trials is the number of critical sections entered, of every kind.
func (r *Result) Trials() (n int64) {
	for _, c := range r.Per {
		n += c.Trials
	}
	return n
}

// Drops is the number of clients closed under a held handle.
func (r *Result) Drops() (n int64) {
	for _, c := range r.Per {
		n += c.Dropped
	}
	return n
}

// Faults is the number of faults injected.
func (r *Result) Faults() int64 { return r.Kills + r.Drops() }

// Violations is the number of broken guarantees seen; it must be 0.
func (r *Result) Violations() (n int64) {
	for _, c := range r.Per {
		n += c.Violations()
	}
	return n
}

func (r *Result) String() string {
	m, s, rw := &r.Per[mutex], &r.Per[semaphore], &r.Per[rwlock]
	var b strings.Builder
	fmt.Fprintf(&b, "trials: mutex %d, semaphore %d, rwlock %d (%d writers); violations: mutex %d, semaphore %d, rwlock %d;"+
		" faults injected %d (%d SIGKILLs of a child process, %d clients closed under a held handle)",
		m.Trials, s.Trials, rw.Trials, rw.WriteTrials, m.Violations(), s.Violations(), rw.Violations(),
		r.Faults(), r.Kills, r.Drops())
	for kd := range numKinds {
		c := &r.Per[kd]
		fmt.Fprintf(&b, "\n  %-10s overlaps %d, out-of-order tokens %d, displaced holders %d, unsignalled losses %d, left inside %d;"+
			" holders killed %d, clients closed under a holder %d",
			kd.String()+":", c.Overlap, c.OutOfOrder, c.Displaced, c.Unsignalled, c.LeftInside, c.Killed, c.Dropped)
		switch kd {
		case semaphore:
			fmt.Fprintf(&b, "; at most %d of %d slots inside at once", c.Peak, r.N)
		case rwlock:
			fmt.Fprintf(&b, "; at most %d holders inside at once", c.Peak)
		}
	}
	fmt.Fprintf(&b, "\n  also: %d writes accepted, %d refused after a loss, %d losses reported, %d acquire timeouts, %d errors, %d failed children, %v",
		r.Writes, r.Fenced, r.Losses, r.Timeout, r.Errors, r.ChildFailures, r.Elapsed.Round(time.Millisecond))
	return b.String()
}

type config struct {
	procs, goroutines    int
	names                [numKinds]int // names per kind
	n                    int           // a semaphore's slots
	dur, expiry, hold    time.Duration
	killEvery, dropEvery time.Duration
	db, uri              string
	sabotage, keep       bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.procs, "p", 3, "processes")
	fs.IntVar(&c.goroutines, "g", 3, "goroutines per process")
	fs.IntVar(&c.names[mutex], "k", 4, "mutex names (each with its fenced resource; 0: no mutexes)")
	fs.IntVar(&c.names[semaphore], "ks", 1, "semaphore names (0: no semaphores)")
	fs.IntVar(&c.names[rwlock], "kr", 2, "reader-writer lock names (0: no rwlocks)")
	fs.IntVar(&c.n, "n", 3, "a semaphore's slots")
	fs.DurationVar(&c.dur, "d", 15*time.Second, "how long to run")
	fs.DurationVar(&c.expiry, "expiry", 2*time.Second, "lock expiry (a killed holder blocks its lock this long)")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "longest sleep between a critical section's writes")
	fs.DurationVar(&c.killEvery, "kill-every", 5*time.Second, "SIGKILL a child about this often, one with a holder inside if there is one (0: never)")
	fs.DurationVar(&c.dropEvery, "drop-every", 6*time.Second, "each child closes its client under a held handle about this often, under each kind in turn (0: never)")
	fs.StringVar(&c.db, "db", testdb.Prefix+"soak", "database (dropped before the run, and after it unless -keep); its name must begin with "+testdb.Prefix)
	fs.StringVar(&c.uri, "uri", "", "server (default: "+testdb.EnvURI+", else a test server of its own: testcontainers where Docker answers, else scripts/testdb)")
	fs.BoolVar(&c.sabotage, "sabotage", false, "children work after releasing: the run must report violations")
	fs.BoolVar(&c.keep, "keep", false, "keep the database after the run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.procs < 1 || c.goroutines < 1 || c.n < 1 || c.dur <= 0 || min(c.names[mutex], c.names[semaphore], c.names[rwlock]) < 0 || c.names == [numKinds]int{} {
		return c, fmt.Errorf("need -p, -g, -n >= 1, -d > 0, and -k, -ks, -kr >= 0, not all 0")
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
	nth   int // which of the -p processes it is: a replacement takes its victim's
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
	for kd := range numKinds {
		for k := range cfg.names[kd] {
			doc := bson.D{{Key: "_id", Value: lockName(kd, k)}, {Key: fKind, Value: kd.String()},
				{Key: fLast, Value: int64(0)}, {Key: fEntries, Value: 0}, {Key: fWrites, Value: 0}}
			if kd != mutex {
				doc = append(doc, bson.E{Key: fHolders, Value: bson.A{}}, bson.E{Key: fPeak, Value: 0},
					bson.E{Key: fLastWriter, Value: int64(0)}, bson.E{Key: fWEntries, Value: 0})
			}
			if _, err := resources.InsertOne(ctx, doc); err != nil {
				return nil, err
			}
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
	fmt.Fprintf(stdout, "soak: %d processes x %d goroutines over %d mutex, %d semaphore (%d slots) and %d rwlock names for %v (expiry %v; %s, %s)\n",
		cfg.procs, cfg.goroutines, cfg.names[mutex], cfg.names[semaphore], cfg.n, cfg.names[rwlock], cfg.dur, cfg.expiry, kills, drops)
	start := time.Now()
	until := start.Add(cfg.dur)
	var (
		outMu   sync.Mutex // one child's line at a time
		seq     int
		running []*proc
		all     []*proc
	)
	spawn := func(nth int) error {
		seq++
		id := "c" + strconv.Itoa(seq)
		cmd := exec.Command(exe,
			"-id", id, "-db", cfg.db, "-g", strconv.Itoa(cfg.goroutines), "-k", strconv.Itoa(cfg.names[mutex]),
			"-ks", strconv.Itoa(cfg.names[semaphore]), "-kr", strconv.Itoa(cfg.names[rwlock]), "-n", strconv.Itoa(cfg.n),
			"-expiry", cfg.expiry.String(), "-hold", cfg.hold.String(), "-drop-every", cfg.dropEvery.String(),
			"-drop-kind", strconv.Itoa(nth%int(numKinds)),
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
		p := &proc{id: id, nth: nth, cmd: cmd, stdin: stdin, done: make(chan struct{})}
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
	for nth := range cfg.procs {
		if err := spawn(nth); err != nil {
			return nil, err
		}
	}

	r := &Result{N: cfg.n}
	// Kill a child now and then, while there is time for its locks to
	// expire and be taken again before the end; start another. The victim
	// is one inside a critical section of the kind whose holders were
	// killed least so far, so that kills hit every kind.
	var (
		hits   [numKinds]int64
		killed = bson.A{} // the victims' ids
	)
	if cfg.killEvery > 0 {
		for {
			next := time.Now().Add(time.Duration(float64(cfg.killEvery) * (0.5 + rand.Float64())))
			if next.After(until.Add(-2 * cfg.expiry)) {
				break
			}
			time.Sleep(time.Until(next))
			i, err := pickVictim(ctx, resources, running, cfg.names, hits)
			if err != nil {
				return nil, err
			}
			victim := running[i]
			running = append(running[:i], running[i+1:]...)
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return nil, fmt.Errorf("kill %s: %w", victim.id, err)
			}
			<-victim.done
			r.Kills++
			// The victim can write nothing more: whatever it was inside of,
			// it left dead. A request it sent just before may still reach
			// the server after this: an entrant refused by one of its
			// holders finds it in the list of the killed (reap), and so
			// does the end of the run.
			killed = append(killed, victim.id)
			if _, err := db.Collection("soak_stats").UpdateOne(ctx, bson.D{{Key: "_id", Value: statsID}},
				bson.D{{Key: "$addToSet", Value: bson.D{{Key: sKilled, Value: victim.id}}}}, options.UpdateOne().SetUpsert(true)); err != nil {
				return nil, err
			}
			for kd := range numKinds {
				n, err := markDead(ctx, resources, kd, bson.D{{Key: fKind, Value: kd.String()}}, bson.A{victim.id})
				if err != nil {
					return nil, err
				}
				hits[kd] += n
			}
			if err := spawn(victim.nth); err != nil {
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
	for kd := range numKinds {
		if _, err := markDead(ctx, resources, kd, bson.D{{Key: fKind, Value: kd.String()}}, killed); err != nil {
			return nil, err
		}
	}
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
		name, _ := d[fKind].(string)
		kd := kind(slices.Index(kindNames[:], name))
		if kd < 0 {
			return fmt.Errorf("resource %v: no kind", d["_id"])
		}
		c := &r.Per[kd]
		c.Trials += num(d[fEntries])
		c.WriteTrials += num(d[fWEntries])
		c.Peak = max(c.Peak, num(d[fPeak]))
		c.Killed += num(d[fKilled])
		c.Dropped += num(d[fDropped])
		c.Overlap += num(d[vOverlap])
		c.OutOfOrder += num(d[vOutOfOrder])
		c.Displaced += num(d[vDisplaced])
		c.Unsignalled += num(d[vUnsignalled])
		r.Writes += num(d[fWrites])
		if in, ok := d[fInside].(bson.M); ok && in["dead"] != true {
			c.LeftInside++
		}
		if in, ok := d[fHolders].(bson.A); ok {
			c.LeftInside += int64(len(in)) // the killed were taken out
		}
	}
	var stats bson.M
	err = db.Collection("soak_stats").FindOne(ctx, bson.D{{Key: "_id", Value: statsID}}).Decode(&stats)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return err
	}
	r.Fenced, r.Losses = num(stats[sFenced]), num(stats[sLosses])
	r.Timeout, r.Errors = num(stats[sTimeouts]), num(stats[sErrors])
	return nil
}

// pickVictim returns the index in running of the child to SIGKILL: one
// found with a live holder inside a resource of a kind whose holders were
// killed least so far, watched for up to half a second; then of any kind,
// for as long again; else any child.
func pickVictim(ctx context.Context, resources *mongo.Collection, running []*proc, names [numKinds]int, hits [numKinds]int64) (int, error) {
	var fewest, every bson.A
	for _, kd := range leastHit(hits, names) {
		fewest = append(fewest, kd.String())
	}
	for kd := range numKinds {
		every = append(every, kd.String())
	}
	live := bson.A{
		bson.D{{Key: fHolders + ".0", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: fInside, Value: bson.D{{Key: "$exists", Value: true}}}, {Key: fInside + ".dead", Value: bson.D{{Key: "$ne", Value: true}}}},
	}
	for start := time.Now(); time.Since(start) < time.Second; time.Sleep(5 * time.Millisecond) {
		kinds := fewest
		if time.Since(start) > time.Second/2 {
			kinds = every
		}
		cur, err := resources.Find(ctx, bson.D{{Key: fKind, Value: bson.D{{Key: "$in", Value: kinds}}}, {Key: "$or", Value: live}})
		if err != nil {
			return 0, err
		}
		var docs []struct {
			Inside  *struct{ Proc string }  `bson:"inside"`
			Holders []struct{ Proc string } `bson:"holders"`
		}
		if err := cur.All(ctx, &docs); err != nil {
			return 0, err
		}
		var inside []int
		for _, d := range docs {
			procs := d.Holders
			if d.Inside != nil {
				procs = append(procs, *d.Inside)
			}
			for _, h := range procs {
				if i := slices.IndexFunc(running, func(p *proc) bool { return p.id == h.Proc }); i >= 0 {
					inside = append(inside, i)
				}
			}
		}
		if len(inside) > 0 {
			return inside[rand.IntN(len(inside))], nil
		}
	}
	return rand.IntN(len(running)), nil
}

// leastHit returns the kinds with names whose count is the least.
func leastHit(counts [numKinds]int64, names [numKinds]int) []kind {
	var least []kind
	for kd := range numKinds {
		switch {
		case names[kd] == 0:
		case len(least) == 0 || counts[kd] < counts[least[0]]:
			least = []kind{kd}
		case counts[kd] == counts[least[0]]:
			least = append(least, kd)
		}
	}
	return least
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
