// Command fx wires a mongolock Provider into a go.uber.org/fx application:
// the client, the database and the Provider are constructors, and a job
// runs once under a lock after the application starts, then stops it.
//
//	MONGODB_URI=mongodb://localhost:27017 go run ./fx
//
// It writes one lock document, in database mongolock_demo, and drops nothing.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/fx"

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

func newClient(lc fx.Lifecycle, cfg Config) (*mongo.Client, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(client.Disconnect))
	return client, nil
}

func newDatabase(client *mongo.Client, cfg Config) *mongo.Database {
	return client.Database(cfg.Database)
}

// newLocks passes the options itself: fx ignores variadic parameters, so
// fx.Provide(mongolock.NewProvider) would build a Provider without any.
// Close on stop frees the locks still held at once, not after an expiry.
func newLocks(lc fx.Lifecycle, db *mongo.Database, cfg Config) (*mongolock.Provider, error) {
	locks, err := mongolock.NewProvider(db, mongolock.WithExpiry(cfg.LockExpiry))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(locks.Close))
	return locks, nil
}

// runReport runs the report under its lock once the application has
// started, then stops the application; stopping it first cancels the job.
func runReport(lc fx.Lifecycle, locks *mongolock.Provider, sd fx.Shutdowner) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				defer close(done)
				err := locks.Lock("nightly-report").Do(ctx, func(ctx context.Context) error {
					fmt.Println("report: running with the lock held")
					return nil
				})
				if err != nil {
					fmt.Fprintln(os.Stderr, "report:", err)
					_ = sd.Shutdown(fx.ExitCode(1))
					return
				}
				fmt.Println("report: done, lock released")
				_ = sd.Shutdown()
			}()
			return nil
		},
		OnStop: func(stop context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-stop.Done():
				return stop.Err()
			}
		},
	})
}

func main() {
	fx.New(
		fx.Provide(newConfig, newClient, newDatabase, newLocks),
		fx.Invoke(runReport),
	).Run()
}
