package gocronmongolock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/gocronmongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// Two replicas' schedulers start the same job at once: one runs it, the
// other's Lock is refused and gocron skips its run. In production each
// replica is a process of its own, with mongolock.NewProvider on the
// application's database; here both share a mongolocktest store.
func ExampleNewLocker() {
	ctx := context.Background()
	store := mongolocktest.NewStore()
	outcomes := make(chan string, 2)
	for range 2 { // the replicas
		locks, err := store.NewProvider( // mongolock.NewProvider(client.Database("app"), ...)
			mongolock.WithHoldAtLeast(30*time.Second), // longer than the replicas' clocks differ, shorter than the period
			mongolock.WithHoldAtMost(50*time.Second))  // a stuck run gives the lock up before the next period
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = locks.Close(ctx) }()

		locker, err := gocronmongolock.NewLocker(locks)
		if err != nil {
			log.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = s.Shutdown() }()
		// In production, a cron job: gocron.CronJob("0 * * * *", false).
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { outcomes <- "ran report" }),
			gocron.WithName("report"), // the lock's name
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, name string, err error) {
				if errors.Is(err, mongolock.ErrNotAcquired) {
					outcomes <- "skipped " + name + ": another replica runs it"
				}
			})))
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
	}
	got := []string{<-outcomes, <-outcomes}
	slices.Sort(got)
	for _, o := range got {
		fmt.Println(o)
	}
	// Output:
	// ran report
	// skipped report: another replica runs it
}

// Only the leader's scheduler runs jobs; IsLeader, which gocron calls
// before each run, asks the server nothing.
func ExampleNewElector() {
	ctx := context.Background()
	locks, err := mongolocktest.NewProvider() // mongolock.NewProvider(client.Database("app"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = locks.Close(ctx) }()
	elector, err := gocronmongolock.NewElector(locks, "scheduler", gocronmongolock.WithValue("replica-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = elector.Close(ctx) }() // resigns: another replica leads at once
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()

	ran := make(chan struct{}, 1)
	_, err = s.NewJob(gocron.DurationJob(10*time.Millisecond), gocron.NewTask(func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-ran // runs are skipped until the campaign has won
	fmt.Println("the leader ran the job, with fencing token > 0:", elector.Leadership().FencingToken() > 0)
	// Output:
	// the leader ran the job, with fencing token > 0: true
}
