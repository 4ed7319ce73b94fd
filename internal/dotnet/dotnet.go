// Package dotnet speaks the protocol of the C# library
// DistributedLock.MongoDB 1.0 exactly as its source does, for the
// tests that show a Go and a .NET service exclude each other and for the
// benchmark's baseline (bench/):
//
//   - acquire: one findOneAndUpdate({_id: name}, pipeline, upsert: true,
//     returnDocument: after) whose pipeline $sets every field with $cond on
//     "expired" (judged by the server's $$NOW); acquired iff the returned
//     lockId is the fresh one sent;
//   - release: deleteOne({_id: name, lockId}), which resets the next token
//     to 1.
//
// It neither extends nor waits: callers do what they need.
package dotnet

import (
	"context"
	"encoding/hex"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultExpiry is DistributedLock.MongoDB's default lease.
const DefaultExpiry = 30 * time.Second

// NewLockID returns a fresh lockId: 32 hex digits, as Guid.ToString("N").
func NewLockID() string {
	id := uuid.New()
	return hex.EncodeToString(id[:])
}

// AcquireUpdate is the acquire pipeline, with $$NOW + expiry written as
// {$add: ["$$NOW", ms]}, as DistributedLock.MongoDB writes it.
func AcquireUpdate(lockID string, expiry time.Duration) mongo.Pipeline {
	epoch := bson.NewDateTimeFromTime(time.Unix(0, 0))
	expired := bson.D{{Key: "$lte", Value: bson.A{
		bson.D{{Key: "$ifNull", Value: bson.A{"$expiresAt", epoch}}},
		"$$NOW",
	}}}
	cond := func(then, otherwise any) bson.D {
		return bson.D{{Key: "$cond", Value: bson.A{expired, then, otherwise}}}
	}
	expiresAt := bson.D{{Key: "$add", Value: bson.A{"$$NOW", expiry.Milliseconds()}}}
	token := bson.D{{Key: "$add", Value: bson.A{
		bson.D{{Key: "$ifNull", Value: bson.A{"$fencingToken", int64(0)}}},
		int64(1),
	}}}
	return mongo.Pipeline{{{Key: "$set", Value: bson.D{
		{Key: "lockId", Value: cond(lockID, "$lockId")},
		{Key: "expiresAt", Value: cond(expiresAt, "$expiresAt")},
		{Key: "acquiredAt", Value: cond("$$NOW", "$acquiredAt")},
		{Key: "fencingToken", Value: cond(token, "$fencingToken")},
	}}}}
}

var acquireOpts = options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)

// TryAcquire makes one attempt with lockID. It reports acquired false, and
// no error, when the lock is held by someone else, and also when the
// attempt lost the test server's race to create a brand-new document
// (FerretDB answers duplicate key, or "$$NOW cannot be used
// within this specific context"; MongoDB retries those itself).
func TryAcquire(ctx context.Context, coll *mongo.Collection, name, lockID string, expiry time.Duration) (token int64, acquired bool, err error) {
	var doc struct {
		LockID       string `bson:"lockId"`
		FencingToken int64  `bson:"fencingToken"`
	}
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: name}}, AcquireUpdate(lockID, expiry), acquireOpts).Decode(&doc)
	switch {
	case err != nil && LostCreateRace(err):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return doc.FencingToken, doc.LockID == lockID, nil
}

// Release deletes the document if lockID still holds the lock, and reports
// whether it did.
func Release(ctx context.Context, coll *mongo.Collection, name, lockID string) (bool, error) {
	res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: name}, {Key: "lockId", Value: lockID}})
	if err != nil {
		return false, err
	}
	return res.DeletedCount == 1, nil
}

// LostCreateRace reports the errors FerretDB/DocumentDB answers when
// upserts of a brand-new _id race.
func LostCreateRace(err error) bool {
	if mongo.IsDuplicateKeyError(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "duplicate key value violates unique constraint") ||
		strings.Contains(msg, "$$NOW operator cannot be used")
}
