// Command lock takes a lock, shows that a second attempt finds it held, and
// releases it.
//
//	MONGODB_URI=mongodb://localhost:27017 go run .
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

func main() {
	database := flag.String("db", "app", "the database that keeps the locks")
	flag.Parse()
	// Every call gets a deadline: without one, a call can wait a long
	// time on a server it cannot reach.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()

	// One Provider per process, made beside the client.
	locks, err := mongolock.NewProvider(client.Database(*database))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = locks.Close(context.Background()) }()

	lock := locks.Lock("nightly-report")
	h, err := lock.Acquire(ctx) // waits while someone else holds it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", h.Name())

	// Any other attempt now finds the lock held, in this process or another.
	_, err = lock.TryAcquire(ctx)
	fmt.Println("second attempt held by someone else:", errors.Is(err, mongolock.ErrNotAcquired))

	// The work goes here. h.Context() ends if the lock is lost: pass it on.
	if err := h.Release(ctx); err != nil {
		log.Fatal(err) // the lock was lost while held
	}
	fmt.Println("released")
}
