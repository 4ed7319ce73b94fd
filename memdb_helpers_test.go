package mongolock_test

// Fixtures over a database in process memory (memDB) for the tests that
// moved from the server to the model: an RW lock's live holders by mode,
// and the C# library's protocol applied to the model's documents.

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// liveReadersAndWriters counts name's live readers (upgradeable ones
// included) and writers, by the model's clock.
func (d *memDB) liveReadersAndWriters(name string) (readers, writers int) {
	d.t.Helper()
	for _, m := range d.liveModes(name) {
		if m == "r" || m == "u" {
			readers++
		} else {
			writers++
		}
	}
	return readers, writers
}

// await polls cond every simulated millisecond until it holds, and fails
// the test if it does not within a simulated minute.
func (d *memDB) await(what string, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("not within a simulated minute: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// writerClaims reports whether doc, an RW lock's document, holds a
// waiting writer's claim.
func writerClaims(doc bson.Raw) bool {
	_, ok := doc.Lookup("waitingUntil").TimeOK()
	return ok && doc.Lookup("waitingMode").StringValue() == "w"
}
