// Command bench measures mongolock side by side with the raw driver round
// trips (the bound) and with DistributedLock.MongoDB's algorithm (the
// baseline), in one run on one server, for workloads A–H (BENCHMARKS.md);
// and the library's semaphore and reader-writer lock side by side with its
// mutex, for workloads I–K:
//
//	go run .                 # every workload: A–E, I, J 10 s each, G 50 s per size, H 60 s (make bench)
//	go run . -quick          # a smoke run: A–E, I, J 2 s each, F with 1,000 locks, G 10 s, H 20 s, K 5 rounds
//	go run . -only C,D       # some workloads
//	go run . -only G -gd 20s # workload G (standby) with a shorter window
//	go run . -only H         # workload H (election failover)
//	go run . -only I,J,K -out out/ijk  # semaphore, RW lock, cost per holder
//	go run . -only E -impls mongolock -cpuprofile cpu.out
//	go run . -from out/results.json   # re-render a saved run's report and plot
//
// The server is MONGOLOCK_TEST_URI if set (the tests' variable; never
// MONGODB_URI), else the local test server started by ../scripts/testdb. The
// run drops its database (-db, default mongolock_test_bench) before and
// after, and takes only a name beginning with mongolock_test_. It prints a markdown table and the targets' PASS/FAIL,
// and writes out/results.md, out/results.json and out/plot.png (out/quick/
// for -quick).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// envURI names the variable with the server: the tests' own, so that
// MONGODB_URI, which may name someone's data, is never dropped from.
const envURI = "MONGOLOCK_TEST_URI"

// testPrefix begins the name of every database the tests and the benchmark
// create and drop (internal/testdb.Prefix): -db must begin with it.
const testPrefix = "mongolock_test_"

func main() {
	f := parseFlags()
	selected, err := f.check()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}

	if f.from != "" {
		if err := rerender(f.from, f.outDir); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := profiled(f.prof, func() error {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return runAll(ctx, f.dur, f.gDur, f.hDur, selected, f.holdN, f.kRound, f.outDir, f.dbName)
	}); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// benchFlags are the command's flags.
type benchFlags struct {
	dur, gDur, hDur             time.Duration
	kRound, holdN               int
	quick                       bool
	only, outDir, dbName, which string
	prof, from                  string
}

// parseFlags reads the command line, with -quick's values for the flags
// it does not give.
func parseFlags() benchFlags {
	var f benchFlags
	flag.DurationVar(&f.dur, "d", 10*time.Second, "how long each of workloads A–E, I and J runs, per implementation")
	flag.DurationVar(&f.gDur, "gd", 50*time.Second, "how long workload G's window is, per implementation and size (after a 2 s warm-up)")
	flag.DurationVar(&f.hDur, "hd", 60*time.Second, "how long workload H's window is, per implementation (after a 2 s warm-up)")
	flag.IntVar(&f.kRound, "kr", 20, "workload K's rounds, each of 20 pairs and 20 refused tries per size")
	flag.BoolVar(&f.quick, "quick", false, "smoke run: -d 2s, -gd 10s, -hd 20s, -n 1000, -kr 5, -out out/quick (unless given)")
	flag.StringVar(&f.only, "only", "", "comma-separated workloads to run, e.g. C,D (default: all, A to K)")
	flag.IntVar(&f.holdN, "n", 10000, "locks held in workload F (also measured at n/10, to see what grows with n)")
	flag.StringVar(&f.outDir, "out", "out", "directory for results.md, results.json and plot.png")
	flag.StringVar(&f.dbName, "db", testPrefix+"bench", "database to use (dropped before and after the run); its name must begin with "+testPrefix)
	flag.StringVar(&f.which, "impls", "", "comma-separated implementations to run (default: raw,mongolock,baseline)")
	flag.StringVar(&f.prof, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&f.from, "from", "", "measure nothing: render the report and plot of a saved results.json")
	flag.Parse()
	if f.quick {
		f.quickDefaults()
	}
	return f
}

// quickDefaults sets -quick's values of the flags not given.
func (f *benchFlags) quickDefaults() {
	set := map[string]bool{}
	flag.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["d"] {
		f.dur = 2 * time.Second
	}
	if !set["gd"] {
		f.gDur = 10 * time.Second
	}
	if !set["hd"] {
		f.hDur = 20 * time.Second
	}
	if !set["n"] {
		f.holdN = 1000
	}
	if !set["kr"] {
		f.kRound = 5
	}
	if !set["out"] { // out/ keeps the committed full run's results
		f.outDir = filepath.Join("out", "quick")
	}
}

// check refuses flags out of range, keeps the implementations -impls
// names, and returns the workloads -only selects.
func (f *benchFlags) check() (map[string]bool, error) {
	selected, err := parseOnly(f.only)
	if err == nil {
		err = selectImpls(f.which)
	}
	if err == nil && f.holdN < 10 {
		err = fmt.Errorf("-n %d: need at least 10", f.holdN)
	}
	if err == nil {
		err = checkDBName(f.dbName)
	}
	if err == nil && f.gDur < standbyHold+standbyAway {
		err = fmt.Errorf("-gd %v: need at least %v (one hold and one time away)", f.gDur, standbyHold+standbyAway)
	}
	if err == nil && f.hDur < 2*electionHold {
		err = fmt.Errorf("-hd %v: need at least %v (two terms)", f.hDur, 2*electionHold)
	}
	if err == nil && f.kRound < 1 {
		err = fmt.Errorf("-kr %d: need at least 1", f.kRound)
	}
	return selected, err
}

// rerender writes the report and plot of the run saved in path to dir.
func rerender(path, dir string) error {
	js, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(js, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	rep.Targets = evaluate(rep)
	return rep.write(os.Stdout, dir)
}

// write prints the markdown report to w and writes results.md, results.json
// and plot.png to dir.
func (r *report) write(w io.Writer, dir string) error {
	md := r.markdown()
	if _, err := io.WriteString(w, md); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := r.plot(filepath.Join(dir, "plot.png")); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Fprintf(w, "\nwrote %s, %s, %s\n", filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json"), filepath.Join(dir, "plot.png"))
	return nil
}

// profiled runs f, writing a CPU profile of it to path unless path is "".
func profiled(path string, f func() error) error {
	if path == "" {
		return f()
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return err
	}
	err = f()
	pprof.StopCPUProfile()
	return errors.Join(err, out.Close())
}

// selectImpls keeps only the implementations named in s ("" keeps all).
func selectImpls(s string) error {
	if s == "" {
		return nil
	}
	var keep []impl
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(impls, func(im impl) bool { return im.name == name })
		if i < 0 {
			return fmt.Errorf("-impls: unknown implementation %q (have raw,mongolock,baseline)", name)
		}
		keep = append(keep, impls[i])
	}
	impls = keep
	return nil
}

// parseOnly turns -only's list into a set of workload ids.
func parseOnly(s string) (map[string]bool, error) {
	all := []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"}
	sel := map[string]bool{}
	if s == "" {
		for _, id := range all {
			sel[id] = true
		}
		return sel, nil
	}
	for id := range strings.SplitSeq(s, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if !slices.Contains(all, id) {
			return nil, fmt.Errorf("-only: unknown workload %q (have %s)", id, strings.Join(all, ","))
		}
		sel[id] = true
	}
	return sel, nil
}

// checkDBName refuses a database without the tests' prefix: the run drops
// its database.
func checkDBName(name string) error {
	if !strings.HasPrefix(name, testPrefix) {
		return fmt.Errorf("-db %q: the run drops its database, so it takes only a name beginning with %q", name, testPrefix)
	}
	return nil
}

// runAll runs the selected workloads on the server, in database dbName
// (dropped before and after), and writes the report to outDir.
func runAll(ctx context.Context, dur, gDur, hDur time.Duration, selected map[string]bool, holdN, kRounds int, outDir, dbName string) error {
	if err := checkDBName(dbName); err != nil {
		return err
	}
	uri, err := serverURI(ctx)
	if err != nil {
		return err
	}
	admin, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer func() { _ = admin.Disconnect(context.Background()) }()
	server, err := describeServer(ctx, admin)
	if err != nil {
		return fmt.Errorf("server at %s: %w", uri, err)
	}
	db := admin.Database(dbName)
	if err := db.Drop(ctx); err != nil {
		return err
	}
	defer func() { _ = db.Drop(context.Background()) }()

	rep := report{
		Server:     server,
		Library:    libraryVersion(),
		Started:    time.Now().UTC().Format(time.RFC3339),
		GoVersion:  runtime.Version(),
		CPUs:       runtime.NumCPU(),
		WindowS:    dur.Seconds(),
		HoldExpiry: holdExpiry.Seconds(),
		StandbyS:   gDur.Seconds(),
		ElectionS:  hDur.Seconds(),
	}
	fmt.Fprintf(os.Stderr, "bench: %s; %v per workload and implementation (G: %v per size; H: %v)\n", server, dur, gDur, hDur)
	b := &benchRun{ctx: ctx, e: env{uri: uri, db: dbName}, db: db, rep: &rep, selected: selected,
		dur: dur, gDur: gDur, hDur: hDur, holdN: holdN, kRounds: kRounds}
	for _, run := range []func() error{b.locks, b.holds, b.standby, b.elections, b.shared, b.holderCost} {
		if err := run(); err != nil {
			return err
		}
	}
	rep.Targets = evaluate(rep)
	if err := rep.write(os.Stdout, outDir); err != nil {
		return err
	}
	if n := rep.violations(); n > 0 {
		return fmt.Errorf("VIOLATION: %d acquisitions broke their resource's rule (workloads I, J); see the report", n)
	}
	return nil
}

// A benchRun is a run in progress: its server and database, the
// workloads selected and their flags, and the report it fills.
type benchRun struct {
	ctx             context.Context
	e               env
	db              *mongo.Database
	rep             *report
	selected        map[string]bool
	dur, gDur, hDur time.Duration
	holdN, kRounds  int
}

// locks runs the selected workloads of A–E, each implementation side by
// side.
func (b *benchRun) locks() error {
	for _, w := range workloads {
		if !b.selected[w.id] {
			continue
		}
		for _, im := range impls {
			if err := b.db.CreateCollection(b.ctx, collection(w.id, im.name)); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "bench: %s %s (%d round(s))\n", w.id, w.title, max(w.rounds, 1))
		err := runWorkload(b.ctx, b.e, impls, w, b.dur, func(im impl, r result) {
			fmt.Fprintf(os.Stderr, "bench: %s %-9s %.1f acq/s, wait p99 %.1f ms, %.2f ops/acq\n", w.id, im.name, r.AcqPerSec, r.WaitP99MS, r.OpsPerAcq)
			b.rep.Results = append(b.rep.Results, r)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// holds runs workload F, if selected: each implementation holding N/10
// locks, then N.
func (b *benchRun) holds() error {
	if !b.selected["F"] {
		return nil
	}
	for _, im := range impls {
		for _, n := range []int{b.holdN / 10, b.holdN} {
			fmt.Fprintf(os.Stderr, "bench: F %-9s holding %d locks ... ", im.name, n)
			if err := b.db.CreateCollection(b.ctx, collection(fmt.Sprintf("F%d", n), im.name)); err != nil {
				return err
			}
			r, err := runHold(b.ctx, b.e, im, n, holdExpiry, holdCadences)
			if err != nil {
				return fmt.Errorf("workload F, %s, N=%d: %w", im.name, n, err)
			}
			fmt.Fprintf(os.Stderr, "%.0f extension round trips/cadence, goroutines %d -> %d\n",
				r.ExtensionsPerCadence, r.GoroutinesBefore, r.GoroutinesDuring)
			b.rep.Holds = append(b.rep.Holds, r)
			settle()
		}
	}
	return nil
}

// standby runs workload G, if selected: each size, each implementation
// but raw, which excludes no one: with one name it has no standby to
// measure.
func (b *benchRun) standby() error {
	if !b.selected["G"] {
		return nil
	}
	for _, procs := range standbySizes {
		for _, im := range impls {
			if im.name == "raw" {
				continue
			}
			fmt.Fprintf(os.Stderr, "bench: G %-9s %d processes (%d waiting), %v window ... ", im.name, procs, procs-1, b.gDur)
			if err := b.db.CreateCollection(b.ctx, collection(fmt.Sprintf("G%d", procs), im.name)); err != nil {
				return err
			}
			r, err := runStandby(b.ctx, b.e, im, procs, b.gDur)
			if err != nil {
				return fmt.Errorf("workload G, %s, P=%d: %w", im.name, procs, err)
			}
			fmt.Fprintf(os.Stderr, "%.1f commands/s, %d acquisitions, takeover p50 %.0f ms, max %.0f ms\n",
				r.OpsPerSec, r.Acquisitions, r.TakeoverP50MS, r.TakeoverMaxMS)
			b.rep.Standby = append(b.rep.Standby, r)
			settle()
		}
	}
	return nil
}

// elections runs workload H, if selected, for each implementation that
// elects.
func (b *benchRun) elections() error {
	if !b.selected["H"] {
		return nil
	}
	for _, im := range impls {
		if electors[im.name] == nil {
			continue // raw: it excludes no one, so it elects no one
		}
		fmt.Fprintf(os.Stderr, "bench: H %-9s %d processes, %v window ... ", im.name, electionProcs, b.hDur)
		if err := b.db.CreateCollection(b.ctx, collection("H", im.name)); err != nil {
			return err
		}
		r, err := runElection(b.ctx, b.e, im, b.hDur)
		if err != nil {
			return fmt.Errorf("workload H, %s: %w", im.name, err)
		}
		fmt.Fprintf(os.Stderr, "%.1f commands/s, %d terms, failover p50 %.0f ms after %d resignations, %.0f ms after %d stops\n",
			r.OpsPerSec, r.Terms, r.Resign.P50MS, r.Resign.Count, r.Stop.P50MS, r.Stop.Count)
		b.rep.Elections = append(b.rep.Elections, r)
		settle()
	}
	return nil
}

// shared runs the selected workloads of I and J.
func (b *benchRun) shared() error {
	for _, w := range sharedWorkloads {
		if !b.selected[w.id] {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s %s\n", w.id, w.title)
		for _, im := range w.impls {
			if err := b.db.CreateCollection(b.ctx, collection(w.id, im.name)); err != nil {
				return err
			}
			r, err := runShared(b.ctx, b.e, w, im, b.dur)
			if err != nil {
				return fmt.Errorf("workload %s, %s: %w", w.id, im.name, err)
			}
			_, all := r.acquisitions()
			fmt.Fprintf(os.Stderr, "bench: %s %-9s %.1f acq/s (%.0f%% of the bound), %.2f ops/acq, most holders at once %d, violations %d\n",
				w.id, im.name, all, 100*r.ofBound(), r.OpsPerAcq, r.MostHolders, r.Violations)
			b.rep.Shared = append(b.rep.Shared, r)
			settle()
		}
	}
	return nil
}

// holderCost runs workload K, if selected.
func (b *benchRun) holderCost() error {
	if !b.selected["K"] {
		return nil
	}
	fmt.Fprintf(os.Stderr, "bench: K %s ... ", holderTitle())
	if err := b.db.CreateCollection(b.ctx, collection("K", "mongolock")); err != nil {
		return err
	}
	k, err := runHolderCost(b.ctx, b.e, b.kRounds, holderPerRound)
	if err != nil {
		return fmt.Errorf("workload K: %w", err)
	}
	for _, c := range k.Sizes {
		fmt.Fprintf(os.Stderr, "n=%d %.0f µs, ", c.N, c.Acquire.CallP50US)
	}
	fmt.Fprintf(os.Stderr, "per acquisition\n")
	b.rep.HolderCost = &k
	return nil
}

// serverURI is MONGOLOCK_TEST_URI if set, else the local test server,
// started (and on first use installed) by ../scripts/testdb, which prints its
// URI last.
func serverURI(ctx context.Context) (string, error) {
	if uri := os.Getenv(envURI); uri != "" {
		return uri, nil
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "testdb"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("%s is unset and %s is missing: run from bench/ (make bench) or set %s", envURI, script, envURI)
	}
	fmt.Fprintf(os.Stderr, "bench: %s is unset; starting the local test server with ../scripts/testdb start\n", envURI)
	cmd := exec.CommandContext(ctx, script, "start")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s start: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	uri := strings.TrimSpace(lines[len(lines)-1])
	if uri == "" {
		return "", errors.New("scripts/testdb start printed no URI")
	}
	return uri, nil
}

// describeServer names the server: its MongoDB version, and FerretDB's own
// where it is FerretDB.
func describeServer(ctx context.Context, c *mongo.Client) (string, error) {
	var info struct {
		Version  string `bson:"version"`
		FerretDB struct {
			Version string `bson:"version"`
		} `bson:"ferretdb"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return "", err
	}
	if info.FerretDB.Version != "" {
		return fmt.Sprintf("FerretDB %s (reports MongoDB %s)", info.FerretDB.Version, info.Version), nil
	}
	return "MongoDB " + info.Version, nil
}

// libraryVersion names the library's commit being measured (from git, if the
// repository is there), noting uncommitted changes to its Go files.
func libraryVersion() string {
	out, err := exec.Command("git", "-C", "..", "log", "-1", "--format=%h %s").Output()
	if err != nil {
		return "unknown (no git repository)"
	}
	v := strings.TrimSpace(string(out))
	// The root package's own last change, which a benchmark commit on top
	// of it leaves the same.
	if lib, err := exec.Command("git", "-C", "..", "log", "-1", "--format=%h", "--", ":(glob)*.go").Output(); err == nil &&
		len(lib) > 0 && !strings.HasPrefix(v, strings.TrimSpace(string(lib))+" ") {
		v += fmt.Sprintf(" (the root package's Go files last changed in %s)", strings.TrimSpace(string(lib)))
	}
	if dirty, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--", ":(glob)*.go").Output(); err == nil && len(dirty) > 0 {
		v += " (+ uncommitted changes to the library)"
	}
	return v
}
