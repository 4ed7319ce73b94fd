package mongolock

import (
	"bytes"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Pre-encoded acquisition pipelines.
//
// The acquire pipeline (acquireUpdate) is the same for every attempt of a
// provider except for the attempt's lockId, and encoding it with the
// driver's reflection-based encoder costs more client CPU than the rest of
// the round trip. So each provider encodes it once per shape (Acquire and
// TryAcquire: fairness.join) with a placeholder lockId, remembers where the
// placeholder's bytes are, and an attempt copies the encoding and writes its
// own lockId over them. A lockId is 32 hex digits, like the placeholder, so
// every BSON length stays right.

// The placeholders for the attempt's lockId and, in a hand-over, the
// releasing handle's: random, so they cannot occur by chance in the rest of
// the pipeline.
var lockIDPlaceholder, fromPlaceholder = newLockID(), newLockID()

// acquireTemplate is an encoded acquire pipeline (a BSON array) with the
// offsets of the placeholders.
type acquireTemplate struct {
	raw        []byte
	at, fromAt []int
}

// newAcquireTemplate encodes acquireUpdate for f (with placeholders for
// lockIDs; f.from non-empty makes it a hand-over).
func newAcquireTemplate(expiry time.Duration, f fairness) acquireTemplate {
	f.lockID = lockIDPlaceholder
	if f.from != "" {
		f.from = fromPlaceholder
	}
	typ, raw, err := bson.MarshalValue(acquireUpdate(lockIDPlaceholder, expiry, f))
	if err != nil || bson.Type(typ) != bson.TypeArray {
		// The pipeline is built from constants and validated options.
		panic(fmt.Sprintf("mongolock: encoding the acquire pipeline: type %v, %v", bson.Type(typ), err))
	}
	return acquireTemplate{raw: raw, at: offsets(raw, lockIDPlaceholder), fromAt: offsets(raw, fromPlaceholder)}
}

func offsets(raw []byte, s string) []int {
	var at []int
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(s))
		if j < 0 {
			return at
		}
		at = append(at, i+j)
		i += j + len(s)
	}
}

// with returns the pipeline for an attempt with lockID; from is the
// releasing handle's lockId in a hand-over, and ignored otherwise.
func (t acquireTemplate) with(lockID, from string) rawArray {
	b := bytes.Clone(t.raw)
	put := func(at []int, id string) {
		if len(at) > 0 && len(id) != len(lockIDPlaceholder) {
			panic("mongolock: lockId of unexpected length")
		}
		for _, i := range at {
			copy(b[i:], id)
		}
	}
	put(t.at, lockID)
	put(t.fromAt, from)
	return b
}

// rawArray is an encoded BSON array, passed to the driver as it is.
type rawArray []byte

func (a rawArray) MarshalBSONValue() (byte, []byte, error) {
	return byte(bson.TypeArray), a, nil
}
