package mongolock_test

// An Acquire that ends on its ctx while no server answers says why, beside
// ctx's error: the last round trip's error, and the servers' last errors
// that a failed server selection knows of (a refused connection), so that
// an outage is told from contention, and errors.As finds its cause.

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/description"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mongolock/mongolock"
)

// refusedConnection is a dial's error where nobody listens.
var refusedConnection = &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
	Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// noServer is the driver's failed server selection while the one server
// refuses connections: ended by ctx's deadline, or by the selection's own
// timeout (serverSelectionTimeoutMS).
func noServer(ended error) error {
	return topology.ServerSelectionError{Wrapped: ended, Desc: description.Topology{Servers: []description.Server{
		{Addr: "127.0.0.1:1", LastError: refusedConnection},
	}}}
}

// requireOutage checks that err, of a call that ctx ended, tells the
// refused connection beneath it, and is not contention.
func requireOutage(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, mongolock.ErrNotAcquired, "an outage reported as contention")
	var op *net.OpError
	require.ErrorAs(t, err, &op, "the refused connection is gone from %v", err)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorAs(t, err, &topology.ServerSelectionError{})
}

func TestAnAcquireThatEndsOnItsCtxWithNoServerSaysWhy(t *testing.T) {
	for _, ended := range []struct {
		label string
		err   error
	}{
		{"selection ended by ctx's deadline", noServer(context.DeadlineExceeded)},
		{"selection timed out", noServer(errors.New("server selection timeout"))},
	} {
		for _, call := range []struct {
			label string
			run   func(ctx context.Context, p *mongolock.Provider, refuse func()) error
		}{
			{"Lock.Acquire", func(ctx context.Context, p *mongolock.Provider, refuse func()) error {
				refuse()
				_, err := p.Lock("a").Acquire(ctx)
				return err
			}},
			{"Semaphore.Acquire", func(ctx context.Context, p *mongolock.Provider, refuse func()) error {
				refuse()
				_, err := p.Semaphore("s", 2).Acquire(ctx)
				return err
			}},
			{"RWLock's Writer Acquire", func(ctx context.Context, p *mongolock.Provider, refuse func()) error {
				refuse()
				_, err := p.RWLock("rw").Writer().Acquire(ctx)
				return err
			}},
			{"Election.Campaign", func(ctx context.Context, p *mongolock.Provider, refuse func()) error {
				refuse()
				_, err := p.Election("e").Campaign(ctx, "v")
				return err
			}},
			{"Upgrade", func(ctx context.Context, p *mongolock.Provider, refuse func()) error {
				h, err := p.RWLock("rw").Upgradeable().TryAcquire(ctx)
				require.NoError(t, err)
				releaseAtCleanup(t, h.Handle)
				refuse()
				return h.Upgrade(ctx)
			}},
		} {
			t.Run(ended.label+"/"+call.label, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p, faults := newMemDB(t).process()
					ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
					defer cancel()
					err := call.run(ctx, p, func() { faults.RefuseWith(1<<30, ended.err) })
					faults.RefuseWith(0, nil)
					requireOutage(t, err)
				})
			})
		}
	}
}

// TryAcquire's one attempt, failed by a timed-out server selection, says
// why too.
func TestATryAcquireWithNoServerSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, faults := newMemDB(t).process()
		faults.RefuseWith(1, noServer(errors.New("server selection timeout")))
		_, err := p.Lock("a").TryAcquire(t.Context())
		var op *net.OpError
		require.ErrorAs(t, err, &op, "the refused connection is gone from %v", err)
		require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
	})
}

// On the wire, against an address nobody listens on, with the driver's
// default server selection timeout (30 s) longer than ctx: the driver's
// refused connection reaches the caller.
func TestAnAcquireWithNoServerListeningSaysWhyOnTheWire(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?connect=direct"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	p, err := mongolock.NewProvider(client.Database("app"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = p.Lock("a").Acquire(ctx)
	requireOutage(t, err)
}
