// Command soak runs P processes x G goroutines over named locks,
// semaphores, reader-writer locks and elections for a while, injecting
// faults, and checks on the server that they did their job:
//
//	go run ./internal/soak                   # 15 s against a test server of its own
//	go run ./internal/soak -d 10m -p 4 -g 8  # make soak SOAK=10m
//	MONGOLOCK_TEST_URI=mongodb://... go run ./internal/soak -d 1h
//
// Each trial picks a kind, then one of its names: -k mutexes
// (Provider.Lock), -ks semaphores of -n slots (Provider.Semaphore), -kr
// reader-writer locks (Provider.RWLock; a writer one time in three, half
// of the writers an upgradeable reader that UpgradeableHandle.Upgrade
// makes the writer), or -ke
// elections (Provider.Election: Campaign, and the leadership is held as a
// mutex is). One acquisition in four (not a campaign) loops on the Try
// call instead of waiting.
//
// The processes do not share one lease: process i has the (i mod count)-th
// of -expiries (default 1s/50ms,20s: an expiry of 1 s extended every 50 ms,
// and one of 20 s extended at the library's default cadence, a third), on
// the same names of every kind. Besides its G goroutines, each process has
// a long holder that holds a slot of the first semaphore or a read lock of
// the first rwlock for up to -long-hold (3 s) at a time, so that holders of
// a long expiry share a document with short-expiry holders that extend.
//
// Before the children start, the soak creates a TTL index with
// expireAfterSeconds 0 on expiresAt of each collection the library uses
// (the locks' and elections', and the semaphores' and RWLocks'), under a
// name of its own: the library's index, of the same key, is then refused,
// and it does not raise this one (it raises only its own name's), as an
// operator's index that mongolock did not raise. The TTL monitor passes
// every 60 s, so the soak also deletes, every -sweep-every, the documents
// whose expiresAt has passed by the server's clock: what the index does,
// only sooner. Whatever lets a document's expiresAt fall below a live
// holder's lease then shows as a violation. The run ends with the TTL
// indexes as listIndexes shows them, and fails if they were changed.
//
// The server is -uri, else MONGOLOCK_TEST_URI (never MONGODB_URI), else the
// tests' own, found as internal/testdb finds it (`make soak` has it start
// a Docker container or scripts/testdb; a bare go run takes a running
// scripts/testdb server). The
// soak drops its database (-db, default mongolock_test_soak) before and
// after the run, and takes only a name beginning with mongolock_test_.
//
// Every critical section writes to a "fenced resource", one document per
// name, that keeps the holders inside. The writes double as the checks,
// made by the server in each update's filter:
//
//   - a mutex's or an election's holder enters only if nobody is inside
//     (but a holder of a killed process) and its token is greater than the
//     last one entered;
//   - a semaphore's enters only if fewer than n are inside and none with
//     its token;
//   - an rwlock's reader enters only if no writer is inside and its token
//     is greater than the last writer's entered; a writer only if nobody
//     is inside and its token is greater than the last one entered;
//   - every write and the exit match the holder among those inside, and a
//     mutex's, an election's or an rwlock's token is still at least the
//     one it had to outrank: otherwise someone entered meanwhile (the
//     holder was displaced);
//   - a holder whose client is dropped under it must be told (Lost) before
//     the server lets the next holder in: otherwise the next one finds it
//     inside (one holder too many, for a semaphore).
//
// Two checks read the library's own documents: a leader proclaims a value
// and reads the election back (Leader), which must show its token and that
// value; a long holder inspects its semaphore or rwlock before each write,
// which must show it holding. Either may fail only once the holder has
// been told of a loss (a document deleted under a live holder fails it:
// the holder "vanished").
//
// A refused entry is a violation: holders overlap (n+1 of a semaphore's),
// or tokens went back in acquisition order. A mutex's, an election's and
// an rwlock writer's holders enter in the order they acquired, so each
// token must exceed the last entered. Readers and a semaphore's holders
// acquire side by side and may enter in another order, so the server
// cannot require that of them. A reader's token must exceed the last
// writer's entered: a writer excludes readers, so that writer acquired
// first. A semaphore's holder reads the last token entered before it
// acquires, and its token must exceed that one (compared by the holder:
// the server sees entries, not acquisitions); no two holders inside may
// have the same token.
//
// Faults: the parent SIGKILLs a child every -kill-every, one with a holder
// inside a critical section of the kind hit least so far if it finds one
// within a second, and starts another in its place; the victim's holders
// are taken out of the resources. A child is killed only while twice its
// expiry remains, so that its locks expire and are taken again before the
// end (with a 20 s expiry, only early in a long run). Each child closes its
// own client under a held handle every -drop-every (of a kind whose
// holders were closed under least so far, by every child), waits for the
// handle to report the loss, and reconnects.
//
// Counts live on the server, so that killed processes lose none: with
// them, each acquisition's wait (from the call, or a Try loop's first
// call, to the handle) as the longest per name, and the longest of those
// that never got a handle (they gave up after 20 s plus the longest
// expiry, or the run ended). The program prints per kind the trials, the
// violations and the longest waits (starvation shows as a figure), the
// faults injected, the TTL indexes and the documents swept, and exits
// with status 1 if there was any violation.
//
// Each child is this same program, started again with MONGOLOCK_SOAK_CHILD=1
// in its environment (TestSoak starts its test binary the same way).
package main

import (
	"fmt"
	"os"
)

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
