// Command wire wires a mongolock Provider with github.com/google/wire: the
// injector in wire.go lists the providers below, and wire_gen.go is what
// `go run github.com/google/wire/cmd/wire` generates from it. A job runs
// once under a lock; then the cleanups close the Provider and the client.
//
//	MONGODB_URI=mongodb://localhost:27017 go run ./wire
//
// It writes one lock document, in database mongolock_demo, and drops nothing.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

// Config is what the application reads from its environment.
type Config struct {
	URI        string
	Database   string
	LockExpiry time.Duration
}

func newConfig() (Config, error) {
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		return Config{}, errors.New("MONGODB_URI is not set: set it to your server's connection string")
	}
	return Config{URI: uri, Database: "mongolock_demo", LockExpiry: 10 * time.Second}, nil
}

func newClient(cfg Config) (*mongo.Client, func(), error) {
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI))
	if err != nil {
		return nil, nil, err
	}
	return client, func() { _ = client.Disconnect(context.Background()) }, nil
}

func newDatabase(client *mongo.Client, cfg Config) *mongo.Database {
	return client.Database(cfg.Database)
}

// newLocks passes the options itself: wire would read NewProvider's
// variadic parameter as a []mongolock.Option to provide. Its cleanup frees
// the locks still held at once, not after an expiry.
func newLocks(db *mongo.Database, cfg Config) (*mongolock.Provider, func(), error) {
	locks, err := mongolock.NewProvider(db, mongolock.WithExpiry(cfg.LockExpiry))
	if err != nil {
		return nil, nil, err
	}
	return locks, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := locks.Close(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "closing locks:", err)
		}
	}, nil
}

// report is a job that runs under a lock.
type report struct{ lock *mongolock.Lock }

func newReport(locks *mongolock.Provider) *report {
	return &report{lock: locks.Lock("nightly-report")}
}

func (r *report) run(ctx context.Context) error {
	return r.lock.Do(ctx, func(ctx context.Context) error {
		fmt.Println("report: running with the lock held")
		return nil
	})
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "wire:", err)
		os.Exit(1)
	}
}

func run() error {
	r, cleanup, err := initReport()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := r.run(ctx); err != nil {
		return err
	}
	fmt.Println("report: done, lock released")
	return nil
}
