package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/soakcheck"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A child is one soak process: G goroutines that take random locks,
// semaphore slots, reader-writer locks and elections' leaderships, and run
// a checked critical section on its resource.
type child struct {
	id        string // unique per process started, in resource documents
	uri, db   string
	names     [numKinds]int // names per kind
	n         int           // a semaphore's slots
	expiry    time.Duration // this process's; others may have another
	cadence   time.Duration // the extension cadence (0: the library's default)
	hold      time.Duration
	longHold  time.Duration // the longest of the long holder's critical sections (0: no long holder)
	giveUp    time.Duration // an acquisition gives up after this long
	until     time.Time
	dropNext  atomic.Int64  // unix nanos of the next client drop; 0: one is under way
	dropKinds atomic.Uint32 // the kinds (bits) a holder of which the next drop may be under
	dropKnown atomic.Bool   // dropKinds are chosen (else they are when the drop falls due)
	every     time.Duration
	sabotage  bool

	res, stats *mongo.Collection // on the checker client, which is never dropped
	gen        atomic.Pointer[generation]
}

// A generation is the client the child's locks use, until it is dropped.
type generation struct {
	client *mongo.Client
	locks  *mongolock.Provider
}

// A kind is a primitive the soak exercises (soakcheck.Kind).
type kind = soakcheck.Kind

const (
	mutex     = soakcheck.Mutex
	semaphore = soakcheck.Semaphore
	rwlock    = soakcheck.RWLock
	election  = soakcheck.Election
	numKinds  = soakcheck.NumKinds
)

var kindNames = soakcheck.KindNames

// A target is what one trial acquires: name k of a kind, for writing (an
// RWLock's writer), with a loop of Try calls or with the waiting call, for
// a long critical section or not.
type target struct {
	kind  kind
	k     int
	write bool
	// upgrade: the writer is an upgradeable reader that Upgrade made the
	// writer (half of the writers)
	upgrade bool
	try     bool
	long    bool
}

// name is the lock's name, and the _id of its fenced resource.
func (t target) name() string { return lockName(t.kind, t.k) }

func lockName(kd kind, k int) string {
	switch kd {
	case semaphore:
		return fmt.Sprintf("soak-sem-%d", k)
	case rwlock:
		return fmt.Sprintf("soak-rw-%d", k)
	case election:
		return fmt.Sprintf("soak-el-%d", k)
	}
	return fmt.Sprintf("soak-%d", k)
}

// Fields of a resource document.
const (
	fKind        = "kind"     // the kind's name
	fLast        = "last"     // the greatest token entered
	fLastWriter  = "lastW"    // an rwlock's: the greatest writer's token entered
	fInside      = "inside"   // a mutex's or election's: {tok, proc, dead}: the holder in its critical section
	fHolders     = "holders"  // a semaphore's or rwlock's: [{tok, proc[, mode]}]: the holders inside
	fEntries     = "entries"  // critical sections entered: the trials
	fWEntries    = "wentries" // an rwlock's: the entries of writers
	fUEntries    = "uentries" // an rwlock's: the entries of writers that upgraded
	fWrites      = "writes"   // writes accepted
	fPeak        = "peak"     // a semaphore's or rwlock's: the most holders inside at once
	fKilled      = "killed"   // holders inside a child when it was SIGKILLed
	fDropped     = "dropped"  // holders whose client was closed under them
	fMaxWait     = "maxWait"  // the longest wait of an acquisition that got its handle, in ns
	fMaxWaitW    = "maxWaitW" // an rwlock's: the longest of a writer's
	fMaxUnfin    = "maxUnfin" // the longest wait of one that never did: it gave up, or the run ended
	fGaveUp      = "gaveUp"   // acquisitions that gave up (-give-up)
	vOverlap     = "v_overlap"
	vOutOfOrder  = "v_outOfOrder"
	vDisplaced   = "v_displaced"
	vUnsignalled = "v_unsignalled"
	vVanished    = "v_vanished"
)

// Fields of the stats document (statsID): events that are not violations.
const (
	statsID = "counts"
	sFenced = "fenced" // writes refused by the fence after the holder learnt of its loss
	sLosses = "losses" // handles whose Lost closed
	sErrors = "errors" // failed calls
	sKilled = "killed" // the ids of the SIGKILLed children
)

// num is a counter of a resource document, whichever number type BSON
// decoded it as.
func num(v any) int64 {
	switch n := v.(type) {
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

// runChild runs a soak child as the parent's flags say, until the run's
// end or its parent's.
func runChild(args []string) error {
	c, goroutines, err := parseChildFlags(args)
	if err != nil {
		return err
	}
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
		wg.Go(func() { c.work(ctx, false) })
	}
	if c.longHold > 0 && c.names[semaphore]+c.names[rwlock] > 0 {
		wg.Go(func() { c.work(ctx, true) })
	}
	wg.Wait()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	return c.gen.Load().client.Disconnect(dctx)
}

// parseChildFlags reads the flags the parent gives a child: the child, and
// how many goroutines it runs.
func parseChildFlags(args []string) (c *child, goroutines int, err error) {
	fs := flag.NewFlagSet("soak child", flag.ContinueOnError)
	c = &child{}
	var until int64
	fs.StringVar(&c.id, "id", "", "process id in resource documents")
	fs.StringVar(&c.db, "db", "", "database")
	fs.IntVar(&goroutines, "g", 1, "goroutines")
	fs.IntVar(&c.names[mutex], "k", 1, "mutex names")
	fs.IntVar(&c.names[semaphore], "ks", 0, "semaphore names")
	fs.IntVar(&c.names[rwlock], "kr", 0, "rwlock names")
	fs.IntVar(&c.names[election], "ke", 0, "election names")
	fs.IntVar(&c.n, "n", 1, "a semaphore's slots")
	fs.DurationVar(&c.expiry, "expiry", 2*time.Second, "lock expiry")
	fs.DurationVar(&c.cadence, "cadence", 0, "extension cadence (0: the library's default)")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "longest sleep between writes in a critical section")
	fs.DurationVar(&c.longHold, "long-hold", 0, "a goroutine more holds semaphore slots and rwlock read locks for up to this long each (0: none)")
	fs.DurationVar(&c.giveUp, "give-up", 20*time.Second, "an acquisition gives up after this long")
	fs.Int64Var(&until, "until", 0, "unix nanos at which to stop acquiring")
	fs.DurationVar(&c.every, "drop-every", 0, "close the client under a held lock this often (0: never)")
	fs.BoolVar(&c.sabotage, "sabotage", false, "release before the critical section (the checks must see it)")
	if err := fs.Parse(args); err != nil {
		return nil, 0, err
	}
	if len(c.kinds()) == 0 {
		return nil, 0, errors.New("no names")
	}
	c.uri = os.Getenv(testdb.EnvURI) // the parent's server
	c.until = time.Unix(0, until)
	return c, goroutines, nil
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

// providerOptions are the options of a child's providers: its expiry, and
// its extension cadence if not 0 (else the library's default).
func providerOptions(expiry, cadence time.Duration) []mongolock.Option {
	opts := []mongolock.Option{mongolock.WithExpiry(expiry), mongolock.WithBusyWaitSleep(10*time.Millisecond, 200*time.Millisecond)}
	if cadence != 0 {
		opts = append(opts, mongolock.WithExtensionCadence(cadence))
	}
	return opts
}

func (c *child) connect() (*generation, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(c.uri))
	if err != nil {
		return nil, err
	}
	locks, err := mongolock.NewProvider(client.Database(c.db), providerOptions(c.expiry, c.cadence)...)
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

// leastDropped returns the kinds (bits) whose holders were closed under
// least so far, by every child (as the parent picks its SIGKILLs'
// victims), so that drops reach every kind whichever children are killed.
// It is read when a drop falls due: by the time a drop scheduled earlier
// comes, others have dropped meanwhile.
func (c *child) leastDropped() uint32 {
	var dropped [numKinds]int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := c.res.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: fKind, Value: 1}, {Key: fDropped, Value: 1}}))
	var docs []bson.M
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil { // the drop goes on, under any kind
		fmt.Fprintf(os.Stderr, "%s: reading the drops: %v\n", c.id, err)
	}
	for _, d := range docs {
		name, _ := d[fKind].(string)
		if kd := slices.Index(kindNames[:], name); kd >= 0 {
			dropped[kd] += num(d[fDropped])
		}
	}
	var bits uint32
	for _, kd := range soakcheck.LeastHit(dropped, c.names) {
		bits |= 1 << kd
	}
	return bits
}

// count adds one to a field of the stats document.
func (c *child) count(field string) {
	c.add(c.stats, statsID, field, true)
}

// add adds one to a field of document id of coll.
func (c *child) add(coll *mongo.Collection, id, field string, upsert bool) {
	c.update(coll, id, bson.D{{Key: "$inc", Value: bson.D{{Key: field, Value: 1}}}}, upsert)
}

// update applies update to document id of coll.
func (c *child) update(coll *mongo.Collection, id string, update bson.D, upsert bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update, options.UpdateOne().SetUpsert(upsert))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v: %v\n", c.id, update, err)
	}
}

// violation adds one to a violation field of t's resource.
func (c *child) violation(t target, field string, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: VIOLATION %s on %s: %s\n", c.id, field, t.name(), fmt.Sprintf(format, args...))
	c.add(c.res, t.name(), field, false)
}

// pick chooses the next trial: a kind, then one of its names; an rwlock's
// holder writes one time in three (half of the writers as an upgradeable
// reader that upgrades), and one acquisition in four loops on
// the Try call (an election has none: it campaigns). A long holder's is a
// slot of the first semaphore or a read lock of the first rwlock, taken by
// the waiting call: the long holders of every process meet there, and the
// other names stay quick.
func (c *child) pick(long bool) target {
	ks := c.kinds()
	if long {
		ks = slices.DeleteFunc(ks, func(kd kind) bool { return kd.Single() })
		return target{kind: ks[rand.IntN(len(ks))], long: true}
	}
	kd := ks[rand.IntN(len(ks))]
	write := kd == rwlock && rand.IntN(3) == 0
	return target{kind: kd, k: rand.IntN(c.names[kd]), write: write, upgrade: write && rand.IntN(2) == 0, try: kd != election && rand.IntN(4) == 0}
}

// acquire takes t with g's provider, waiting until ctx ends; an election's
// leadership is returned too.
func (c *child) acquire(ctx context.Context, g *generation, t target) (*mongolock.Handle, *mongolock.Leadership, error) {
	tr := soakcheck.Trial{Kind: t.kind, Name: t.name(), Write: t.write, Upgrade: t.upgrade, Try: t.try}
	return soakcheck.Acquire(ctx, g.locks, tr, c.id, c.n, func() time.Duration { return 10*time.Millisecond + rand.N(20*time.Millisecond) })
}

// work acquires random targets and runs critical sections until ctx ends.
// A long holder (long) takes only targets for long critical sections.
func (c *child) work(ctx context.Context, long bool) {
	errorsLogged := 0
	for ctx.Err() == nil {
		t := c.pick(long)
		g := c.gen.Load()
		actx, cancel := context.WithTimeout(ctx, c.giveUp)
		// A semaphore's holders enter in any order: the token to outrank is
		// the last one entered before this acquisition began.
		var floor int64
		var err error
		if t.kind == semaphore {
			floor, err = c.lastEntered(actx, t)
		}
		var (
			h      *mongolock.Handle
			lead   *mongolock.Leadership
			waited time.Duration // from the call (a Try loop's first) to the handle
		)
		if err == nil {
			start := time.Now()
			h, lead, err = c.acquire(actx, g, t)
			waited = time.Since(start)
		}
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			c.unfinished(t, waited, false)
			return // the run is over
		case errors.Is(err, context.DeadlineExceeded):
			c.unfinished(t, waited, true)
			continue
		default:
			if c.gen.Load() == g { // not just a dropped client
				c.count(sErrors)
				if errorsLogged++; errorsLogged <= 3 {
					fmt.Fprintf(os.Stderr, "%s: acquire %s: %v\n", c.id, t.name(), err)
				}
			}
			soakcheck.Sleep(ctx, 20*time.Millisecond)
			continue
		}
		dropped := c.section(t, floor, waited, h, lead, g)
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = h.Release(rctx)
		rcancel()
		if soakcheck.Closed(h.Lost()) {
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

// unfinished records on t's resource an acquisition that never got its
// handle after waiting so long: it gave up (counted), or the run ended.
func (c *child) unfinished(t target, waited time.Duration, gaveUp bool) {
	update := bson.D{{Key: "$max", Value: bson.D{{Key: fMaxUnfin, Value: waited.Nanoseconds()}}}}
	if gaveUp {
		update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: fGaveUp, Value: 1}}})
	}
	c.update(c.res, t.name(), update, false)
}

// waitField is the field of t's resource that keeps its longest wait.
func (t target) waitField() string {
	if t.write {
		return fMaxWaitW
	}
	return fMaxWait
}

// section is one critical section on t's resource under h: enter, write a
// few times, exit, each a conditional write that the server checks. floor
// is a semaphore's last token entered before h was acquired; waited is how
// long the acquisition waited, recorded as the section enters; lead is an
// election's leadership, checked before the first write. It reports
// whether it dropped the client.
//
// A long holder's section lasts from half -long-hold to -long-hold:
// holders of different expiries share a semaphore's or an rwlock's
// document, and one of a long expiry must outlast the extensions of one of
// a short expiry (other sections last a few round trips; long ones of
// exclusive holders would only block their names). Before each of its
// writes, the long holder reads the lock's own document, which must show
// it holding until it is told of a loss.
func (c *child) section(t target, floor int64, waited time.Duration, h *mongolock.Handle, lead *mongolock.Leadership, g *generation) (dropped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok := h.FencingToken()
	if !c.enter(ctx, t, tok, floor, waited, h) {
		return false
	}
	dropped, displaced := c.writeInside(ctx, t, tok, h, lead, g)
	// Exit, unless a mutex's or an election's holder displaced already
	// (counted once); a semaphore's or rwlock's takes itself out of the
	// holders still.
	if !displaced || !t.kind.Single() {
		c.exit(ctx, t, tok, displaced)
	}
	return dropped
}

// enter enters t's resource with h's token tok, unless h was lost before
// it began; floor and waited are section's. It reports whether it
// entered.
func (c *child) enter(ctx context.Context, t target, tok, floor int64, waited time.Duration, h *mongolock.Handle) bool {
	if soakcheck.Closed(h.Lost()) {
		// Lost before it began: nothing to protect, but it did wait.
		c.update(c.res, t.name(), bson.D{{Key: "$max", Value: bson.D{{Key: t.waitField(), Value: waited.Nanoseconds()}}}}, false)
		return false
	}
	if c.sabotage && rand.IntN(2) == 0 {
		// Work after release: the bug the checks exist to catch.
		_ = h.Release(ctx)
	}
	if t.kind == semaphore && tok <= floor {
		c.violation(t, vOutOfOrder, "token %d acquired after token %d had entered", tok, floor)
	}
	if t.kind.Single() {
		return c.enterSingle(ctx, t, tok, waited)
	}
	return c.enterShared(ctx, t, tok, waited)
}

// writeInside writes to t's resource, inside it with token tok, a few
// times (a long holder's for its length), dropping the client when a drop
// is due, and checking the lock's own document before each write. It
// stops at h's loss, at a violation, and at a write refused. It reports
// whether it dropped the client, and whether a write found another holder
// inside.
func (c *child) writeInside(ctx context.Context, t target, tok int64, h *mongolock.Handle, lead *mongolock.Leadership, g *generation) (dropped, displaced bool) {
	writes, pause, end := c.length(t)
	for i := 0; i < writes || time.Now().Before(end); i++ {
		if c.dueToDrop(t) {
			dropped = true
			c.drop(t, h, g)
		}
		select {
		case <-time.After(rand.N(pause + 1)):
		case <-h.Lost():
		}
		if soakcheck.Closed(h.Lost()) {
			break // stop work at once: the next holder may come in soon
		}
		// A violation of either check was counted: stop, and exit.
		if c.check(ctx, t, h, i == 0, lead, g) || soakcheck.Closed(h.Lost()) {
			break // a violation counted, or told of a loss meanwhile
		}
		if refused, displaced := c.write(ctx, t, tok, h); refused {
			return dropped, displaced
		}
	}
	return dropped, false
}

// length is how long t's section writes: at least writes times, each
// after a pause of up to pause, and until end.
func (c *child) length(t target) (writes int, pause time.Duration, end time.Time) {
	writes, pause = 1+rand.IntN(3), c.hold
	if t.long {
		// Long enough to be extended, and to outlast another process's
		// shorter lease; over when the run is.
		end = time.Now().Add(c.longHold/2 + rand.N(c.longHold/2+1))
		if end.After(c.until) {
			end = c.until
		}
		pause = 100 * time.Millisecond
	}
	return writes, pause, end
}

// write writes once to t's resource: accepted only while this holder is
// inside, and for a mutex, an election or an rwlock only with a token at
// least the last one entered (of a writer, for a reader). It reports
// whether the write was refused, and whether that was a violation:
// another holder inside while h was not told of a loss.
func (c *child) write(ctx context.Context, t target, tok int64, h *mongolock.Handle) (refused, displaced bool) {
	mine := bson.D{{Key: "_id", Value: t.name()}, {Key: fInside + ".tok", Value: tok}, {Key: fLast, Value: bson.D{{Key: "$lte", Value: tok}}}}
	if !t.kind.Single() {
		mine = bson.D{{Key: "_id", Value: t.name()}, {Key: fHolders + ".tok", Value: tok}}
		if t.kind == rwlock {
			mine = append(mine, bson.E{Key: t.fence(), Value: bson.D{{Key: "$lte", Value: tok}}})
		}
	}
	res, err := c.res.UpdateOne(ctx, mine, bson.D{{Key: "$inc", Value: bson.D{{Key: fWrites, Value: 1}}}})
	if err != nil {
		c.count(sErrors)
		return false, false
	}
	if res.MatchedCount > 0 {
		return false, false
	}
	if soakcheck.Closed(h.Lost()) {
		c.count(sFenced)
		return true, false
	}
	c.violation(t, vDisplaced, "token %d of %s: a write found someone else inside", tok, c.id)
	return true, true
}

// exit takes the holder of token tok out of t's resource. Finding it not
// inside is a violation, unless a write found it displaced already.
func (c *child) exit(ctx context.Context, t target, tok int64, displaced bool) {
	filter := bson.D{{Key: "_id", Value: t.name()}, {Key: fInside + ".tok", Value: tok}}
	exit := bson.D{{Key: "$unset", Value: bson.D{{Key: fInside, Value: ""}}}}
	if !t.kind.Single() {
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

// check runs a holder's checks of the lock's own document before a write:
// a leader's (lead, before its first: first) and a long holder's. It
// reports whether it counted a violation. Their calls end with h (its
// Context), as an application's work under a lock does: a holder told of
// its loss while it waits for a reply stops at once, rather than staying
// inside its resource until the reply comes, after the next holder came
// in. The section's writes, its exit among them, keep the section's ctx.
func (c *child) check(ctx context.Context, t target, h *mongolock.Handle, first bool, lead *mongolock.Leadership, g *generation) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.Context(), cancel)()
	return lead != nil && first && c.leaderDisplaced(ctx, t, lead, g) || t.long && c.vanished(ctx, t, h, g)
}

// leaderDisplaced proclaims a value of this term and reads the leader
// back: until the leadership is lost, the server must show this leader
// with that value. It reports a violation: someone else leads, or nobody,
// and the leader was not told.
func (c *child) leaderDisplaced(ctx context.Context, t target, l *mongolock.Leadership, g *generation) bool {
	tok := l.FencingToken()
	value := fmt.Sprintf("%s/%d", c.id, tok)
	if err := l.Proclaim(ctx, value); err != nil {
		if !errors.Is(err, mongolock.ErrLockLost) && l.Context().Err() == nil && c.gen.Load() == g {
			c.count(sErrors)
			fmt.Fprintf(os.Stderr, "%s: proclaim: %v\n", c.id, err)
		}
		return false // a loss, signalled by Proclaim or by the end of the check: the write stops at Lost
	}
	ld, err := g.locks.Election(t.name()).Leader(ctx)
	switch {
	case l.Context().Err() != nil: // lost meanwhile (read after the reply; it ends the check too): someone else may lead
		return false
	case errors.Is(err, mongolock.ErrNoLeader):
		c.violation(t, vDisplaced, "token %d of %s leads, but the election has no leader", tok, c.id)
		return true
	case err != nil:
		if c.gen.Load() == g {
			c.count(sErrors)
			fmt.Fprintf(os.Stderr, "%s: leader: %v\n", c.id, err)
		}
		return false
	case ld.FencingToken != tok || ld.Value != value:
		c.violation(t, vDisplaced, "token %d of %s leads with %q, but the election shows token %d with %q", tok, c.id, value, ld.FencingToken, ld.Value)
		return true
	}
	return false
}

// vanished reads t's semaphore or rwlock as the library shows it, by the
// server's clock: it must show h's token holding until h is told of a
// loss. It reports a violation: it shows no such holder (the document is
// gone, or the holder was dropped from it), and Lost was still open after
// the reply.
func (c *child) vanished(ctx context.Context, t target, h *mongolock.Handle, g *generation) bool {
	tok := h.FencingToken()
	var (
		holders []mongolock.HolderInfo
		err     error
	)
	if t.kind == semaphore {
		var info mongolock.SemaphoreInfo
		info, err = g.locks.Semaphore(t.name(), c.n).Inspect(ctx)
		holders = info.Holders
	} else {
		var info mongolock.RWLockInfo
		info, err = g.locks.RWLock(t.name()).Inspect(ctx)
		holders = info.Holders
	}
	var held []int64 // the tokens shown holding
	for _, in := range holders {
		held = append(held, in.FencingToken)
	}
	switch {
	case h.Context().Err() != nil: // lost meanwhile (it ends the check too): the caller stops
		return false
	case err != nil && !errors.Is(err, mongolock.ErrNoLock):
		if c.gen.Load() == g {
			c.count(sErrors)
			fmt.Fprintf(os.Stderr, "%s: inspect: %v\n", c.id, err)
		}
		return false
	case !slices.Contains(held, tok):
		why := fmt.Sprintf("it showed tokens %v", held)
		if err != nil {
			why = "its document was gone"
		}
		c.violation(t, vVanished, "token %d of %s%s (expiry %v) was not told of a loss, but the lock no longer showed it holding: %s",
			tok, c.id, role(t.mode()), c.expiry, why)
		return true
	}
	return false
}

// enterSingle enters a mutex's or an election's resource: nobody inside
// (but a holder of a killed process, marked dead), and a token greater
// than every earlier one. It records waited as the entrant's wait. It
// reports whether it entered.
func (c *child) enterSingle(ctx context.Context, t target, tok int64, waited time.Duration) bool {
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
		{Key: "$max", Value: bson.D{{Key: fMaxWait, Value: waited.Nanoseconds()}}},
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
		{Key: fMaxWait, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fMaxWait, waited.Nanoseconds()}}}},
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
// It records waited as the entrant's wait. It reports whether it entered.
func (c *child) enterShared(ctx context.Context, t target, tok int64, waited time.Duration) bool {
	may, me := c.sharedEntry(t, tok)
	enter := mongo.Pipeline{{{Key: "$set", Value: sharedEntered(t, me, tok, waited)}}}
	if ok, err := c.tryEnter(ctx, t, may, enter); ok || err != nil {
		return ok
	}
	if !c.sharedRefused(ctx, t, tok) {
		return false
	}
	// Enter anyway, so that the run goes on and those inside see it too.
	if _, err := c.res.UpdateOne(ctx, bson.D{{Key: "_id", Value: t.name()}}, enter); err != nil {
		c.count(sErrors)
		return false
	}
	return true
}

// sharedEntry returns the filter of t's resource that lets the holder of
// token tok in (enterShared's rules), and the holder as it is to be listed
// inside.
func (c *child) sharedEntry(t target, tok int64) (may, me bson.D) {
	me = bson.D{{Key: "tok", Value: tok}, {Key: "proc", Value: c.id}}
	may = bson.D{{Key: "_id", Value: t.name()}}
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
	return may, me
}

// sharedEntered is the $set of an entry into t's resource: me among the
// holders, with its token tok, its wait and the counts.
func sharedEntered(t target, me bson.D, tok int64, waited time.Duration) bson.D {
	holders := bson.D{{Key: "$ifNull", Value: bson.A{"$" + fHolders, bson.A{}}}}
	set := bson.D{
		{Key: fHolders, Value: bson.D{{Key: "$concatArrays", Value: bson.A{holders, bson.A{bson.D{{Key: "$literal", Value: me}}}}}}},
		{Key: fLast, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fLast, tok}}}},
		{Key: fEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fEntries, 1}}}},
		{Key: fWrites, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fWrites, 1}}}},
		{Key: fPeak, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fPeak, bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$size", Value: holders}}, 1}}}}}}},
		{Key: t.waitField(), Value: bson.D{{Key: "$max", Value: bson.A{"$" + t.waitField(), waited.Nanoseconds()}}}},
	}
	if t.write {
		set = append(set,
			bson.E{Key: fLastWriter, Value: bson.D{{Key: "$max", Value: bson.A{"$" + fLastWriter, tok}}}},
			bson.E{Key: fWEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fWEntries, 1}}}})
	}
	if t.upgrade {
		set = append(set, bson.E{Key: fUEntries, Value: bson.D{{Key: "$add", Value: bson.A{"$" + fUEntries, 1}}}})
	}
	return set
}

// sharedRefused reads why t's resource refused the holder of token tok,
// and counts the violation. The tokens only grow, so a token refused is
// still refused; the holders may have left meanwhile. It reports whether
// it could read the resource.
func (c *child) sharedRefused(ctx context.Context, t target, tok int64) bool {
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
	return true
}

// markDead takes the holders of the killed processes procs out of the
// resources of kind kd that filter matches (a mutex's or an election's
// holder is marked dead), counts them as killed, and returns how many
// resources it changed.
func markDead(ctx context.Context, res *mongo.Collection, kd kind, filter bson.D, procs bson.A) (int64, error) {
	in := bson.D{{Key: "$in", Value: procs}}
	var update bson.D
	if kd.Single() {
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
// client now: the drop is due, t is of one of its kinds (chosen by the
// goroutine that first finds it due; any kind once the drop is overdue by
// three times -drop-every, as a child may seldom hold the kinds hit least:
// sooner, a kind whose holders hold briefly, as an election's leaders do
// here, could miss every drop of a short run), and only
// one of the child's goroutines is told so per drop.
func (c *child) dueToDrop(t target) bool {
	next := c.dropNext.Load()
	now := time.Now().UnixNano()
	if next == 0 || now < next {
		return false
	}
	if c.dropKnown.CompareAndSwap(false, true) {
		c.dropKinds.Store(c.leastDropped())
	}
	kinds := c.dropKinds.Load()
	if now-next > 3*int64(c.every) {
		kinds = 1<<numKinds - 1
	}
	return kinds&(1<<t.kind) != 0 && c.dropNext.CompareAndSwap(next, 0)
}

// drop closes the client under the held handle h of t (and under every
// other handle of this child), then waits for h to report the loss, which
// must come before the server lets the next holder in (the next holder
// would find us inside: with a semaphore, one holder too many). Other
// goroutines move to a new client at once.
func (c *child) drop(t target, h *mongolock.Handle, g *generation) {
	defer c.scheduleDrop()
	c.dropKnown.Store(false) // the next drop's kinds are chosen when it falls due
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
