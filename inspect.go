package mongolock

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// LockInfo is the state of one lock as the server saw it at ServerTime.
type LockInfo struct {
	Name string
	// Held reports whether an unexpired acquisition holds the lock, judged
	// by the server's clock.
	Held bool
	// Owner and Value are the holder's (WithOwner; an election's value),
	// when a mongolock acquisition holds the lock; otherwise "" (a free
	// lock, or one held by DistributedLock.MongoDB).
	Owner, Value string
	// AcquiredAt and ExpiresAt are the last acquisition's, in server time.
	AcquiredAt, ExpiresAt time.Time
	// FencingToken is the last acquisition's token.
	FencingToken int64
	// Waiting reports whether a mongolock process waiting in Acquire
	// claims the next turn.
	Waiting bool
	// ServerTime is the server's clock when it was read.
	ServerTime time.Time
}

// ErrNoLock reports that a lock has no document: it was never used, or its
// document was deleted a while after its last release.
var ErrNoLock = errors.New("mongolock: no such lock")

// Inspect returns the state of the lock called name, in one round trip. It
// returns an error wrapping ErrNoLock if the lock has no document.
func (p *Provider) Inspect(ctx context.Context, name string) (LockInfo, error) {
	if ctx == nil {
		return LockInfo{}, p.Lock(name).errorf("inspect", errNilContext)
	}
	cur, err := p.coll.Aggregate(ctx, inspectPipeline(bson.D{{Key: "_id", Value: name}}))
	if err != nil {
		return LockInfo{}, p.Lock(name).errorf("inspect", err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	if !cur.Next(ctx) {
		err := cur.Err()
		if err == nil {
			err = ErrNoLock
		}
		return LockInfo{}, p.Lock(name).errorf("inspect", err)
	}
	info, err := decodeInfo(cur.Current)
	if err != nil {
		return LockInfo{}, p.Lock(name).errorf("inspect", err)
	}
	return info, nil
}

// infoDoc is what inspectPipeline returns per document.
type infoDoc struct {
	Name         string    `bson:"_id"`
	Held         bool      `bson:"held"`
	Mine         bool      `bson:"mongolock"`
	Owner        string    `bson:"owner"`
	Value        string    `bson:"value"`
	AcquiredAt   time.Time `bson:"acquiredAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	FencingToken int64     `bson:"fencingToken"`
	Waiting      bool      `bson:"waiting"`
	Now          time.Time `bson:"now"`
}

func decodeInfo(raw bson.Raw) (LockInfo, error) {
	var d infoDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return LockInfo{}, err
	}
	info := LockInfo{Name: d.Name, Held: d.Held, AcquiredAt: d.AcquiredAt, ExpiresAt: d.ExpiresAt,
		FencingToken: d.FencingToken, Waiting: d.Waiting, ServerTime: d.Now}
	if d.Held && d.Mine {
		info.Owner, info.Value = d.Owner, d.Value
	}
	return info, nil
}
