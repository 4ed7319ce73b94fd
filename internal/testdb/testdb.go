// Package testdb gives mongolock's tests, examples and benchmarks a real
// MongoDB-compatible server, never a mock.
//
// The server is chosen once per process, in this order:
//
//  1. MONGOLOCK_TEST_URI, if set: any MongoDB (or Atlas) the user points
//     the tests at. Never MONGODB_URI: a service that imports mongolock runs
//     these tests with `go test all`, with MONGODB_URI naming its own data.
//  2. A Docker daemon that answers: a mongo container started with
//     testcontainers-go as a single-node replica set.
//  3. The project's scripts/testdb: FerretDB v2 on PostgreSQL/DocumentDB on
//     loopback, installed and started on demand.
//
// Each test gets a database of its own, named with Prefix and dropped when
// the test ends; DropDatabase drops no database without Prefix. Tests that
// need a capability the server lacks skip, naming it; under CI=true a
// missing server fails the test instead of skipping it.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// Prefix begins the name of every database the tests create; DropDatabase
// refuses any other.
const Prefix = "mongolock_test_"

// Server describes the server the tests run against.
type Server struct {
	URI           string // connection string
	Source        string // EnvURI, "testcontainers" or "scripts/testdb"
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

func connect() (*Server, *mongo.Client, error) {
	uri, source := envURI(), EnvURI
	if uri == "" {
		var err error
		if dockerAnswers() {
			source = "testcontainers"
			uri, stopCtr, err = startContainer()
		} else {
			source = "scripts/testdb"
			uri, err = startScript()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("no MongoDB server (%s): %w", source, err)
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

// fail stops the test for a missing server: a failure under CI=true, a skip
// elsewhere.
func fail(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("testdb: %v (CI=true: a missing server is a failure)", err)
	}
	tb.Skipf("testdb: %v; set %s or run scripts/testdb start", err, EnvURI)
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

// scriptPath finds scripts/testdb from this source file's location.
func scriptPath() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the source tree")
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "testdb")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("scripts/testdb: %w", err)
	}
	return p, nil
}

// startScript runs scripts/testdb start (idempotent: it reuses a running
// server) and returns the URI it prints.
func startScript() (string, error) {
	p, err := scriptPath()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, "start")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s start: %v: %s", p, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return "", fmt.Errorf("%s start printed no URI", p)
	}
	return lines[len(lines)-1], nil
}

func redact(uri string) string {
	if i := strings.Index(uri, "@"); i >= 0 {
		if j := strings.Index(uri, "://"); j >= 0 && j < i {
			return uri[:j+3] + "…" + uri[i:]
		}
	}
	return uri
}
