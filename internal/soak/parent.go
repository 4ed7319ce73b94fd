package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
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

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/soakcheck"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Result is what a soak run measured, read from the server at the end.
type Result struct {
	Per    [numKinds]Counts // by kind: mutex, semaphore, rwlock, election
	N      int              // a semaphore's slots
	Writes int64            // writes the fenced resources accepted
	Kills  int64            // child processes SIGKILLed
	Fenced int64            // writes refused after the holder learnt of its loss
	Losses int64            // handles that reported a loss
	Errors int64            // failed calls (a dropped client's are not counted)
	GiveUp time.Duration    // how long an acquisition waited before it gave up

	// The TTL indexes on expiresAt of the library's collections at the end
	// of the run, and the documents the sweeps deleted once their
	// expiresAt had passed, by collection.
	TTL         []TTLIndex
	Swept       map[string]int64
	SweepErrors int64

	ChildFailures int // children that exited with an error (not killed)
	Elapsed       time.Duration
}

// A TTLIndex is a TTL index on expiresAt, as listIndexes showed it.
type TTLIndex struct {
	Collection, Name string
	Seconds          int64 // expireAfterSeconds
}

// Counts are one kind's trials, faults and violations.
type Counts = soakcheck.Counts

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
	var b strings.Builder
	b.WriteString(soakcheck.Summary(&r.Per, r.N, r.GiveUp, fmt.Sprintf("faults injected %d (%d SIGKILLs of a child process, %d clients closed under a held handle)",
		r.Faults(), r.Kills, r.Drops())))
	b.WriteString("\n  TTL indexes on expiresAt at the end:")
	for i, ix := range r.TTL {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s %s expireAfterSeconds %d", ix.Collection, ix.Name, ix.Seconds)
	}
	b.WriteString("; documents swept once their expiresAt had passed:")
	for i, coll := range slices.Sorted(maps.Keys(r.Swept)) {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s %d", coll, r.Swept[coll])
	}
	fmt.Fprintf(&b, " (%d sweeps failed)", r.SweepErrors)
	fmt.Fprintf(&b, "\n  also: %d writes accepted, %d refused after a loss, %d losses reported, %d errors, %d failed children, %v",
		r.Writes, r.Fenced, r.Losses, r.Errors, r.ChildFailures, r.Elapsed.Round(time.Millisecond))
	return b.String()
}

type config struct {
	procs, goroutines    int
	names                [numKinds]int // names per kind
	n                    int           // a semaphore's slots
	expiries             []lease       // process i has the (i mod count)-th
	dur, hold, longHold  time.Duration
	killEvery, dropEvery time.Duration
	sweepEvery           time.Duration
	db, uri              string
	sabotage, keep       bool
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

// lease is the lease of the nth of the -p processes (and of its
// replacements).
func (c *config) lease(nth int) lease { return c.expiries[nth%len(c.expiries)] }

// expiryRange returns the shortest and the longest expiry of the processes.
func (c *config) expiryRange() (shortest, longest time.Duration) {
	shortest = c.lease(0).expiry
	for nth := range c.procs {
		shortest, longest = min(shortest, c.lease(nth).expiry), max(longest, c.lease(nth).expiry)
	}
	return shortest, longest
}

// giveUp is how long an acquisition waits before it gives up: long enough
// to wait out the lease of a killed holder of the longest expiry.
func (c *config) giveUp() time.Duration {
	_, longest := c.expiryRange()
	return 20*time.Second + longest
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
	fs.IntVar(&c.names[election], "ke", 2, "election names (0: no elections)")
	fs.IntVar(&c.n, "n", 3, "a semaphore's slots")
	fs.DurationVar(&c.dur, "d", 15*time.Second, "how long to run")
	expiries := fs.String("expiries", "1s/50ms,20s", "lock expiries, comma-separated, each with /extension cadence unless the library's default (a third): process i has the (i mod count)-th; all use the same names (a killed holder blocks its lock this long)")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "longest sleep between a critical section's writes")
	fs.DurationVar(&c.longHold, "long-hold", 3*time.Second, "each process has a long holder more: a goroutine that holds a slot of the first semaphore or a read lock of the first rwlock from half this to this, one after another, while holders of other expiries extend beside it (0: none)")
	fs.DurationVar(&c.sweepEvery, "sweep-every", 100*time.Millisecond, "delete the library's documents whose expiresAt has passed this often, as the TTL index does at its monitor's passes, every 60 s (0: only the monitor)")
	fs.DurationVar(&c.killEvery, "kill-every", 5*time.Second, "SIGKILL a child about this often, one with a holder inside if there is one (0: never)")
	fs.DurationVar(&c.dropEvery, "drop-every", 6*time.Second, "each child closes its client under a held handle about this often, of a kind closed under least so far (0: never)")
	fs.StringVar(&c.db, "db", testdb.Prefix+"soak", "database (dropped before the run, and after it unless -keep); its name must begin with "+testdb.Prefix)
	fs.StringVar(&c.uri, "uri", "", "server (default: "+testdb.EnvURI+", else the tests' server as internal/testdb finds it)")
	fs.BoolVar(&c.sabotage, "sabotage", false, "children work after releasing: the run must report violations")
	fs.BoolVar(&c.keep, "keep", false, "keep the database after the run")
	err := fs.Parse(args)
	if err != nil {
		return c, err
	}
	if c.procs < 1 || c.goroutines < 1 || c.n < 1 || c.dur <= 0 || slices.Min(c.names[:]) < 0 || c.names == [numKinds]int{} {
		return c, fmt.Errorf("need -p, -g, -n >= 1, -d > 0, and -k, -ks, -kr, -ke >= 0, not all 0")
	}
	if c.expiries, err = parseExpiries(*expiries); err != nil {
		return c, err
	}
	if !strings.HasPrefix(c.db, testdb.Prefix) {
		return c, fmt.Errorf("-db %q: the soak drops its database, so it takes only a name beginning with %q", c.db, testdb.Prefix)
	}
	return c, checkExpiries(c.db, c.expiries)
}

// parseExpiries reads -expiries: comma-separated durations, each with
// /cadence or not.
func parseExpiries(list string) ([]lease, error) {
	var leases []lease
	for item := range strings.SplitSeq(list, ",") {
		var (
			l   lease
			err error
		)
		expiry, cadence, hasCadence := strings.Cut(strings.TrimSpace(item), "/")
		if l.expiry, err = time.ParseDuration(expiry); err == nil && hasCadence {
			l.cadence, err = time.ParseDuration(cadence)
		}
		if err != nil {
			return nil, fmt.Errorf("-expiries %q: want comma-separated durations, each with /cadence or not (1s/50ms,20s)", list)
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// checkExpiries returns the library's refusal of an expiry, or its cadence,
// if it refuses one. NewProvider does no I/O, and this client never
// connects.
func checkExpiries(db string, leases []lease) error {
	unconnected, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/"))
	if err != nil {
		return err
	}
	defer func() { _ = unconnected.Disconnect(context.Background()) }()
	for _, l := range leases {
		if _, err := mongolock.NewProvider(unconnected.Database(db), providerOptions(l.expiry, l.cadence)...); err != nil {
			return fmt.Errorf("-expiries %v: %w", l, err)
		}
	}
	return nil
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
	return runChildren(cfg, stdout, stderr)
}

// childEnv marks a child process.
const childEnv = "MONGOLOCK_SOAK_CHILD"

// A childProc is a running child process.
type childProc struct {
	id     string
	nth    int // which of the -p processes it is: a replacement takes its victim's
	expiry time.Duration
	cmd    *exec.Cmd
	stdin  io.Closer
	done   chan struct{} // closed when it has exited
	err    error         // its exit, once done
}

// runChildren runs cfg.procs children for cfg.dur, killing and replacing them
// as cfg asks, and then reads what they recorded.
func runChildren(cfg config, stdout, stderr io.Writer) (*Result, error) {
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
	if err := prepare(ctx, db, cfg); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(stdout, announcement(cfg))
	start := time.Now()
	f := &fleet{cfg: cfg, exe: exe, until: start.Add(cfg.dur), stderr: stderr}
	defer f.killAll() // on an early return: no child outlives the parent
	r := &Result{N: cfg.n, GiveUp: cfg.giveUp()}
	// Sweep from before the first child starts until the last has ended.
	sweepCtx, stopSweep := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		r.Swept, r.SweepErrors = sweep(sweepCtx, db, cfg.sweepEvery, stderr)
	}()
	defer func() { stopSweep(); <-swept }() // on an early return

	for nth := range cfg.procs {
		if err := f.spawn(nth); err != nil {
			return nil, err
		}
	}
	killed, err := f.killNowAndThen(ctx, db, r)
	if err != nil {
		return nil, err
	}
	if err := f.await(r); err != nil {
		return nil, err
	}
	r.Elapsed = time.Since(start)
	stopSweep()
	<-swept
	if err := r.report(ctx, db, killed, stdout); err != nil {
		return nil, err
	}
	return r, nil
}

// prepare writes, before any child starts, each name's fenced resource
// and the TTL indexes.
func prepare(ctx context.Context, db *mongo.Database, cfg config) error {
	resources := db.Collection("soak_resources")
	for kd := range numKinds {
		for k := range cfg.names[kd] {
			doc := bson.D{{Key: "_id", Value: lockName(kd, k)}, {Key: fKind, Value: kd.String()},
				{Key: fLast, Value: int64(0)}, {Key: fEntries, Value: 0}, {Key: fWrites, Value: 0}}
			if !kd.Single() {
				doc = append(doc, bson.E{Key: fHolders, Value: bson.A{}}, bson.E{Key: fPeak, Value: 0},
					bson.E{Key: fLastWriter, Value: int64(0)}, bson.E{Key: fWEntries, Value: 0}, bson.E{Key: fUEntries, Value: 0})
			}
			if _, err := resources.InsertOne(ctx, doc); err != nil {
				return err
			}
		}
	}
	return createTTL0(ctx, db)
}

// announcement is the run's first line: its shape and its faults.
func announcement(cfg config) string {
	kills, drops := "no SIGKILLs", "no clients closed"
	if cfg.killEvery > 0 {
		kills = fmt.Sprintf("a SIGKILL about every %v", cfg.killEvery)
	}
	if cfg.dropEvery > 0 {
		drops = fmt.Sprintf("a client closed per process about every %v", cfg.dropEvery)
	}
	long := "no long holders"
	if cfg.longHold > 0 {
		long = fmt.Sprintf("a long holder per process, up to %v", cfg.longHold)
	}
	sweeps := "no sweeps"
	if cfg.sweepEvery > 0 {
		sweeps = fmt.Sprintf("expired documents swept every %v", cfg.sweepEvery)
	}
	var expiries []string
	for nth := range cfg.procs {
		expiries = append(expiries, cfg.lease(nth).String())
	}
	return fmt.Sprintf("soak: %d processes x %d goroutines over %d mutex, %d semaphore (%d slots), %d rwlock and %d election names for %v"+
		" (expiry[/cadence] by process %s; %s; %s, %s; TTL indexes %q with expireAfterSeconds 0, %s)",
		cfg.procs, cfg.goroutines, cfg.names[mutex], cfg.names[semaphore], cfg.n, cfg.names[rwlock], cfg.names[election], cfg.dur,
		strings.Join(expiries, ", "), long, kills, drops, ttl0Name, sweeps)
}

// A fleet is the parent's children: those running, and every one it
// started, whose output it passes on a line at a time.
type fleet struct {
	cfg     config
	exe     string
	until   time.Time // when the children stop acquiring
	stderr  io.Writer
	outMu   sync.Mutex // one child's line at a time
	seq     int
	running []*childProc
	all     []*childProc
}

// spawn starts a child as the nth of the -p processes.
func (f *fleet) spawn(nth int) error {
	f.seq++
	id := "c" + strconv.Itoa(f.seq)
	cmd := exec.Command(f.exe, f.childArgs(id, nth)...)
	cmd.Env = append(os.Environ(), childEnv+"=1", testdb.EnvURI+"="+f.cfg.uri)
	out := &lineWriter{mu: &f.outMu, w: f.stderr}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &childProc{id: id, nth: nth, expiry: f.cfg.lease(nth).expiry, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = stdin.Close()
		close(p.done)
	}()
	f.running = append(f.running, p)
	f.all = append(f.all, p)
	return nil
}

// childArgs are the flags of the child id, the nth of the -p processes.
func (f *fleet) childArgs(id string, nth int) []string {
	cfg := f.cfg
	return []string{
		"-id", id, "-db", cfg.db, "-g", strconv.Itoa(cfg.goroutines), "-k", strconv.Itoa(cfg.names[mutex]),
		"-ks", strconv.Itoa(cfg.names[semaphore]), "-kr", strconv.Itoa(cfg.names[rwlock]), "-ke", strconv.Itoa(cfg.names[election]),
		"-n", strconv.Itoa(cfg.n), "-expiry", cfg.lease(nth).expiry.String(), "-cadence", cfg.lease(nth).cadence.String(),
		"-hold", cfg.hold.String(), "-long-hold", cfg.longHold.String(), "-give-up", cfg.giveUp().String(),
		"-drop-every", cfg.dropEvery.String(),
		"-until", strconv.FormatInt(f.until.UnixNano(), 10), "-sabotage=" + strconv.FormatBool(cfg.sabotage)}
}

// killAll kills every child started and waits for it to exit.
func (f *fleet) killAll() {
	for _, p := range f.all {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// killNowAndThen kills a child now and then, while there is time for its
// locks to expire and be taken again before the end (a child of a long
// expiry only early on), and starts another in its place. The victim is
// one inside a critical section of the kind whose holders were killed
// least so far, so that kills hit every kind. It returns the victims' ids.
func (f *fleet) killNowAndThen(ctx context.Context, db *mongo.Database, r *Result) (bson.A, error) {
	var hits [numKinds]int64
	killed := bson.A{}
	if f.cfg.killEvery <= 0 {
		return killed, nil
	}
	shortest, _ := f.cfg.expiryRange()
	for {
		next := time.Now().Add(time.Duration(float64(f.cfg.killEvery) * (0.5 + rand.Float64())))
		if next.After(f.until.Add(-2 * shortest)) {
			return killed, nil
		}
		time.Sleep(time.Until(next))
		candidates := f.killable()
		if len(candidates) == 0 {
			continue
		}
		victim, err := pickVictim(ctx, db.Collection("soak_resources"), candidates, f.cfg.names, hits)
		if err != nil {
			return nil, err
		}
		if err := f.kill(victim); err != nil {
			return nil, err
		}
		r.Kills++
		killed = append(killed, victim.id)
		if err := recordKill(ctx, db, victim.id, &hits); err != nil {
			return nil, err
		}
		if err := f.spawn(victim.nth); err != nil {
			return nil, err
		}
	}
}

// killable are the running children whose locks, were they killed now,
// would expire with time to spare before the end.
func (f *fleet) killable() []*childProc {
	var candidates []*childProc
	for _, p := range f.running {
		if time.Until(f.until) > 2*p.expiry {
			candidates = append(candidates, p)
		}
	}
	return candidates
}

// kill SIGKILLs victim and waits for it to exit.
func (f *fleet) kill(victim *childProc) error {
	f.running = slices.DeleteFunc(f.running, func(p *childProc) bool { return p == victim })
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", victim.id, err)
	}
	<-victim.done
	return nil
}

// recordKill records a victim that can write nothing more: whatever it
// was inside of, it left dead. A request it sent just before may still
// reach the server after this: an entrant refused by one of its holders
// finds it in the list of the killed (reap), and so does the end of the
// run. It adds to hits the kills of holders, by kind.
func recordKill(ctx context.Context, db *mongo.Database, id string, hits *[numKinds]int64) error {
	if _, err := db.Collection("soak_stats").UpdateOne(ctx, bson.D{{Key: "_id", Value: statsID}},
		bson.D{{Key: "$addToSet", Value: bson.D{{Key: sKilled, Value: id}}}}, options.UpdateOne().SetUpsert(true)); err != nil {
		return err
	}
	resources := db.Collection("soak_resources")
	for kd := range numKinds {
		n, err := markDead(ctx, resources, kd, bson.D{{Key: fKind, Value: kd.String()}}, bson.A{id})
		if err != nil {
			return err
		}
		hits[kd] += n
	}
	return nil
}

// await waits for the children running at the end: they stop acquiring
// at until, and a section in progress ends within 2 expiries (a dropped
// client's loss) plus round trips. It counts those that failed.
func (f *fleet) await(r *Result) error {
	_, longest := f.cfg.expiryRange()
	grace := time.NewTimer(time.Until(f.until) + 2*longest + 30*time.Second)
	defer grace.Stop()
	for _, p := range f.running {
		select {
		case <-p.done:
		case <-grace.C:
			return fmt.Errorf("child %s did not end within 30 s of the end of the run", p.id)
		}
		if p.err != nil {
			r.ChildFailures++
			fmt.Fprintf(f.stderr, "soak: child %s: %v\n", p.id, p.err)
		}
	}
	return nil
}

// report marks the killed dead in every resource, reads the run's counts,
// prints them, and checks that the run had the TTL indexes it says.
func (r *Result) report(ctx context.Context, db *mongo.Database, killed bson.A, stdout io.Writer) error {
	resources := db.Collection("soak_resources")
	for kd := range numKinds {
		if _, err := markDead(ctx, resources, kd, bson.D{{Key: fKind, Value: kd.String()}}, killed); err != nil {
			return err
		}
	}
	if err := r.read(ctx, db); err != nil {
		return err
	}
	fmt.Fprintln(stdout, r)
	if err := r.checkTTL(); err != nil {
		return err
	}
	if r.Violations() > 0 {
		fmt.Fprintln(stdout, "FAIL: violations")
	}
	return nil
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
		c.Upgrades += num(d[fUEntries])
		c.Peak = max(c.Peak, num(d[fPeak]))
		c.Killed += num(d[fKilled])
		c.Dropped += num(d[fDropped])
		c.MaxWait = max(c.MaxWait, time.Duration(num(d[fMaxWait])))
		c.MaxWaitW = max(c.MaxWaitW, time.Duration(num(d[fMaxWaitW])))
		c.MaxUnfin = max(c.MaxUnfin, time.Duration(num(d[fMaxUnfin])))
		c.GaveUp += num(d[fGaveUp])
		c.Overlap += num(d[vOverlap])
		c.OutOfOrder += num(d[vOutOfOrder])
		c.Displaced += num(d[vDisplaced])
		c.Unsignalled += num(d[vUnsignalled])
		c.Vanished += num(d[vVanished])
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
	r.Fenced, r.Losses, r.Errors = num(stats[sFenced]), num(stats[sLosses]), num(stats[sErrors])
	r.TTL, err = ttlIndexes(ctx, db)
	return err
}

// libraryCollections are the collections of the children's providers: the
// default one (locks and elections), and the one the library names after
// it for semaphores and RWLocks.
var libraryCollections = []string{mongolock.DefaultCollection, mongolock.DefaultCollection + "_semaphores"}

// ttl0Name names the soak's TTL index. Under the library's name
// (mongolock.TTLIndexName) the library would raise it to an hour; under
// another, on the same key, the library's own is refused (options
// conflict) and this one stays: an operator's index that mongolock did not
// raise, with which the TTL monitor deletes a document as soon as its
// expiresAt passes.
const ttl0Name = "soak_ttl0"

// createTTL0 creates, before any child starts, the TTL index ttl0Name
// with expireAfterSeconds 0 on expiresAt of each library collection.
func createTTL0(ctx context.Context, db *mongo.Database) error {
	for _, coll := range libraryCollections {
		_, err := db.Collection(coll).Indexes().CreateOne(ctx, mongo.IndexModel{
			Keys:    bson.D{{Key: "expiresAt", Value: 1}},
			Options: options.Index().SetName(ttl0Name).SetExpireAfterSeconds(0),
		})
		if err != nil {
			return fmt.Errorf("creating the TTL index %s on %s: %w", ttl0Name, coll, err)
		}
	}
	return nil
}

// ttlIndexes lists the TTL indexes on expiresAt of the library collections.
func ttlIndexes(ctx context.Context, db *mongo.Database) ([]TTLIndex, error) {
	var all []TTLIndex
	for _, coll := range libraryCollections {
		cur, err := db.Collection(coll).Indexes().List(ctx)
		if err != nil {
			return nil, err
		}
		var ixs []struct {
			Name    string        `bson:"name"`
			Key     bson.D        `bson:"key"`
			Seconds bson.RawValue `bson:"expireAfterSeconds"`
		}
		if err := cur.All(ctx, &ixs); err != nil {
			return nil, err
		}
		for _, ix := range ixs {
			secs, ok := ix.Seconds.AsInt64OK()
			if ok && len(ix.Key) == 1 && ix.Key[0].Key == "expiresAt" {
				all = append(all, TTLIndex{Collection: coll, Name: ix.Name, Seconds: secs})
			}
		}
	}
	return all, nil
}

// checkTTL returns an error unless the TTL indexes on expiresAt, at the
// end, were the soak's with expireAfterSeconds 0, one per library
// collection: otherwise the run did not test what it says.
func (r *Result) checkTTL() error {
	var want []TTLIndex
	for _, coll := range libraryCollections {
		want = append(want, TTLIndex{Collection: coll, Name: ttl0Name})
	}
	if !slices.Equal(r.TTL, want) {
		return fmt.Errorf("TTL indexes on expiresAt at the end: %v; want %v", r.TTL, want)
	}
	return nil
}

// sweep deletes, every period until ctx ends, the documents of the
// library collections whose expiresAt has passed by the server's $$NOW:
// what the TTL index does, but every period instead of at the monitor's
// pass every 60 s (MongoDB's ttlMonitorSleepSecs; DocumentDB's pg_cron
// job), so that a short run sees many. A document is deleted only if its
// expiresAt is still the one read (filters with $$NOW are not taken by
// every server's delete). It returns the documents deleted by collection,
// and the sweeps that failed.
func sweep(ctx context.Context, db *mongo.Database, period time.Duration, stderr io.Writer) (map[string]int64, int64) {
	deleted, failed := map[string]int64{}, int64(0)
	if period <= 0 {
		return deleted, 0
	}
	// $$NOW in a $match's $expr is refused by FerretDB where expiresAt
	// has an index: the comparison is a field of its own.
	expired := mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: "_expired", Value: bson.D{{Key: "$lt", Value: bson.A{"$expiresAt", "$$NOW"}}}}}}},
		{{Key: "$match", Value: bson.D{
			{Key: "_expired", Value: true},
			{Key: "expiresAt", Value: bson.D{{Key: "$type", Value: "date"}}}, // as the monitor: only a date counts
		}}},
		{{Key: "$project", Value: bson.D{{Key: "expiresAt", Value: 1}}}},
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		for _, name := range libraryCollections {
			n, err := sweepOnce(ctx, db.Collection(name), expired)
			deleted[name] += n
			if err != nil && ctx.Err() == nil {
				if failed++; failed <= 3 {
					fmt.Fprintf(stderr, "soak: sweeping %s: %v\n", name, err)
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return deleted, failed
		}
	}
}

// sweepOnce deletes the documents of coll that expired matches, if their
// expiresAt is still the one read.
func sweepOnce(ctx context.Context, coll *mongo.Collection, expired mongo.Pipeline) (int64, error) {
	cur, err := coll.Aggregate(ctx, expired)
	if err != nil {
		return 0, err
	}
	var docs []bson.D
	if err := cur.All(ctx, &docs); err != nil || len(docs) == 0 {
		return 0, err
	}
	var each bson.A
	for _, d := range docs {
		each = append(each, d) // {_id, expiresAt}
	}
	res, err := coll.DeleteMany(ctx, bson.D{{Key: "$or", Value: each}})
	if err != nil {
		return 0, err
	}
	return res.DeletedCount, nil
}

// pickVictim returns the child of candidates to SIGKILL: one found with a
// live holder inside a resource of a kind whose holders were killed least
// so far, watched for up to half a second; then of any kind, for as long
// again; else any.
func pickVictim(ctx context.Context, resources *mongo.Collection, candidates []*childProc, names [numKinds]int, hits [numKinds]int64) (*childProc, error) {
	var fewest, every bson.A
	for _, kd := range soakcheck.LeastHit(hits, names) {
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
			return nil, err
		}
		var docs []struct {
			Inside  *struct{ Proc string }  `bson:"inside"`
			Holders []struct{ Proc string } `bson:"holders"`
		}
		if err := cur.All(ctx, &docs); err != nil {
			return nil, err
		}
		var inside []*childProc
		for _, d := range docs {
			procs := d.Holders
			if d.Inside != nil {
				procs = append(procs, *d.Inside)
			}
			for _, h := range procs {
				if i := slices.IndexFunc(candidates, func(p *childProc) bool { return p.id == h.Proc }); i >= 0 {
					inside = append(inside, candidates[i])
				}
			}
		}
		if len(inside) > 0 {
			return inside[rand.IntN(len(inside))], nil
		}
	}
	return candidates[rand.IntN(len(candidates))], nil
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
