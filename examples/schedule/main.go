// Command schedule shows a scheduled job that runs once per period although
// every replica's scheduler starts it: it starts several worker processes,
// each with a cron-style schedule ("every period, on the period") on a clock
// of its own that is a little off, and prints who ran each period, with the
// fencing token.
//
//	MONGODB_URI=mongodb://localhost:27017 go run ./examples/schedule
//	MONGODB_URI=mongodb://... go run ./examples/schedule -hold 0   # see periods run twice
//
// Each run takes the lock with one attempt (TryAcquire) and releases it when
// the job is done, which is long before the other replicas' clocks reach the
// same time. WithHoldAtLeast keeps the lock held until -hold after it was
// taken, by the server's clock, so the replicas whose clocks are behind find
// it held and skip the period; WithHoldAtMost bounds how long a stuck job
// could keep it. The hold must be longer than the replicas' clocks differ,
// and shorter than the period.
//
// It writes one lock document, in database mongolock_demo (-db), and drops
// nothing. Each worker is this same program, started again with -worker.
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
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

const lockName = "schedule-demo"

// config is what the parent and its workers share.
type config struct {
	uri, db        string
	workers        int
	periods        int
	period         time.Duration
	skew           time.Duration // the farthest a worker's clock is off
	hold           time.Duration // WithHoldAtLeast
	job            time.Duration // how long the job runs
	first          time.Time     // when the first period begins, by the true clock
	stdout, stderr io.Writer
}

func main() {
	c := config{stdout: os.Stdout, stderr: os.Stderr}
	flag.StringVar(&c.db, "db", "mongolock_demo", "the database of the lock document")
	flag.IntVar(&c.workers, "workers", 3, "worker processes (replicas)")
	flag.IntVar(&c.periods, "periods", 4, "periods to run")
	flag.DurationVar(&c.period, "period", 2*time.Second, "the schedule's period (a cron job's minute, shortened)")
	flag.DurationVar(&c.skew, "skew", 250*time.Millisecond, "how far the workers' clocks are off, at most, either way")
	flag.DurationVar(&c.hold, "hold", time.Second, "WithHoldAtLeast: how long after a run began the lock stays held (0: released when the job ends)")
	flag.DurationVar(&c.job, "job", 100*time.Millisecond, "how long the job runs")
	worker := flag.Int("worker", 0, "internal: run as worker number N")
	first := flag.Int64("first", 0, "internal: when the first period begins, in Unix milliseconds")
	flag.Parse()

	c.uri = os.Getenv("MONGODB_URI")
	if c.uri == "" {
		fmt.Fprintln(os.Stderr, "schedule: MONGODB_URI is not set: set it to your server's connection string, "+
			"e.g. MONGODB_URI=mongodb://localhost:27017")
		os.Exit(2)
	}
	var err error
	if *worker > 0 {
		c.first = time.UnixMilli(*first)
		err = runWorker(c, *worker)
	} else {
		_, err = runParent(c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule:", err)
		os.Exit(1)
	}
}

// clockOf says how far worker n's clock is off, with its sign.
func clockOf(c config, n int) string {
	if d := skewOf(c, n); d > 0 {
		return "+" + d.String()
	}
	return skewOf(c, n).String()
}

// skewOf is how far worker n's clock is off: from -skew to +skew, evenly.
func skewOf(c config, n int) time.Duration {
	if c.workers < 2 {
		return 0
	}
	return -c.skew + 2*c.skew*time.Duration(n-1)/time.Duration(c.workers-1)
}

// runWorker is one replica: at the start of each period by its own clock,
// it tries the lock once, and runs the job if it got it. It prints
// "ran PERIOD TOKEN" or "skipped PERIOD" for the parent.
func runWorker(c config, n int) error {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(c.uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(ctx) }()
	locks, err := mongolock.NewProvider(client.Database(c.db),
		mongolock.WithExpiry(c.period/2),
		mongolock.WithHoldAtLeast(c.hold),
		mongolock.WithHoldAtMost(c.period)) // a stuck job gives the lock up by the next period
	if err != nil {
		return err
	}
	defer func() { _ = locks.Close(ctx) }()
	job := locks.Lock(lockName)

	clock := func() time.Time { return time.Now().Add(skewOf(c, n)) } // this replica's clock
	for period := range c.periods {
		time.Sleep(c.first.Add(time.Duration(period) * c.period).Sub(clock())) // the scheduler fires
		h, err := job.TryAcquire(ctx)
		if errors.Is(err, mongolock.ErrNotAcquired) {
			fmt.Fprintf(c.stdout, "skipped %d\n", period)
			continue
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "ran %d %d\n", period, h.FencingToken())
		select { // the job: done long before the other replicas' clocks reach the period
		case <-time.After(c.job):
		case <-h.Lost():
		}
		if err := h.Release(ctx); err != nil { // held until c.hold after it was taken
			return err
		}
	}
	return nil
}

// A run is one period's run of the job: by which worker, with which token.
type run struct {
	period, worker int
	token          int64
}

// runParent starts the workers, relays what they print as it comes, and
// checks that each period's job ran exactly once, with fencing tokens that
// increase from period to period. The workers inherit MONGODB_URI. It
// returns the runs, by period.
func runParent(c config) ([]run, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The first period begins once the workers had time to connect.
	c.first = time.Now().Add(c.period + time.Second).Truncate(c.period).Add(c.period)
	fmt.Fprintf(c.stdout, "%d replicas, each on a clock up to %v off, run a job every %v for %d periods; the lock is held %v after each run began\n\n",
		c.workers, c.skew, c.period, c.periods, c.hold)
	var (
		mu   sync.Mutex
		runs = make([][]run, c.periods)
		wg   sync.WaitGroup
		errs = make([]error, c.workers)
	)
	for w := 1; w <= c.workers; w++ {
		cmd := exec.Command(exe, "-worker", strconv.Itoa(w), "-first", strconv.FormatInt(c.first.UnixMilli(), 10),
			"-db", c.db, "-workers", strconv.Itoa(c.workers), "-periods", strconv.Itoa(c.periods), "-period", c.period.String(),
			"-skew", c.skew.String(), "-hold", c.hold.String(), "-job", c.job.String())
		cmd.Stderr = c.stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var r run
				var what string
				fields := strings.Fields(sc.Text())
				if len(fields) >= 2 {
					what = fields[0]
					r.period, _ = strconv.Atoi(fields[1])
				}
				if len(fields) == 3 {
					r.token, _ = strconv.ParseInt(fields[2], 10, 64)
				}
				r.worker = w
				mu.Lock()
				at := time.Since(c.first).Round(time.Millisecond)
				switch {
				case what == "ran" && r.period >= 0 && r.period < c.periods:
					runs[r.period] = append(runs[r.period], r)
					fmt.Fprintf(c.stdout, "%8v  period %d  worker %d (clock %s) ran the job, fencing token %d\n", at, r.period, w, clockOf(c, w), r.token)
				case what == "skipped":
					fmt.Fprintf(c.stdout, "%8v  period %d  worker %d (clock %s) skipped: the lock was held\n", at, r.period, w, clockOf(c, w))
				default:
					fmt.Fprintf(c.stdout, "%8v  worker %d: %s\n", at, w, sc.Text())
				}
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				errs[w-1] = fmt.Errorf("worker %d: %w", w, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var all []run
	for period, rs := range runs {
		if len(rs) != 1 {
			return nil, fmt.Errorf("period %d ran %d times, not once", period, len(rs))
		}
		if len(all) > 0 && rs[0].token <= all[len(all)-1].token {
			return nil, fmt.Errorf("period %d's fencing token %d followed %d", period, rs[0].token, all[len(all)-1].token)
		}
		all = append(all, rs[0])
	}
	fmt.Fprintf(c.stdout, "\n%d periods, each run exactly once, fencing tokens strictly increasing\n", len(all))
	return all, nil
}
