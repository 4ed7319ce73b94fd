package conformance

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Env is one body's run over one store, the model or a server: processes
// of a database of the body's own, a bounded context, settle, and the
// database's documents as they are. Faults are the model's only.
type Env struct {
	T   *testing.T
	Ctx context.Context // ends with the test, or 20 s after it began
	// Settle lets what the body started run as far as it can before a
	// check that it waits (synctest.Wait in a bubble; nothing on the real
	// clock, where the check is only as strong as the moment it runs).
	Settle func()
	// Model is the database in process memory the body runs over; nil
	// over a server, or a store that gives only providers.
	Model *memdb.Store
	// DB is the server's database the body runs over; nil elsewhere.
	DB *mongo.Database
	// open returns a provider with opts on a client of its own, and that
	// client's network (nil but on the model).
	open func(opts []mongolock.Option) (*mongolock.Provider, *memdb.Faults, error)
}

// StallProofExpiry and StallProofCadence make a lease that a machine
// loaded with other test runs, stalling a process for a second or two,
// does not lose, extended often enough that a loss is still seen soon: for
// a holder on the real clock whose point is not the lease's length.
const StallProofExpiry, StallProofCadence = 3 * time.Second, 250 * time.Millisecond

// StallProof is that lease, as options.
var StallProof = []mongolock.Option{mongolock.WithExpiry(StallProofExpiry), mongolock.WithExtensionCadence(StallProofCadence)}

// ModelDB is the name of the model's database.
const ModelDB = "mongolock_test_memory"

// Over runs body over the model in a testing/synctest bubble and, unless
// -short or no server is configured, over the server: what it checks holds
// on both.
func Over(t *testing.T, body func(e *Env)) {
	t.Run("model", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { body(OverModel(t)) }) })
	t.Run("server", func(t *testing.T) { body(OverServer(t, testdb.Database(t))) })
}

// OverModel returns an Env over a new model database, for a test that runs
// in a testing/synctest bubble: its $$NOW and every timer of the library
// read the bubble's clock. Each process reaches it through a client, and a
// network, of its own.
func OverModel(t *testing.T) *Env {
	// The last cleanup: the bubble ends only once every goroutine has
	// ended, and a closed provider's idle senders, and round trips the
	// test abandoned, end within this of its clock.
	t.Cleanup(func() { time.Sleep(time.Minute) })
	store := memdb.NewStore(ModelDB, nil)
	e := newEnv(t, synctest.Wait, func(opts []mongolock.Option) (*mongolock.Provider, *memdb.Faults, error) {
		client := store.Client()
		p, err := backend.NewProvider(client, ModelDB, opts)
		return p.(*mongolock.Provider), &client.Faults, err
	})
	e.Model = store
	return e
}

// OverServer returns an Env over db, a server's database: each process is
// a client of its own.
func OverServer(t *testing.T, db *mongo.Database) *Env {
	e := newEnv(t, func() {}, func(opts []mongolock.Option) (*mongolock.Provider, *memdb.Faults, error) {
		p, err := mongolock.NewProvider(testdb.NewClient(t).Database(db.Name()), opts...)
		return p, nil, err
	})
	e.DB = db
	return e
}

// overOpen returns an Env, in a bubble, whose processes open returns, and
// no more.
func overOpen(t *testing.T, open Open) *Env {
	newProvider := open(t)
	return newEnv(t, synctest.Wait, func(opts []mongolock.Option) (*mongolock.Provider, *memdb.Faults, error) {
		p, err := newProvider(opts...)
		return p, nil, err
	})
}

func newEnv(t *testing.T, settle func(), open func([]mongolock.Option) (*mongolock.Provider, *memdb.Faults, error)) *Env {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return &Env{T: t, Ctx: ctx, Settle: settle, open: open}
}

// Process returns a provider with opts on a client of its own, as another
// process would have, closed when the test ends; and that client's network,
// whose faults the test sets (nil but on the model).
func (e *Env) Process(opts ...mongolock.Option) (*mongolock.Provider, *memdb.Faults) {
	e.T.Helper()
	p, faults, err := e.open(opts)
	require.NoError(e.T, err)
	e.T.Cleanup(func() {
		// Under a fault the releases of what it still holds may fail:
		// the test has said what it expects of them.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p, faults
}

// Doc returns name's document in the collection coll as it is now (on the
// model, read past every client's faults); nil if there is none.
func (e *Env) Doc(coll, name string) bson.Raw {
	e.T.Helper()
	var doc bson.Raw
	err := e.raw(coll, func(c *mongo.Collection) (err error) {
		doc, err = c.FindOne(e.Ctx, byID(name)).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil
		}
		return err
	}, func(c *memdb.Table, now time.Time) error {
		docs, err := c.Find(now, byID(name), nil)
		if len(docs) > 0 {
			doc = docs[0]
		}
		return err
	})
	require.NoError(e.T, err, "reading the document of %q", name)
	return doc
}

// Edit applies update to name's document in the collection coll, as
// someone editing it by hand would.
func (e *Env) Edit(coll, name string, update bson.D) {
	e.T.Helper()
	require.NoError(e.T, e.raw(coll, func(c *mongo.Collection) error {
		_, err := c.UpdateOne(e.Ctx, byID(name), update)
		return err
	}, func(c *memdb.Table, now time.Time) error {
		_, _, err := c.UpdateOne(now, byID(name), update)
		return err
	}), "editing the document of %q", name)
}

// Remove deletes name's document in the collection coll, as someone
// deleting it by hand would; the test fails if there is none.
func (e *Env) Remove(coll, name string) {
	e.T.Helper()
	deleted := false
	require.NoError(e.T, e.raw(coll, func(c *mongo.Collection) error {
		res, err := c.DeleteOne(e.Ctx, byID(name))
		deleted = err == nil && res.DeletedCount == 1
		return err
	}, func(c *memdb.Table, now time.Time) (err error) {
		deleted, err = c.DeleteOne(now, byID(name))
		return err
	}), "deleting the document of %q", name)
	require.True(e.T, deleted, "no document of %q in %s", name, coll)
}

// raw runs onServer or onModel, whichever store e is over, on coll.
func (e *Env) raw(coll string, onServer func(*mongo.Collection) error, onModel func(*memdb.Table, time.Time) error) error {
	switch {
	case e.DB != nil:
		return onServer(e.DB.Collection(coll))
	case e.Model != nil:
		return e.Model.Do(context.Background(), coll, onModel)
	}
	return errors.New("conformance: this store gives only providers, not its documents")
}

func byID(name string) bson.D { return bson.D{{Key: "_id", Value: name}} }

// provider returns a provider with short expiries (a loss is seen within
// a third of a second) and quick polls, then opts; its Close must succeed.
func (e *Env) provider(opts ...mongolock.Option) *mongolock.Provider {
	e.T.Helper()
	p, _ := e.Process(append([]mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithBusyWaitSleep(5*time.Millisecond, 50*time.Millisecond)}, opts...)...)
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(e.T, p.Close(ctx))
	})
	return p
}

// acquire takes l, or fails the test.
func (e *Env) acquire(l *mongolock.Lock) *mongolock.Handle {
	e.T.Helper()
	h, err := l.Acquire(e.Ctx)
	require.NoError(e.T, err)
	return h
}

func (e *Env) release(h *mongolock.Handle) {
	e.T.Helper()
	require.NoError(e.T, h.Release(e.Ctx))
}

// await waits for ch to close, or fails the test.
func (e *Env) await(ch <-chan struct{}, what string) {
	e.T.Helper()
	select {
	case <-ch:
	case <-e.Ctx.Done():
		e.T.Fatalf("not before the test's deadline: %s", what)
	}
}

// notLost fails the test if h's Lost is closed.
func (e *Env) notLost(h *mongolock.Handle, why string) {
	e.T.Helper()
	select {
	case <-h.Lost():
		e.T.Fatal(why)
	default:
	}
}

// requireFree checks that l can be taken at once, and releases it.
func (e *Env) requireFree(l *mongolock.Lock, why string) {
	e.T.Helper()
	h, err := l.TryAcquire(e.Ctx)
	require.NoError(e.T, err, why)
	e.release(h)
}

// ended returns a context that has ended.
func (e *Env) ended() context.Context {
	ctx, cancel := context.WithCancel(e.Ctx)
	cancel()
	return ctx
}

// pollUntil waits until cond holds, or fails the test.
func (e *Env) pollUntil(what string, cond func() bool) {
	e.T.Helper()
	for !cond() {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-e.Ctx.Done():
			e.T.Fatalf("not before the test's deadline: %s", what)
		}
	}
}

// result is an Acquire's outcome, from a goroutine.
type result struct {
	h   *mongolock.Handle
	err error
}

// start runs acquire in a goroutine; its result arrives on the channel.
func start(acquire func() (*mongolock.Handle, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		h, err := acquire()
		ch <- result{h, err}
	}()
	return ch
}

// notYet fails the test if ch has delivered: it must wait.
func (e *Env) notYet(ch <-chan result, what string) {
	e.T.Helper()
	e.Settle()
	select {
	case r := <-ch:
		e.T.Fatalf("%s returned before the release: %v, %v", what, r.h, r.err)
	default:
	}
}

func (e *Env) receive(ch <-chan result) *mongolock.Handle {
	e.T.Helper()
	select {
	case r := <-ch:
		require.NoError(e.T, r.err)
		return r.h
	case <-e.Ctx.Done():
		e.T.Fatal("the waiting Acquire did not return")
		return nil
	}
}

// requireOp checks that err is an *Error of operation op.
func requireOp(t *testing.T, err error, op string) {
	t.Helper()
	var me *mongolock.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, op, me.Op)
}
