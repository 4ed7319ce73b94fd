package mongolock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// Benchmarks of the client's hot path against the bound, side by side on
// the same server: "raw" is the two round trips a lock needs at the least
// (a findOneAndUpdate and an updateOne on the lock's document, locking
// nothing). Compare ns/op and allocs/op of the pairs; bench/ (make bench)
// has the workloads with contention.

// BenchmarkAcquireRelease: one goroutine, one name, no contention.
func BenchmarkAcquireRelease(b *testing.B) {
	db := testdb.Database(b)
	// Services bound their calls; a ctx that can end takes the library's
	// cancellable path.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.Run("raw", func(b *testing.B) {
		coll := db.Collection("raw")
		for b.Loop() {
			rawAcquireRelease(ctx, b, coll, "bench")
		}
	})
	b.Run("mongolock", func(b *testing.B) { acquireRelease(ctx, b, db) })
}

// acquireRelease acquires and releases a lock of a provider with opts
// until the benchmark's loop ends.
func acquireRelease(ctx context.Context, b *testing.B, db *mongo.Database, opts ...mongolock.Option) {
	p, err := mongolock.NewProvider(db, opts...)
	if err != nil {
		b.Fatal(err)
	}
	l := p.Lock("bench")
	for b.Loop() {
		h, err := l.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	mongolock.WaitBackground(p)
}

// BenchmarkUncontendedParts: where an uncontended acquisition and release
// spend their time, one goroutine, one name: "raw" the bound (two round
// trips that lock nothing); "distributedlock" DistributedLock.MongoDB's
// statements (its upsert acquisition and delete release); "statements"
// mongolock's acquisition and release statements sent alone through the
// driver (an Acquire's first attempt with a claim; "statements-try":
// TryAcquire's; "statements-unclaimed": the one for a lock nobody waits
// for, which an uncontended Acquire sends); "mongolock"
// the API. statements - raw is what the server and
// the driver spend on mongolock's statements; mongolock - statements is the
// client's engine (handle, lease, line, telemetry off by default).
func BenchmarkUncontendedParts(b *testing.B) {
	db := testdb.Database(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	p, err := mongolock.NewProvider(db)
	if err != nil {
		b.Fatal(err)
	}
	l := p.Lock("bench")
	if err := l.Do(ctx, func(context.Context) error { return nil }); err != nil { // creates the document
		b.Fatal(err)
	}
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rawAcquireRelease(ctx, b, db.Collection("raw"), "bench")
		}
	})
	b.Run("distributedlock", func(b *testing.B) {
		coll := db.Collection("dotnet")
		b.ReportAllocs()
		for b.Loop() {
			id := dotnet.NewLockID()
			if _, ok, err := dotnet.TryAcquire(ctx, coll, "bench", id, dotnet.DefaultExpiry); err != nil || !ok {
				b.Fatal("not acquired: ", err)
			}
			if _, err := dotnet.Release(ctx, coll, "bench", id); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, s := range []struct{ name, statement string }{
		{"statements", "acquire"}, {"statements-try", "try"}, {"statements-unclaimed", "unclaimed"},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := mongolock.StatementRoundTrips(ctx, l, s.statement); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("mongolock", func(b *testing.B) {
		b.ReportAllocs()
		acquireRelease(ctx, b, db)
	})
	mongolock.WaitBackground(p)
}

// BenchmarkAcquireReleaseDistinctNames: parallel goroutines, a name each.
func BenchmarkAcquireReleaseDistinctNames(b *testing.B) {
	db := testdb.Database(b)
	// Services bound their calls; a ctx that can end takes the library's
	// cancellable path.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.Run("raw", func(b *testing.B) {
		coll := db.Collection("raw")
		var n atomic.Int64
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			name := fmt.Sprint("bench-", n.Add(1))
			for pb.Next() {
				rawAcquireRelease(ctx, b, coll, name)
			}
		})
	})
	b.Run("mongolock", func(b *testing.B) {
		p, err := mongolock.NewProvider(db)
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		b.SetParallelism(16) // 32 goroutines on 2 CPUs, as bench/'s E
		b.RunParallel(func(pb *testing.PB) {
			l := p.Lock(fmt.Sprint("bench-", n.Add(1)))
			for pb.Next() {
				h, err := l.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := h.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
		mongolock.WaitBackground(p)
	})
}

var rawUpsert = options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)

func rawAcquireRelease(ctx context.Context, b *testing.B, coll *mongo.Collection, name string) {
	filter := bson.D{{Key: "_id", Value: name}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "lockId", Value: "x"}}}}
	if err := coll.FindOneAndUpdate(ctx, filter, update, rawUpsert).Err(); err != nil {
		b.Error(err)
	}
	if _, err := coll.UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: bson.D{{Key: "lockId", Value: ""}}}}); err != nil {
		b.Error(err)
	}
}

// BenchmarkAcquireTelemetry: what the hooks of WithTrace add to an
// acquisition and its release. "off" is no WithTrace; "counting" a Trace
// whose hooks count their calls. "hooks" runs only the telemetry of one
// acquisition, without I/O; "server" an Acquire and a Release, one
// goroutine, one name, as BenchmarkAcquireRelease. The OpenTelemetry
// hooks' cost is otelmongolock's BenchmarkAcquireTelemetry.
func BenchmarkAcquireTelemetry(b *testing.B) {
	db := testdb.Database(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var calls atomic.Int64
	count := func(mongolock.TraceLock) { calls.Add(1) }
	hooks := &mongolock.Trace{
		AcquireStart: func(ctx context.Context, _ mongolock.AcquireStartInfo) context.Context {
			calls.Add(1)
			return ctx
		},
		AcquireAttempt: func(context.Context, mongolock.AttemptInfo) { calls.Add(1) },
		AcquireDone:    func(context.Context, mongolock.AcquireDoneInfo) { calls.Add(1) },
		ReleaseStart: func(ctx context.Context, _ mongolock.ReleaseStartInfo) context.Context {
			calls.Add(1)
			return ctx
		},
		ReleaseDone: func(context.Context, mongolock.ReleaseDoneInfo) { calls.Add(1) },
		Acquired:    count,
		Unheld:      count,
	}
	setups := []struct {
		name string
		opts []mongolock.Option
	}{{"off", nil}, {"counting", []mongolock.Option{mongolock.WithTrace(hooks)}}}
	for _, s := range setups {
		b.Run("hooks/"+s.name, func(b *testing.B) {
			p, err := mongolock.NewProvider(db, s.opts...)
			if err != nil {
				b.Fatal(err)
			}
			l := p.Lock("bench")
			b.ReportAllocs()
			for b.Loop() {
				mongolock.TelemetryCycle(ctx, l)
			}
		})
	}
	for _, s := range setups {
		b.Run("server/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			acquireRelease(ctx, b, db, s.opts...)
		})
	}
}

// BenchmarkHandleContextErr: what a worker pays to ask whether its lock is
// still held, h.Context().Err() of a held handle, which looks at the
// clocks before it answers; "composite" the same of a CompositeHandle of
// two locks. No I/O: the handles are held over the in-memory store, and
// their leases are not extended within the benchmark's time.
func BenchmarkHandleContextErr(b *testing.B) {
	ctx := context.Background()
	p, err := mongolocktest.NewProvider(mongolock.WithExpiry(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close(ctx) }()
	h, err := p.Lock("bench").TryAcquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c, err := mongolock.NewComposite(p.Lock("bench-1"), p.Lock("bench-2"))
	if err != nil {
		b.Fatal(err)
	}
	ch, err := c.TryAcquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []struct {
		name string
		ctx  func() context.Context
	}{{"handle", h.Context}, {"composite", ch.Context}} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.ctx().Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
