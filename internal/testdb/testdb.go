// Package testdb gives mongolock's tests, examples and benchmarks a real
// MongoDB-compatible server, never a mock.
//
// The server is chosen once per process (decide), in this order:
//
//  1. MONGOLOCK_TEST_URI, if set: any MongoDB (or Atlas) the user points
//     the tests at. Never MONGODB_URI: a service that imports mongolock runs
//     these tests with `go test all`, with MONGODB_URI naming its own data.
//  2. Where the run must have a server (MONGOLOCK_TEST_REQUIRED=1, which
//     `make test` sets, or CI=true in mongolock's own module): a mongo
//     container (a single-node replica set, started by ./container, a
//     module of its own) where a Docker daemon answers, else the project's
//     scripts/testdb, FerretDB v2 on PostgreSQL/DocumentDB on loopback,
//     installed and started on demand. Without one the tests fail.
//  3. Elsewhere in mongolock's own module (`go test` in a clone): the
//     scripts/testdb server if it is already running; nothing is installed
//     or started.
//  4. Otherwise (an application's `go test all`, or a clone with no server
//     running): none. The tests that need a server skip, and the first
//     says in one line on stderr how to give them one.
//
// Under go test -short there is none, whatever the environment says: the
// tests that need a server (the server tier) skip, here rather than each
// on its own, and the run is the model tier alone.
//
// Each test gets a database of its own, named with Prefix and dropped when
// the test ends; DropDatabase drops no database without Prefix. Tests that
// need a capability the server lacks skip, naming it.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// EnvURI names the environment variable with the tests' server: the
// tests', examples', benchmarks' and soak's own, never MONGODB_URI.
const EnvURI = "MONGOLOCK_TEST_URI"

// EnvRequired names the environment variable that, set to 1, says the run
// must have a server: started here if EnvURI is unset, and a failure if
// there is none. `make test` sets it.
const EnvRequired = "MONGOLOCK_TEST_REQUIRED"

// modulePath is mongolock's module path; its nested modules' paths begin
// with it.
const modulePath = "github.com/mongolock/mongolock"

// Prefix begins the name of every database the tests create; DropDatabase
// refuses any other.
const Prefix = "mongolock_test_"

// Server describes the server the tests run against.
type Server struct {
	URI           string // connection string
	Source        string // EnvURI, "container" or "scripts/testdb"
	Version       string // the MongoDB version the server reports
	FerretDB      string // FerretDB's own version, "" on MongoDB
	ReplicaSet    bool   // a replica set (or sharded cluster)
	ChangeStreams bool   // $changeStream works
}

// Name says which server this is, for logs and skip messages.
func (s *Server) Name() string {
	if s.FerretDB != "" {
		return fmt.Sprintf("FerretDB %s (reports MongoDB %s) via %s", s.FerretDB, s.Version, s.Source)
	}
	topo := "standalone"
	if s.ReplicaSet {
		topo = "replica set"
	}
	return fmt.Sprintf("MongoDB %s %s via %s", s.Version, topo, s.Source)
}

// A Capability is something a test may need that not every server has.
type Capability string

const (
	ReplicaSet    Capability = "replica set"
	ChangeStreams Capability = "change streams"
)

var (
	mu        sync.Mutex
	connected bool
	server    *Server
	client    *mongo.Client
	connErr   error
	stopCtr   func()
)

// Connect connects the process-wide client once and describes the server.
func Connect() (*Server, *mongo.Client, error) {
	mu.Lock()
	defer mu.Unlock()
	if !connected {
		connected = true
		server, client, connErr = connect()
	}
	return server, client, connErr
}

// URI returns the connection string of the server the tests use, starting
// the server if needed. Examples and child processes use it.
func URI() (string, error) {
	s, _, err := Connect()
	if err != nil {
		return "", err
	}
	return s.URI, nil
}

// Close disconnects the process-wide client and stops a container this
// process started. Call it from TestMain after m.Run, before leak checks.
func Close() {
	mu.Lock()
	defer mu.Unlock()
	if client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = client.Disconnect(ctx)
		cancel()
	}
	if stopCtr != nil {
		stopCtr()
	}
	connected, server, client, connErr, stopCtr = false, nil, nil, nil, nil
}

// envURI is the server the environment names for the tests ("" for none):
// EnvURI's, whatever else is set.
func envURI() string { return os.Getenv(EnvURI) }

// An environ is what decides where the tests find their server.
type environ struct {
	uri      string // EnvURI
	required bool   // EnvRequired=1
	ci       bool   // CI=true
	own      bool   // the main module is mongolock's (or one nested in it), from source
}

// A plan is how a process finds its server.
type plan struct {
	uri     string // the environment's server; "" for none
	start   bool   // start one: a container where Docker answers, else scripts/testdb
	running bool   // take the scripts/testdb server if it runs, start nothing
	strict  bool   // a missing server fails the tests instead of skipping them
}

// decide is the rule the package comment states. An application's CI sets
// CI=true too, and runs our tests with `go test all`: there CI=true alone
// does not make a server required.
func decide(e environ) plan {
	strict := e.required || (e.own && e.ci)
	switch {
	case e.uri != "":
		return plan{uri: e.uri, strict: strict}
	case strict:
		return plan{start: true, strict: true}
	case e.own:
		return plan{running: true}
	default:
		return plan{}
	}
}

// currentEnv reads the environ of this process.
func currentEnv() environ {
	bi, _ := debug.ReadBuildInfo()
	return environ{
		uri:      envURI(),
		required: os.Getenv(EnvRequired) == "1",
		ci:       os.Getenv("CI") == "true",
		own:      ownModule(bi),
	}
}

// ownModule reports whether bi is of mongolock's module (or one nested in
// it) built from its source tree. A test binary's main module is the
// module of the package under test: mongolock's own, built from a clone,
// is "(devel)"; one an application requires has the version it requires.
func ownModule(bi *debug.BuildInfo) bool {
	if bi == nil {
		return false
	}
	m := bi.Main
	return (m.Path == modulePath || strings.HasPrefix(m.Path, modulePath+"/")) && m.Version == "(devel)"
}

// Required reports whether this run must have a server: where it does, a
// missing server fails the tests; elsewhere they skip. Under -short none
// is required.
func Required() bool { return !short() && decide(currentEnv()).strict }

// short reports whether this is a test binary run with -short, which
// leaves out the tests that need a server. Outside a test binary (the
// soak's and the benchmark's commands) it is false.
func short() bool { return testing.Testing() && flag.Parsed() && testing.Short() }

// errNoServer is the error of a run that is given no server and may not
// start one; errShort that of a run with -short, which wants none.
var (
	errNoServer = errors.New("no test server")
	errShort    = errors.New("-short")
)

// hint is the line that says why the tests that need a server skip, and
// how to run them.
func hint(err error) string {
	if errors.Is(err, errShort) {
		return "mongolock tests: -short: skipping the server tier (the tests that need a server); " +
			"to run them, go test without -short (in a clone of mongolock: make test)"
	}
	return fmt.Sprintf("mongolock tests: %v: skipping the server tier (the tests that need a server); "+
		"to run them, set %s=mongodb://HOST:PORT/, or in a clone of mongolock run make test, which starts a local server", err, EnvURI)
}

var hinted sync.Once

// NoteSkip writes hint(err) to stderr once per process, so that a package
// whose tests skip for want of a server says why in one line even without
// go test -v.
func NoteSkip(err error) {
	hinted.Do(func() { fmt.Fprintln(os.Stderr, hint(err)) })
}

func connect() (*Server, *mongo.Client, error) {
	if short() {
		return nil, nil, errShort
	}
	p := decide(currentEnv())
	uri, source := p.uri, EnvURI
	if uri == "" {
		var err error
		switch {
		case p.start && dockerAnswers():
			source = "container"
			uri, stopCtr, err = startContainer()
		case p.start:
			source = "scripts/testdb"
			uri, err = startScript()
		case p.running:
			source = "scripts/testdb"
			uri, err = runningScript()
		default:
			return nil, nil, errNoServer
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w (%s): %w", errNoServer, source, err)
		}
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(20 * time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s (%s): %w", redact(uri), source, err)
	}
	s, err := describe(c)
	if err != nil {
		_ = c.Disconnect(context.Background())
		return nil, nil, fmt.Errorf("server at %s (%s): %w", redact(uri), source, err)
	}
	s.URI, s.Source = uri, source
	return s, c, nil
}

func describe(c *mongo.Client) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := c.Database("admin")
	var info struct {
		Version  string `bson:"version"`
		FerretDB struct {
			Version string `bson:"version"`
		} `bson:"ferretdb"`
	}
	if err := admin.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return nil, fmt.Errorf("buildInfo: %w", err)
	}
	var hello struct {
		SetName string `bson:"setName"`
		Msg     string `bson:"msg"`
	}
	if err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	s := &Server{
		Version:    info.Version,
		FerretDB:   info.FerretDB.Version,
		ReplicaSet: hello.SetName != "" || hello.Msg == "isdbgrid",
	}
	// Ask the server rather than guess from the topology.
	if cs, err := c.Watch(ctx, mongo.Pipeline{}); err == nil {
		s.ChangeStreams = true
		_ = cs.Close(ctx)
	}
	return s, nil
}

// fail stops the test for a missing server: a failure where the run must
// have one, a skip elsewhere.
func fail(tb testing.TB, err error) {
	tb.Helper()
	msg, strict := missing(err)
	if strict {
		tb.Fatal(msg)
	}
	NoteSkip(err)
	tb.Skip(msg)
}

// missing says what a test does for want of a server: fail, with a
// message, where the run must have one; otherwise skip, with the hint.
func missing(err error) (msg string, strict bool) {
	if Required() {
		return fmt.Sprintf("testdb: %v (a server is required: %s=1 or CI=true)", err, EnvRequired), true
	}
	return hint(err), false
}

// Client returns the process-wide client.
func Client(tb testing.TB) *mongo.Client {
	tb.Helper()
	_, c, err := Connect()
	if err != nil {
		fail(tb, err)
	}
	return c
}

// Info describes the server.
func Info(tb testing.TB) *Server {
	tb.Helper()
	s, _, err := Connect()
	if err != nil {
		fail(tb, err)
	}
	return s
}

// Require skips the test, naming the capability, when the server lacks it.
func Require(tb testing.TB, c Capability) {
	tb.Helper()
	s := Info(tb)
	has := map[Capability]bool{ReplicaSet: s.ReplicaSet, ChangeStreams: s.ChangeStreams}[c]
	if !has {
		tb.Skipf("needs %s, which %s lacks", c, s.Name())
	}
}

// Database returns a fresh database for this test, its name beginning with
// Prefix, dropped when it ends.
func Database(tb testing.TB) *mongo.Database {
	tb.Helper()
	return DatabaseOf(tb, Client(tb))
}

// DatabaseOf returns a fresh database on the given client (another client
// of the same server), dropped when the test ends.
func DatabaseOf(tb testing.TB, c *mongo.Client) *mongo.Database {
	tb.Helper()
	db := c.Database(dbName(tb.Name()))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DropDatabase(ctx, db); err != nil {
			tb.Errorf("testdb: %v", err)
		}
	})
	return db
}

// DropDatabase drops db if its name begins with Prefix, and refuses to
// (without a word to the server) otherwise.
func DropDatabase(ctx context.Context, db *mongo.Database) error {
	if !strings.HasPrefix(db.Name(), Prefix) {
		return fmt.Errorf("refusing to drop database %q: the tests drop only databases whose names begin with %q", db.Name(), Prefix)
	}
	if err := db.Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", db.Name(), err)
	}
	return nil
}

// NewClient returns a client of its own (its own connection pool, as a
// separate process would have), disconnected when the test ends.
func NewClient(tb testing.TB, opts ...*options.ClientOptions) *mongo.Client {
	tb.Helper()
	s := Info(tb)
	all := append([]*options.ClientOptions{options.Client().ApplyURI(s.URI)}, opts...)
	c, err := mongo.Connect(all...)
	if err != nil {
		tb.Fatalf("testdb: connect: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

// maxDBName is the longest database name the tests make (the strictest
// server limit).
const maxDBName = 38

// dbName makes a database name from a test name: Prefix, at most maxDBName
// bytes, only characters every server accepts, and a random suffix so that
// reruns and parallel packages never share one.
func dbName(test string) string {
	const suffixBytes = 4
	const room = maxDBName - len(Prefix) - 1 - 2*suffixBytes // for the test's name
	var b strings.Builder
	for _, r := range test {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= room {
			break
		}
	}
	var suffix [suffixBytes]byte
	_, _ = rand.Read(suffix[:])
	return Prefix + b.String() + "_" + hex.EncodeToString(suffix[:])
}

// ---------------------------------------------------------------- servers

// dockerAnswers reports whether a Docker daemon answers on its socket.
func dockerAnswers() bool {
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		sock = strings.TrimPrefix(h, "unix://")
	} else if h != "" {
		return true // a remote daemon: let testcontainers find out
	}
	if _, err := os.Stat(sock); err != nil {
		return false
	}
	hc := http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	resp, err := hc.Get("http://docker/_ping")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// sourceDir is this package's directory in the source tree.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the source tree")
	}
	return filepath.Dir(file), nil
}

// scriptPath finds scripts/testdb from this source file's location.
func scriptPath() (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "..", "..", "scripts", "testdb")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("scripts/testdb: %w", err)
	}
	return p, nil
}

// runningScript returns the URI of the scripts/testdb server if it
// answers, and starts nothing.
func runningScript() (string, error) {
	if _, err := script(30*time.Second, "status"); err != nil {
		return "", errors.New("not running")
	}
	return script(30*time.Second, "uri")
}

// startScript runs scripts/testdb start (idempotent: it reuses a running
// server) and returns the URI it prints last.
func startScript() (string, error) {
	out, err := script(8*time.Minute, "start")
	if err != nil {
		return "", err
	}
	words := strings.Fields(out)
	if len(words) == 0 {
		return "", errors.New("scripts/testdb start printed no URI")
	}
	return words[len(words)-1], nil
}

// script runs scripts/testdb cmd and returns what it prints on stdout.
func script(timeout time.Duration, cmd string) (string, error) {
	p, err := scriptPath()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, p, cmd)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", p, cmd, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func redact(uri string) string {
	if i := strings.Index(uri, "@"); i >= 0 {
		if j := strings.Index(uri, "://"); j >= 0 && j < i {
			return uri[:j+3] + "…" + uri[i:]
		}
	}
	return uri
}
