// Command fence writes a document of its own under a lock, with the lock's
// fencing token, so that a holder that lost the lock cannot overwrite it.
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

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

func main() {
	database := flag.String("db", "app", "the database of the locks and the accounts")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(*database)
	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = locks.Close(context.Background()) }()

	h, err := locks.Lock("account-42").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = h.Release(context.Background()) }()

	// UpdateOne, applied only if no holder with a higher fencing token
	// has written this document: the server checks, in the same round trip.
	accounts := db.Collection("accounts")
	_, err = mongolock.FencedUpdateOne(ctx, accounts, h,
		bson.D{{Key: "_id", Value: "account-42"}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 100}}}},
		options.UpdateOne().SetUpsert(true))
	switch {
	case errors.Is(err, mongolock.ErrFenced):
		log.Fatal("a later holder wrote the account: this one lost the lock, stop")
	case err != nil:
		log.Fatal(err)
	}

	var account bson.M
	if err := accounts.FindOne(ctx, bson.D{{Key: "_id", Value: "account-42"}}).Decode(&account); err != nil {
		log.Fatal(err)
	}
	fmt.Println("deposited; the account carries our token:", account[mongolock.FenceField] == h.FencingToken())
}
