package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
)

// Workload H, election failover: electionProcs processes (one client each)
// campaign in one election. The leader leads electionHold, then ends its
// term, by turns with a resignation and with a stop, and campaigns again
// electionAway later. A stop is a crash: the process's client is
// disconnected without resigning, so the others wait out the lease
// (electionExpiry), and the process comes back with a new client. H
// measures the failover delay per kind of end, and what all processes cost
// the server meanwhile (commands/s).
const (
	electionProcs  = 5
	electionHold   = 3 * time.Second
	electionAway   = 1 * time.Second
	electionExpiry = 2 * time.Second
	electionWarmup = 2 * time.Second
	// electionGrace is how long after the window the run goes on so that
	// the window's last end of a term is followed by a new leader.
	electionGrace = 10 * time.Second
	electionName  = "leader"
)

func electionTitle() string {
	return fmt.Sprintf("%d processes campaigning in one election; the leader leads %v, then resigns or stops (a crash), by turns, "+
		"and campaigns again %v later; expiry %v", electionProcs, electionHold, electionAway, electionExpiry)
}

// An elector campaigns the way one implementation does, for one process.
type elector interface {
	campaign(ctx context.Context, name, value string) (term, error)
	// close ends the process's use of the implementation, before its client.
	close(ctx context.Context)
}

// A term is one leadership: release resigns it; abandon stops keeping it
// without sending anything, as a crash does.
type term struct {
	held
	abandon func()
}

// electors are the implementations H runs: raw excludes no one, so it
// elects no one.
var electors = map[string]func(db *mongo.Database, coll string, expiry time.Duration) (elector, error){
	"mongolock": openMongolockElector,
	"baseline":  openBaselineElector,
}

// mongolockElector is the library's election, one Provider per process.
type mongolockElector struct{ p *mongolock.Provider }

func openMongolockElector(db *mongo.Database, coll string, expiry time.Duration) (elector, error) {
	p, err := mongolock.NewProvider(db, mongolock.WithCollection(coll), mongolock.WithExpiry(expiry))
	if err != nil {
		return nil, err
	}
	return mongolockElector{p: p}, nil
}

func (m mongolockElector) campaign(ctx context.Context, name, value string) (term, error) {
	l, err := m.p.Election(name).Campaign(ctx, value)
	if err != nil {
		return term{}, err
	}
	// The provider extends the lease; a crash disconnects its client, after
	// which nothing it tries is sent.
	return term{held: held{release: l.Release, lost: l.Lost()}, abandon: func() {}}, nil
}

func (m mongolockElector) close(ctx context.Context) { _ = m.p.Close(ctx) }

// baselineElector is the baseline as an election: its acquire and its
// deleteOne release, with DistributedLock.MongoDB's lease extension, which
// leaderships longer than the expiry need: every expiry/3 (its default
// cadence), updateOne({_id, lockId}) setting expiresAt to $$NOW + expiry.
// It stores no value.
type baselineElector struct{ b baseline }

func openBaselineElector(db *mongo.Database, coll string, expiry time.Duration) (elector, error) {
	return baselineElector{b: baseline{coll: db.Collection(coll), expiry: expiry}}, nil
}

func (e baselineElector) campaign(ctx context.Context, name, _ string) (term, error) {
	lockID, err := e.b.wait(ctx, name)
	if err != nil {
		return term{}, err
	}
	kctx, stop := context.WithCancel(context.Background())
	done, lost := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		e.extend(kctx, name, lockID, lost)
	}()
	abandon := func() { stop(); <-done }
	resign := func(ctx context.Context) error {
		abandon()
		_, err := dotnet.Release(ctx, e.b.coll, name, lockID)
		return err
	}
	return term{held: held{release: resign, lost: lost}, abandon: abandon}, nil
}

// extend extends the lease of lockID every expiry/3 until ctx ends, and
// closes lost if an extension finds that lockID no longer holds the lock.
func (e baselineElector) extend(ctx context.Context, name, lockID string, lost chan<- struct{}) {
	filter := bson.D{{Key: "_id", Value: name}, {Key: "lockId", Value: lockID}}
	update := mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: bson.D{
		{Key: "$add", Value: bson.A{"$$NOW", e.b.expiry.Milliseconds()}},
	}}}}}}
	tick := time.NewTicker(e.b.expiry / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		res, err := e.b.coll.UpdateOne(ctx, filter, update)
		if err == nil && res.MatchedCount == 0 {
			close(lost)
			return
		}
	}
}

func (baselineElector) close(context.Context) {}

// electionResult is what one run of workload H measured for one
// implementation.
type electionResult struct {
	Impl       string    `json:"impl"`
	Processes  int       `json:"processes"`
	Seconds    float64   `json:"seconds"` // the window, after the warm-up
	commands             // sent by all clients in the window
	Terms      int       `json:"terms"` // Campaign returns in the window
	PerProcess []int     `json:"termsPerProcess"`
	Resign     failovers `json:"resign"`
	Stop       failovers `json:"stop"`
	Lost       int       `json:"lost"` // terms signalled lost before their end
	errorCount
}

// failovers are the failovers after the terms of one kind that ended in the
// window: from the Resign call's return, or the stop, to the next leader's
// Campaign return (0 if that returned first).
type failovers struct {
	Count    int       `json:"count"`
	P50MS    float64   `json:"p50Ms"`
	MaxMS    float64   `json:"maxMs"`
	DelaysMS []float64 `json:"delaysMs"` // each failover's, in order
	// Unfinished failovers had no new leader within electionGrace; they
	// count with their length so far.
	Unfinished int `json:"unfinished"`
	// After a stop: the lease the server still kept at the stop, and the
	// failover's delay after that lease ended.
	LeaseLeftP50MS   float64   `json:"leaseLeftP50Ms,omitempty"`
	AfterExpiryP50MS float64   `json:"afterExpiryP50Ms,omitempty"`
	AfterExpiryMaxMS float64   `json:"afterExpiryMaxMs,omitempty"`
	AfterExpiryMS    []float64 `json:"afterExpiryMs,omitempty"` // each one's, in order
}

// electionLog records every term of a run as standbyLog records
// acquisitions, in the order the Campaign calls returned: with one leader at
// a time, the order of the terms. Every other term (odd index) ends by a
// stop, and leaseEnds has when the server ended the lease of each stopped
// term, where it could be read.
type electionLog struct {
	standbyLog
	leaseEnds map[int]time.Time
}

func isStop(term int) bool { return term%2 == 1 }

func (l *electionLog) stopped(term int, at, leaseEnd time.Time, lost bool, err error) {
	l.released(term, at, lost, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !leaseEnd.IsZero() {
		l.leaseEnds[term] = leaseEnd
	}
}

// electionRun is one run of workload H for one implementation.
type electionRun struct {
	e     env
	coll  string
	open  func(db *mongo.Database, coll string, expiry time.Duration) (elector, error)
	log   electionLog
	lease *mongo.Collection // an uncounted client's: reads the lease left at a stop
	bg    sync.WaitGroup    // stopped processes' electors closing

	mu  sync.Mutex
	ops []*opCounter // of every client of the run, stopped ones included
}

// A voter is one of H's processes: a client of its own, and its elector.
type voter struct {
	client *mongo.Client
	ops    *opCounter
	el     elector
}

func (r *electionRun) start(ctx context.Context) (*voter, error) {
	client, ops, err := connect(ctx, r.e)
	if err != nil {
		return nil, err
	}
	el, err := r.open(client.Database(r.e.db), r.coll, electionExpiry)
	if err != nil {
		_ = client.Disconnect(ctx)
		return nil, err
	}
	r.mu.Lock()
	r.ops = append(r.ops, ops)
	r.mu.Unlock()
	return &voter{client: client, ops: ops, el: el}, nil
}

func (r *electionRun) sumOps() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := map[string]int{}
	for _, c := range r.ops {
		for k, v := range c.snapshot() {
			total[k] += v
		}
	}
	return total
}

// shutdown ends v as a process that exits does: its elector closed, then
// its client.
func (v *voter) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v.el.close(ctx)
	_ = v.client.Disconnect(ctx)
}

// crash ends v as a crash does, sending nothing more: t abandoned, the
// client disconnected (the endSessions that a disconnection sends is not
// counted: a crashed process sends none), and what is left of the elector
// closed in the background, where nothing it tries is sent.
func (r *electionRun) crash(v *voter, t term) {
	t.abandon()
	before := v.ops.snapshot()["endSessions"]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = v.client.Disconnect(ctx)
	cancel()
	v.ops.mu.Lock()
	v.ops.n["endSessions"] = before
	if before == 0 {
		delete(v.ops.n, "endSessions")
	}
	v.ops.mu.Unlock()
	r.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v.el.close(ctx)
	})
}

// leaseEnd reads when the server ends the election's lease, by the server's
// clock, and returns that instant by this process's clock (both on one
// machine here), taking the reading as made halfway through its round trip.
func (r *electionRun) leaseEnd(ctx context.Context) (time.Time, error) {
	t0 := time.Now()
	cur, err := r.lease.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id", Value: electionName}}}},
		{{Key: "$project", Value: bson.D{{Key: "left", Value: bson.D{{Key: "$subtract", Value: bson.A{"$expiresAt", "$$NOW"}}}}}}},
	})
	if err != nil {
		return time.Time{}, err
	}
	var docs []struct {
		Left float64 `bson:"left"` // ms
	}
	if err := cur.All(ctx, &docs); err != nil {
		return time.Time{}, err
	}
	t1 := time.Now()
	if len(docs) != 1 {
		return time.Time{}, errors.New("lease end: the election's document is gone")
	}
	return t0.Add(t1.Sub(t0)/2 + time.Duration(docs[0].Left*float64(time.Millisecond))), nil
}

// slot is one process's loop until ctx ends: campaign, lead electionHold,
// resign or stop, stay away electionAway; after a stop, a new process (a
// new client) takes its place.
func (r *electionRun) slot(ctx context.Context, proc int) {
	var v *voter
	defer func() {
		if v != nil {
			v.shutdown()
		}
	}()
	for ctx.Err() == nil {
		if v == nil {
			var err error
			if v, err = r.start(ctx); err != nil {
				if ctx.Err() == nil {
					r.log.failed(err)
					pause(ctx, 100*time.Millisecond)
				}
				continue
			}
		}
		t, err := v.el.campaign(ctx, electionName, fmt.Sprintf("process %d", proc))
		if err != nil {
			if ctx.Err() == nil {
				r.log.failed(err)
				pause(ctx, 10*time.Millisecond)
			}
			continue
		}
		k := r.log.acquired(proc, time.Now())
		pause(ctx, electionHold)
		lost := t.isLost()
		switch {
		case ctx.Err() != nil: // the run is over: resign, uncounted
			rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			_ = t.release(rctx)
			cancel()
		case isStop(k):
			at := time.Now()
			r.crash(v, t)
			v = nil
			end, err := r.leaseEnd(ctx)
			r.log.stopped(k, at, end, lost, err)
		default:
			rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			err := t.release(rctx)
			cancel()
			r.log.released(k, time.Now(), lost, err)
		}
		pause(ctx, electionAway)
	}
}

// runElection runs workload H for im: a warm-up, the window d, then until
// the window's last term's end has been followed by a new leader (at most
// electionGrace).
func runElection(ctx context.Context, e env, im impl, d time.Duration) (electionResult, error) {
	res := electionResult{Impl: im.name, Processes: electionProcs, Seconds: d.Seconds()}
	open, ok := electors[im.name]
	if !ok {
		return res, fmt.Errorf("no election for %s", im.name)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(e.uri))
	if err != nil {
		return res, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	r := &electionRun{e: e, coll: collection("H", im.name), open: open, log: electionLog{leaseEnds: map[int]time.Time{}}}
	r.lease = client.Database(e.db).Collection(r.coll)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for proc := range electionProcs {
		wg.Go(func() { r.slot(rctx, proc) })
	}
	pause(ctx, electionWarmup)
	ops0, from := r.sumOps(), time.Now()
	pause(ctx, d)
	ops1, to := r.sumOps(), time.Now()
	giveUp := to.Add(electionGrace)
	for ctx.Err() == nil && !r.log.followed(from, to) && time.Now().Before(giveUp) {
		pause(ctx, 20*time.Millisecond)
	}
	cut := time.Now()
	cancel()
	wg.Wait()
	r.bg.Wait()

	window := to.Sub(from)
	res.Seconds = window.Seconds()
	res.commands = countCommands(diff(ops1, ops0), window)
	r.log.tally(&res, from, to, cut)
	res.Lost, res.errorCount = r.log.lost, r.log.errorCount
	return res, ctx.Err()
}

// tally fills res with the terms that began in the window from..to, per
// process, and the failovers after the terms that ended in it: a term
// the run's end (cut) left unfollowed counts as unfinished. The terms
// are done: no process logs more.
func (l *electionLog) tally(res *electionResult, from, to, cut time.Time) {
	res.PerProcess = make([]int, electionProcs)
	in := func(t time.Time) bool { return !t.IsZero() && !t.Before(from) && !t.After(to) }
	var resign, stop, left, after []time.Duration
	terms := l.acqs
	for i, t := range terms {
		if in(t.acquired) {
			res.Terms++
			res.PerProcess[t.proc]++
		}
		if !in(t.released) {
			continue
		}
		f, ds := &res.Resign, &resign
		if isStop(i) {
			f, ds = &res.Stop, &stop
		}
		if i+1 == len(terms) {
			f.Unfinished++
			*ds = append(*ds, cut.Sub(t.released))
			continue
		}
		next := terms[i+1].acquired
		*ds = append(*ds, max(next.Sub(t.released), 0))
		if end, ok := l.leaseEnds[i]; ok {
			left = append(left, end.Sub(t.released))
			after = append(after, next.Sub(end))
		}
	}
	for _, x := range []struct {
		f  *failovers
		ds []time.Duration
	}{{&res.Resign, resign}, {&res.Stop, stop}} {
		x.f.Count, x.f.P50MS, x.f.MaxMS, x.f.DelaysMS = len(x.ds), ms(percentile(x.ds, 50)), ms(percentile(x.ds, 100)), msList(x.ds)
	}
	res.Stop.LeaseLeftP50MS = ms(percentile(left, 50))
	res.Stop.AfterExpiryP50MS = ms(percentile(after, 50))
	res.Stop.AfterExpiryMaxMS = ms(percentile(after, 100))
	res.Stop.AfterExpiryMS = msList(after)
}

// msList returns ds in milliseconds, to a hundredth.
func msList(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = math.Round(ms(d)*100) / 100
	}
	return out
}
