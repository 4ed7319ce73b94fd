package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A child is one soak process: G goroutines that take random locks,
// semaphore slots and reader-writer locks, and run a checked critical
// section on its resource.
type child struct {
	id       string // unique per process started, in resource documents
	uri, db  string
	names    [numKinds]int // names per kind
	n        int           // a semaphore's slots
	expiry   time.Duration
	hold     time.Duration
	until    time.Time
	dropNext atomic.Int64 // unix nanos of the next client drop; 0: one is under way
	dropKind atomic.Int32 // the kind whose holder the next drop is under
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

// A kind is a primitive the soak exercises.
type kind int

const (
	mutex     kind = iota // Provider.Lock
	semaphore             // Provider.Semaphore
	rwlock                // Provider.RWLock
	numKinds
)

var kindNames = [numKinds]string{"mutex", "semaphore", "rwlock"}

func (kd kind) String() string { return kindNames[kd] }

// A target is what one trial acquires: name k of a kind, for writing (an
// RWLock's writer), with a loop of Try calls or with the waiting call.
type target struct {
	kind  kind
	k     int
	write bool
	try   bool
}

// name is the lock's name, and the _id of its fenced resource.
func (t target) name() string { return lockName(t.kind, t.k) }

func lockName(kd kind, k int) string {
	switch kd {
	case semaphore:
		return fmt.Sprintf("soak-sem-%d", k)
	case rwlock:
		return fmt.Sprintf("soak-rw-%d", k)
	}
	return fmt.Sprintf("soak-%d", k)
}

// Fields of a resource document.
const (
	fKind        = "kind"     // the kind's name
	fLast        = "last"     // the greatest token entered
	fLastWriter  = "lastW"    // an rwlock's: the greatest writer's token entered
	fInside      = "inside"   // a mutex's: {tok, proc, dead}: the holder in its critical section
	fHolders     = "holders"  // a semaphore's or rwlock's: [{tok, proc[, mode]}]: the holders inside
	fEntries     = "entries"  // critical sections entered: the trials
	fWEntries    = "wentries" // an rwlock's: the entries of writers
	fWrites      = "writes"   // writes accepted
	fPeak        = "peak"     // a semaphore's or rwlock's: the most holders inside at once
	fKilled      = "killed"   // holders inside a child when it was SIGKILLed
	fDropped     = "dropped"  // holders whose client was closed under them
	vOverlap     = "v_overlap"
	vOutOfOrder  = "v_outOfOrder"
	vDisplaced   = "v_displaced"
	vUnsignalled = "v_unsignalled"
)

// Fields of the stats document (statsID): events that are not violations.
const (
	statsID   = "counts"
	sFenced   = "fenced"   // writes refused by the fence after the holder learnt of its loss
	sLosses   = "losses"   // handles whose Lost closed
	sTimeouts = "timeouts" // Acquire calls that gave up (20 s)
	sErrors   = "errors"   // other failed calls
	sKilled   = "killed"   // the ids of the SIGKILLed children
)

func runChild(args []string) error {
	fs := flag.NewFlagSet("soak child", flag.ContinueOnError)
	c := &child{}
	var (
		goroutines, dropKind int
		until                int64
	)
	fs.StringVar(&c.id, "id", "", "process id in resource documents")
	fs.StringVar(&c.db, "db", "", "database")
	fs.IntVar(&goroutines, "g", 1, "goroutines")
	fs.IntVar(&c.names[mutex], "k", 1, "mutex names")
	fs.IntVar(&c.names[semaphore], "ks", 0, "semaphore names")
	fs.IntVar(&c.names[rwlock], "kr", 0, "rwlock names")
	fs.IntVar(&c.n, "n", 1, "a semaphore's slots")
	fs.DurationVar(&c.expiry, "expiry", 2*time.Second, "lock expiry")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "longest sleep between writes in a critical section")
	fs.Int64Var(&until, "until", 0, "unix nanos at which to stop acquiring")
	fs.DurationVar(&c.every, "drop-every", 0, "close the client under a held lock this often (0: never)")
	fs.IntVar(&dropKind, "drop-kind", 0, "close it first under a holder of this kind (0 mutex, 1 semaphore, 2 rwlock), then of the next in turn")
	fs.BoolVar(&c.sabotage, "sabotage", false, "release before the critical section (the checks must see it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(c.kinds()) == 0 {
		return errors.New("no names")
	}
	c.dropKind.Store(int32(c.nextKind(kind(dropKind))))
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

// kinds returns the kinds that have names.
func (c *child) kinds() []kind {
	var ks []kind
	for kd := range numKinds {
		if c.names[kd] > 0 {
			ks = append(ks, kd)
		}
	}
	return ks
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

// scheduleDrop sets the time of the next drop.
func (c *child) scheduleDrop() {
	if c.every > 0 {
		d := time.Duration(float64(c.every) * (0.5 + rand.Float64()))
		c.dropNext.Store(time.Now().Add(d).UnixNano())
	}
}

// nextKind returns the first kind from kd on, in turn, that has names.
func (c *child) nextKind(kd kind) kind {
	for c.names[kd%numKinds] == 0 {
		kd++
	}
	return kd % numKinds
}

// count adds one to a field of the stats document.
func (c *child) count(field string) {
	c.add(c.stats, statsID, field, true)
}

// add adds one to a field of document id of coll.
func (c *child) add(coll *mongo.Collection, id, field string, upsert bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: field, Value: 1}}}}, options.UpdateOne().SetUpsert(upsert))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: counting %s: %v\n", c.id, field, err)
	}
}

// violation adds one to a violation field of t's resource.
func (c *child) violation(t target, field string, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: VIOLATION %s on %s: %s\n", c.id, field, t.name(), fmt.Sprintf(format, args...))
	c.add(c.res, t.name(), field, false)
}

// pick chooses the next trial: a kind, then one of its names; an rwlock's
// holder writes one time in three, and one acquisition in four loops on
// the Try call.
func (c *child) pick() target {
	ks := c.kinds()
	kd := ks[rand.IntN(len(ks))]
	return target{kind: kd, k: rand.IntN(c.names[kd]), write: kd == rwlock && rand.IntN(3) == 0, try: rand.IntN(4) == 0}
}

// acquire takes t with g's provider, waiting until ctx ends.
func (c *child) acquire(ctx context.Context, g *generation, t target) (*mongolock.Handle, error) {
	var try, wait func(context.Context) (*mongolock.Handle, error)
	switch t.kind {
	case mutex:
		l := g.locks.Lock(t.name())
		try, wait = l.TryAcquire, l.Acquire
	case semaphore:
		s := g.locks.Semaphore(t.name(), c.n)
		try, wait = s.TryAcquire, s.Acquire
	case rwlock:
		l := g.locks.RWLock(t.name()).Reader()
		if t.write {
			l = g.locks.RWLock(t.name()).Writer()
		}
		try, wait = l.TryAcquire, l.Acquire
	}
	if !t.try {
		return wait(ctx)
	}
	for {
		h, err := try(ctx)
		if !errors.Is(err, mongolock.ErrNotAcquired) {
			return h, err
		}
		sleep(ctx, 10*time.Millisecond+rand.N(20*time.Millisecond))
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		}
	}
}

// work acquires random targets and runs critical sections until ctx ends.
func (c *child) work(ctx context.Context) {
	errorsLogged := 0
	for ctx.Err() == nil {
		t := c.pick()
		g := c.gen.Load()
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		// A semaphore's holders enter in any order: the token to outrank is
		// the last one entered before this acquisition began.
		var floor int64
		var err error
		if t.kind == semaphore {
			floor, err = c.lastEntered(actx, t)
		}
		var h *mongolock.Handle
		if err == nil {
			h, err = c.acquire(actx, g, t)
		}
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
					fmt.Fprintf(os.Stderr, "%s: acquire %s: %v\n", c.id, t.name(), err)
				}
			}
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		dropped := c.section(t, floor, h, g)
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

// lastEntered reads the greatest token entered into t's resource.
func (c *child) lastEntered(ctx context.Context, t target) (int64, error) {
	var doc struct {
		Last int64 `bson:"last"`
	}
	err := c.res.FindOne(ctx, bson.D{{Key: "_id", Value: t.name()}}).Decode(&doc)
	return doc.Last, err
}

// section is one critical section on t's resource under h: enter, write a
// few times, exit, each a conditional write that the server checks. floor
// is a semaphore's last token entered before h was acquired. It reports
// whether it dropped the client.
func (c *child) section(t target, floor int64, h *mongolock.Handle, g *generation) (dropped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok := h.FencingToken()
	if closed(h.Lost()) {
		return false // lost before it began: nothing to protect
	}
	if c.sabotage && rand.IntN(2) == 0 {
		// Work after release: the bug the checks exist to catch.
		_ = h.Release(ctx)
	}
	if t.kind == semaphore && tok <= floor {
		c.violation(t, vOutOfOrder, "token %d acquired after token %d had entered", tok, floor)
	}
	var entered bool
	if t.kind == mutex {
		entered = c.enterMutex(ctx, t, tok)
	} else {
		entered = c.enterShared(ctx, t, tok)
	}
	if !entered {
		return false
	}

	// Write: accepted only while this holder is inside, and for a mutex
	// or an rwlock only with a token at least the last one entered (of a
	// writer, for a reader).
	mine := bson.D{{Key: "_id", Value: t.name()}, {Key: fInside + ".tok", Value: tok}, {Key: fLast, Value: bson.D{{Key: "$lte", Value: tok}}}}
	if t.kind != mutex {
		mine = bson.D{{Key: "_id", Value: t.name()}, {Key: fHolders + ".tok", Value: tok}}
		if t.kind == rwlock {
			mine = append(mine, bson.E{Key: t.fence(), Value: bson.D{{Key: "$lte", Value: tok}}})
		}
	}
	displaced := false
	for range 1 + rand.IntN(3) {
		if c.dueToDrop(t) {
			dropped = true
			c.drop(t, h, g)
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
				c.violation(t, vDisplaced, "token %d of %s: a write found someone else inside", tok, c.id)
			}
			break
		}
	}

	// Exit, unless a mutex's holder displaced already (counted once); a
	// semaphore's or rwlock's takes itself out of the holders still.
	if !displaced || t.kind != mutex {
		filter := bson.D{{Key: "_id", Value: t.name()}, {Key: fInside + ".tok", Value: tok}}
		exit := bson.D{{Key: "$unset", Value: bson.D{{Key: fInside, Value: ""}}}}
		if t.kind != mutex {
			filter = bson.D{{Key: "_id", Value: t.name()}, {Key: fHolders + ".tok", Value: tok}}
			exit = bson.D{{Key: "$pull", Value: bson.D{{Key: fHolders, Value: bson.D{{Key: "tok", Value: tok}}}}}}
		}
		res, err := c.res.UpdateOne(ctx, filter, exit)
		switch {
		case err != nil:
			c.count(sErrors)
		case res.MatchedCount == 0 && !displaced:
			c.violation(t, vDisplaced, "token %d of %s: at exit, someone else was inside", tok, c.id)
		}
	}
	return dropped
}

// mode is an rwlock holder's mode in its resource: "w" for a writer, "r"
// for a reader; "" for other kinds.
func (t target) mode() string {
	switch {
	case t.kind != rwlock:
		return ""
	case t.write:
		return "w"
	}
	return "r"
}

// role names an rwlock holder's mode, for messages.
func role(mode string) string {
	return map[string]string{"r": " (reader)", "w": " (writer)"}[mode]
}

// fence is the field of an rwlock's resource that its holder's token must
// outrank: the last token entered for a writer, the last writer's for a
// reader (readers enter in any order).
func (t target) fence() string {
	if t.write {
		return fLast
	}
	return fLastWriter
}

// enterMutex enters a mutex's resource: nobody inside (but a holder of a
// killed process, marked dead), and a token greater than every earlier
// one. It reports whether it entered.
func (c *child) enterMutex(ctx context.Context, t target, tok int64) bool {
	me := bson.D{{Key: "tok", Value: tok}, {Key: "proc", Value: c.id}}
	free := bson.D{
		{Key: "_id", Value: t.name()},
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
	if ok, err := c.tryEnter(ctx, t, free, enter); ok || err != nil {
		return ok
	}
	var doc struct {
		Last   int64 `bson:"last"`
		Inside *struct {
			Tok  int64  `bson:"tok"`
			Proc string `bson:"proc"`
			Dead bool   `bson:"dead"`
		} `bson:"inside"`
	}
	if !c.readResource(ctx, t, &doc) {
		return false
	}
	if doc.Last >= tok {
		c.violation(t, vOutOfOrder, "token %d acquired after token %d was accepted", tok, doc.Last)
	}
	if doc.Inside != nil && !doc.Inside.Dead {
		c.violation(t, vOverlap, "token %d of %s entered while token %d of %s was inside", tok, c.id, doc.Inside.Tok, doc.Inside.Proc)
	}
	// Enter anyway, so that the run goes on and the displaced holder
	// sees it too.
	force := mongo.Pipeline{{{Key: "$set", Value: bson.D{
		{Key: fInside, Value: bson.D{{Key: "$literal", Value: me}}},
		{Key: fLast, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fLast, tok}}}},
		{Key: fEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fEntries, 1}}}},
	}}}}
	if _, err := c.res.UpdateOne(ctx, bson.D{{Key: "_id", Value: t.name()}}, force); err != nil {
		c.count(sErrors)
		return false
	}
	return true
}

// tryEnter sends the entry (filter, update) into t's resource, and again
// once if the holders of killed processes were in the way (reap). It
// reports whether it entered, or the error that it counted.
func (c *child) tryEnter(ctx context.Context, t target, filter bson.D, update any) (bool, error) {
	for tries := 1; ; tries++ {
		res, err := c.res.UpdateOne(ctx, filter, update)
		if err != nil {
			c.count(sErrors)
			fmt.Fprintf(os.Stderr, "%s: enter: %v\n", c.id, err)
			return false, err
		}
		if res.MatchedCount == 1 || tries == 2 || !c.reap(ctx, t) {
			return res.MatchedCount == 1, nil
		}
	}
}

// readResource decodes t's resource into doc, or counts the error.
func (c *child) readResource(ctx context.Context, t target, doc any) bool {
	err := c.res.FindOne(ctx, bson.D{{Key: "_id", Value: t.name()}}).Decode(doc)
	if err != nil {
		c.count(sErrors)
		fmt.Fprintf(os.Stderr, "%s: reading resource: %v\n", c.id, err)
	}
	return err == nil
}

// enterShared enters a semaphore's or an rwlock's resource, adding this
// holder to those inside, if the server finds that it may:
//
//   - a semaphore's: fewer than n inside (the killed are taken out), and
//     none with this token;
//   - an rwlock reader's: no writer inside, and a token greater than the
//     last writer's entered;
//   - an rwlock writer's: nobody inside, and a token greater than the last
//     one entered.
//
// A refusal is a violation: it is counted, and the holder enters anyway.
// It reports whether it entered.
func (c *child) enterShared(ctx context.Context, t target, tok int64) bool {
	me := bson.D{{Key: "tok", Value: tok}, {Key: "proc", Value: c.id}}
	may := bson.D{{Key: "_id", Value: t.name()}}
	switch {
	case t.kind == semaphore:
		may = append(may,
			bson.E{Key: fHolders + "." + strconv.Itoa(c.n-1), Value: bson.D{{Key: "$exists", Value: false}}},
			bson.E{Key: fHolders + ".tok", Value: bson.D{{Key: "$ne", Value: tok}}})
	case t.write:
		may = append(may, bson.E{Key: fHolders, Value: bson.D{{Key: "$size", Value: 0}}})
	default:
		may = append(may, bson.E{Key: fHolders + ".mode", Value: bson.D{{Key: "$ne", Value: "w"}}})
	}
	if t.kind == rwlock {
		me = append(me, bson.E{Key: "mode", Value: t.mode()})
		may = append(may, bson.E{Key: t.fence(), Value: bson.D{{Key: "$lt", Value: tok}}})
	}
	holders := bson.D{{Key: "$ifNull", Value: bson.A{"$" + fHolders, bson.A{}}}}
	set := bson.D{
		{Key: fHolders, Value: bson.D{{Key: "$concatArrays", Value: bson.A{holders, bson.A{bson.D{{Key: "$literal", Value: me}}}}}}},
		{Key: fLast, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fLast, tok}}}},
		{Key: fEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fEntries, 1}}}},
		{Key: fWrites, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fWrites, 1}}}},
		{Key: fPeak, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fPeak, bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$size", Value: holders}}, 1}}}}}}},
	}
	if t.write {
		set = append(set,
			bson.E{Key: fLastWriter, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fLastWriter, tok}}}},
			bson.E{Key: fWEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fWEntries, 1}}}})
	}
	enter := mongo.Pipeline{{{Key: "$set", Value: set}}}
	if ok, err := c.tryEnter(ctx, t, may, enter); ok || err != nil {
		return ok
	}
	// Refused: read why. The tokens only grow, so a token refused is still
	// refused; the holders may have left meanwhile.
	var doc struct {
		Last       int64 `bson:"last"`
		LastWriter int64 `bson:"lastW"`
		Holders    []struct {
			Tok  int64  `bson:"tok"`
			Proc string `bson:"proc"`
			Mode string `bson:"mode"`
		} `bson:"holders"`
	}
	if !c.readResource(ctx, t, &doc) {
		return false
	}
	var inside []string
	dup := false
	for _, in := range doc.Holders {
		inside = append(inside, fmt.Sprintf("%d of %s%s", in.Tok, in.Proc, role(in.Mode)))
		dup = dup || in.Tok == tok
	}
	who := fmt.Sprintf("token %d of %s%s", tok, c.id, role(t.mode()))
	switch {
	case t.kind == semaphore && dup:
		c.violation(t, vOutOfOrder, "%s entered while a holder with the same token was inside", who)
	case t.kind == rwlock && t.write && doc.Last >= tok:
		c.violation(t, vOutOfOrder, "%s acquired after token %d had entered", who, doc.Last)
	case t.kind == rwlock && !t.write && doc.LastWriter >= tok:
		c.violation(t, vOutOfOrder, "%s acquired after writer's token %d had entered", who, doc.LastWriter)
	case t.kind == semaphore:
		c.violation(t, vOverlap, "%s entered while %d of %d slots were taken, now: [%s]", who, c.n, c.n, strings.Join(inside, ", "))
	default:
		c.violation(t, vOverlap, "%s entered while a conflicting holder was inside, now: [%s]", who, strings.Join(inside, ", "))
	}
	// Enter anyway, so that the run goes on and those inside see it too.
	if _, err := c.res.UpdateOne(ctx, bson.D{{Key: "_id", Value: t.name()}}, enter); err != nil {
		c.count(sErrors)
		return false
	}
	return true
}

// markDead takes the holders of the killed processes procs out of the
// resources of kind kd that filter matches (a mutex's holder is marked
// dead), counts them as killed, and returns how many resources it changed.
func markDead(ctx context.Context, res *mongo.Collection, kd kind, filter bson.D, procs bson.A) (int64, error) {
	in := bson.D{{Key: "$in", Value: procs}}
	var update bson.D
	if kd == mutex {
		filter = append(filter, bson.E{Key: fInside + ".proc", Value: in}, bson.E{Key: fInside + ".dead", Value: bson.D{{Key: "$ne", Value: true}}})
		update = bson.D{{Key: "$set", Value: bson.D{{Key: fInside + ".dead", Value: true}}}}
	} else {
		filter = append(filter, bson.E{Key: fHolders + ".proc", Value: in})
		update = bson.D{{Key: "$pull", Value: bson.D{{Key: fHolders, Value: bson.D{{Key: "proc", Value: in}}}}}}
	}
	update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: fKilled, Value: 1}}})
	r, err := res.UpdateMany(ctx, filter, update)
	if err != nil {
		return 0, err
	}
	return r.ModifiedCount, nil
}

// reap takes the holders of killed processes out of t's resource, for an
// entrant that was refused: it reports whether there were any, and the
// entrant is to try again.
func (c *child) reap(ctx context.Context, t target) bool {
	var stats struct {
		Killed bson.A `bson:"killed"`
	}
	err := c.stats.FindOne(ctx, bson.D{{Key: "_id", Value: statsID}}).Decode(&stats)
	if err != nil || len(stats.Killed) == 0 {
		return false // none killed yet (ErrNoDocuments), or an error: the caller's read tells
	}
	n, err := markDead(ctx, c.res, t.kind, bson.D{{Key: "_id", Value: t.name()}}, stats.Killed)
	return err == nil && n > 0
}

// dueToDrop reports whether this goroutine, holding t, is to drop the
// client now: drops take the kinds in turn, and only one of the child's
// goroutines is told so per drop.
func (c *child) dueToDrop(t target) bool {
	next := c.dropNext.Load()
	return next != 0 && kind(c.dropKind.Load()) == t.kind && time.Now().UnixNano() >= next && c.dropNext.CompareAndSwap(next, 0)
}

// drop closes the client under the held handle h of t (and under every
// other handle of this child), then waits for h to report the loss, which
// must come before the server lets the next holder in (the next holder
// would find us inside: with a semaphore, one holder too many). Other
// goroutines move to a new client at once.
func (c *child) drop(t target, h *mongolock.Handle, g *generation) {
	defer c.scheduleDrop()
	c.dropKind.Store(int32(c.nextKind(t.kind + 1)))
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
	c.add(c.res, t.name(), fDropped, false)
	select {
	case <-h.Lost():
	case <-time.After(2 * c.expiry):
		c.violation(t, vUnsignalled, "token %d of %s: no loss signalled %v after its client was closed", h.FencingToken(), c.id, 2*c.expiry)
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
