// Command contend shows mongolock at work: it starts several worker
// processes that contend for one lock and prints every acquisition with its
// fencing token.
//
//	MONGODB_URI=mongodb://localhost:27017 go run ./examples/contend
//	MONGODB_URI=mongodb://... go run ./examples/contend -workers 5
//
// The server is the one MONGODB_URI names (`make demo` in the repository
// sets it to the tests' server: MONGOLOCK_TEST_URI, else a local test server
// it starts). It writes one lock document, in database mongolock_demo, and
// drops nothing. Each worker is this same program,
// started again with -worker. Only one holds the lock at a time; the fencing
// tokens increase in the order the lock was taken.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
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

const (
	database = "mongolock_demo"
	lockName = "demo"
)

func main() {
	workers := flag.Int("workers", 3, "worker processes")
	rounds := flag.Int("rounds", 3, "acquisitions per worker")
	hold := flag.Duration("hold", 100*time.Millisecond, "how long each acquisition holds the lock")
	worker := flag.Int("worker", 0, "internal: run as worker number N")
	flag.Parse()

	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		fmt.Fprintln(os.Stderr, "contend: MONGODB_URI is not set: set it to your server's connection string, "+
			"e.g. MONGODB_URI=mongodb://localhost:27017 (make demo sets it to the tests' server)")
		os.Exit(2)
	}
	var err error
	if *worker > 0 {
		err = runWorker(uri, *worker, *rounds, *hold)
	} else {
		err = runParent(*workers, *rounds, *hold)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "contend:", err)
		os.Exit(1)
	}
}

// runWorker acquires the lock rounds times, holding it for hold each time,
// and prints "acquired <token>" and "released" lines for the parent.
func runWorker(uri string, n, rounds int, hold time.Duration) error {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(ctx) }()

	lock, err := mongolock.New(client.Database(database), lockName,
		mongolock.WithExpiry(5*time.Second), mongolock.WithAdaptiveBackoff(true))
	if err != nil {
		return err
	}
	for range rounds {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		h, err := lock.Acquire(actx)
		cancel()
		if err != nil {
			return err
		}
		fmt.Printf("acquired %d\n", h.FencingToken())
		select { // the critical section: work until done, or stop if the lock is lost
		case <-time.After(hold):
		case <-h.Lost():
		}
		if err := h.Release(ctx); err != nil {
			return err
		}
		fmt.Println("released")
	}
	return nil
}

// runParent starts the workers, relays their lines as they come, and checks
// that the fencing tokens increase in the order the lock was taken (a
// worker prints "acquired" while it holds the lock, at least -hold before
// the next worker can take it, so the order the lines arrive in is the
// order of acquisition). The workers inherit MONGODB_URI.
func runParent(workers, rounds int, hold time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("%d worker processes x %d acquisitions of lock %q, each held %v\n\n", workers, rounds, lockName, hold)
	start := time.Now()
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
		errs   = make([]error, workers)
	)
	for w := 1; w <= workers; w++ {
		cmd := exec.Command(exe, "-worker", strconv.Itoa(w), "-rounds", strconv.Itoa(rounds), "-hold", hold.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				mu.Lock()
				elapsed := time.Since(start).Round(time.Millisecond)
				if tok, ok := strings.CutPrefix(line, "acquired "); ok {
					t, _ := strconv.ParseInt(tok, 10, 64)
					tokens = append(tokens, t)
					fmt.Printf("%8v  worker %d (pid %d) acquired  fencing token %d\n", elapsed, w, cmd.Process.Pid, t)
				} else {
					fmt.Printf("%8v  worker %d (pid %d) %s\n", elapsed, w, cmd.Process.Pid, line)
				}
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				errs[w-1] = fmt.Errorf("worker %d: %w", w, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			return fmt.Errorf("fencing token %d followed %d", tokens[i], tokens[i-1])
		}
	}
	fmt.Printf("\n%d acquisitions in %v, one holder at a time, fencing tokens strictly increasing\n",
		len(tokens), time.Since(start).Round(time.Millisecond))
	return nil
}
