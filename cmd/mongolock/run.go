package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
)

const runHelp = `
Acquires the lock NAME, waiting while someone else holds it (up to --wait; --try
makes one attempt), runs CMD with MONGOLOCK_NAME and MONGOLOCK_FENCING_TOKEN in its
environment, releases the lock when CMD exits, and exits with CMD's status, or with
76 if the lock was lost. While CMD runs, the lock's lease (--expiry) is extended
every --expiry/3. Go programs, other mongolock commands and DistributedLock.MongoDB
services using the same database and collection share the lock.

CMD runs in a process group of its own, and signals go to the whole group: SIGINT,
SIGTERM, SIGHUP and SIGQUIT sent to mongolock are passed on, and the lock is
released once CMD has exited. (So CMD cannot read from a terminal: its group is
not the terminal's foreground group.)

If the lock is lost while CMD runs, CMD's group gets SIGTERM at once and SIGKILL
--grace later, and mongolock exits with status 76; the lock stays held until the
lease ends on the server, and is released once CMD's group has stopped. When the
lease could not be extended (the server was unreachable, or --hold-at-most), mongolock
knows a safety margin of
min(--expiry/10, 1s) before the server's lease ends: with a --grace shorter than
that margin (by default it is half of it: 500ms with the default --expiry), CMD is
killed before anyone else can take the lock; a longer grace lets CMD overlap the
next holder by up to the difference. A force release frees the lock at once: CMD
is stopped within --expiry/3, while the next holder may already run, so pass
MONGOLOCK_FENCING_TOKEN to what CMD writes, for it to refuse an older holder. A CMD
that exits before mongolock learns of the loss did not hold the lock to its end
either: the release finds the loss, and mongolock says so, with CMD's status, and
exits with 76 whatever that status was. If mongolock itself is killed by SIGKILL,
CMD gets SIGKILL too (on Linux; the processes CMD started do not).

For a job that every replica's cron starts at the same time and that must run once
per period, --hold-at-least keeps the lock held until that long after it was
acquired (by the server's clock), also after CMD exited and mongolock with it, so
that a replica whose clock is a little behind finds it held (with --try: exit 75)
and skips the period. --hold-at-most bounds how long one run may hold the lock: at
that long after the acquisition, its lease is not extended any more, and CMD is
stopped as on any loss (status 76). It must be at least --expiry. A CMD that cannot
start never ran: the lock is freed at once, --hold-at-least or not. Both apply to the
lock NAME only, not with --semaphore, --read or --write.

With --semaphore N, --units K holds K of its N slots at once, with one lease and one
fencing token, and releases them together; a waiting run keeps later requests of
other processes from taking the slots it waits for, so small ones cannot starve it.

Without --verbose, run prints nothing of its own unless something went wrong; a
lock held by someone else is not wrong: the exit status (75) says it. So cron
mails only what CMD prints.

--json says how run ended in one JSON object on stderr (stdout is CMD's), in place
of its last message: {"name":"nightly","acquired":true,"fencingToken":1757930000000000001,
"lost":false,"status":0}, with "error" when mongolock failed. A loss while CMD runs is
still said as it happens, in a line of text before it.

Examples:
  mongolock run nightly -- ./report.sh
  mongolock run --try nightly -- ./report.sh            # in a crontab: skip if held
  mongolock run --wait 10m --expiry 1m migrate -- ./migrate.sh up
  mongolock run --semaphore 3 exports -- ./export.sh    # at most 3 at a time
  mongolock run --semaphore 8 --units 3 gpus -- ./train.sh  # 3 of 8 units at once
  mongolock run --read catalog -- ./read-catalog.sh     # with other readers; --write alone
  mongolock run nightly -- sh -c 'exec ./report.sh --token "$MONGOLOCK_FENCING_TOKEN"'
  mongolock run --try --hold-at-least 50s --hold-at-most 10m hourly -- ./hourly.sh  # once an hour, from every replica's cron
`

type runFlags struct {
	wait, grace, expiry time.Duration
	atLeast, atMost     time.Duration
	try, read, write    bool
	verbose, asJSON     bool
	owner               string
	slots, units        int
}

// runExcludes says which of run's flags exclude which: given together,
// on the command line or both by the environment, they are a usage error.
var runExcludes = map[string][]string{
	"try":           {"wait"},
	"semaphore":     {"read", "write"},
	"read":          {"write"},
	"hold-at-least": {"semaphore", "read", "write"},
	"hold-at-most":  {"semaphore", "read", "write"},
}

// register adds the flags of an acquisition to fs: run's and acquire's.
func (f *runFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.wait, "wait", 0, "give up after waiting `DURATION` for the lock, at most 744h (default: wait as long as it takes)")
	fs.BoolVar(&f.try, "try", false, "make one attempt: exit with 75 at once if the lock is held")
	fs.DurationVar(&f.expiry, "expiry", mongolock.DefaultExpiry, "the lease `DURATION`: how long the server keeps the lock for a mongolock that stopped extending it (100ms to 24h)")
	fs.StringVar(&f.owner, "owner", "", "who holds the lock (`NAME`), as list and inspect show it (default: host/pid of mongolock)")
	fs.IntVar(&f.slots, "semaphore", 0, "hold one of `N` slots (1 to 4096) of the semaphore NAME, not the lock NAME")
	fs.IntVar(&f.units, "units", 1, "with --semaphore, hold `K` of its slots at once (1 to N), released together")
	fs.BoolVar(&f.read, "read", false, "hold the reader-writer lock NAME for reading, with other readers")
	fs.BoolVar(&f.write, "write", false, "hold the reader-writer lock NAME for writing, alone")
}

// checkAcquisition refuses the flags of an acquisition (register's) that
// exclude each other or are out of range, for the command called cmd; set
// is given's. Durations and the owner are checkValues'.
func (c *cli) checkAcquisition(cmd string, f *runFlags, set map[string]bool) error {
	on := map[string]bool{"try": f.try, "wait": set["wait"], "semaphore": set["semaphore"], "read": f.read, "write": f.write}
	if err := c.excluded(cmd, on, "try", "wait"); err != nil {
		return err
	}
	if err := c.excluded(cmd, on, "semaphore", "read", "write"); err != nil {
		return err
	}
	switch {
	case set["semaphore"] && f.slots < 1:
		return fail(exitUsage, "%s: %s: a semaphore has at least 1 slot", cmd, c.srcValue("semaphore"))
	case set["semaphore"] && f.slots > mongolock.MaxSemaphoreSlots:
		return fail(exitUsage, "%s: %s: a semaphore has at most %d slots", cmd, c.srcValue("semaphore"), mongolock.MaxSemaphoreSlots)
	case set["units"] && !set["semaphore"]:
		return fail(exitUsage, "%s: %s applies to a semaphore: give --semaphore N", cmd, c.src("units"))
	case set["units"] && (f.units < 1 || f.units > f.slots):
		return fail(exitUsage, "%s: %s: a semaphore of %d slots is held with 1 to %d units", cmd, c.srcValue("units"), f.slots, f.slots)
	}
	return nil
}

// checkRun refuses run's own flags that are out of range or exclude
// others, once checkAcquisition has passed; set is given's.
func (c *cli) checkRun(f *runFlags, set map[string]bool) error {
	holds := set["hold-at-least"] || set["hold-at-most"]
	switch {
	case set["hold-at-most"] && f.atMost < f.expiry && f.expiry >= f.atLeast:
		return fail(exitUsage, "run: %s: must be at least %s (%v)", c.srcValue("hold-at-most"), c.src("expiry"), f.expiry)
	case set["hold-at-most"] && f.atMost < f.atLeast:
		return fail(exitUsage, "run: %s: must be at least %s (%v)", c.srcValue("hold-at-most"), c.src("hold-at-least"), f.atLeast)
	case holds && (set["semaphore"] || f.read || f.write):
		return fail(exitUsage, "run: --hold-at-least and --hold-at-most apply to a lock, not with --semaphore, --read or --write")
	}
	return nil
}

// options are the Provider's options for f's acquisition.
func (f *runFlags) options() []mongolock.Option {
	opts := []mongolock.Option{mongolock.WithExpiry(f.expiry)}
	if f.owner != "" {
		opts = append(opts, mongolock.WithOwner(f.owner))
	}
	return opts
}

func (c *cli) runCommand() *command {
	f := new(runFlags)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.register(fs)
	fs.DurationVar(&f.grace, "grace", 0, "on loss, CMD has `DURATION` after SIGTERM before SIGKILL, at most 1h (default: half of min(--expiry/10, 1s))")
	fs.DurationVar(&f.atLeast, "hold-at-least", 0, "keep the lock held until `DURATION` after it was acquired, also after CMD exited, at most 744h (default: release it when CMD exits)")
	fs.DurationVar(&f.atMost, "hold-at-most", 0, "lose the lock (and stop CMD) `DURATION` after it was acquired; at least --expiry, at most 744h (default: no bound)")
	fs.BoolVar(&f.verbose, "verbose", false, "say on stderr when the lock is acquired, refused and released")
	cmd := &command{name: "run", synopsis: "run [flags] NAME [--] CMD [ARGS...]", help: runHelp, flags: fs}
	fs.BoolVar(&f.asJSON, "json", false, "say how it ended in one JSON object on stderr, in place of a message")
	cmd.run = func(args []string) error {
		r := new(runReport)
		err := c.run(cmd, f, args, r)
		if !f.asJSON {
			return err
		}
		return r.print(c.stderr, err)
	}
	return cmd
}

// A runReport is what run --json says of how it ended.
type runReport struct {
	Name         string `json:"name"`
	NameQuoted   bool   `json:"nameQuoted,omitempty"`
	Acquired     bool   `json:"acquired"`
	FencingToken int64  `json:"fencingToken,omitempty"`
	Lost         bool   `json:"lost"`
	Status       int    `json:"status"`
	Error        string `json:"error,omitempty"`
}

// print writes r, with err's status and message, as one line on w, and
// returns err's status alone.
func (r *runReport) print(w io.Writer, err error) error {
	var e *exitError
	switch {
	case err == nil:
	case errors.As(err, &e):
		r.Status, r.Error = e.code, e.msg
	default:
		r.Status, r.Error = exitFailed, oneLine(err)
	}
	if r.NameQuoted = !utf8.ValidString(r.Name); r.NameQuoted {
		r.Name = printName(r.Name)
	}
	_ = json.NewEncoder(w).Encode(r)
	if r.Status == 0 {
		return nil
	}
	return &exitError{code: r.Status}
}

func (c *cli) run(cmd *command, f *runFlags, args []string, report *runReport) error {
	pos, argv, err := c.parseArgs(cmd, args, 1)
	if err != nil {
		return err
	}
	set := c.given(cmd.flags, runExcludes)
	switch {
	case len(pos) == 0:
		return fail(exitUsage, "run: no lock name (mongolock run --help)")
	case len(argv) == 0:
		return fail(exitUsage, "run: no command to run after the lock's name (mongolock run --help)")
	}
	if err := c.checkAcquisition("run", f, set); err != nil {
		return err
	}
	if err := c.checkRun(f, set); err != nil {
		return err
	}
	// A command that cannot run is found out before the lock is taken.
	if err := lookPath(argv[0]); err != nil {
		return err
	}
	name, err := readName("run", pos[0])
	if err != nil {
		return err
	}
	report.Name = name
	s, err := c.conn.open(f.runOptions(set)...)
	if err != nil {
		return err
	}
	defer s.close()
	defer func() { report.Lost = s.lost }()
	return c.runUnder(s, f, report, argv, f.graceOf(set))
}

// lookPath fails as run does for a command that cannot be run.
func lookPath(cmd string) error {
	_, err := exec.LookPath(cmd)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return fail(exitNotFound, "run: %s", oneLine(err))
	}
	return fail(exitNoExec, "run: %s", oneLine(err))
}

// graceOf is --grace, or its default: half of the safety margin.
func (f *runFlags) graceOf(set map[string]bool) time.Duration {
	if set["grace"] {
		return f.grace
	}
	return min(f.expiry/10, time.Second) / 2
}

// runOptions are the Provider's options for run's acquisition.
func (f *runFlags) runOptions(set map[string]bool) []mongolock.Option {
	opts := append(f.options(), mongolock.WithHoldAtLeast(f.atLeast))
	if set["hold-at-most"] {
		opts = append(opts, mongolock.WithHoldAtMost(f.atMost))
	}
	return opts
}

// runUnder acquires name as f says, runs argv holding it, and releases it.
func (c *cli) runUnder(s *session, f *runFlags, report *runReport, argv []string, grace time.Duration) error {
	name := report.Name
	// Signals are caught from now on: while waiting they end the wait,
	// while CMD runs they are passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	h, err := c.acquire(s, "run", name, f, sigs)
	if err != nil {
		return err
	}
	report.Acquired, report.FencingToken = true, h.FencingToken()
	if f.verbose {
		fmt.Fprintf(c.stderr, "mongolock: run: acquired %q, fencing token %d\n", name, h.FencingToken())
	}
	status, err := c.runHolding(s, h, argv, grace, sigs)
	if err != nil {
		return err
	}
	if f.verbose {
		fmt.Fprintf(c.stderr, "mongolock: run: released %q\n", name)
	}
	if status != 0 {
		return fail(status, "")
	}
	return nil
}

// interrupted is the cause of a wait that a signal ended.
type interrupted struct{ sig os.Signal }

func (i interrupted) Error() string { return i.sig.String() }

// acquire takes the lock (or slot) as f says, for the command called cmd,
// and ends the wait on the first of sigs.
func (c *cli) acquire(s *session, cmd, name string, f *runFlags, sigs <-chan os.Signal) (*mongolock.Handle, error) {
	try, wait := acquirers(s, name, f)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	acquire := wait
	switch {
	case f.try:
		acquire = try
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, s.timeout)
		defer stop()
	case f.wait > 0:
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, f.wait)
		defer stop()
	}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-sigs:
			cancel(interrupted{sig})
		case <-stop:
		}
	}()
	h, err := acquire(ctx)
	close(stop)
	<-watched
	var sig interrupted
	if errors.As(context.Cause(ctx), &sig) {
		if h != nil {
			c.release(s, h)
		}
		return nil, fail(signalStatus(sig.sig), "%s: %s while waiting for %q: not acquired", cmd, sig.sig, name)
	}
	if err != nil {
		return nil, notAcquired(cmd, err, f.verbose)
	}
	return h, nil
}

// acquirers returns the TryAcquire and the Acquire of what f names: a
// semaphore's slots, an RWLock's reader or writer, or a lock.
func acquirers(s *session, name string, f *runFlags) (try, wait func(context.Context) (*mongolock.Handle, error)) {
	switch {
	case f.slots > 0:
		sem := s.p.Semaphore(name, f.slots).Units(f.units)
		return sem.TryAcquire, sem.Acquire
	case f.read:
		r := s.p.RWLock(name).Reader()
		return r.TryAcquire, r.Acquire
	case f.write:
		w := s.p.RWLock(name).Writer()
		return w.TryAcquire, w.Acquire
	}
	l := s.p.Lock(name)
	return l.TryAcquire, l.Acquire
}

// notAcquired is the failure of the command cmd whose acquisition failed
// with err: not acquired (said only when verbose), the server's error, or
// another.
func notAcquired(cmd string, err error, verbose bool) error {
	switch {
	case errors.Is(err, mongolock.ErrNotAcquired):
		if verbose {
			return fail(exitNotAcquired, "%s: %s", cmd, oneLine(err))
		}
		return fail(exitNotAcquired, "")
	case isServerError(err):
		return serverError(err)
	}
	return fail(exitFailed, "%s", oneLine(err))
}

// runHolding runs argv while h holds its lock, stops it if the lock is
// lost, then releases h. It returns argv's exit status, or an exitLost
// failure if h was lost before its release.
func (c *cli) runHolding(s *session, h *mongolock.Handle, argv []string, grace time.Duration, sigs <-chan os.Signal) (int, error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Env = append(os.Environ(), "MONGOLOCK_NAME="+h.Name(), "MONGOLOCK_FENCING_TOKEN="+strconv.FormatInt(h.FencingToken(), 10))
	child.Stdin, child.Stdout, child.Stderr = c.stdin, c.stdout, c.stderr
	child.SysProcAttr = sysProcAttr()
	select {
	case <-h.Lost():
		s.lost = true
		return 0, fail(exitLost, "run: lost %q before %s started: %s; not run", h.Name(), argv[0], lossReason(backend.ReleaseUnused(context.Background(), h)))
	default:
	}
	exited, err := startChild(child)
	if err != nil {
		c.release(s, h) // the command never ran: no hold, and a loss is moot
		code := exitNoExec
		if errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return 0, fail(code, "run: %s", oneLine(err))
	}
	if lost, kill := c.watch(s, h, child, exited, grace, sigs); lost {
		c.releaseAfterLoss(s, h, child, kill)
		return 0, fail(exitLost, "")
	}
	status := exitStatus(child)
	// A loss found only now (a force release is seen at the next
	// extension, up to --expiry/3 later) may have let someone else in
	// while the command ran: its status cannot stand for success.
	if err := c.releaseHandle(s, h); err != nil {
		s.lost = true
		return 0, fail(exitLost, "run: %s exited with status %d, but the lock %q (fencing token %d) was lost before its release: %s",
			argv[0], status, h.Name(), h.FencingToken(), lossReason(err))
	}
	return status, nil
}

// startChild starts child and returns the channel of its exit, or why it did
// not start.
func startChild(child *exec.Cmd) (exited <-chan error, err error) {
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		// A child's parent-death signal comes when the thread that
		// started it ends: this one, kept until the child is waited for.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := child.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- child.Wait()
	}()
	return done, <-started
}

// watch waits for child to exit while h holds, forwarding sigs to it. At
// h's loss it sends child SIGTERM, and SIGKILL after grace. It reports
// whether h was lost, and the timer of that SIGKILL if it is still to
// come.
func (c *cli) watch(s *session, h *mongolock.Handle, child *exec.Cmd, exited <-chan error, grace time.Duration, sigs <-chan os.Signal) (lost bool, kill <-chan time.Time) {
	lostCh := h.Lost()
	for {
		select {
		case <-exited: // its status is in child.ProcessState
			return lost, kill
		case <-lostCh:
			lostCh, s.lost, lost = nil, true, true
			terminate(child.Process)
			kill = time.After(grace)
			// The lock stays held on the server until its lease ends
			// there, unless released: it is released once CMD has stopped.
			lossErr := backend.LossOf(h)
			if lossErr == nil {
				lossErr = mongolock.ErrLockLost
			}
			fmt.Fprintf(c.stderr, "mongolock: run: lost %q (fencing token %d) while %s ran: %s; sent it SIGTERM\n",
				h.Name(), h.FencingToken(), child.Args[0], lossReason(lossErr))
		case <-kill:
			kill = nil
			killGroup(child.Process)
			fmt.Fprintf(c.stderr, "mongolock: run: %s still ran %v after SIGTERM: sent it SIGKILL\n", child.Args[0], grace)
		case sig := <-sigs:
			forward(child.Process, sig)
		}
	}
}

// releaseAfterLoss releases the lost h once child has stopped: what CMD
// started may outlive it, and gets SIGKILL at the end of the grace too
// (kill, if it is still to come).
func (c *cli) releaseAfterLoss(s *session, h *mongolock.Handle, child *exec.Cmd, kill <-chan time.Time) {
	if kill != nil && groupAlive(child.Process) {
		<-kill
		killGroup(child.Process)
	}
	// CMD has stopped: the release frees the lock at once (the lost
	// lease is not extended; WithHoldAtLeast's hold still applies).
	ctx, cancel := s.ctx()
	_ = h.Release(ctx)
	cancel()
}

// lossReason says why a lock was lost, from its Release's error.
func lossReason(err error) string {
	var le *mongolock.Error
	if errors.As(err, &le) {
		err = le.Err
	}
	return strings.TrimPrefix(oneLine(err), "lock lost: ")
}

// releaseHandle releases h after its command exited, and returns the
// error if h had been lost. Another failure is reported, but the command's
// work was done under the lock.
func (c *cli) releaseHandle(s *session, h *mongolock.Handle) error {
	ctx, cancel := s.ctx()
	defer cancel()
	switch err := h.Release(ctx); {
	case errors.Is(err, mongolock.ErrLockLost):
		return err
	case err != nil:
		fmt.Fprintf(c.stderr, "mongolock: run: %s; the lock frees itself when its lease ends\n", oneLine(err))
	}
	return nil
}

// release releases h, which nobody used, within --timeout: its command
// never ran, so the lock is free at once, --hold-at-least or not.
func (c *cli) release(s *session, h *mongolock.Handle) {
	ctx, cancel := s.ctx()
	defer cancel()
	_ = backend.ReleaseUnused(ctx, h)
}

// exitStatus is a shell's status for the command's end: its exit code, or
// 128+N if signal N ended it.
func exitStatus(child *exec.Cmd) int {
	ps := child.ProcessState
	if ps == nil {
		return exitFailed
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return signalStatus(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	return exitFailed
}

// signalStatus is 128+N for signal N, as shells report a command that a
// signal ended.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFailed
}

// isServerError reports whether err came from the server, the network or
// a request's time limit, rather than from the request itself.
func isServerError(err error) bool {
	return errors.As(err, new(mongo.ServerError)) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, new(topology.ServerSelectionError)) ||
		errors.Is(err, mongo.ErrClientDisconnected)
}
