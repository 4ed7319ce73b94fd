// Package simulate runs the soak's checks over the in-memory store in
// simulated time: TestSimulate, which `make simulate` runs with
// -simulate.n=100000 and `make test` in a small form.
//
//	make simulate                                   # 100,000 critical sections
//	make simulate SIMULATEFLAGS=-simulate.seed=42   # the choices of seed 42
//	go test ./internal/simulate -run 'TestSimulate$' -v -simulate.n=20000 -simulate.worlds=1
//
// What runs is the library's engine, the one that runs over MongoDB, its
// statements applied to the documents of internal/memdb, inside a
// testing/synctest bubble: the store's $$NOW and every timer of the
// library (leases, extensions, waits, backoffs) read the bubble's clock,
// which moves on whenever every goroutine of the bubble waits. Hours of
// leases pass in seconds, and a lease runs out by the same clock that the
// store's statements compare it with.
//
// A world is one such simulation: P processes (-simulate.p) of G
// goroutines (-simulate.g) and a long holder each, as the soak's
// children. A process is a Provider over a client of its own to the
// store (memdb.Store.Client), with a network of its own, and its
// expiry[/extension cadence] is the (i mod count)-th of -simulate.expiries
// (1s/50ms, 20s and 3s by default), on the same names. Its goroutines
// pick, as the soak's do, a mutex, a semaphore of 3 slots (two of them at
// once one time in four, Semaphore.Units), an rwlock's
// reader, writer or upgradeable reader that upgrades, or an election, by
// the waiting call or a loop of Try calls, and run a critical section on
// the name's fenced resource; one section in eight (not a long holder's)
// passes its acquisition by ticket to a successor, a process apart
// from the chaos, which runs a critical section under it: the holder must
// be lost by then. Meanwhile, by the world's seed:
//
//   - about every 50 ms a process's network misbehaves: every reply
//     delayed for a while (up to a third of its expiry), the next replies
//     lost after their operations were applied (ambiguous: the caller
//     cannot tell), the next operations refused with a transient error,
//     or a partition of up to twice its expiry;
//   - about every second, a process closes its client under a held
//     handle: the client is cut off for good, the holder must be told of
//     its loss within twice its expiry, and its goroutines move to a new
//     client;
//   - about every 4 s, a process dies, preferably one with a holder inside
//     a kind whose holders died least so far: its client is cut off for
//     good, its goroutines stop and write nothing more, its Provider is
//     closed without releasing anything, its holders are taken out of the
//     resources (a mutex's left inside, dead), and its leases run out by
//     the store's clock; another process takes its place.
//
// The fenced resources are soakcheck.Board's: one per name, in process
// memory, applying at the instant of each entry, write and exit the rules
// the soak's server-side update filters state (no overlap, tokens in
// order, no holder displaced), by the simulated clock. The soak's other
// checks run as its children run them: a dropped client's holder must be
// told (Unsignalled), a long holder must be shown holding by Inspect until
// it is told of a loss (Vanished), a leader must read back what it
// proclaimed (Displaced). A run ends once -simulate.n critical sections
// were entered in all worlds together, and prints the soak's summary
// lines, summed over the worlds. A world that falls short fails: at
// once if it entered none for ten minutes of simulated time (more with
// long expiries): it stopped making progress; else once its simulated
// time runs out, which follows its share of -simulate.n, about four times
// what the share takes (-simulate.d sets it). A run whose live heap grows
// with its length fails too: by more than a megabyte a world and a
// kilobyte a critical section from a quarter of the run to nine tenths.
// Every 30 s of wall time a line says how many sections were entered so
// far and how fast, so that a long run shows whether it slows down as it
// goes on.
//
// A world's database is one server or a replica set (-simulate.members,
// by the same rule as the events below: 1,3 by default, so that with two
// worlds or more, half run over a replica set of three): internal/replset's
// model, whose members each have a clock ahead of the first's by up to
// -simulate.skew (250 ms; the processes give it as WithMaxClockSkew) and
// replicate with lags of up to 30 ms. Each process's client is a driver's
// (replset.Client): it sends to the primary it selected, learns of a new
// one at its next heartbeat or when refused, and writes at w: "majority",
// reads at "local" and opens its change streams at "majority", as the
// library asks. About every -simulate.failover (10 s), the set's primary
// steps down, or is cut off from the others for one to two election
// timeouts (it keeps answering the clients that selected it until it
// steps down; the others elect one of themselves; its writes that no
// majority applied are rolled back when it rejoins), or a secondary is cut
// off as long, or a member restarts; the summary counts the elections and
// rollbacks. Two tests show that the checks see what the library's
// settings prevent: TestSimulateFindsTwoHoldersWhenTheLibraryWritesAtW1
// (its clients write at w: 1) and
// TestSimulateFindsTwoHoldersPastTheClockSkewBound (a member's clock 2 s
// ahead of the one before it, past every process's margin and bound): each
// must find a violation in every seed it runs.
//
// -simulate.worlds (default: one per core) worlds run side by side, each
// with its own store, processes and clock, world i with seed+i: one
// bubble keeps about one core busy. The worlds' stores report change
// events as MongoDB 8.0 and 4.4 do in turn (-simulate.events): world i's
// in the (i mod count)-th form, so that the release events' filters meet
// both a pipeline's update events with their diff and its replace events.
// Their stores keep 1,024 change events and 4 in turn (-simulate.history,
// by the same rule): a history of 4 is one the library's change streams
// fall behind often, failing with ChangeStreamHistoryLost, and the library
// reopens them while its waiters poll.
//
// What a seed fixes, and what it does not: the seed (printed first, from
// the clock unless -simulate.seed says) fixes the world's shape and every
// choice the simulation makes: each goroutine's sequence of kinds, names,
// modes and hold times, and the schedule of faults (when, of which kind,
// on which process, how long). It does not fix the order in which the
// goroutines that are ready at one instant of simulated time run (the Go
// scheduler's, over several cores), nor the library's own randomness
// (backoff jitter, lock ids); and since that order decides which
// operation a fault meets and who wins a race, two runs of one seed
// diverge within the first simulated seconds. So a failure does not
// replay exactly: its seed replays the same workload under the same
// fault schedule, which finds the same kind of failure again at some
// rate (go test -count=N reruns it). What does replay exactly is the
// test a finding turns into: a focused reproduction.
package simulate
