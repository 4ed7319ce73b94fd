package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Twenty clients race for each brand-new name at once. On FerretDB some of
// the upserts fail with duplicate-key or "$$NOW cannot be used" errors
// (PROTOCOL.md); the library must turn those into "someone else got there
// first", so that exactly one racer wins each name and nobody sees another
// error.
func TestRaceForNewNamesHasExactlyOneWinnerAndNoErrors(t *testing.T) {
	const racers, rounds = 20, 25
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := testdb.Database(t)
	providers := make([]*mongolock.Provider, racers)
	for i := range providers {
		// Separate clients, as separate processes would have.
		providers[i] = newProvider(t, ownClient(t, db, nil))
	}
	for round := range rounds {
		name := fmt.Sprintf("fresh-%d", round)
		var (
			wg      sync.WaitGroup
			winners atomic.Int32
			mu      sync.Mutex
			errs    []error
			handles []*mongolock.Handle
		)
		start := make(chan struct{})
		for _, p := range providers {
			wg.Add(1)
			go func(l *mongolock.Lock) {
				defer wg.Done()
				<-start
				h, err := l.TryAcquire(ctx)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners.Add(1)
					handles = append(handles, h)
				case !errors.Is(err, mongolock.ErrNotAcquired):
					errs = append(errs, err)
				}
			}(p.Lock(name))
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs, "round %d", round)
		require.EqualValues(t, 1, winners.Load(), "round %d: winners", round)
		for _, h := range handles {
			require.NoError(t, h.Release(ctx))
		}
	}
}
