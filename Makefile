# mongolock: `make test` is the README's test command and what CI runs.
GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
ACTIONLINT  ?= $(GO) run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
TESTFLAGS   ?=
# gotestsum runs go test -json and prints each test as it ends, so that a
# run of several minutes shows its progress from its first seconds.
GOTESTSUM   ?= $(GO) run gotest.tools/gotestsum@v1.13.0 --format testname --hide-summary=skipped --
# GoReleaser is a large program (minutes to build on two cores): built once
# per version into a cache directory that CI keeps too, rather than by go run.
GORELEASER_VERSION ?= v2.15.1
TOOLS              ?= $(HOME)/.cache/mongolock-tools
GORELEASER         ?= $(TOOLS)/goreleaser-$(GORELEASER_VERSION)/goreleaser

# The tests find their server themselves (internal/testdb): MONGOLOCK_TEST_URI
# if set (their own variable: never MONGODB_URI, which may name real data).
# `make test` also sets MONGOLOCK_TEST_REQUIRED=1, which tells them that a
# missing server is a failure and that they may start one: a mongo:8.0
# container (internal/testdb/container, a module of its own) where a Docker
# daemon answers, else the local FerretDB test server, which `make` starts up
# front (installing it into ~/.cache/mongolock-testdb on first use) so that
# its output is seen (CI=true does the same in a clone). Without either, `go
# test` takes only a running local test server and skips what needs a server
# where there is none, as in an application's `go test all`.
# The tests, the benchmark and the soak create and drop only databases whose
# names begin with mongolock_test_.

.PHONY: test lint api demo demo-schedule demo-fleet bench soak simulate testdb testdb-stop

# One package at a time (-p 1): the root package's fault and guarantee tests
# time leases to tens of milliseconds, and on two cores the other packages'
# tests (the command's, the soak's, the examples', each running processes of
# their own) beside them make timers late by hundreds.
test: testdb
	@echo "make test: each test is printed as it ends; the first come once the tests are built with -race (seconds, or about 40 s with an empty build cache)"
	MONGOLOCK_TEST_REQUIRED=1 $(GOTESTSUM) -race -count=1 -p 1 -timeout 15m $(TESTFLAGS) ./...
	cd otelmongolock && MONGOLOCK_TEST_REQUIRED=1 $(GOTESTSUM) -race -count=1 -timeout 15m $(TESTFLAGS) ./...
	cd gocronmongolock && MONGOLOCK_TEST_REQUIRED=1 $(GOTESTSUM) -race -count=1 -timeout 15m $(TESTFLAGS) ./...

# The exported API of each module is recorded in api/, a feature a line, as
# Go's own api/ files are: make lint fails when the code's API differs from
# its record. After a change made on purpose (said in CHANGELOG.md), `make
# api` records it anew.
APIFLAGS ?= -w
api:
	$(GO) run ./internal/apicheck $(APIFLAGS) api/mongolock.txt . ./mongolocktest
	$(GO) run ./internal/apicheck $(APIFLAGS) -C otelmongolock api/otelmongolock.txt .
	$(GO) run ./internal/apicheck $(APIFLAGS) -C gocronmongolock api/gocronmongolock.txt .

# Besides the code (the root module's, otelmongolock's, the OpenTelemetry
# instrumentation, and gocronmongolock's, the gocron adapters: modules of
# their own so that their modules stay out of an application's graph): the
# workflows (actionlint), the module graph an application that imports
# mongolock gets (scripts/modgraph), the release: GoReleaser's configuration
# (goreleaser check), and the offline install of the next release prepared
# from this tree (scripts/release-check, RELEASING.md).
lint: $(filter $(TOOLS)/%,$(GORELEASER))
	$(MAKE) --no-print-directory api APIFLAGS=
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd otelmongolock && $(GO) vet ./... && $(STATICCHECK) ./...
	cd gocronmongolock && $(GO) vet ./... && $(STATICCHECK) ./...
	cd bench && $(GO) vet ./...
	cd examples/wiring && $(GO) vet ./...
	cd internal/testdb/container && $(GO) vet ./...
	cd internal/modproxy && $(GO) vet ./... && $(STATICCHECK) ./...
	$(ACTIONLINT) -color=false
	./scripts/modgraph
	$(GORELEASER) check
	./scripts/release-check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed: $$out"; exit 1; fi

# The README's "see it work" command: worker processes contend for one lock.
# The example is a program to copy, and reads MONGODB_URI as one would; here
# it is given the tests' server: MONGOLOCK_TEST_URI, else the local test
# server (started here even where Docker answers: the example does not start
# containers). It writes one lock document (database mongolock_demo) and
# drops nothing. Against a server of your own: MONGODB_URI=... go run
# ./examples/contend.
demo:
	@if [ -n "$$MONGOLOCK_TEST_URI" ]; then echo "using MONGOLOCK_TEST_URI"; else ./scripts/testdb start >/dev/null; fi
	MONGODB_URI="$${MONGOLOCK_TEST_URI:-$$(./scripts/testdb uri)}" $(GO) run ./examples/contend

# A scheduled job that every replica starts, on clocks a little off, runs
# once per period (WithHoldAtLeast); the same server as demo.
demo-schedule:
	@if [ -n "$$MONGOLOCK_TEST_URI" ]; then echo "using MONGOLOCK_TEST_URI"; else ./scripts/testdb start >/dev/null; fi
	MONGODB_URI="$${MONGOLOCK_TEST_URI:-$$(./scripts/testdb uri)}" $(GO) run ./examples/schedule

# Three workers share a fleet's shards; one is killed, one leaves, and the
# shards move each time; the same server as demo.
demo-fleet:
	@if [ -n "$$MONGOLOCK_TEST_URI" ]; then echo "using MONGOLOCK_TEST_URI"; else ./scripts/testdb start >/dev/null; fi
	MONGODB_URI="$${MONGOLOCK_TEST_URI:-$$(./scripts/testdb uri)}" $(GO) run ./examples/fleet

# The benchmark (BENCHMARKS.md): mongolock, the raw driver round trips
# and DistributedLock.MongoDB's algorithm side by side on one server. bench/ is
# a module of its own, so that its plotting dependency stays out of go.mod;
# it finds its server itself (MONGOLOCK_TEST_URI, else scripts/testdb) and
# drops its database, mongolock_test_bench.
# BENCHFLAGS=-quick for a smoke run, BENCHFLAGS='-only C,D' for some workloads,
# BENCHFLAGS='-only I,J,K -out out/ijk' for the semaphore and reader-writer lock.
bench:
	cd bench && $(GO) run . $(BENCHFLAGS)

# The soak (internal/soak): P processes x G goroutines over mutexes, semaphores
# of n slots, reader-writer locks and elections, each critical section
# checked on the server through a fenced resource that keeps the holders
# inside, while holder processes are SIGKILLed and clients closed under held
# handles. Processes of different expiries (1 s and 20 s) share the names,
# a long holder per process keeps semaphore slots and read locks, and every
# collection the library uses has a TTL index of 0 s, with documents deleted
# as soon as their expiresAt passes. Prints trials, violations and the
# longest wait for a handle per primitive, the faults injected and the TTL
# indexes at the end (violations must be 0; exit status 1 if not). The
# server is the tests' (MONGOLOCK_TEST_URI, else as `make test`); the soak
# drops its database, mongolock_test_soak. `make test` runs a 12 s form
# (TestSoak). SOAK=10m for ten minutes; SOAKFLAGS='-p 4 -g 8 -k 2 -ks 2 -n 2
# -kr 1 -ke 1 -expiries 1s/50ms,5s' for other shapes (go run ./internal/soak -h).
SOAK      ?= 60s
SOAKFLAGS ?=

soak: testdb
	MONGOLOCK_TEST_REQUIRED=1 $(GO) run ./internal/soak -d $(SOAK) $(SOAKFLAGS)

# The simulation (internal/simulate): the soak's checks (fenced resources,
# tokens, overlaps, losses signalled, longest waits) over the in-memory
# store (internal/memdb) in simulated time (a testing/synctest bubble), so
# that no server is needed and hours of leases pass in seconds. Processes
# of mixed expiries (1s/50ms, 20s, 3s) contend for mutexes, a semaphore,
# reader-writer locks (upgradeable readers among them) and elections,
# while their replies are delayed, lost after the operation applied,
# refused, cut off by partitions, clients are closed under held handles
# and processes die; half the worlds run over a replica set of three
# members with skewed clocks, whose primary steps down, is cut off (its
# unreplicated writes rolled back when it rejoins) or restarts about every
# 10 s. It stops after SIMULATE_N critical sections, over one
# simulation per core (-simulate.worlds), and prints the seed first and
# the soak's summary lines at the end; a violation fails it with the
# command that replays its seed, and so does a world that stops entering
# critical sections or a heap that grows with the run. Not under -race:
# that is what makes 100,000 fit in a minute, and SIMULATE_N=1000000 in
# under ten (docs/reliability.md). `make test` runs a small form
# (TestSimulate: 3,000, 1,000 under -race). SIMULATEFLAGS='-simulate.seed=N'
# replays a seed; go test ./internal/simulate -args -h lists the flags.
# Then the fleet worlds (TestSimulateFleet): workers of a fleet of 32 shards
# join, leave, crash, are cut off and stall, until its shards have moved
# SIMULATE_FLEET_MOVES times; no shard may run in two workers at once, and
# each burst of changes must settle within its bound (make test: 1,000,
# 300 under -race).
SIMULATE_N           ?= 100000
SIMULATE_FLEET_MOVES ?= 100000
SIMULATEFLAGS        ?=

simulate:
	$(GO) test -count=1 -timeout 30m -run 'TestSimulate$$' -v ./internal/simulate -simulate.n=$(SIMULATE_N) $(SIMULATEFLAGS)
	$(GO) test -count=1 -timeout 30m -run 'TestSimulateFleet$$' -v ./internal/simulate -simulate.fleet.moves=$(SIMULATE_FLEET_MOVES) $(SIMULATEFLAGS)

$(TOOLS)/goreleaser-%/goreleaser:
	@echo "building goreleaser $* into $(@D) (once)"
	GOBIN=$(@D) $(GO) install github.com/goreleaser/goreleaser/v2@$*

testdb:
	@if [ -z "$$MONGOLOCK_TEST_URI" ] && [ -n "$$MONGODB_URI" ]; then \
		echo "MONGODB_URI is ignored: the tests take their server from MONGOLOCK_TEST_URI"; fi
	@if [ -n "$$MONGOLOCK_TEST_URI" ]; then echo "using MONGOLOCK_TEST_URI"; \
	elif docker info >/dev/null 2>&1; then echo "using Docker (a mongo:8.0 container per test process)"; \
	else ./scripts/testdb start; fi

testdb-stop:
	./scripts/testdb stop
