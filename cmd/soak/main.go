// Command soak runs P processes x G goroutines over K lock names for a
// while, injecting faults, and checks on the server that the locks did
// their job:
//
//	go run ./cmd/soak                   # 15 s against a test server of its own
//	go run ./cmd/soak -d 10m -p 4 -g 8  # make soak SOAK=10m
//	MONGOLOCK_TEST_URI=mongodb://... go run ./cmd/soak -d 1h
//
// The server is -uri, else MONGOLOCK_TEST_URI (never MONGODB_URI), else the
// tests' own (testcontainers where Docker answers, else scripts/testdb). The
// soak drops its database (-db, default mongolock_test_soak) before and
// after the run, and takes only a name beginning with mongolock_test_.
//
// Every critical section writes to a "fenced resource", one document per
// lock name, that accepts a write only with a fencing token at least its
// last one. The writes double as the checks, made by the server:
//
//   - entering sets the resource's holder (inside) only if nobody is inside
//     and the entrant's token is greater than the last one: otherwise two
//     holders overlap, or tokens went back in acquisition order;
//   - every write and the exit match the holder's own token: otherwise
//     someone entered meanwhile (the holder was displaced);
//   - a holder whose client is dropped under it must be told (Lost) before
//     the server lets the next holder in: otherwise the next one finds it
//     inside.
//
// Faults: the parent SIGKILLs a random child process every -kill-every
// (mid-hold, as a rule: the children hold or wait all the time) and starts
// another in its place; each child closes its own client under a held lock
// every -drop-every, waits for the handle to report the loss, and
// reconnects. Counts live on the server, so that killed processes lose
// none. The program prints the trials (acquisitions), the faults injected
// and the violations, and exits with status 1 if there was any violation.
//
// Each child is this same program, started again with MONGOLOCK_SOAK_CHILD=1
// in its environment (TestSoak starts its test binary the same way).
package main

import (
	"fmt"
	"os"
)

// childEnv marks a child process.
const childEnv = "MONGOLOCK_SOAK_CHILD"

func main() {
	var err error
	if os.Getenv(childEnv) == "1" {
		err = runChild(os.Args[1:])
	} else {
		var r *Result
		r, err = runParent(os.Args[1:], os.Stdout, os.Stderr)
		if err == nil && r.Violations() > 0 {
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
}
