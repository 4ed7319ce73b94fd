package mongolock

import (
	"context"
	"errors"
	"sync"
	"time"
	"weak"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A Provider mints named locks that share options and a collection. It is
// safe for concurrent use and cheap to keep for the life of a process;
// inject it where code needs locks.
type Provider struct {
	coll   *mongo.Collection
	opts   config
	shared *collection

	acquireOpts *options.FindOneAndUpdateOptionsBuilder
	// The encoded acquire pipelines of TryAcquire and Acquire, and of a
	// hand-over to an Acquire of this provider (pipeline.go, handoff.go).
	tryPipeline, waitPipeline, handoffPipeline acquireTemplate
}

// NewProvider returns a Provider for locks in db. It validates every option
// and returns an error naming the bad one; it does no I/O. A nil db is an
// error.
func NewProvider(db *mongo.Database, opts ...Option) (*Provider, error) {
	if db == nil {
		return nil, errors.New("mongolock: nil *mongo.Database")
	}
	o, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	shared := collectionFor(db, o.collection)
	f := fairness{proc: shared.id, entryLife: o.waiterLifetime()}
	p := &Provider{
		coll:        db.Collection(o.collection),
		opts:        o,
		shared:      shared,
		acquireOpts: options.FindOneAndUpdate().SetReturnDocument(options.After),
		tryPipeline: newAcquireTemplate(o.expiry, f),
	}
	f.join = true
	p.waitPipeline = newAcquireTemplate(o.expiry, f)
	f.join, f.from = false, "handover"
	p.handoffPipeline = newAcquireTemplate(o.expiry, f)
	return p, nil
}

// New returns the lock called name in db; see NewProvider for the options.
func New(db *mongo.Database, name string, opts ...Option) (*Lock, error) {
	p, err := NewProvider(db, opts...)
	if err != nil {
		return nil, err
	}
	return p.Lock(name), nil
}

// Lock returns the lock called name. Names are arbitrary strings, used as
// the document's _id exactly as given (case-sensitive, not hashed). Locks
// with the same name, collection and database exclude each other, in this
// process and in any other, whichever Provider minted them.
func (p *Provider) Lock(name string) *Lock {
	return &Lock{p: p, name: name}
}

// collection is what every Provider of one client, database and collection
// in this process shares: the TTL index is created once, and waiters for
// one name queue together (queue.go).
type collection struct {
	id        string // this process's id in lock documents (fair.go)
	indexOnce sync.Once
	bg        sync.WaitGroup // background work: index creation, orphan cleanup
	queues    queues
	leases    scheduler
	notify    notifier
}

// collectionKey identifies a collection of one client. The client is held
// weakly, so that the registry does not keep disconnected clients alive.
type collectionKey struct {
	client   weak.Pointer[mongo.Client]
	db, coll string
}

var collections sync.Map // collectionKey -> *collection

func collectionFor(db *mongo.Database, coll string) *collection {
	k := collectionKey{weak.Make(db.Client()), db.Name(), coll}
	if c, ok := collections.Load(k); ok {
		return c.(*collection)
	}
	c, _ := collections.LoadOrStore(k, &collection{id: newLockID()})
	return c.(*collection)
}

// background runs f in a goroutine counted by the collection's WaitGroup,
// with a context that ends after timeout: every such goroutine has an end.
func (p *Provider) background(timeout time.Duration, f func(ctx context.Context)) {
	p.shared.bg.Add(1)
	go func() {
		defer p.shared.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		f(ctx)
	}()
}
