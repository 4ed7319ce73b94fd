// Command elect leads an election for one term: the shape of a service of
// which one instance at a time, the leader, runs the scheduler.
//
//	MONGODB_URI=mongodb://localhost:27017 go run . -name instance-1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

func main() {
	database := flag.String("db", "app", "the database that keeps the locks")
	name := flag.String("name", "instance-1", "this instance's name, the value it leads with")
	flag.Parse()
	// Stops on Ctrl-C; a service would stop on SIGTERM too.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	locks, err := mongolock.NewProvider(client.Database(*database))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = locks.Close(context.Background()) }()

	election := locks.Election("scheduler")
	// Run campaigns, calls the function while this instance leads, and
	// campaigns again when it returns, until ctx ends.
	err = election.Run(ctx, *name, func(ctx context.Context, l *mongolock.Leadership) {
		leader, err := election.Leader(ctx) // what every instance sees
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("leading:", leader.Value == *name)
		// A service works here until ctx ends (leadership lost, or
		// stopping). This tour stops after one term.
		stop()
	})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	fmt.Println("stepped down")
}
