package soakcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mongolock/mongolock"
)

// A Trial is what one trial acquires: the lock of a kind called Name, for
// writing (an RWLock's writer), as an upgradeable reader that Upgrade makes
// the writer, Units of a semaphore's slots, with a loop of Try calls or
// with the waiting call.
type Trial struct {
	Kind    Kind
	Name    string
	Write   bool
	Upgrade bool // the writer is an upgradeable reader that Upgrade made the writer
	Units   int  // a semaphore's units; 0: one
	Try     bool
}

// Acquire takes tr with locks, waiting until ctx ends; an election's
// leadership is returned too, campaigning with value owner. A semaphore
// has slots slots. Between refused Try calls it sleeps pause(). If an
// upgrade fails, the reader is released and the upgrade's error returned.
func Acquire(ctx context.Context, locks *mongolock.Provider, tr Trial, owner string, slots int, pause func() time.Duration) (*mongolock.Handle, *mongolock.Leadership, error) {
	var l interface {
		TryAcquire(context.Context) (*mongolock.Handle, error)
		Acquire(context.Context) (*mongolock.Handle, error)
	}
	switch tr.Kind {
	case Election:
		lead, err := locks.Election(tr.Name).Campaign(ctx, owner)
		if err != nil {
			return nil, nil, err
		}
		return lead.Handle, lead, nil
	case Mutex:
		l = locks.Lock(tr.Name)
	case Semaphore:
		l = locks.Semaphore(tr.Name, slots).Units(max(tr.Units, 1))
	case RWLock:
		rw := locks.RWLock(tr.Name)
		switch {
		case tr.Upgrade:
			l = upgradeable{rw.Upgradeable()}
		case tr.Write:
			l = rw.Writer()
		default:
			l = rw.Reader()
		}
	}
	h, err := func() (*mongolock.Handle, error) {
		if !tr.Try {
			return l.Acquire(ctx)
		}
		for {
			h, err := l.TryAcquire(ctx)
			if !errors.Is(err, mongolock.ErrNotAcquired) {
				return h, err
			}
			Sleep(ctx, pause())
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", err, ctx.Err())
			}
		}
	}()
	if err != nil || !tr.Upgrade {
		return h, nil, err
	}
	if err := (&mongolock.UpgradeableHandle{Handle: h}).Upgrade(ctx); err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Release(rctx)
		return nil, nil, err
	}
	return h, nil, nil
}

// upgradeable is an upgradeable reader's lock, whose calls return their
// UpgradeableHandle's Handle.
type upgradeable struct{ u *mongolock.UpgradeableLock }

func (u upgradeable) Acquire(ctx context.Context) (*mongolock.Handle, error) {
	return handle(u.u.Acquire(ctx))
}

func (u upgradeable) TryAcquire(ctx context.Context) (*mongolock.Handle, error) {
	return handle(u.u.TryAcquire(ctx))
}

func handle(h *mongolock.UpgradeableHandle, err error) (*mongolock.Handle, error) {
	if err != nil {
		return nil, err
	}
	return h.Handle, nil
}
