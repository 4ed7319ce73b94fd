package main

import (
	"fmt"
	"math"
	"strings"
)

// report is everything one run measured, and the targets judged from it.
type report struct {
	Server     string          `json:"server"`
	Library    string          `json:"library"` // the commit measured
	Started    string          `json:"started"`
	GoVersion  string          `json:"goVersion"`
	CPUs       int             `json:"cpus"`
	WindowS    float64         `json:"windowSeconds"` // per workload A–E and implementation
	HoldExpiry float64         `json:"holdExpirySeconds"`
	StandbyS   float64         `json:"standbyWindowSeconds,omitempty"` // workload G's window, per implementation and size
	Results    []result        `json:"results"`
	Holds      []holdResult    `json:"holds"`
	Standby    []standbyResult `json:"standby,omitempty"`
	Targets    []target        `json:"targets"`

	// Workload H: its window, per implementation, and what it measured.
	ElectionS float64          `json:"electionWindowSeconds,omitempty"`
	Elections []electionResult `json:"elections,omitempty"`

	// Workloads I and J (windows of WindowS), and K.
	Shared     []sharedResult `json:"shared,omitempty"`
	HolderCost *holderRun     `json:"holderCost,omitempty"`
}

// A target is one of the benchmark's goals, judged from this run's figures.
type target struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Required string `json:"required"`
	Pass     bool   `json:"pass"`
}

func (r *report) result(workload, impl string) *result {
	for i := range r.Results {
		if r.Results[i].Workload == workload && r.Results[i].Impl == impl {
			return &r.Results[i]
		}
	}
	return nil
}

func (r *report) hold(impl string, n int) *holdResult {
	for i := range r.Holds {
		if r.Holds[i].Impl == impl && r.Holds[i].N == n {
			return &r.Holds[i]
		}
	}
	return nil
}

func (r *report) standby(impl string, procs int) *standbyResult {
	for i := range r.Standby {
		if r.Standby[i].Impl == impl && r.Standby[i].Processes == procs {
			return &r.Standby[i]
		}
	}
	return nil
}

func (r *report) shared(workload string) []sharedResult {
	var rs []sharedResult
	for _, x := range r.Shared {
		if x.Workload == workload {
			rs = append(rs, x)
		}
	}
	return rs
}

// violations counts the acquisitions of workloads I and J that broke their
// resource's rule.
func (r *report) violations() int {
	n := 0
	for _, x := range r.Shared {
		n += x.Violations
	}
	return n
}

func (r *report) election(impl string) *electionResult {
	for i := range r.Elections {
		if r.Elections[i].Impl == impl {
			return &r.Elections[i]
		}
	}
	return nil
}

// largestHoldN is workload F's N (the run also holds N/10).
func (r *report) largestHoldN() int {
	n := 0
	for _, h := range r.Holds {
		n = max(n, h.N)
	}
	return n
}

// serialBound is the most acquisitions per second that any lock could give
// one name with critical section cs ms: each hand-over needs at least an
// acquire and a release round trip, taken from raw's A (0 if A did not run).
func (r *report) serialBound(csMS float64) float64 {
	a := r.result("A", "raw")
	if a == nil || a.CycleP50MS == 0 {
		return 0
	}
	return 1000 / (csMS + a.CycleP50MS)
}

// markdown is the report: a section per workload that ran, then the
// targets.
func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Server: %s. Go %s, %d CPUs. Started %s.\nLibrary: %s.\n", r.Server, r.GoVersion, r.CPUs, r.Started, r.Library)
	if len(r.Results) > 0 {
		r.resultsMarkdown(&b)
	}
	if len(r.Holds) > 0 {
		r.holdsMarkdown(&b)
	}
	if len(r.Standby) > 0 {
		r.standbyMarkdown(&b)
	}
	if len(r.Elections) > 0 {
		r.electionMarkdown(&b)
	}
	for _, w := range sharedWorkloads {
		r.sharedMarkdown(&b, w)
	}
	if r.HolderCost != nil {
		r.holderMarkdown(&b)
	}
	if len(r.Targets) > 0 {
		r.targetsMarkdown(&b)
	}
	return b.String()
}

// resultsMarkdown writes workloads A–E's table and notes.
func (r *report) resultsMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### Workloads A–E (%g s each, per implementation; A and E in 5 interleaved slices, B–D one after another)\n\n", r.WindowS)
	b.WriteString("| workload | impl | acq/s | wait p50 ms | wait p99 ms | acquire+release p50 ms | acquire+release p99 ms | ops/acq | min process share (floor) | starved workers | client CPU µs/acq |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, x := range r.Results {
		share := "1 process"
		if x.Processes > 1 {
			share = fmt.Sprintf("%.3f (%.3f)", x.MinShare, x.FairFloor)
		}
		fmt.Fprintf(b, "| %s | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %d/%d | %.0f |\n",
			x.Workload, x.Impl, x.AcqPerSec, x.WaitP50MS, x.WaitP99MS, x.CycleP50MS, x.CycleP99MS,
			x.OpsPerAcq, share, x.StarvedWorkers, x.Processes*x.Workers, x.ClientCPUPerAcqUS)
	}
	b.WriteString("\n")
	for _, w := range workloads {
		if r.result(w.id, "mongolock") != nil || r.result(w.id, "raw") != nil {
			fmt.Fprintf(b, "- **%s**: %s.", w.id, w.title)
			if bound := r.serialBound(ms(w.criticalSection)); w.shared && bound > 0 {
				fmt.Fprintf(b, " Serial bound for one name: %.0f acq/s (1 / (critical section + raw's A acquire+release p50)).", bound)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("- Each worker loops: acquire, hold for the critical section, release, 2 ms of work outside the lock. " +
		"Processes are separate clients with their own provider.\n" +
		"- **raw** is two driver round trips (findOneAndUpdate + updateOne) and excludes no one: in B–D it is the server's " +
		"throughput without mutual exclusion, not a lock's.\n" +
		"- **baseline** is DistributedLock.MongoDB's algorithm (pipeline upsert, one try then random 10–800 ms sleeps, " +
		"deleteOne release); it omits lease extension, which these short holds never need.\n" +
		"- wait = acquire call to handle; a wait still going when the window closed counts with its length so far. " +
		"ops/acq = commands sent (command monitor, Started events, all clients) / acquisitions. " +
		"min process share = the smallest process's fraction of acquisitions; floor = 1/(2P). " +
		"starved = workers with no acquisition in the window. " +
		"client CPU = the bench process's CPU time (all its clients, lockers and workers; the server's is not counted) / acquisitions.\n")
	for _, x := range r.Results {
		if x.Errors > 0 {
			fmt.Fprintf(b, "- %s %s: %d errors (first: %s)\n", x.Workload, x.Impl, x.Errors, x.FirstError)
		}
	}
}

// holdsMarkdown writes workload F's table and notes.
func (r *report) holdsMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### Workload F: %s (expiry %g s, cadence %g s)\n\n", holdTitle, r.HoldExpiry, r.HoldExpiry/3)
	b.WriteString("| impl | N | acquired (s) | lost by hold end | extension round trips / cadence | goroutines before → during hold | heap / held lock | stack / held lock | release errors |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, h := range r.Holds {
		all := 0
		for _, v := range h.HoldOps {
			all += v
		}
		ext := fmt.Sprintf("%.0f (all commands: %.0f; slowest %.0f ms)", h.ExtensionsPerCadence, float64(all)/float64(h.Cadences), h.SlowestExtensionMs)
		switch h.Impl {
		case "raw":
			ext = "n/a (no lease)"
		case "baseline":
			ext = fmt.Sprintf("n/a (omitted; DistributedLock: %d)", h.N)
		}
		fmt.Fprintf(b, "| %s | %d | %d (%.1f s) | %d | %s | %d → %d | %.0f B | %.0f B | %d |\n",
			h.Impl, h.N, h.Acquired, h.AcquireSeconds, h.LostByEnd, ext, h.GoroutinesBefore, h.GoroutinesDuring,
			h.HeapPerLockB, h.StackPerLockB, h.ReleaseErrors)
	}
	fmt.Fprintf(b, "\n- acquired = locks taken (32 goroutines) within %v, and how long that took; lost = of those, signalled lost (Handle.Lost) by the end of the hold. ", holdAcquireLimit)
	b.WriteString("extension round trips / cadence = update commands sent during the hold / cadences held (all commands: of any kind; slowest: the slowest update's reply). " +
		"heap and stack per held lock = HeapAlloc and StackInuse after GC, held minus before, / N. " +
		"release errors = releases that failed, e.g. locks lost during the hold.\n")
	for _, h := range r.Holds {
		if h.FirstError != "" {
			fmt.Fprintf(b, "- F %s N=%d: first release error: %s\n", h.Impl, h.N, h.FirstError)
		}
	}
}

// targetsMarkdown writes the targets' table and how many pass.
func (r *report) targetsMarkdown(b *strings.Builder) {
	b.WriteString("\n### Targets (ratios from this run)\n\n")
	b.WriteString("| target | measured | required | result |\n|---|---|---|---|\n")
	pass := 0
	for _, t := range r.Targets {
		res := "FAIL"
		if t.Pass {
			res, pass = "PASS", pass+1
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.Name, t.Measured, t.Required, res)
	}
	fmt.Fprintf(b, "\n%d of %d targets pass.\n", pass, len(r.Targets))
}

// evaluate judges the benchmark's targets for mongolock against the
// baseline of this same run (and the serial bound, from raw's A); targets
// whose workloads did not run are left out.
func evaluate(r report) []target {
	j := &judge{r: &r}
	j.standby()
	j.shared()
	j.election()
	j.locks()
	j.holds()
	return j.ts
}

// A judge collects the targets judged from r's figures.
type judge struct {
	r  *report
	ts []target
}

func (j *judge) add(name, measured, required string, pass bool) {
	j.ts = append(j.ts, target{Name: name, Measured: measured, Required: required, Pass: pass})
}

// ratio judges mongolock's figure m over the other's o: at most limit, or
// at least limit if atLeast.
func (j *judge) ratio(name, unit string, m, o, limit float64, atLeast bool, vs string) {
	q := m / o
	req := fmt.Sprintf("≤ %gx %s", limit, vs)
	pass := q <= limit
	if atLeast {
		req = fmt.Sprintf("≥ %gx %s", limit, vs)
		pass = q >= limit
	} else if limit == 1 {
		req = fmt.Sprintf("≤ the %s's", vs)
	}
	if math.IsNaN(q) {
		pass = false
	}
	j.add(name, fmt.Sprintf("%s vs %s = %sx", num(m, unit), num(o, unit), num(q, "")), req, pass)
}

// ofBound judges mongolock's acquisitions/s: at least share of the serial
// bound for one name (left out if raw's A did not run).
func (j *judge) ofBound(name string, m *result, share float64) {
	bound := j.r.serialBound(m.CriticalSectionMS)
	if bound <= 0 {
		return
	}
	q := m.AcqPerSec / bound
	j.add(name, fmt.Sprintf("%s vs serial bound %s = %.1f%%", num(m.AcqPerSec, "/s"), num(bound, "/s"), 100*q),
		fmt.Sprintf("≥ %.0f%% of the serial bound", 100*share), q >= share)
}

// standby judges workload G: commands/s and takeovers against the
// baseline's, and how commands/s grow with the waiting processes.
func (j *judge) standby() {
	if len(standbySizes) < 2 {
		return
	}
	r := j.r
	small, big := standbySizes[0], standbySizes[1]
	m, base := r.standby("mongolock", small), r.standby("baseline", small)
	if m != nil && base != nil {
		j.ratio(fmt.Sprintf("G commands/s (P=%d)", small), "/s", m.OpsPerSec, base.OpsPerSec, 0.5, false, "baseline")
		j.ratio(fmt.Sprintf("G takeover p50 (P=%d)", small), "ms", m.TakeoverP50MS, base.TakeoverP50MS, 2, false, "baseline")
	}
	if mBig := r.standby("mongolock", big); m != nil && mBig != nil {
		g := mBig.OpsPerSec / m.OpsPerSec
		measured := fmt.Sprintf("%s → %s = %sx", num(m.OpsPerSec, "/s"), num(mBig.OpsPerSec, "/s"), num(g, ""))
		if bBig := r.standby("baseline", big); base != nil && bBig != nil {
			measured += fmt.Sprintf(" (baseline: %s → %s = %sx)", num(base.OpsPerSec, "/s"), num(bBig.OpsPerSec, "/s"),
				num(bBig.OpsPerSec/base.OpsPerSec, ""))
		}
		j.add(fmt.Sprintf("G commands/s growth, %d → %d waiting (P=%d → %d)", small-1, big-1, small, big), measured,
			"≤ 1.5x", g <= 1.5 && !math.IsNaN(g))
	}
}

// shared judges workloads I and J: no violation of the resource's rule.
func (j *judge) shared() {
	for _, x := range j.r.Shared {
		j.add(fmt.Sprintf("%s %s: %s (safety)", x.Workload, x.Impl, sharedRule(x)),
			fmt.Sprintf("%d violations; most holders at once %d", x.Violations, x.MostHolders), "no violation", x.Violations == 0)
	}
}

// election judges workload H against the baseline.
func (j *judge) election() {
	if m, base := j.r.election("mongolock"), j.r.election("baseline"); m != nil && base != nil {
		j.ratio("H commands/s", "/s", m.OpsPerSec, base.OpsPerSec, 0.5, false, "baseline")
		j.ratio("H failover p50 after a resignation", "ms", m.Resign.P50MS, base.Resign.P50MS, 1, false, "baseline")
		j.ratio("H failover p50 after a stop", "ms", m.Stop.P50MS, base.Stop.P50MS, 1, false, "baseline")
	}
}

// locks judges workloads A–E: against the baseline, and the serial bound.
func (j *judge) locks() {
	r := j.r
	if m, base := r.result("A", "mongolock"), r.result("A", "baseline"); m != nil && base != nil {
		j.ratio("A acquire+release p50", "ms", m.CycleP50MS, base.CycleP50MS, 1.05, false, "baseline")
	}
	if m, base := r.result("E", "mongolock"), r.result("E", "baseline"); m != nil && base != nil {
		j.ratio("E acq/s", "/s", m.AcqPerSec, base.AcqPerSec, 0.95, true, "baseline")
	}
	if m, base := r.result("C", "mongolock"), r.result("C", "baseline"); m != nil {
		j.ofBound("C acq/s", m, 0.90)
		j.add("C ops/acq", num(m.OpsPerAcq, ""), "≤ 1.05", m.OpsPerAcq <= 1.05)
		if base != nil {
			j.ratio("C wait p99", "ms", m.WaitP99MS, base.WaitP99MS, 0.2, false, "baseline")
		}
	}
	if m, base := r.result("D", "mongolock"), r.result("D", "baseline"); m != nil {
		j.ofBound("D acq/s", m, 0.85)
		if base != nil {
			j.ratio("D ops/acq", "", m.OpsPerAcq, base.OpsPerAcq, 0.5, false, "baseline")
		}
		j.add("D min process share", fmt.Sprintf("%.3f (per process: %v)", m.MinShare, m.PerProcess),
			fmt.Sprintf("≥ 1/(2P) = %.3f", m.FairFloor), m.MinShare >= m.FairFloor)
		if base != nil {
			j.ratio("D wait p99", "ms", m.WaitP99MS, base.WaitP99MS, 0.2, false, "baseline")
		}
	}
	if m, base := r.result("B", "mongolock"), r.result("B", "baseline"); m != nil {
		j.ofBound("B acq/s", m, 0.75)
		if base != nil {
			j.ratio("B wait p99", "ms", m.WaitP99MS, base.WaitP99MS, 1, false, "baseline")
		}
		j.add("B every process's share", fmt.Sprintf("%.3f to %.3f (per process: %v)", m.MinShare, 1-m.MinShare, m.PerProcess),
			"within 0.40-0.60", m.MinShare >= 0.4)
	}
}

// holds judges workload F: every lock held, the extensions batched, and
// goroutines independent of N.
func (j *judge) holds() {
	r := j.r
	n := r.largestHoldN()
	big, small := r.hold("mongolock", n), r.hold("mongolock", n/10)
	if big == nil || small == nil {
		return
	}
	j.add(fmt.Sprintf("F holds all N=%d locks through the hold (precondition)", n),
		fmt.Sprintf("%d acquired in %.0f s, %d of them lost by the end", big.Acquired, big.AcquireSeconds, big.LostByEnd),
		fmt.Sprintf("%d held, none lost", n), big.Acquired == n && big.LostByEnd == 0)
	limit := math.Ceil(float64(n) / 1000)
	j.add(fmt.Sprintf("F extension round trips / cadence (N=%d)", n), fmt.Sprintf("%.0f", big.ExtensionsPerCadence),
		fmt.Sprintf("≤ ceil(N/1000) = %.0f", limit), big.ExtensionsPerCadence <= limit)
	// Independent of N: going from N/10 to N held locks adds fewer
	// goroutines than 1% of the locks added (a goroutine per lock adds
	// one per lock; a shared scheduler adds none).
	dBig, dSmall := big.GoroutinesDuring-big.GoroutinesBefore, small.GoroutinesDuring-small.GoroutinesBefore
	allowed := (n - n/10) / 100
	j.add("F goroutines independent of N", fmt.Sprintf("+%d while holding %d, +%d while holding %d", dSmall, n/10, dBig, n),
		fmt.Sprintf("growth from N/10 to N ≤ %d (1%% of the locks added)", allowed), dBig-dSmall <= allowed)
}

// standbyMarkdown writes workload G's table.
func (r *report) standbyMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### Workload G, standby (leader election): %s; %g s window after a %g s warm-up, per implementation and size\n\n",
		standbyTitle(), r.StandbyS, standbyWarmup.Seconds())
	b.WriteString("| impl | processes (waiting) | commands/s | acquisitions | takeover p50 ms | takeover p90 ms | takeover max ms | takeovers | commands in the window |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, x := range r.Standby {
		fmt.Fprintf(b, "| %s | %d (%d) | %.1f | %d | %.0f | %.0f | %.0f | %d | %s |\n",
			x.Impl, x.Processes, x.Processes-1, x.OpsPerSec, x.Acquisitions, x.TakeoverP50MS, x.TakeoverP90MS,
			x.TakeoverMaxMS, x.Takeovers, opsList(x.OpsByCommand))
	}
	b.WriteString("\n")
	if len(standbySizes) >= 2 {
		small, big := standbySizes[0], standbySizes[1]
		var growth []string
		for _, im := range impls {
			s, l := r.standby(im.name, small), r.standby(im.name, big)
			if s != nil && l != nil {
				growth = append(growth, fmt.Sprintf("%s %sx", im.name, num(l.OpsPerSec/s.OpsPerSec, "")))
			}
		}
		if len(growth) > 0 {
			fmt.Fprintf(b, "- commands/s from P=%d to P=%d (%d to %d waiting): %s.\n", small, big, small-1, big-1, strings.Join(growth, ", "))
		}
	}
	b.WriteString("- Each process (a client of its own, with its own provider) loops: acquire the one name, hold it, release, stay away. " +
		"raw is not run: it excludes no one, so nobody would wait.\n" +
		"- commands/s = commands sent by all clients in the window (command monitor, Started events) / the window. " +
		"acquisitions = Acquire calls that returned in the window. " +
		"takeover = for each release that returned in the window, from that Release call's return to the return of the next " +
		"acquisition's Acquire, by any process (0 if that returned first); a release not followed within " +
		fmt.Sprintf("%v after the window counts with its length up to then.\n", standbyGrace))
	for _, x := range r.Standby {
		if x.UnfinishedTakeovers > 0 || x.Lost > 0 || x.Errors > 0 {
			fmt.Fprintf(b, "- G %s P=%d: %d takeovers unfinished, %d holds lost, %d errors", x.Impl, x.Processes,
				x.UnfinishedTakeovers, x.Lost, x.Errors)
			if x.FirstError != "" {
				fmt.Fprintf(b, " (first: %s)", x.FirstError)
			}
			b.WriteString("\n")
		}
	}
}

// electionMarkdown writes workload H's table.
func (r *report) electionMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### Workload H, election failover: %s; %g s window after a %g s warm-up, per implementation\n\n",
		electionTitle(), r.ElectionS, electionWarmup.Seconds())
	b.WriteString("| impl | commands/s | terms | after a resignation: failovers | p50 ms | max ms | after a stop: failovers | p50 ms | max ms | lease left at the stop p50 ms | after the lease's end p50 ms | max ms | commands in the window |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, x := range r.Elections {
		fmt.Fprintf(b, "| %s | %.1f | %d | %d | %.0f | %.0f | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n",
			x.Impl, x.OpsPerSec, x.Terms, x.Resign.Count, x.Resign.P50MS, x.Resign.MaxMS, x.Stop.Count, x.Stop.P50MS,
			x.Stop.MaxMS, x.Stop.LeaseLeftP50MS, x.Stop.AfterExpiryP50MS, x.Stop.AfterExpiryMaxMS, opsList(x.OpsByCommand))
	}
	b.WriteString("\n- Each process (a client of its own) campaigns in one election; the leader leads, then ends its term, " +
		"every other term by resigning and the others by stopping: its client is disconnected without resigning (a crash; " +
		"the endSessions a disconnection sends is not counted), and a new process with a new client takes its place. " +
		"Either way it campaigns again after its time away. raw is not run: it excludes no one.\n" +
		"- mongolock: Provider.Election, Campaign, Leadership.Release (WithExpiry as above, other options default). " +
		"baseline: its acquire (one try, then random 10–800 ms sleeps) as Campaign, deleteOne as Resign, and " +
		"DistributedLock.MongoDB's lease extension, which terms longer than the expiry need (updateOne every expiry/3); " +
		"it stores no value.\n" +
		"- commands/s = commands sent by all clients, stopped ones included, in the window / the window. " +
		"terms = Campaign calls that returned in the window. " +
		"failover = for each term that ended in the window, from its Resign call's return (or the stop) to the next " +
		"leader's Campaign return (0 if that returned first); one not followed within " +
		fmt.Sprintf("%v after the window counts with its length up to then. ", electionGrace) +
		"After a stop: lease left = how long the server still kept the lease (read by $$NOW just after the stop), " +
		"and after the lease's end = the failover less that.\n")
	for _, x := range r.Elections {
		if x.Resign.Unfinished+x.Stop.Unfinished > 0 || x.Lost > 0 || x.Errors > 0 {
			fmt.Fprintf(b, "- H %s: %d failovers unfinished, %d terms lost, %d errors", x.Impl,
				x.Resign.Unfinished+x.Stop.Unfinished, x.Lost, x.Errors)
			if x.FirstError != "" {
				fmt.Fprintf(b, " (first: %s)", x.FirstError)
			}
			b.WriteString("\n")
		}
	}
}

// num formats a figure with a precision that suits its size.
func num(v float64, unit string) string {
	var s string
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		s = fmt.Sprint(v)
	case math.Abs(v) >= 100:
		s = fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit == "" {
		return s
	}
	if unit == "/s" {
		return s + "/s"
	}
	return s + " " + unit
}

// sharedRule states what workload I's or J's guard checks.
func sharedRule(x sharedResult) string {
	for _, k := range x.Kinds {
		if k.Shared {
			return fmt.Sprintf("no holder with a writer, at most %d writer", x.Slots)
		}
	}
	return fmt.Sprintf("at most %d hold at once", x.Slots)
}

// sharedMarkdown writes the table of workload I or J, if it ran.
func (r *report) sharedMarkdown(b *strings.Builder, w sharedWorkload) {
	rs := r.shared(w.id)
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### Workload %s, %s; %g s per implementation\n\n", w.id, w.title, r.WindowS)
	b.WriteString("| impl |")
	align := "|---|"
	for _, k := range w.kinds {
		fmt.Fprintf(b, " %s/s | %s wait p50 ms | %s wait p99 ms |", k.name, k.name, k.name)
		align += "--:|--:|--:|"
	}
	if len(w.kinds) > 1 {
		b.WriteString(" all/s |")
		align += "--:|"
	}
	bound := rs[0].bound()
	fmt.Fprintf(b, " exclusive/s of %s | commands/acq | most holders at once | violations | min process share | starved workers | commands |\n%s--:|--:|--:|--:|--:|--:|---|\n",
		num(bound, "/s"), align)
	for _, x := range rs {
		fmt.Fprintf(b, "| %s |", x.Impl)
		for _, k := range x.Kinds {
			fmt.Fprintf(b, " %.1f | %.1f | %.1f |", k.AcqPerSec, k.WaitP50MS, k.WaitP99MS)
		}
		if len(x.Kinds) > 1 {
			_, all := x.acquisitions()
			fmt.Fprintf(b, " %.1f |", all)
		}
		fmt.Fprintf(b, " %.1f%% | %.2f | %d | %d | %.3f | %d/%d | %s |\n", 100*x.ofBound(), x.OpsPerAcq, x.MostHolders,
			x.Violations, x.MinShare, x.StarvedWorkers, x.Processes*x.Workers, opsList(x.OpsByCommand))
	}
	b.WriteString("\n")
	if len(rs) >= 2 {
		_, a := rs[0].acquisitions()
		_, o := rs[1].acquisitions()
		fmt.Fprintf(b, "- %s vs %s: %s vs %s acquisitions = %sx.\n", rs[0].Impl, rs[1].Impl, num(a, "/s"), num(o, "/s"), num(a/o, ""))
	}
	fmt.Fprintf(b, "- Bound: slots (exclusive holders at a time) / hold = %d / %g ms = %s; a hand-over's round trip comes on top. "+
		"exclusive/s = acquisitions held exclusively (all of them but an RWLock's readers) per second.\n", rs[0].Slots, rs[0].HoldMS, num(bound, "/s"))
	b.WriteString("- Each worker loops: pick an operation by its share, acquire, hold, release, 2 ms of work outside. " +
		"Processes are separate clients with their own Provider. wait = acquire call to handle, per kind; a wait cut by the window's " +
		"end counts with its length so far. commands/acq = commands sent by all clients / acquisitions of every kind. " +
		fmt.Sprintf("min process share = the smallest process's fraction of all acquisitions (1/(2P) = %.3f); ", 1/float64(2*rs[0].Processes)) +
		"starved = workers with no acquisition of any kind. most holders at once and violations: every acquisition is counted from its Acquire's return to its Release " +
		"call, within the server's hold, across all processes: a count over the rule (" + sharedRule(rs[0]) + ") is a violation.\n")
	for _, x := range rs {
		if x.Violations > 0 {
			fmt.Fprintf(b, "- **VIOLATION**: %s %s: %d acquisitions broke the rule; first: %s\n", x.Workload, x.Impl, x.Violations, x.FirstViolation)
		}
		for _, k := range x.Kinds {
			if k.Errors > 0 || k.Unfinished > 0 {
				fmt.Fprintf(b, "- %s %s %s: %d errors, %d waits cut by the window's end", x.Workload, x.Impl, k.Kind, k.Errors, k.Unfinished)
				if k.FirstError != "" {
					fmt.Fprintf(b, " (first error: %s)", k.FirstError)
				}
				b.WriteString("\n")
			}
		}
	}
}

// holderMarkdown writes workload K's table.
func (r *report) holderMarkdown(b *strings.Builder) {
	h := r.HolderCost
	cols := []struct {
		head string
		fig  func(holderCost) float64
	}{
		{"acquire call p50 µs", func(c holderCost) float64 { return c.Acquire.CallP50US }},
		{"p90", func(c holderCost) float64 { return c.Acquire.CallP90US }},
		{"its command p50 µs", func(c holderCost) float64 { return c.Acquire.CommandP50US }},
		{"p90", func(c holderCost) float64 { return c.Acquire.CommandP90US }},
		{"release call p50 µs", func(c holderCost) float64 { return c.Release.CallP50US }},
		{"its command p50 µs", func(c holderCost) float64 { return c.Release.CommandP50US }},
		{"refused try call p50 µs", func(c holderCost) float64 { return c.Refused.CallP50US }},
		{"its command p50 µs", func(c holderCost) float64 { return c.Refused.CommandP50US }},
		{"acquisition's reply, bytes", func(c holderCost) float64 { return float64(c.ReplyBytes) }},
	}
	fmt.Fprintf(b, "\n### Workload K, cost per holder: %s; %d rounds of %d per size\n\n| n |", holderTitle(), h.Rounds, h.PerRound)
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c.head)
	}
	b.WriteString("\n|--:|" + strings.Repeat("--:|", len(cols)) + "\n")
	for _, size := range h.Sizes {
		fmt.Fprintf(b, "| %d |", size.N)
		for _, c := range cols {
			fmt.Fprintf(b, " %.0f |", c.fig(size))
		}
		b.WriteString("\n")
	}
	small, big := h.Sizes[0].N, h.Sizes[len(h.Sizes)-1].N
	if big > small {
		fmt.Fprintf(b, "| per holder, %d → %d |", small, big)
		for _, c := range cols {
			fmt.Fprintf(b, " %.2f |", h.slope(c.fig))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\n- One process (a client and Provider of its own, expiry %v so that none of its holders is extended meanwhile) "+
		"holds n-1 slots of a semaphore of n; another times TryAcquire + Release pairs on it, one at a time, in rounds over the sizes "+
		"(rotating which goes first); then the first process takes the last slot and the other times refused tries. "+
		"call = the library call as its caller sees it (a ctx with a timeout, as services bound calls); its command = that call's one "+
		"command, from the request's sending to the reply's reading (the driver's command monitor): the server's work plus the transport, "+
		"for which a ping's command time stands (p50 %.0f µs); call less command is the client's work (the pipeline, the reply's decoding). "+
		"per holder = (figure at n=%d − figure at n=%d) / %d. The reply is the semaphore's document after the update with only its newest holder (a projection).\n",
		holderExpiry, h.PingP50US, big, small, big-small)
}
