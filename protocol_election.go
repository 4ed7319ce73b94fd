package mongolock

import (
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// An election's statements. Its document is a lock's (protocol_lock.go),
// acquired with the leader's value: acquirePipeline and unclaimedPipeline
// with a value, and electionTurn.

// electionTurn is an election's turnLength, one term: a leader that resigns
// steps aside for a campaign waiting in another process.
const electionTurn = 1

// proclaimUpdate: a leader's new value, updateOne(ownerFilter,
// proclaimUpdate). Owner-checked: a stale leader's proclaim matches nothing.
func proclaimUpdate(value string) bson.D { return set("value", value) }

// leaderEvents: where the server has change streams, while an election is
// observed, watch its document for a new holder, a release, a proclaimed
// value, its creation or its deletion: an update event by the fields it
// changed, a replace event by the last write's mark. Extensions and claims
// do not match.
func leaderEvents(name string) mongo.Pipeline {
	exists := obj("$exists", true)
	return mongo.Pipeline{obj("$match", obj("documentKey._id", name, "$or", bson.A{
		obj("operationType", obj("$in", bson.A{"insert", "delete"})),
		obj("operationType", "replace", "fullDocument.lastWrite", obj("$in", bson.A{wroteAcquire, wroteRelease})),
		obj("updateDescription.updatedFields.lockId", exists), obj("updateDescription.updatedFields.value", exists),
		obj("updateDescription.removedFields", obj("$in", bson.A{"lockId", "value"})),
	}))}
}
