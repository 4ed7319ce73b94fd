package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
)

func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	lock, err := mongolock.New(db, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	h, err := lock.Acquire(ctx) // waits while another process holds it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", h.Name())
	// ... work, stopping if h.Context() ends (the lock was lost) ...
	if err := h.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// acquired nightly-report
	// released
}

func ExampleLock_TryAcquire() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	lock, err := mongolock.New(db, "inventory-sync")
	if err != nil {
		log.Fatal(err)
	}
	h, err := lock.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first attempt: acquired")

	// A second attempt, here as anywhere else, finds the lock held.
	_, err = lock.TryAcquire(ctx)
	switch {
	case errors.Is(err, mongolock.ErrNotAcquired):
		fmt.Println("second attempt: held by someone else, skipping this run")
	case err != nil:
		log.Fatal(err)
	default: // (for the checked output)
		fmt.Println("second attempt: acquired (unexpected)") // (for the checked output)
	}

	if err := h.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first attempt: acquired
	// second attempt: held by someone else, skipping this run
}

func ExampleProvider() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	// One provider for the whole application: its options apply to every
	// lock it mints.
	locks, err := mongolock.NewProvider(db, mongolock.WithExpiry(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	orders, err := locks.Lock("orders").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Different names are different locks: both are held at once.
	invoices, err := locks.Lock("invoices").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", orders.Name(), "and", invoices.Name())

	for _, h := range []*mongolock.Handle{invoices, orders} {
		if err := h.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// holding orders and invoices
}

func ExampleLock_Do() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	lock, err := mongolock.New(db, "schema-migration")
	if err != nil {
		log.Fatal(err)
	}
	// Do acquires, runs the function, and releases, also on error or panic.
	// The function's ctx ends if the lock is lost while it runs.
	err = lock.Do(ctx, func(ctx context.Context) error {
		fmt.Println("migrating with the lock held")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// Released: the lock is free again.
	h, err := lock.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("free again after Do")
	if err := h.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// migrating with the lock held
	// free again after Do
}

func ExampleWithHoldAtLeast() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db,
		mongolock.WithHoldAtLeast(50*time.Minute), // longer than the replicas' clocks differ, shorter than the period
		mongolock.WithHoldAtMost(2*time.Hour))     // a stuck run gives the lock up
	if err != nil {
		log.Fatal(err)
	}
	job := locks.Lock("hourly-report")
	// Every replica's scheduler calls this at the start of each hour.
	runJob := func() {
		h, err := job.TryAcquire(ctx)
		if errors.Is(err, mongolock.ErrNotAcquired) {
			fmt.Println("skipped: another replica ran it this hour")
			return
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("running the hourly report")
		// ... the job, stopping if h.Context() ends ...
		if err := h.Release(ctx); err != nil { // held until 50 minutes after h.AcquiredAt()
			log.Fatal(err)
		}
	}
	runJob() // on the replica whose clock is ahead
	runJob() // on one whose clock is a second behind, after the job is done
	// Output:
	// running the hourly report
	// skipped: another replica ran it this hour
}

func ExampleHandle_FencingToken() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	lock, err := mongolock.New(db, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	acquireAndRelease := func() int64 {
		h, err := lock.Acquire(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// Send h.FencingToken() with every write to the protected
		// resource; it refuses tokens lower than the highest it has seen,
		// so a holder that lost the lock without knowing it cannot write.
		token := h.FencingToken()
		if err := h.Release(ctx); err != nil {
			log.Fatal(err)
		}
		return token
	}
	first := acquireAndRelease()
	second := acquireAndRelease()
	fmt.Println("second token greater than first:", second > first)
	// Output:
	// second token greater than first: true
}

// A worker that checks its lock before each step, and passes the
// handle's context to each write. If its process was stopped past the
// lease (a long GC pause, SIGSTOP), or the machine suspended (a laptop
// asleep, a paused VM), the first check after it runs again finds the
// lock lost, and a fenced write would be refused unsent: the worker stops
// before it writes as a holder it no longer is.
func ExampleHandle_Context() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("reports").Drop(ctx)               // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = locks.Close(ctx) }()
	h, err := locks.Lock("nightly-report").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	reports := db.Collection("reports")
	work := h.Context()
	steps := 0
	for part := range 3 {
		// Done at once if the lease has ended, also while the machine
		// was suspended.
		if work.Err() != nil {
			fmt.Println("stopped:", context.Cause(work))
			break
		}
		_, err := mongolock.FencedUpdateOne(work, reports, h,
			bson.D{{Key: "_id", Value: "nightly"}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "part", Value: part}}}},
			options.UpdateOne().SetUpsert(true))
		if err != nil { // ErrLockLost, ErrFenced, or the server's
			fmt.Println("stopped:", err)
			break
		}
		steps++
	}
	fmt.Println("steps done:", steps)
	if err := h.Release(ctx); err != nil {
		log.Fatal(err) // a loss, reported again
	}
	// Output:
	// steps done: 3
}

func ExampleProvider_Locks() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db, mongolock.WithOwner("billing-worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	// Held: billing/invoices and reports/nightly; used and released:
	// billing/refunds.
	for _, name := range []string{"billing/invoices", "reports/nightly"} {
		h, err := locks.Lock(name).Acquire(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = h.Release(ctx) }()
	}
	if err := locks.Lock("billing/refunds").Do(ctx, func(context.Context) error { return nil }); err != nil {
		log.Fatal(err)
	}

	// One lock: its state by the server's clock.
	info, err := locks.Inspect(ctx, "billing/invoices")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Name, "held:", info.Held, "by", info.Owner)

	// Every lock of the billing service, in name order, read in batches.
	for info, err := range locks.Locks(ctx, "billing/") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s held=%v owner=%q\n", info.Name, info.Held, info.Owner)
	}
	// Output:
	// billing/invoices held: true by billing-worker-1
	// billing/invoices held=true owner="billing-worker-1"
	// billing/refunds held=false owner=""
}

func ExampleProvider_ForceRelease() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db, mongolock.WithExpiry(3*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	h, err := locks.Lock("stuck-export").Acquire(ctx) // a holder, here in the same process
	if err != nil {
		log.Fatal(err)
	}

	// An operator frees the lock; its fencing token stays.
	released, err := locks.ForceRelease(ctx, "stuck-export")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", released)

	// The holder finds out at its next extension.
	<-h.Lost()
	fmt.Println("holder lost it:", errors.Is(context.Cause(h.Context()), mongolock.ErrLockLost))

	released, err = locks.ForceRelease(ctx, "stuck-export")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released again:", released)
	// Output:
	// released: true
	// holder lost it: true
	// released again: false
}

func ExampleElection() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db, mongolock.WithOwner("node-a"))
	if err != nil {
		log.Fatal(err)
	}
	election := locks.Election("scheduler")

	// Followers watch who leads: the current state at once, then each change.
	updates := election.Observe(ctx)
	if leader := <-updates; leader == (mongolock.Leader{}) {
		fmt.Println("nobody leads")
	}

	leadership, err := election.Campaign(ctx, "http://10.0.0.7:8080") // waits while another leads
	if err != nil {
		log.Fatal(err)
	}
	// ... lead, stopping if leadership.Context() ends (leadership was lost) ...
	leader, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Owner, leader.Value)
	fmt.Println("observed:", (<-updates).Value)

	if err := leadership.Proclaim(ctx, "http://10.0.0.7:9090"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("observed:", (<-updates).Value)

	if err := leadership.Release(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = election.Leader(ctx)
	fmt.Println("after resigning, no leader:", errors.Is(err, mongolock.ErrNoLeader))
	// Output:
	// nobody leads
	// leader: node-a http://10.0.0.7:8080
	// observed: http://10.0.0.7:8080
	// observed: http://10.0.0.7:9090
	// after resigning, no leader: true
}

func ExampleElection_Run() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// Lead whenever possible, until the process is interrupted.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	err = locks.Election("scheduler").Run(ctx, "http://10.0.0.7:8080", func(ctx context.Context, l *mongolock.Leadership) {
		fmt.Println("leading")
		stop() // interrupted (for the checked output)
		// ... schedule jobs, with l.FencingToken(), until ctx ends:
		// leadership was lost, or Run's ctx ended ...
		<-ctx.Done()
	})
	fmt.Println("stopped:", errors.Is(err, context.Canceled))
	// Output:
	// leading
	// stopped: true
}

func ExampleFleet_Run() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// Work on this worker's share of 4 partitions, until the process is interrupted.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	var started sync.WaitGroup             // (for the checked output)
	started.Add(4)                         // (for the checked output)
	go func() { started.Wait(); stop() }() // interrupted once all run (for the checked output)
	err = locks.Fleet("partitions", 4).Run(ctx, func(ctx context.Context, s mongolock.Shard) error {
		started.Done() // (for the checked output)
		// ... consume partition s.Index, with fenced writes by s.Handle,
		// until ctx ends: the shard moves to another worker, or was lost,
		// or Run's ctx ended ...
		<-ctx.Done()
		return nil
	})
	fmt.Println("stopped:", errors.Is(err, context.Canceled))
	// Output:
	// stopped: true
}

func ExampleSemaphore() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE"))        // the application's database
	_ = db.Collection("distributed_locks_semaphores").Drop(ctx) // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// At most two exports at a time, across every process.
	exports := locks.Semaphore("exports", 2)

	first, err := exports.Acquire(ctx) // waits while both slots are held
	if err != nil {
		log.Fatal(err)
	}
	second, err := exports.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = exports.TryAcquire(ctx)
	fmt.Println("a third is refused:", errors.Is(err, mongolock.ErrNotAcquired))
	// ... export, stopping if first.Context() ends (the slot was lost) ...
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}

	err = exports.Do(ctx, func(ctx context.Context) error {
		fmt.Println("exporting") // ctx ends if the slot is lost
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// a third is refused: true
	// exporting
}

func ExampleSemaphore_Units() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE"))        // the application's database
	_ = db.Collection("distributed_locks_semaphores").Drop(ctx) // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// Eight GPUs, shared by jobs that need one to eight of them.
	gpus := locks.Semaphore("gpus", 8)

	h, err := gpus.Units(3).Acquire(ctx) // waits until 3 are free
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(context.Background())

	_, err = gpus.Units(6).TryAcquire(ctx)
	fmt.Println("6 more are refused:", errors.Is(err, mongolock.ErrNotAcquired))
	_, err = gpus.Units(9).TryAcquire(ctx)
	fmt.Println("9 of 8 are invalid:", errors.Is(err, mongolock.ErrInvalidArgument))
	info, err := gpus.Inspect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holders:", len(info.Holders), "units:", info.Holders[0].Units)
	// Output:
	// 6 more are refused: true
	// 9 of 8 are invalid: true
	// holders: 1 units: 3
}

func ExampleRWLock() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE"))        // the application's database
	_ = db.Collection("distributed_locks_semaphores").Drop(ctx) // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// Many readers of the catalog at once, or one writer.
	catalog := locks.RWLock("catalog")

	reader, err := catalog.Reader().Acquire(ctx) // waits while a writer holds or waits
	if err != nil {
		log.Fatal(err)
	}
	another, err := catalog.Reader().TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = catalog.Writer().TryAcquire(ctx)
	fmt.Println("a writer is refused:", errors.Is(err, mongolock.ErrNotAcquired))
	// ... read, stopping if reader.Context() ends (the lock was lost) ...
	for _, h := range []*mongolock.Handle{reader, another} {
		if err := h.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}

	writer, err := catalog.Writer().Acquire(ctx) // waits until nobody holds it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the writer's token outranks the readers':", writer.FencingToken() > another.FencingToken())
	if err := writer.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// a writer is refused: true
	// the writer's token outranks the readers': true
}

func ExampleRWLock_Upgradeable() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE"))        // the application's database
	_ = db.Collection("distributed_locks_semaphores").Drop(ctx) // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// Read the price list, and rewrite it if it is stale: nobody writes in between.
	prices := locks.RWLock("prices")

	h, err := prices.Upgradeable().Acquire(ctx) // beside readers; one at a time
	if err != nil {
		log.Fatal(err)
	}
	read := h.FencingToken()
	// ... read; it is stale ...
	if err := h.Upgrade(ctx); err != nil { // new readers wait; the others leave
		log.Fatal(err)
	}
	fmt.Println("the writer's token outranks the read's:", h.FencingToken() > read)
	// ... write ...
	if err := h.Downgrade(ctx); err != nil { // readers may enter again, writers not
		log.Fatal(err)
	}
	reader, err := prices.Reader().TryAcquire(ctx)
	fmt.Println("a reader is let in:", err == nil)
	for _, h := range []*mongolock.Handle{h.Handle, reader} {
		if err := h.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// the writer's token outranks the read's: true
	// a reader is let in: true
}

func ExampleComposite() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE"))        // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)            // start afresh (for the checked output)
	_ = db.Collection("distributed_locks_semaphores").Drop(ctx) // (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	// A transfer holds both accounts and one of four ledger slots: all or none.
	transfer, err := mongolock.NewComposite(locks.Lock("account-17"), locks.Lock("account-42"), locks.Semaphore("ledger", 4))
	if err != nil {
		log.Fatal(err)
	}
	// Another names the accounts the other way round: both take them in
	// one order, so the two cannot deadlock.
	refund, err := mongolock.NewComposite(locks.Lock("account-42"), locks.Lock("account-17"))
	if err != nil {
		log.Fatal(err)
	}

	h, err := transfer.Acquire(ctx) // waits until it holds every part
	if err != nil {
		log.Fatal(err)
	}
	for _, part := range h.Handles() {
		fmt.Println("holds", part.Name()) // and part.FencingToken() for its resource
	}
	_, err = refund.TryAcquire(ctx)
	fmt.Println("the refund is refused:", errors.Is(err, mongolock.ErrNotAcquired))
	// ... transfer, stopping if h.Context() ends (a part was lost) ...
	if err := h.Release(ctx); err != nil {
		log.Fatal(err)
	}

	err = refund.Do(ctx, func(ctx context.Context) error {
		fmt.Println("refunding") // ctx ends if a part is lost
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// holds account-17
	// holds account-42
	// holds ledger
	// the refund is refused: true
	// refunding
}

func ExampleWithTrace() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	// Hooks on the library's events; those left nil cost nothing.
	// OpenTelemetry spans and metrics: otelmongolock.Trace().
	hooks := &mongolock.Trace{
		AcquireDone: func(ctx context.Context, info mongolock.AcquireDoneInfo) {
			fmt.Println(info.Operation, info.Lock.Name, info.Outcome, "after", info.Attempts, "attempt(s)")
		},
		Lost: func(info mongolock.LossInfo) {
			fmt.Println("lost", info.Lock.Name, info.Reason)
		},
	}
	locks, err := mongolock.NewProvider(db,
		mongolock.WithTrace(hooks),
		mongolock.WithLogger(slog.Default()),
	)
	if err != nil {
		log.Fatal(err)
	}
	err = locks.Lock("nightly-report").Do(ctx, func(ctx context.Context) error {
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// acquire nightly-report acquired after 1 attempt(s)
}

func ExampleFencedUpdateOne() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("accounts").Drop(ctx)              // start afresh (for the checked output)

	locks, err := mongolock.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	accounts := db.Collection("accounts")
	deposit := func(h *mongolock.Handle, amount int) error {
		// Applied only if no holder with a higher token wrote the account.
		_, err := mongolock.FencedUpdateOne(ctx, accounts, h,
			bson.D{{Key: "_id", Value: "acct-1"}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: amount}}}},
			options.UpdateOne().SetUpsert(true))
		if errors.Is(err, mongolock.ErrFenced) {
			// A later holder wrote the account: h has lost its lock. Stop.
			return err
		}
		return err
	}

	// Another process holds the lock, and loses it without knowing yet
	// (as after a long pause; here, an operator's force release).
	other, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI"))) // its own client
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = other.Disconnect(context.Background()) }()
	elsewhere, err := mongolock.NewProvider(other.Database(db.Name()))
	if err != nil {
		log.Fatal(err)
	}
	defer elsewhere.Close(ctx)
	stale, err := elsewhere.Lock("acct-1").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := locks.ForceRelease(ctx, "acct-1"); err != nil {
		log.Fatal(err)
	}
	current, err := locks.Lock("acct-1").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer current.Release(ctx)

	fmt.Println("current holder:", deposit(current, 100))
	err = deposit(stale, 50)
	fmt.Println("stale holder refused:", errors.Is(err, mongolock.ErrFenced))

	var account struct {
		Balance int   `bson:"balance"`
		Token   int64 `bson:"_mongolockFencingToken"`
	}
	if err := accounts.FindOne(ctx, bson.D{{Key: "_id", Value: "acct-1"}}).Decode(&account); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", account.Balance, "token is the current holder's:", account.Token == current.FencingToken())
	// Output:
	// current holder: <nil>
	// stale holder refused: true
	// balance: 100 token is the current holder's: true
}

// Several fenced writes in one transaction, where the server has them (a
// replica set or a sharded cluster): a refusal of either aborts both.
func ExampleFencedUpdateOne_transaction() {
	var (
		ctx        context.Context
		client     *mongo.Client
		accounts   *mongo.Collection
		h          *mongolock.Handle
		from, to   bson.D
		debit, pay bson.D
	)
	sess, err := client.StartSession()
	if err != nil {
		log.Fatal(err)
	}
	defer sess.EndSession(ctx)
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		if _, err := mongolock.FencedUpdateOne(ctx, accounts, h, from, debit); err != nil {
			return nil, err // ErrFenced aborts the transaction
		}
		return mongolock.FencedUpdateOne(ctx, accounts, h, to, pay)
	})
	fmt.Println(errors.Is(err, mongolock.ErrFenced))
}

func ExampleElection_TakeOver() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)

	// A rolling deploy: version 1 of the scheduler leads.
	v1, err := mongolock.NewProvider(db, mongolock.WithOwner("scheduler-v1"))
	if err != nil {
		log.Fatal(err)
	}
	old, err := v1.Election("scheduler").Campaign(ctx, "http://10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}

	// Version 2 starts and asks version 1 to hand over. Version 1 stops
	// scheduling, and answers with a ticket of its leadership: a secret,
	// passed to version 2 only (an authenticated call, a file only the
	// two can read).
	ticket, err := old.Ticket()
	if err != nil {
		log.Fatal(err)
	}

	// Version 2 leads from the take-over on, with its own value. Nobody
	// else can lead in between, and version 1 leads no more.
	v2, err := mongolock.NewProvider(db, mongolock.WithOwner("scheduler-v2"))
	if err != nil {
		log.Fatal(err)
	}
	leadership, err := v2.Election("scheduler").TakeOver(ctx, ticket, "http://10.0.0.8:8080")
	if err != nil {
		log.Fatal(err) // errors.Is(err, mongolock.ErrStaleTicket): version 1 lost it meanwhile; campaign instead
	}
	leader, err := v2.Election("scheduler").Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Owner, leader.Value)
	fmt.Println("a greater token:", leadership.FencingToken() > old.FencingToken())

	// Version 1 sees its leadership taken over, and exits: a hand-off, not
	// a failure, so its Release returns nil.
	<-old.Lost()
	fmt.Println("version 1 was taken over:", errors.Is(context.Cause(old.Context()), mongolock.ErrTakenOver), old.Release(ctx) == nil)
	_, err = v2.Election("scheduler").TakeOver(ctx, ticket, "http://10.0.0.9:8080")
	fmt.Println("the ticket again:", errors.Is(err, mongolock.ErrStaleTicket))
	// ... version 2 schedules while it leads ...
	if err := leadership.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leader: scheduler-v2 http://10.0.0.8:8080
	// a greater token: true
	// version 1 was taken over: true true
	// the ticket again: true
}

// An Acquire whose ctx ends while no server answers says why: not
// contention, but the driver's error, found by errors.As.
func ExampleLock_Acquire_unreachable() {
	var lock *mongolock.Lock
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := lock.Acquire(ctx) // ctx: a 5 s deadline
	var opErr *net.OpError
	switch {
	case errors.Is(err, mongolock.ErrNotAcquired): // someone else held it the whole time
	case errors.As(err, &opErr): // no server answered: "dial tcp ...: connection refused"
	}
}
