# mongolock: `make test` is the README's test command and what CI runs.
GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
TESTFLAGS   ?=

# The tests find their server themselves (internal/testdb): MONGODB_URI if
# set, else a testcontainers mongo where a Docker daemon answers, else the
# local FerretDB test server. `make` starts the last one up front (installing
# it into ~/.cache/mongolock-testdb on first use) so that its output is seen.

.PHONY: test lint demo testdb testdb-stop

test: testdb
	$(GO) test -race -timeout 15m $(TESTFLAGS) ./...

lint:
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed: $$out"; exit 1; fi

# The README's "see it work" command: worker processes contend for one lock.
demo: testdb
	$(GO) run ./examples/contend

testdb:
	@if [ -n "$$MONGODB_URI" ]; then echo "using MONGODB_URI"; \
	elif docker info >/dev/null 2>&1; then echo "using Docker (testcontainers)"; \
	else ./scripts/testdb start; fi

testdb-stop:
	./scripts/testdb stop
