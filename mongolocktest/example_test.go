package mongolocktest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A test gives the code under test an in-memory Provider instead of one
// over a database; the rest of the code is the same.
func Example() {
	// refresh is the code under test: it takes a *mongolock.Provider, as
	// in production, and works under the lock.
	refresh := func(ctx context.Context, locks *mongolock.Provider, work func(ctx context.Context) error) error {
		return locks.Lock("cache-refresh").Do(ctx, work)
	}

	ctx := context.Background()
	locks, err := mongolocktest.NewProvider(mongolock.WithOwner("test")) // not mongolock.NewProvider(db, ...)
	if err != nil {
		panic(err)
	}
	defer locks.Close(ctx)

	// Free: the work runs under the lock.
	err = refresh(ctx, locks, func(ctx context.Context) error {
		info, err := locks.Inspect(ctx, "cache-refresh")
		fmt.Println("held by", info.Owner)
		return err
	})
	fmt.Println("err:", err)

	// Held by someone else: refresh waits until its ctx ends.
	h, _ := locks.Lock("cache-refresh").Acquire(ctx)
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	err = refresh(short, locks, func(context.Context) error { return nil })
	fmt.Println("contended:", errors.Is(err, mongolock.ErrNotAcquired))
	_ = h.Release(ctx)

	// Lost during the work: the work's ctx ends at the holder's next
	// extension (a third of the expiry: short here), and refresh says so.
	quick, err := mongolocktest.NewProvider(mongolock.WithExpiry(time.Second))
	if err != nil {
		panic(err)
	}
	defer quick.Close(ctx)
	err = refresh(ctx, quick, func(ctx context.Context) error {
		_, _ = quick.ForceRelease(ctx, "cache-refresh")
		<-ctx.Done()
		return ctx.Err()
	})
	fmt.Println("lost:", errors.Is(err, mongolock.ErrLockLost))
	// Output:
	// held by test
	// err: <nil>
	// contended: true
	// lost: true
}

func ExampleLose() {
	// record is the code under test, handed a held lock: it writes only
	// while the lock is held.
	record := func(h *mongolock.Handle, write func(token int64)) error {
		if h.Context().Err() != nil {
			return context.Cause(h.Context())
		}
		write(h.FencingToken())
		return nil
	}

	ctx := context.Background()
	locks, _ := mongolocktest.NewProvider()
	defer locks.Close(ctx)
	h, _ := locks.Lock("ledger").Acquire(ctx)
	write := func(token int64) { fmt.Println("written with a token:", token > 0) }

	fmt.Println(record(h, write))
	mongolocktest.Lose(h)
	fmt.Println(record(h, write))
	// Output:
	// written with a token: true
	// <nil>
	// mongolock: "ledger": lock lost: its holder was force released (mongolocktest.Lose)
}
