package main

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/faultproxy"
	"github.com/mongolock/mongolock/internal/testdb"
)

// A holder's checks inside its critical section (a long holder's Inspect,
// a leader's Proclaim and Leader) end when it is told of its loss, however
// late the reply: a holder that waits past its loss for a reply is still
// inside its resource when the next holder enters, and the checks would
// count the overlap as the library's. Its client is cut off (a blackhole)
// while it holds: its lease runs out, and the check's reply never comes.
// Being told of the loss is no failure of the check: nothing is counted.
func TestSoakHolderStopsCheckingAtItsLoss(t *testing.T) {
	for _, tgt := range []target{{kind: semaphore, long: true}, {kind: election}} {
		t.Run(kindNames[tgt.kind], func(t *testing.T) {
			db := testdb.Database(t)
			c := &child{id: "p1", n: 3, expiry: time.Second, res: db.Collection("soak_resources"), stats: db.Collection("soak_stats")}
			px, g := proxiedGeneration(t, db.Name(), c.expiry)
			var (
				h    *mongolock.Handle
				lead *mongolock.Leadership
				err  error
			)
			if tgt.kind == election {
				lead, err = g.locks.Election(tgt.name()).Campaign(t.Context(), c.id)
				if err == nil {
					h = lead.Handle
				}
			} else {
				h, err = g.locks.Semaphore(tgt.name(), c.n).Acquire(t.Context())
			}
			if err != nil {
				t.Fatal(err)
			}
			px.Blackhole() // every reply, the extensions' too
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel() // the check, if it still waits when the test fails
			done := make(chan bool, 1)
			go func() { done <- c.check(ctx, tgt, h, true, lead, g) }()
			<-h.Lost()
			select {
			case violation := <-done:
				if violation {
					t.Error("the check counted a violation; want none for a holder told of its loss")
				}
			case <-time.After(10 * c.expiry):
				cancel()
				<-done
				t.Fatalf("the holder was still waiting for its check's reply %v after it was told of its loss", 10*c.expiry)
			}
			var stats bson.M
			err = c.stats.FindOne(context.Background(), bson.D{{Key: "_id", Value: statsID}}).Decode(&stats)
			if err != mongo.ErrNoDocuments {
				t.Errorf("stats after the check: %v (%v); want none counted", stats, err)
			}
		})
	}
}

// proxiedGeneration returns a generation whose client reaches the test
// server through a new fault proxy, with a child's options of expiry
// (extended at the library's cadence); both are closed when the test ends.
func proxiedGeneration(t *testing.T, db string, expiry time.Duration) (*faultproxy.Proxy, *generation) {
	t.Helper()
	uri := testdb.Info(t).URI
	o := options.Client().ApplyURI(uri)
	if len(o.Hosts) == 0 {
		t.Fatal("no host in the test server's URI")
	}
	px, err := faultproxy.New(o.Hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetHosts([]string{px.Addr()}).SetDirect(true))
	if err != nil {
		_ = px.Close()
		t.Fatal(err)
	}
	locks, err := mongolock.NewProvider(client.Database(db), providerOptions(expiry, 0)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Fresh connections without faults for the goodbyes, then close.
		px.Reset()
		_ = px.Restore()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = locks.Close(ctx)
		_ = client.Disconnect(ctx)
		_ = px.Close()
	})
	return px, &generation{client: client, locks: locks}
}
