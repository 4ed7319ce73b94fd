package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A child is one soak process: G goroutines that take random locks of the K
// and run a checked critical section on the lock's resource.
type child struct {
	id       string // unique per process started, in resource documents
	uri, db  string
	names    int
	expiry   time.Duration
	hold     time.Duration
	until    time.Time
	dropNext atomic.Int64 // unix nanos of the next client drop; 0: one is under way
	every    time.Duration
	sabotage bool

	res, stats *mongo.Collection // on the checker client, which is never dropped
	gen        atomic.Pointer[generation]
}

// A generation is the client the child's locks use, until it is dropped.
type generation struct {
	client *mongo.Client
	locks  *mongolock.Provider
}

// Fields of a resource document.
const (
	fLast        = "last"    // the greatest token accepted
	fInside      = "inside"  // {tok, proc, dead}: the holder in its critical section
	fEntries     = "entries" // critical sections entered: the trials
	fWrites      = "writes"  // writes accepted
	vOverlap     = "v_overlap"
	vOutOfOrder  = "v_outOfOrder"
	vDisplaced   = "v_displaced"
	vUnsignalled = "v_unsignalled"
)

// Fields of the stats document (statsID): events that are not violations.
const (
	statsID   = "counts"
	sDrops    = "drops"    // clients closed under a held lock
	sFenced   = "fenced"   // writes refused by the fence after the holder learnt of its loss
	sLosses   = "losses"   // handles whose Lost closed
	sTimeouts = "timeouts" // Acquire calls that gave up (20 s)
	sErrors   = "errors"   // other failed calls
)

func lockName(k int) string { return fmt.Sprintf("soak-%d", k) }

func runChild(args []string) error {
	fs := flag.NewFlagSet("soak child", flag.ContinueOnError)
	c := &child{}
	var (
		goroutines int
		until      int64
	)
	fs.StringVar(&c.id, "id", "", "process id in resource documents")
	fs.StringVar(&c.db, "db", "", "database")
	fs.IntVar(&goroutines, "g", 1, "goroutines")
	fs.IntVar(&c.names, "k", 1, "lock names")
	fs.DurationVar(&c.expiry, "expiry", 2*time.Second, "lock expiry")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "longest sleep between writes in a critical section")
	fs.Int64Var(&until, "until", 0, "unix nanos at which to stop acquiring")
	fs.DurationVar(&c.every, "drop-every", 0, "close the client under a held lock this often (0: never)")
	fs.BoolVar(&c.sabotage, "sabotage", false, "release before the critical section (the checks must see it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.uri = os.Getenv(testdb.EnvURI) // the parent's server
	c.until = time.Unix(0, until)

	// The parent holds our stdin: when it goes away, so do we.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintf(os.Stderr, "%s: stdin closed: the parent is gone\n", c.id)
		os.Exit(3)
	}()

	checker, err := mongo.Connect(options.Client().ApplyURI(c.uri))
	if err != nil {
		return err
	}
	defer func() { _ = checker.Disconnect(context.Background()) }()
	c.res = checker.Database(c.db).Collection("soak_resources")
	c.stats = checker.Database(c.db).Collection("soak_stats")
	g, err := c.connect()
	if err != nil {
		return err
	}
	c.gen.Store(g)
	c.scheduleDrop()

	ctx, cancel := context.WithDeadline(context.Background(), c.until)
	defer cancel()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() { c.work(ctx) })
	}
	wg.Wait()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	return c.gen.Load().client.Disconnect(dctx)
}

func (c *child) connect() (*generation, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(c.uri))
	if err != nil {
		return nil, err
	}
	locks, err := mongolock.NewProvider(client.Database(c.db),
		mongolock.WithExpiry(c.expiry), mongolock.WithBusyWaitSleep(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	return &generation{client: client, locks: locks}, nil
}

func (c *child) scheduleDrop() {
	if c.every > 0 {
		d := time.Duration(float64(c.every) * (0.5 + rand.Float64()))
		c.dropNext.Store(time.Now().Add(d).UnixNano())
	}
}

// count adds one to a field of the stats document.
func (c *child) count(field string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.stats.UpdateOne(ctx, bson.D{{Key: "_id", Value: statsID}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: field, Value: 1}}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: counting %s: %v\n", c.id, field, err)
	}
}

// violation adds one to a violation field of resource k.
func (c *child) violation(k int, field string, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: VIOLATION %s on %s: %s\n", c.id, field, lockName(k), fmt.Sprintf(format, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.res.UpdateOne(ctx, bson.D{{Key: "_id", Value: k}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: field, Value: 1}}}}); err != nil {
		fmt.Fprintf(os.Stderr, "%s: counting %s: %v\n", c.id, field, err)
	}
}

// work acquires random locks and runs critical sections until ctx ends.
func (c *child) work(ctx context.Context) {
	errorsLogged := 0
	for ctx.Err() == nil {
		k := rand.IntN(c.names)
		g := c.gen.Load()
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		h, err := g.locks.Lock(lockName(k)).Acquire(actx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // the run is over
		case errors.Is(err, context.DeadlineExceeded):
			c.count(sTimeouts)
			continue
		default:
			if c.gen.Load() == g { // not just a dropped client
				c.count(sErrors)
				if errorsLogged++; errorsLogged <= 3 {
					fmt.Fprintf(os.Stderr, "%s: acquire: %v\n", c.id, err)
				}
			}
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		dropped := c.section(k, h, g)
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = h.Release(rctx)
		rcancel()
		if closed(h.Lost()) {
			c.count(sLosses)
		} else if err != nil && !dropped && c.gen.Load() == g {
			c.count(sErrors)
			fmt.Fprintf(os.Stderr, "%s: release: %v\n", c.id, err)
		}
	}
}

// section is one critical section on resource k under h: enter, write a
// few times, exit, each a conditional write that the server checks. It
// reports whether it dropped the client.
func (c *child) section(k int, h *mongolock.Handle, g *generation) (dropped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok := h.FencingToken()
	me := bson.D{{Key: "tok", Value: tok}, {Key: "proc", Value: c.id}}
	if c.sabotage && rand.IntN(2) == 0 {
		// Work after release: the bug the checks exist to catch.
		_ = h.Release(ctx)
	}

	// Enter: nobody inside (but a holder of a killed process, marked dead),
	// and a token greater than every earlier one.
	free := bson.D{
		{Key: "_id", Value: k},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fInside, Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: fInside + ".dead", Value: true}},
		}},
		{Key: fLast, Value: bson.D{{Key: "$lt", Value: tok}}},
	}
	enter := bson.D{
		{Key: "$set", Value: bson.D{{Key: fInside, Value: me}, {Key: fLast, Value: tok}}},
		{Key: "$inc", Value: bson.D{{Key: fEntries, Value: 1}, {Key: fWrites, Value: 1}}},
	}
	res, err := c.res.UpdateOne(ctx, free, enter)
	if err != nil {
		c.count(sErrors)
		fmt.Fprintf(os.Stderr, "%s: enter: %v\n", c.id, err)
		return false
	}
	if res.MatchedCount == 0 {
		var doc struct {
			Last   int64 `bson:"last"`
			Inside *struct {
				Tok  int64  `bson:"tok"`
				Proc string `bson:"proc"`
				Dead bool   `bson:"dead"`
			} `bson:"inside"`
		}
		if err := c.res.FindOne(ctx, bson.D{{Key: "_id", Value: k}}).Decode(&doc); err != nil {
			c.count(sErrors)
			fmt.Fprintf(os.Stderr, "%s: reading resource: %v\n", c.id, err)
			return false
		}
		if doc.Last >= tok {
			c.violation(k, vOutOfOrder, "token %d acquired after token %d was accepted", tok, doc.Last)
		}
		if doc.Inside != nil && !doc.Inside.Dead {
			c.violation(k, vOverlap, "token %d of %s entered while token %d of %s was inside", tok, c.id, doc.Inside.Tok, doc.Inside.Proc)
		}
		// Enter anyway, so that the run goes on and the displaced holder
		// sees it too.
		force := mongo.Pipeline{{{Key: "$set", Value: bson.D{
			{Key: fInside, Value: bson.D{{Key: "$literal", Value: me}}},
			{Key: fLast, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fLast, tok}}}},
			{Key: fEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fEntries, 1}}}},
		}}}}
		if _, err := c.res.UpdateOne(ctx, bson.D{{Key: "_id", Value: k}}, force); err != nil {
			c.count(sErrors)
			return false
		}
	}

	// Write: accepted only with a token at least the last one, and only
	// while this holder is the one inside.
	mine := bson.D{{Key: "_id", Value: k}, {Key: fInside + ".tok", Value: tok}, {Key: fLast, Value: bson.D{{Key: "$lte", Value: tok}}}}
	displaced := false
	for range 1 + rand.IntN(3) {
		if c.dueToDrop() {
			dropped = true
			c.drop(k, h, g)
		}
		select {
		case <-time.After(rand.N(c.hold + 1)):
		case <-h.Lost():
		}
		if closed(h.Lost()) {
			break // stop work at once: the next holder may come in soon
		}
		res, err := c.res.UpdateOne(ctx, mine, bson.D{{Key: "$inc", Value: bson.D{{Key: fWrites, Value: 1}}}})
		if err != nil {
			c.count(sErrors)
			continue
		}
		if res.MatchedCount == 0 {
			if closed(h.Lost()) {
				c.count(sFenced)
			} else {
				displaced = true
				c.violation(k, vDisplaced, "token %d of %s: a write found someone else inside", tok, c.id)
			}
			break
		}
	}

	// Exit, unless displaced already (counted once).
	if !displaced {
		res, err := c.res.UpdateOne(ctx, bson.D{{Key: "_id", Value: k}, {Key: fInside + ".tok", Value: tok}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fInside, Value: ""}}}})
		switch {
		case err != nil:
			c.count(sErrors)
		case res.MatchedCount == 0:
			c.violation(k, vDisplaced, "token %d of %s: at exit, someone else was inside", tok, c.id)
		}
	}
	return dropped
}

// dueToDrop reports whether this goroutine is to drop the client now; only
// one of the child's goroutines is told so per drop.
func (c *child) dueToDrop() bool {
	next := c.dropNext.Load()
	return next != 0 && time.Now().UnixNano() >= next && c.dropNext.CompareAndSwap(next, 0)
}

// drop closes the client under the held handle h (and under every other
// handle of this child), then waits for h to report the loss, which must
// come before the server lets the next holder in (the next holder would
// find us inside). Other goroutines move to a new client at once.
func (c *child) drop(k int, h *mongolock.Handle, g *generation) {
	defer c.scheduleDrop()
	for {
		next, err := c.connect()
		if err == nil {
			c.gen.Store(next)
			break
		}
		fmt.Fprintf(os.Stderr, "%s: reconnect: %v\n", c.id, err)
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.client.Disconnect(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: disconnect: %v\n", c.id, err)
	}
	c.count(sDrops)
	select {
	case <-h.Lost():
	case <-time.After(2 * c.expiry):
		c.violation(k, vUnsignalled, "token %d of %s: no loss signalled %v after its client was closed", h.FencingToken(), c.id, 2*c.expiry)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
