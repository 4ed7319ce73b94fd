package mongolock_test

import (
	"context"
	"errors"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	gotoken "go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// Every error an exported call returns is an *Error of the call's
// operation and lock, which errors.Is tells by the right sentinel and no
// other: errorCases walks each call's error paths, over the in-memory
// store in simulated time (the fenced writes' refusals over the server),
// and TestEveryCallThatReturnsAnErrorHasErrorCases keeps the table whole.

// errorCase is one error path of one exported call.
type errorCase struct {
	call string // as exportedErrorCalls names it: "New", "Lock.Acquire", "mongolocktest.Store.NewProvider"
	path string // which error
	// op and name are the *Error's; is, the sentinels (and ctx's errors)
	// it must match: any other must not.
	op, name string
	is       []error
	// own, if set, is the error the call must return as it is: not the
	// library's (Do's fn's own error), or what the driver reports
	// (FencedFindOneAndUpdate's mongo.ErrNoDocuments).
	own    error
	server bool // its collection is the test server's, not the offline one
	run    func(t *testing.T, e *errorEnv) error
}

// sentinels are every error that errors.Is may tell an *Error by.
var sentinels = []error{
	mongolock.ErrMismatch, mongolock.ErrNotAcquired, mongolock.ErrLockLost, mongolock.ErrInvalidArgument,
	mongolock.ErrClosed, mongolock.ErrCollation, mongolock.ErrFenced, mongolock.ErrNoLeader, mongolock.ErrNoLock,
	mongolock.ErrStaleTicket, mongolock.ErrReleased, context.Canceled, context.DeadlineExceeded,
}

// errJob is a job's own error, as Do's fn returns it.
var errJob = errors.New("the job failed")

// errorEnv is where a case runs: p, the provider whose calls fail, and
// rival, another process's, over one store in process memory; net is p's
// network to it, whose faults a case sets; coll is for fenced writes.
type errorEnv struct {
	ctx        context.Context
	store, net *memdb.Store
	p, rival   *mongolock.Provider
	coll       *mongo.Collection
	db         *mongo.Database // a database of a client that reaches no server
	providers  []*mongolock.Provider
	handles    []*mongolock.Handle // released by close, lost ones too
}

func newErrorEnv(t *testing.T, offline *mongo.Database) *errorEnv {
	store := memdb.NewStore("mongolock_errors", nil)
	e := &errorEnv{store: store, net: store.Client(), db: offline, coll: offline.Collection("resources")}
	e.p = e.provider(t, e.net)
	e.rival = e.provider(t, store.Client())
	return e
}

// provider returns a provider over net with opts, closed by close.
func (e *errorEnv) provider(t *testing.T, net *memdb.Store, opts ...mongolock.Option) *mongolock.Provider {
	p, err := backend.NewProvider(net, "mongolock_errors", opts)
	require.NoError(t, err)
	e.providers = append(e.providers, p.(*mongolock.Provider))
	return p.(*mongolock.Provider)
}

// close releases e's handles and closes its providers: in a bubble, their
// goroutines end, and no handle is left for the garbage collector to
// release outside it.
func (e *errorEnv) close() {
	e.net.Faults.Heal()
	for _, h := range e.handles {
		_ = h.Release(context.Background())
	}
	for _, p := range e.providers {
		_ = p.Close(context.Background())
	}
}

// within returns a context that ends after d of the bubble's time.
func (e *errorEnv) within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(e.ctx, d)
	t.Cleanup(cancel)
	return ctx
}

// tryAcquirer is a Lock or a Semaphore.
type tryAcquirer interface {
	TryAcquire(ctx context.Context) (*mongolock.Handle, error)
	Name() string
}

// hold returns a handle of l, which must be free.
func (e *errorEnv) hold(t *testing.T, l tryAcquirer) *mongolock.Handle {
	h, err := l.TryAcquire(e.ctx)
	require.NoError(t, err, "TryAcquire(%q)", l.Name())
	e.handles = append(e.handles, h)
	return h
}

// holdUpgradeable returns a handle of rw's upgradeable reader, which must
// be free.
func (e *errorEnv) holdUpgradeable(t *testing.T, rw *mongolock.RWLock) *mongolock.UpgradeableHandle {
	h, err := rw.Upgradeable().TryAcquire(e.ctx)
	require.NoError(t, err, "TryAcquire(%q)", rw.Name())
	e.handles = append(e.handles, h.Handle)
	return h
}

// upgraded returns a handle of rw's upgradeable reader, upgraded: the
// writer.
func (e *errorEnv) upgraded(t *testing.T, rw *mongolock.RWLock) *mongolock.UpgradeableHandle {
	h := e.holdUpgradeable(t, rw)
	require.NoError(t, h.Upgrade(e.ctx))
	return h
}

// lost returns a handle of l that has been lost.
func (e *errorEnv) lost(t *testing.T, l *mongolock.Lock) *mongolock.Handle {
	h := e.hold(t, l)
	mongolocktest.Lose(h)
	return h
}

// later runs call in a goroutine, and once the bubble is idle (it waits),
// runs then and returns call's error.
func later(call func() error, then func()) error {
	got := make(chan error, 1)
	go func() { got <- call() }()
	synctest.Wait()
	then()
	return <-got
}

// doLosing is a Do's fn that ends the lock called name (ForceRelease) and
// waits until its ctx says so, then returns ret.
func doLosing(e *errorEnv, name string, ret error) func(context.Context) error {
	return func(ctx context.Context) error {
		if _, err := e.p.ForceRelease(e.ctx, name); err != nil {
			return err
		}
		<-ctx.Done()
		return ret
	}
}

// tokenOnly is a TokenSource that is no acquisition's.
type tokenOnly int64

func (t tokenOnly) FencingToken() int64 { return int64(t) }

// fencedCalls are the two fenced writes, with their op, as one signature.
var fencedCalls = []struct {
	call, op string
	write    func(ctx context.Context, coll *mongo.Collection, h mongolock.TokenSource, filter, update any, upsert bool) error
}{
	{"FencedUpdateOne", "fenced update one", func(ctx context.Context, coll *mongo.Collection, h mongolock.TokenSource, filter, update any, upsert bool) error {
		_, err := mongolock.FencedUpdateOne(ctx, coll, h, filter, update, options.UpdateOne().SetUpsert(upsert))
		return err
	}},
	{"FencedFindOneAndUpdate", "fenced find one and update", func(ctx context.Context, coll *mongo.Collection, h mongolock.TokenSource, filter, update any, upsert bool) error {
		return mongolock.FencedFindOneAndUpdate(ctx, coll, h, filter, update, options.FindOneAndUpdate().SetUpsert(upsert)).Err()
	}},
}

// errorCases are every exported call's error paths, a table per family.
func errorCases() []errorCase {
	return slices.Concat(argumentErrorCases(), acquireArgumentErrorCases(), handleArgumentErrorCases(), modeErrorCases(), lossErrorCases(),
		closedErrorCases(), contentionErrorCases(), serverErrorCases(), fencedErrorCases(), ticketErrorCases())
}

// argumentErrorCases are the refusals of bad arguments (ErrInvalidArgument)
// by the constructors, a composite's calls and an election's: nothing is
// sent.
func argumentErrorCases() []errorCase {
	bad := mongolock.WithExpiry(0)
	var noCtx context.Context // a nil context: every call refuses it
	inv := []error{mongolock.ErrInvalidArgument}
	return []errorCase{
		{call: "New", path: "a nil database", op: "new", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.New(nil, "x")
			return err
		}},
		{call: "New", path: "a bad option", op: "new", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.New(e.db, "x", bad)
			return err
		}},

		{call: "NewProvider", path: "a nil database", op: "new provider", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewProvider(nil)
			return err
		}},
		{call: "NewProvider", path: "a bad option", op: "new provider", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewProvider(e.db, bad)
			return err
		}},

		{call: "mongolocktest.NewProvider", path: "a bad option", op: "new provider", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolocktest.NewProvider(bad)
			return err
		}},
		{call: "mongolocktest.Store.NewProvider", path: "a bad option", op: "new provider", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolocktest.NewStore().NewProvider(bad)
			return err
		}},

		{call: "NewComposite", path: "no parts", op: "new composite", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewComposite()
			return err
		}},
		{call: "NewComposite", path: "a nil part", op: "new composite", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewComposite(e.p.Lock("a"), nil)
			return err
		}},
		{call: "NewComposite", path: "a part twice", op: "new composite", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewComposite(e.p.Lock("a"), e.p.Lock("a"))
			return err
		}},
		{call: "NewComposite", path: "a semaphore of no slots", op: "new composite", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewComposite(e.p.Semaphore("s", 0))
			return err
		}},

		{call: "Composite.Acquire", path: "a nil context", op: "acquire", name: "a, b", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := composite(t, e).Acquire(noCtx)
			return err
		}},
		{call: "Composite.TryAcquire", path: "a nil context", op: "try acquire", name: "a, b", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := composite(t, e).TryAcquire(noCtx)
			return err
		}},
		{call: "Composite.Do", path: "a nil context", op: "do", name: "a, b", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return composite(t, e).Do(noCtx, func(context.Context) error { return nil })
		}},
		{call: "Composite.Do", path: "a nil function", op: "do", name: "a, b", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return composite(t, e).Do(e.ctx, nil)
		}},

		{call: "Election.Campaign", path: "a nil context", op: "campaign", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Election("e").Campaign(noCtx, "v")
			return err
		}},
		{call: "Election.Campaign", path: "a value too long", op: "campaign", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Election("e").Campaign(e.ctx, strings.Repeat("v", mongolock.MaxValueLen+1))
			return err
		}},
		{call: "Election.Campaign", path: "a provider that holds", op: "campaign", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			p := e.provider(t, e.net, mongolock.WithHoldAtLeast(time.Second))
			_, err := p.Election("e").Campaign(e.ctx, "v")
			return err
		}},
		{call: "Election.Run", path: "a nil context", op: "run", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Election("e").Run(noCtx, "v", func(context.Context, *mongolock.Leadership) {})
		}},
		{call: "Election.Run", path: "a nil function", op: "run", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Election("e").Run(e.ctx, "v", nil)
		}},
		{call: "Election.Run", path: "a value too long", op: "run", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Election("e").Run(e.ctx, strings.Repeat("v", mongolock.MaxValueLen+1), func(context.Context, *mongolock.Leadership) {})
		}},

		{call: "Fleet.Run", path: "a nil context", op: "run", name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Fleet("f", 2).Run(noCtx, func(context.Context, mongolock.Shard) error { return nil })
		}},
		{call: "Fleet.Run", path: "a nil function", op: "run", name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Fleet("f", 2).Run(e.ctx, nil)
		}},
		{call: "Fleet.Run", path: "no shards", op: "run", name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Fleet("f", 0).Run(e.ctx, func(context.Context, mongolock.Shard) error { return nil })
		}},
		{call: "Fleet.Run", path: "a drain timeout of 0", op: "run", name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Fleet("f", 2).DrainTimeout(0).Run(e.ctx, func(context.Context, mongolock.Shard) error { return nil })
		}},
	}
}

// acquireArgumentErrorCases are the refusals of bad arguments
// (ErrInvalidArgument) by the acquisitions of a lock, a semaphore and an
// upgradeable reader: nothing is sent.
func acquireArgumentErrorCases() []errorCase {
	var noCtx context.Context // a nil context: every call refuses it
	inv := []error{mongolock.ErrInvalidArgument}
	return []errorCase{
		{call: "UpgradeableLock.Acquire", path: "a nil context", op: "acquire", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.RWLock("rw").Upgradeable().Acquire(noCtx)
			return err
		}},
		{call: "UpgradeableLock.TryAcquire", path: "a nil context", op: "try acquire", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.RWLock("rw").Upgradeable().TryAcquire(noCtx)
			return err
		}},
		{call: "UpgradeableLock.Do", path: "a nil context", op: "do", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.RWLock("rw").Upgradeable().Do(noCtx, func(context.Context, *mongolock.UpgradeableHandle) error { return nil })
		}},
		{call: "UpgradeableLock.Do", path: "a nil function", op: "do", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.RWLock("rw").Upgradeable().Do(e.ctx, nil)
		}},

		{call: "Lock.Acquire", path: "a nil context", op: "acquire", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Lock("x").Acquire(noCtx)
			return err
		}},
		{call: "Lock.TryAcquire", path: "a nil context", op: "try acquire", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Lock("x").TryAcquire(noCtx)
			return err
		}},
		{call: "Lock.Do", path: "a nil context", op: "do", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Lock("x").Do(noCtx, func(context.Context) error { return nil })
		}},
		{call: "Lock.Do", path: "a nil function", op: "do", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Lock("x").Do(e.ctx, nil)
		}},

		{call: "Semaphore.Acquire", path: "a nil context", op: "acquire", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Semaphore("s", 1).Acquire(noCtx)
			return err
		}},
		{call: "Semaphore.Acquire", path: "n out of range", op: "acquire", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Semaphore("s", mongolock.MaxSemaphoreSlots+1).Acquire(e.ctx)
			return err
		}},
		{call: "Semaphore.TryAcquire", path: "a nil context", op: "try acquire", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Semaphore("s", 1).TryAcquire(noCtx)
			return err
		}},
		{call: "Semaphore.TryAcquire", path: "n out of range", op: "try acquire", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Semaphore("s", 0).TryAcquire(e.ctx)
			return err
		}},
		{call: "Semaphore.Do", path: "a nil context", op: "do", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Semaphore("s", 1).Do(noCtx, func(context.Context) error { return nil })
		}},
		{call: "Semaphore.Do", path: "a nil function", op: "do", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Semaphore("s", 1).Do(e.ctx, nil)
		}},
		{call: "Semaphore.Do", path: "n out of range", op: "do", name: "s", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Semaphore("s", -1).Do(e.ctx, func(context.Context) error { return nil })
		}},
	}
}

// handleArgumentErrorCases are the refusals of bad arguments
// (ErrInvalidArgument) by the calls of a handle, a leadership or a provider.
func handleArgumentErrorCases() []errorCase {
	var noCtx context.Context // a nil context: every call refuses it
	inv := []error{mongolock.ErrInvalidArgument}
	return []errorCase{
		{call: "Handle.Release", path: "a nil context", op: "release", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.hold(t, e.p.Lock("x")).Release(noCtx)
		}},
		{call: "Handle.Release", path: "a leadership's, with a nil context", op: "release", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return lead(t, e).Release(noCtx)
		}},

		{call: "CompositeHandle.Release", path: "a nil context", op: "release", name: "a, b", is: inv, run: func(t *testing.T, e *errorEnv) error {
			h := holdComposite(t, e)
			return h.Release(noCtx)
		}},

		{call: "UpgradeableHandle.Upgrade", path: "a nil handle", op: "upgrade", is: inv, run: func(t *testing.T, e *errorEnv) error {
			var h *mongolock.UpgradeableHandle // a failed Acquire's
			return h.Upgrade(e.ctx)
		}},
		{call: "UpgradeableHandle.Upgrade", path: "a zero handle", op: "upgrade", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return (&mongolock.UpgradeableHandle{}).Upgrade(e.ctx)
		}},
		{call: "UpgradeableHandle.Downgrade", path: "a nil handle", op: "downgrade", is: inv, run: func(t *testing.T, e *errorEnv) error {
			var h *mongolock.UpgradeableHandle
			return h.Downgrade(e.ctx)
		}},
		{call: "UpgradeableHandle.Upgrade", path: "a nil context", op: "upgrade", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.holdUpgradeable(t, e.p.RWLock("rw")).Upgrade(noCtx)
		}},
		{call: "UpgradeableHandle.Downgrade", path: "a nil context", op: "downgrade", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.upgraded(t, e.p.RWLock("rw")).Downgrade(noCtx)
		}},

		{call: "Leadership.Proclaim", path: "a nil context", op: "proclaim", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return lead(t, e).Proclaim(noCtx, "w")
		}},
		{call: "Leadership.Proclaim", path: "a value too long", op: "proclaim", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return lead(t, e).Proclaim(e.ctx, strings.Repeat("w", mongolock.MaxValueLen+1))
		}},
		{call: "Leadership.Release", path: "a nil context", op: "release", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return lead(t, e).Release(noCtx)
		}},

		{call: "UpgradeableHandle.Release", path: "a nil context", op: "release", name: "rw", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.holdUpgradeable(t, e.p.RWLock("rw")).Release(noCtx)
		}},

		{call: "Provider.Close", path: "a nil context", op: "close", is: inv, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Close(noCtx)
		}},
		{call: "Provider.ForceReleaseHolder", path: "an empty id", op: "force release holder", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.ForceReleaseHolder(e.ctx, "x", "")
			return err
		}},
	}
}

// modeErrorCases are the calls refused for another size, kind or mode
// (ErrMismatch), or for a handle released already (ErrReleased).
func modeErrorCases() []errorCase {
	return []errorCase{
		{call: "NewComposite", path: "a Semaphore and an RWLock of one name", op: "new composite", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			_, err := mongolock.NewComposite(e.p.Semaphore("s", 2), e.p.RWLock("s").Reader())
			return err
		}},

		{call: "UpgradeableHandle.Upgrade", path: "the writer already", op: "upgrade", name: "rw", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			return e.upgraded(t, e.p.RWLock("rw")).Upgrade(e.ctx)
		}},
		{call: "UpgradeableHandle.Downgrade", path: "not the writer", op: "downgrade", name: "rw", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			return e.holdUpgradeable(t, e.p.RWLock("rw")).Downgrade(e.ctx)
		}},
		{call: "UpgradeableHandle.Downgrade", path: "released", op: "downgrade", name: "rw", is: []error{mongolock.ErrReleased}, run: func(t *testing.T, e *errorEnv) error {
			h := e.upgraded(t, e.p.RWLock("rw"))
			require.NoError(t, h.Release(e.ctx))
			return h.Downgrade(e.ctx)
		}},

		{call: "UpgradeableLock.TryAcquire", path: "a semaphore's name", op: "try acquire", name: "rw", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Semaphore("rw", 2))
			_, err := e.p.RWLock("rw").Upgradeable().TryAcquire(e.ctx)
			return err
		}},

		{call: "Leadership.Proclaim", path: "resigned", op: "proclaim", name: "e", is: []error{mongolock.ErrReleased}, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			require.NoError(t, l.Release(e.ctx))
			return l.Proclaim(e.ctx, "w")
		}},

		{call: "UpgradeableHandle.Ticket", path: "released", op: "ticket", name: "rw", is: []error{mongolock.ErrReleased}, run: func(t *testing.T, e *errorEnv) error {
			h := e.holdUpgradeable(t, e.p.RWLock("rw"))
			require.NoError(t, h.Release(e.ctx))
			_, err := h.Ticket()
			return err
		}},

		{call: "Leadership.Ticket", path: "released", op: "ticket", name: "e", is: []error{mongolock.ErrReleased}, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			require.NoError(t, l.Release(e.ctx))
			_, err := l.Ticket()
			return err
		}},

		{call: "Semaphore.Acquire", path: "held with another n", op: "acquire", name: "s", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Semaphore("s", 2))
			_, err := e.p.Semaphore("s", 3).Acquire(e.ctx)
			return err
		}},
		{call: "Semaphore.TryAcquire", path: "an RWLock's name", op: "try acquire", name: "s", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.RWLock("s").Reader())
			_, err := e.p.Semaphore("s", 1).TryAcquire(e.ctx)
			return err
		}},
		{call: "Semaphore.Do", path: "held with another n", op: "do", name: "s", is: []error{mongolock.ErrMismatch}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Semaphore("s", 2))
			return e.p.Semaphore("s", 3).Do(e.ctx, func(context.Context) error { return nil })
		}},
	}
}

// lossErrorCases are the calls that report a loss (ErrLockLost), and Do's
// with fn's error.
func lossErrorCases() []errorCase {
	lost := []error{mongolock.ErrLockLost}
	return []errorCase{
		{call: "Composite.Do", path: "a part lost while fn ran", op: "do", name: "a", is: lost, run: func(t *testing.T, e *errorEnv) error {
			return composite(t, e).Do(e.ctx, doLosing(e, "a", nil))
		}},
		{call: "Composite.Do", path: "fn's error, and a part lost", op: "do", name: "a", is: []error{errJob, mongolock.ErrLockLost}, run: func(t *testing.T, e *errorEnv) error {
			return composite(t, e).Do(e.ctx, doLosing(e, "a", errJob))
		}},
		{call: "Composite.Do", path: "fn's error alone", own: errJob, run: func(t *testing.T, e *errorEnv) error {
			return composite(t, e).Do(e.ctx, func(context.Context) error { return errJob })
		}},

		{call: "CompositeHandle.Release", path: "a part lost", op: "release", name: "a", is: lost, run: func(t *testing.T, e *errorEnv) error {
			h := holdComposite(t, e)
			mongolocktest.Lose(h.Handles()[0])
			return h.Release(e.ctx)
		}},
		{call: "CompositeHandle.Release", path: "every part lost", op: "release", name: "a, b", is: lost, run: func(t *testing.T, e *errorEnv) error {
			h := holdComposite(t, e)
			for _, part := range h.Handles() {
				mongolocktest.Lose(part)
			}
			return h.Release(e.ctx)
		}},

		{call: "Handle.Release", path: "lost", op: "release", name: "x", is: lost, run: func(t *testing.T, e *errorEnv) error {
			return e.lost(t, e.p.Lock("x")).Release(e.ctx)
		}},

		{call: "UpgradeableHandle.Upgrade", path: "lost", op: "upgrade", name: "rw", is: lost, run: func(t *testing.T, e *errorEnv) error {
			h := e.holdUpgradeable(t, e.p.RWLock("rw"))
			mongolocktest.Lose(h.Handle)
			return h.Upgrade(e.ctx)
		}},
		{call: "UpgradeableHandle.Downgrade", path: "lost", op: "downgrade", name: "rw", is: lost, run: func(t *testing.T, e *errorEnv) error {
			h := e.upgraded(t, e.p.RWLock("rw"))
			mongolocktest.Lose(h.Handle)
			return h.Downgrade(e.ctx)
		}},

		{call: "Leadership.Proclaim", path: "lost", op: "proclaim", name: "e", is: lost, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			mongolocktest.Lose(l.Handle)
			return l.Proclaim(e.ctx, "w")
		}},

		{call: "Handle.Release", path: "a leadership's, lost", op: "release", name: "e", is: lost, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			mongolocktest.Lose(l.Handle)
			return l.Release(e.ctx)
		}},

		{call: "Leadership.Release", path: "lost", op: "release", name: "e", is: lost, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			mongolocktest.Lose(l.Handle)
			return l.Release(e.ctx)
		}},

		{call: "UpgradeableHandle.Release", path: "lost", op: "release", name: "rw", is: lost, run: func(t *testing.T, e *errorEnv) error {
			h := e.holdUpgradeable(t, e.p.RWLock("rw"))
			mongolocktest.Lose(h.Handle)
			return h.Release(e.ctx)
		}},

		{call: "Leadership.Ticket", path: "lost", op: "ticket", name: "e", is: lost, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			mongolocktest.Lose(l.Handle)
			_, err := l.Ticket()
			return err
		}},

		{call: "Lock.Do", path: "lost while fn ran", op: "do", name: "x", is: lost, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Lock("x").Do(e.ctx, doLosing(e, "x", nil))
		}},
		{call: "Lock.Do", path: "fn's error, and a loss", op: "do", name: "x", is: []error{errJob, mongolock.ErrLockLost}, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Lock("x").Do(e.ctx, doLosing(e, "x", errJob))
		}},
		{call: "Lock.Do", path: "fn's error alone", own: errJob, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Lock("x").Do(e.ctx, func(context.Context) error { return errJob })
		}},
		{call: "Fleet.Run", path: "a shard's fn's error alone", own: errJob, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Fleet("f", 2).Run(e.ctx, func(context.Context, mongolock.Shard) error { return errJob })
		}},
	}
}

// closedErrorCases are the calls of a closed provider (ErrClosed).
func closedErrorCases() []errorCase {
	return []errorCase{
		{call: "Composite.Acquire", path: "a closed provider", op: "acquire", name: "a", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			c := composite(t, e)
			require.NoError(t, e.p.Close(e.ctx))
			_, err := c.Acquire(e.ctx)
			return err
		}},

		{call: "Election.Campaign", path: "a closed provider", op: "campaign", name: "e", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			require.NoError(t, e.p.Close(e.ctx))
			_, err := e.p.Election("e").Campaign(e.ctx, "v")
			return err
		}},
		{call: "Fleet.Run", path: "a closed provider", op: "run", name: "f", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			require.NoError(t, e.p.Close(e.ctx))
			return e.p.Fleet("f", 2).Run(e.ctx, func(context.Context, mongolock.Shard) error { return nil })
		}},
		{call: "Fleet.Run", path: "its provider closed", op: "run", name: "f", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			return later(func() error {
				return e.p.Fleet("f", 2).Run(e.ctx, func(ctx context.Context, _ mongolock.Shard) error { <-ctx.Done(); return nil })
			}, func() { require.NoError(t, e.p.Close(e.ctx)) })
		}},
		{call: "Election.Run", path: "its provider closed", op: "run", name: "e", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("e"))
			return later(func() error {
				return e.p.Election("e").Run(e.ctx, "v", func(context.Context, *mongolock.Leadership) {})
			}, func() { require.NoError(t, e.p.Close(e.ctx)) })
		}},

		{call: "UpgradeableHandle.Upgrade", path: "its provider closed while it waits", op: "upgrade", name: "rw", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			h := e.holdUpgradeable(t, e.p.RWLock("rw"))
			e.hold(t, e.rival.RWLock("rw").Reader())
			return later(func() error { return h.Upgrade(e.ctx) }, func() { require.NoError(t, e.p.Close(e.ctx)) })
		}},

		{call: "UpgradeableLock.Do", path: "a closed provider", op: "do", name: "rw", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			require.NoError(t, e.p.Close(e.ctx))
			return e.p.RWLock("rw").Upgradeable().Do(e.ctx, func(context.Context, *mongolock.UpgradeableHandle) error { return nil })
		}},

		{call: "Lock.Acquire", path: "a closed provider", op: "acquire", name: "x", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			require.NoError(t, e.p.Close(e.ctx))
			_, err := e.p.Lock("x").Acquire(e.ctx)
			return err
		}},
		{call: "Lock.TryAcquire", path: "a closed provider", op: "try acquire", name: "x", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			require.NoError(t, e.p.Close(e.ctx))
			_, err := e.p.Lock("x").TryAcquire(e.ctx)
			return err
		}},
	}
}

// contentionErrorCases are the calls that found the lock held
// (ErrNotAcquired, ErrNoLeader) or no lock at all (ErrNoLock).
func contentionErrorCases() []errorCase {
	notAcquiredInTime := []error{mongolock.ErrNotAcquired, context.DeadlineExceeded}
	return []errorCase{
		{call: "Composite.Acquire", path: "a part held until ctx ends", op: "acquire", name: "b", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("b"))
			_, err := composite(t, e).Acquire(e.within(t, time.Minute))
			return err
		}},
		{call: "Composite.TryAcquire", path: "a part held", op: "try acquire", name: "b", is: []error{mongolock.ErrNotAcquired}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("b"))
			_, err := composite(t, e).TryAcquire(e.ctx)
			return err
		}},
		{call: "Composite.Do", path: "a part held until ctx ends", op: "do", name: "b", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("b"))
			return composite(t, e).Do(e.within(t, time.Minute), func(context.Context) error { return nil })
		}},

		{call: "Election.Campaign", path: "another leads until ctx ends", op: "campaign", name: "e", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("e"))
			_, err := e.p.Election("e").Campaign(e.within(t, time.Minute), "v")
			return err
		}},
		{call: "Election.Leader", path: "nobody leads", op: "leader", name: "e", is: []error{mongolock.ErrNoLeader}, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Election("e").Leader(e.ctx)
			return err
		}},
		{call: "Fleet.Run", path: "ctx ends", op: "run", name: "f", is: []error{context.DeadlineExceeded}, run: func(t *testing.T, e *errorEnv) error {
			return e.p.Fleet("f", 2).Run(e.within(t, time.Minute), func(ctx context.Context, _ mongolock.Shard) error { <-ctx.Done(); return nil })
		}},
		{call: "Election.Run", path: "another leads until ctx ends", op: "run", name: "e", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("e"))
			return e.p.Election("e").Run(e.within(t, time.Minute), "v", func(context.Context, *mongolock.Leadership) {})
		}},

		{call: "UpgradeableHandle.Upgrade", path: "another reader holds until ctx ends", op: "upgrade", name: "rw", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			h := e.holdUpgradeable(t, e.p.RWLock("rw"))
			e.hold(t, e.rival.RWLock("rw").Reader())
			return h.Upgrade(e.within(t, time.Minute))
		}},

		{call: "UpgradeableLock.Acquire", path: "a writer holds until ctx ends", op: "acquire", name: "rw", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.RWLock("rw").Writer())
			_, err := e.p.RWLock("rw").Upgradeable().Acquire(e.within(t, time.Minute))
			return err
		}},
		{call: "UpgradeableLock.TryAcquire", path: "another upgradeable reader holds", op: "try acquire", name: "rw", is: []error{mongolock.ErrNotAcquired}, run: func(t *testing.T, e *errorEnv) error {
			e.holdUpgradeable(t, e.rival.RWLock("rw"))
			_, err := e.p.RWLock("rw").Upgradeable().TryAcquire(e.ctx)
			return err
		}},

		{call: "Lock.Acquire", path: "held until ctx ends", op: "acquire", name: "x", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("x"))
			_, err := e.p.Lock("x").Acquire(e.within(t, time.Minute))
			return err
		}},
		{call: "Lock.TryAcquire", path: "held", op: "try acquire", name: "x", is: []error{mongolock.ErrNotAcquired}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("x"))
			_, err := e.p.Lock("x").TryAcquire(e.ctx)
			return err
		}},
		{call: "Lock.Do", path: "held until ctx ends", op: "do", name: "x", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Lock("x"))
			return e.p.Lock("x").Do(e.within(t, time.Minute), func(context.Context) error { return nil })
		}},

		{call: "Provider.Inspect", path: "no such lock", op: "inspect", name: "x", is: []error{mongolock.ErrNoLock}, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Inspect(e.ctx, "x")
			return err
		}},

		{call: "RWLock.Inspect", path: "no such lock", op: "inspect", name: "rw", is: []error{mongolock.ErrNoLock}, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.RWLock("rw").Inspect(e.ctx)
			return err
		}},

		{call: "Semaphore.Acquire", path: "every slot held until ctx ends", op: "acquire", name: "s", is: notAcquiredInTime, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Semaphore("s", 1))
			_, err := e.p.Semaphore("s", 1).Acquire(e.within(t, time.Minute))
			return err
		}},
		{call: "Semaphore.TryAcquire", path: "every slot held", op: "try acquire", name: "s", is: []error{mongolock.ErrNotAcquired}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.rival.Semaphore("s", 1))
			_, err := e.p.Semaphore("s", 1).TryAcquire(e.ctx)
			return err
		}},
		{call: "Semaphore.Inspect", path: "no such lock", op: "inspect", name: "s", is: []error{mongolock.ErrNoLock}, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.p.Semaphore("s", 1).Inspect(e.ctx)
			return err
		}},
	}
}

// serverErrorCases are the calls whose server failed them (unreachable,
// too slow for ctx), the one-round-trip calls among them.
func serverErrorCases() []errorCase {
	cases := []errorCase{
		{call: "Handle.Release", path: "the server unreachable", op: "release", name: "x", run: func(t *testing.T, e *errorEnv) error {
			h := e.hold(t, e.p.Lock("x"))
			e.net.Faults.Partition()
			return h.Release(e.ctx)
		}},

		{call: "UpgradeableHandle.Downgrade", path: "the server unreachable", op: "downgrade", name: "rw", run: func(t *testing.T, e *errorEnv) error {
			h := e.upgraded(t, e.p.RWLock("rw"))
			e.net.Faults.Partition()
			return h.Downgrade(e.ctx)
		}},

		{call: "Lock.Acquire", path: "the server unreachable until ctx ends", op: "acquire", name: "x", is: []error{context.DeadlineExceeded}, run: func(t *testing.T, e *errorEnv) error {
			e.net.Faults.Partition()
			_, err := e.p.Lock("x").Acquire(e.within(t, time.Minute))
			return err
		}},
		{call: "Lock.TryAcquire", path: "the server unreachable", op: "try acquire", name: "x", run: func(t *testing.T, e *errorEnv) error {
			e.net.Faults.Partition()
			_, err := e.p.Lock("x").TryAcquire(e.ctx)
			return err
		}},

		{call: "Provider.Close", path: "ctx ended", op: "close", is: []error{context.Canceled}, run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.p.Lock("x"))
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			return e.p.Close(ctx)
		}},
		{call: "Provider.Close", path: "a release failed", op: "close", run: func(t *testing.T, e *errorEnv) error {
			e.hold(t, e.p.Lock("x"))
			e.hold(t, e.p.Lock("y"))
			e.net.Faults.Partition()
			return e.p.Close(e.ctx)
		}},
	}
	cases = append(cases, roundTripCases("Election.Leader", "leader", "e", func(e *errorEnv, ctx context.Context) error {
		_, err := e.p.Election("e").Leader(ctx)
		return err
	})...)
	cases = append(cases, roundTripCases("Provider.ForceRelease", "force release", "x", func(e *errorEnv, ctx context.Context) error {
		_, err := e.p.ForceRelease(ctx, "x")
		return err
	})...)
	cases = append(cases, roundTripCases("Provider.ForceReleaseHolder", "force release holder", "x", func(e *errorEnv, ctx context.Context) error {
		_, err := e.p.ForceReleaseHolder(ctx, "x", "id")
		return err
	})...)
	cases = append(cases, roundTripCases("Provider.Inspect", "inspect", "x", func(e *errorEnv, ctx context.Context) error {
		_, err := e.p.Inspect(ctx, "x")
		return err
	})...)
	cases = append(cases, roundTripCases("Provider.Locks", "list", "billing/", func(e *errorEnv, ctx context.Context) error {
		return listed(e.p.Locks(ctx, "billing/"))
	})...)
	cases = append(cases, roundTripCases("RWLock.Inspect", "inspect", "rw", func(e *errorEnv, ctx context.Context) error {
		_, err := e.p.RWLock("rw").Inspect(ctx)
		return err
	})...)
	cases = append(cases, roundTripCases("Semaphore.Inspect", "inspect", "s", func(e *errorEnv, ctx context.Context) error {
		_, err := e.p.Semaphore("s", 1).Inspect(ctx)
		return err
	})...)
	return cases
}

// fencedErrorCases are the fenced writes' refusals and losses.
func fencedErrorCases() []errorCase {
	inv := []error{mongolock.ErrInvalidArgument}
	lost := []error{mongolock.ErrLockLost}
	var cases []errorCase
	for _, f := range fencedCalls {
		for _, end := range []struct {
			path string
			move func(c *mongolock.Clocks, d time.Duration)
		}{
			{"a lease that ended while the machine was suspended", (*mongolock.Clocks).Suspend},
			{"a lease whose deadline passed while its process was stopped", (*mongolock.Clocks).Stop},
		} {
			cases = append(cases, errorCase{call: f.call, path: end.path, op: f.op, name: "f", is: lost, run: func(t *testing.T, e *errorEnv) error {
				p := e.provider(t, e.net, mongolock.WithExpiry(2*time.Second))
				clocks := mongolock.FakeClocks(p, false)
				h := e.hold(t, p.Lock("f"))
				end.move(clocks, 3*time.Second)
				return f.write(e.ctx, e.coll, h, byID("doc"), setWriter("w"), false)
			}})
		}
		cases = append(cases,
			errorCase{call: f.call, path: "a lost handle's Context, through a type of another package", op: f.op, is: lost, run: func(t *testing.T, e *errorEnv) error {
				h := e.lost(t, e.p.Lock("f"))
				return f.write(e.ctx, e.coll, sourceWithContext{h.FencingToken(), h.Context()}, byID("doc"), setWriter("w"), false)
			}},
			errorCase{call: f.call, path: "a nil collection", op: f.op, name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
				return f.write(e.ctx, nil, e.hold(t, e.p.Lock("f")), byID("doc"), setWriter("w"), false)
			}},
			errorCase{call: f.call, path: "a replacement document", op: f.op, name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
				return f.write(e.ctx, e.coll, e.hold(t, e.p.Lock("f")), byID("doc"), bson.D{{Key: "by", Value: "w"}}, false)
			}},
			errorCase{call: f.call, path: "an upsert without an _id equality", op: f.op, name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
				return f.write(e.ctx, e.coll, e.hold(t, e.p.Lock("f")), bson.D{{Key: "by", Value: "w"}}, setWriter("w"), true)
			}},
			errorCase{call: f.call, path: "a released handle", op: f.op, name: "f", is: []error{mongolock.ErrReleased}, run: func(t *testing.T, e *errorEnv) error {
				h := e.hold(t, e.p.Lock("f"))
				require.NoError(t, h.Release(e.ctx))
				return f.write(e.ctx, e.coll, h, byID("doc"), setWriter("w"), false)
			}},
			errorCase{call: f.call, path: "a token source that is no acquisition", op: f.op, is: inv, run: func(t *testing.T, e *errorEnv) error {
				return f.write(e.ctx, e.coll, tokenOnly(0), byID("doc"), setWriter("w"), false)
			}},
			errorCase{call: f.call, path: "a document of a higher token", op: f.op, name: "f", is: []error{mongolock.ErrFenced}, server: true, run: func(t *testing.T, e *errorEnv) error {
				old, next := staleAndNext(t, e)
				require.NoError(t, fencedCalls[0].write(e.ctx, e.coll, next, byID("doc"), setWriter("next"), true))
				return f.write(e.ctx, e.coll, old, byID("doc"), setWriter("old"), false)
			}},
			errorCase{call: f.call, path: "an upsert of a document of a higher token", op: f.op, name: "f", is: []error{mongolock.ErrFenced}, server: true, run: func(t *testing.T, e *errorEnv) error {
				old, next := staleAndNext(t, e)
				require.NoError(t, fencedCalls[0].write(e.ctx, e.coll, next, byID("doc"), setWriter("next"), true))
				return f.write(e.ctx, e.coll, old, byID("doc"), setWriter("old"), true)
			}},
			errorCase{call: f.call, path: "an update the server refuses", op: f.op, name: "f", server: true, run: func(t *testing.T, e *errorEnv) error {
				return f.write(e.ctx, e.coll, e.hold(t, e.p.Lock("f")), byID("doc"), bson.D{{Key: "$inc", Value: bson.D{{Key: "by", Value: "w"}}}}, true)
			}},
		)
	}
	return append(cases, errorCase{call: "FencedFindOneAndUpdate", path: "no document matches", own: mongo.ErrNoDocuments, server: true,
		run: func(t *testing.T, e *errorEnv) error {
			return fencedCalls[1].write(e.ctx, e.coll, e.hold(t, e.p.Lock("f")), byID("none"), setWriter("w"), false)
		}})
}

// roundTripCases are the cases of a call of one round trip, call, of op
// on the lock name: with a nil context, and with the server unreachable.
func roundTripCases(call, op, name string, send func(e *errorEnv, ctx context.Context) error) []errorCase {
	return []errorCase{
		{call: call, path: "a nil context", op: op, name: name, is: []error{mongolock.ErrInvalidArgument}, run: func(t *testing.T, e *errorEnv) error {
			return send(e, nil)
		}},
		{call: call, path: "the server unreachable", op: op, name: name, run: func(t *testing.T, e *errorEnv) error {
			e.net.Faults.Partition()
			return send(e, e.ctx)
		}},
	}
}

// composite is the composite of e.p's locks "a" and "b".
func composite(t *testing.T, e *errorEnv) *mongolock.Composite {
	c, err := mongolock.NewComposite(e.p.Lock("a"), e.p.Lock("b"))
	require.NoError(t, err)
	return c
}

// lead returns e.p's leadership of the election "e".
func lead(t *testing.T, e *errorEnv) *mongolock.Leadership {
	l, err := e.p.Election("e").Campaign(e.ctx, "v")
	require.NoError(t, err)
	e.handles = append(e.handles, l.Handle)
	return l
}

// holdComposite returns e's composite held.
func holdComposite(t *testing.T, e *errorEnv) *mongolock.CompositeHandle {
	h, err := composite(t, e).TryAcquire(e.ctx)
	require.NoError(t, err)
	e.handles = append(e.handles, h.Handles()...)
	return h
}

// staleAndNext returns two handles of e.p's lock "f": old, released, and
// next, acquired after it.
func staleAndNext(t *testing.T, e *errorEnv) (old, next *mongolock.Handle) {
	old = e.hold(t, e.p.Lock("f"))
	released, err := e.rival.ForceRelease(e.ctx, "f") // old does not know it yet
	require.NoError(t, err)
	require.True(t, released)
	return old, e.hold(t, e.p.Lock("f"))
}

// listed returns the error that ends a listing, if any.
func listed(seq func(yield func(mongolock.LockInfo, error) bool)) error {
	for _, err := range seq {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestEveryErrorIsAnErrorOfItsCallAndLock(t *testing.T) {
	offline := offlineDatabase(t)
	for _, c := range errorCases() {
		t.Run(c.call+"/"+c.path, func(t *testing.T) {
			run := func(t *testing.T) {
				e := newErrorEnv(t, offline)
				defer e.close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				e.ctx = ctx
				if c.server {
					e.coll = testdb.Database(t).Collection("fenced")
				}
				checkError(t, c, c.run(t, e))
			}
			if c.server {
				run(t) // the server's network is outside any bubble
				return
			}
			synctest.Test(t, run)
		})
	}
}

// checkError checks err against c.
func checkError(t *testing.T, c errorCase, err error) {
	t.Helper()
	require.Error(t, err)
	t.Log(err)
	if c.own != nil {
		require.Same(t, c.own, err, "not the error as it was")
		return
	}
	me, ok := err.(*mongolock.Error) // the error itself, not one it wraps
	require.True(t, ok, "%T, not an *Error: %v", err, err)
	require.Equal(t, c.op, me.Op, "Op of %v", err)
	require.Equal(t, c.name, me.Name, "Name of %v", err)
	for _, s := range c.is {
		require.ErrorIs(t, err, s)
	}
	for _, s := range sentinels {
		if !slices.Contains(c.is, s) {
			require.NotErrorIs(t, err, s)
		}
	}
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "mongolock: "+c.op), "the message does not begin with the op: %s", msg)
	require.Equal(t, 1, strings.Count(msg, "mongolock:"), "the package's prefix more than once: %s", msg)
}

// TestEveryCallThatReturnsAnErrorHasErrorCases: a function or method
// added to the root package or to mongolocktest that returns an error
// needs its rows in errorCases, and every row's call must exist.
func TestEveryCallThatReturnsAnErrorHasErrorCases(t *testing.T) {
	calls := append(exportedErrorCalls(t, ".", ""), exportedErrorCalls(t, "mongolocktest", "mongolocktest.")...)
	require.Contains(t, calls, "Lock.Acquire", "the walk found nothing")
	covered := map[string]bool{}
	for _, c := range errorCases() {
		covered[c.call] = true
		require.Contains(t, calls, c.call, "a row of a call that does not exist, or returns no error")
	}
	for _, call := range calls {
		if !covered[call] && !notCalls[call] {
			t.Errorf("%s returns an error: add its error paths to errorCases", call)
		}
	}
}

// notCalls return an error that is no failure of theirs.
var notCalls = map[string]bool{
	"Error.Unwrap": true, // the cause
}

// exportedErrorCalls parses the package in dir (its files for this
// platform, no tests) and returns its exported functions and methods of
// exported types whose results have an error in them (an iterator's, a
// mongo.SingleResult's), as prefix+"Func" or prefix+"Type.Method".
func exportedErrorCalls(t *testing.T, dir, prefix string) []string {
	bp, err := build.ImportDir(dir, 0)
	require.NoError(t, err)
	fset := gotoken.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, bp.ImportPath)
	require.NoError(t, err)
	var calls []string
	add := func(name string, f *doc.Func) {
		if returnsError(f.Decl.Type.Results) {
			calls = append(calls, prefix+name)
		}
	}
	for _, f := range pkg.Funcs {
		add(f.Name, f)
	}
	for _, typ := range pkg.Types {
		for _, f := range typ.Funcs {
			add(f.Name, f)
		}
		for _, m := range typ.Methods {
			add(typ.Name+"."+m.Name, m)
		}
	}
	return calls
}

// returnsError reports whether results name error, or mongo's
// SingleResult, which carries one.
func returnsError(results *ast.FieldList) bool {
	found := false
	if results != nil {
		ast.Inspect(results, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				found = found || n.Name == "error"
			case *ast.SelectorExpr:
				found = found || n.Sel.Name == "SingleResult"
			}
			return !found
		})
	}
	return found
}

// Errors shorten long names to 64 bytes; a name of multi-byte characters
// must be cut between characters, not inside one.
func TestErrorShortensLongNamesWithoutSplittingCharacters(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	p := newProvider(t, testdb.Database(t))
	name := strings.Repeat("锁", 30) // 90 bytes, 3 per character
	h := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock(name)))

	_, err := p.Lock(name).TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	var le *mongolock.Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, "try acquire", le.Op)
	require.LessOrEqual(t, len(le.Name), 64)
	require.True(t, strings.HasPrefix(name, strings.TrimSuffix(le.Name, "...")), "Name %q is not a prefix of the name", le.Name)
	require.True(t, utf8.ValidString(le.Name), "Name %q is not valid UTF-8", le.Name)
	require.NotContains(t, err.Error(), `\x`, "the message shows a split character")
	require.NoError(t, h.Release(ctx))
}

// A lost handle's Context cause is printed on its own (a log of
// context.Cause), so it says whose error it is and which lock was lost: a
// Handle's, a CompositeHandle's (its lost part's), one taken over.
func TestALostHandlesContextCauseNamesTheLibraryAndTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		p, err := mongolocktest.NewProvider()
		require.NoError(t, err)
		defer p.Close(ctx)
		causeOf := func(h interface{ Context() context.Context }) error {
			require.Error(t, h.Context().Err(), "the handle is not done")
			return context.Cause(h.Context())
		}

		h := mustTryAcquire(t, ctx, p.Lock("ledger"))
		mongolocktest.Lose(h)
		cause := causeOf(h)
		require.ErrorIs(t, cause, mongolock.ErrLockLost)
		require.EqualError(t, cause, `mongolock: "ledger": lock lost: its holder was force released (mongolocktest.Lose)`)

		c, err := mongolock.NewComposite(p.Lock("a"), p.Lock("b"))
		require.NoError(t, err)
		ch, err := c.TryAcquire(ctx)
		require.NoError(t, err)
		mongolocktest.Lose(ch.Handles()[1])
		cause = causeOf(ch)
		require.ErrorIs(t, cause, mongolock.ErrLockLost)
		require.EqualError(t, cause, `mongolock: "b": lock lost: its holder was force released (mongolocktest.Lose)`)
		require.ErrorIs(t, ch.Release(ctx), mongolock.ErrLockLost)

		h = mustTryAcquire(t, ctx, p.Lock("job"))
		ticket, err := h.Ticket()
		require.NoError(t, err)
		taker, err := p.TakeOver(ctx, ticket)
		require.NoError(t, err)
		cause = causeOf(h)
		require.ErrorIs(t, cause, mongolock.ErrTakenOver)
		require.ErrorIs(t, cause, mongolock.ErrLockLost)
		require.EqualError(t, cause, `mongolock: "job": lock lost: taken over by its ticket`)
		require.NoError(t, taker.Release(ctx))
	})
}
