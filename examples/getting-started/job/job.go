// Package job runs the nightly report on whichever replica of a service
// gets its lock first.
package job

import (
	"context"
	"errors"

	"github.com/mongolock/mongolock"
)

// RunOnce runs report with the lock held and says whether it ran: it does
// not run while another replica holds the lock. report's ctx ends if the
// lock is lost.
func RunOnce(ctx context.Context, locks *mongolock.Provider, report func(ctx context.Context) error) (ran bool, err error) {
	h, err := locks.Lock("nightly-report").TryAcquire(ctx)
	if errors.Is(err, mongolock.ErrNotAcquired) {
		return false, nil // another replica runs it
	}
	if err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, h.Release(context.Background())) }()
	return true, report(h.Context())
}
