// Command service is the shape of a service that does a job under a lock:
// whichever of its instances gets the lock runs the job; the others wait.
//
//	MONGODB_URI=mongodb://localhost:27017 go run ./examples/service
//
// It connects with the service's own connection string (MONGODB_URI), and
// keeps its lock in database app (distributed_locks); it drops nothing.
// SIGINT or SIGTERM stops the wait or the job, and releases the lock.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

// run does the job once, holding the lock, and returns its error, or the
// lock's: not acquired, or lost.
func run(ctx context.Context, uri, database string) (err error) {
	client, err := mongo.Connect(options.Client().ApplyURI(uri)) // the service's own MONGODB_URI
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()

	locks, err := mongolock.NewProvider(client.Database(database)) // one per process
	if err != nil {
		return err
	}
	defer func() { _ = locks.Close(context.Background()) }() // releases whatever is still held

	h, err := locks.Lock("nightly-report").Acquire(ctx) // waits while another instance holds it
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Release(context.Background())) }() // reports a loss
	// h.Context() ends if the lock is lost: stop working then.
	return report(h.Context())
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("MONGODB_URI"), "app"); err != nil {
		log.Fatal(err)
	}
}

// report is the job. It stops when ctx ends: the lock was lost, or the
// service is stopping.
func report(ctx context.Context) error {
	select {
	case <-time.After(100 * time.Millisecond): // the work
		fmt.Println("report written")
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
