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

// lockIDPlaceholder stands for the attempt's lockId in an encoded pipeline:
// random, so it cannot occur by chance in the rest of the pipeline.
var lockIDPlaceholder = newLockID()

// acquireTemplate is an encoded acquire pipeline (a BSON array) with the
// offsets of the placeholder lockId.
type acquireTemplate struct {
	raw []byte
	at  []int
}

func newAcquireTemplate(expiry time.Duration, f fairness) acquireTemplate {
	f.lockID = lockIDPlaceholder
	typ, raw, err := bson.MarshalValue(acquireUpdate(lockIDPlaceholder, expiry, f))
	if err != nil || bson.Type(typ) != bson.TypeArray {
		// The pipeline is built from constants and validated options.
		panic(fmt.Sprintf("mongolock: encoding the acquire pipeline: type %v, %v", bson.Type(typ), err))
	}
	t := acquireTemplate{raw: raw}
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(lockIDPlaceholder))
		if j < 0 {
			break
		}
		t.at = append(t.at, i+j)
		i += j + len(lockIDPlaceholder)
	}
	return t
}

// with returns the pipeline for an attempt with lockID.
func (t acquireTemplate) with(lockID string) rawArray {
	if len(lockID) != len(lockIDPlaceholder) {
		panic("mongolock: lockId of unexpected length")
	}
	b := bytes.Clone(t.raw)
	for _, at := range t.at {
		copy(b[at:], lockID)
	}
	return b
}

// rawArray is an encoded BSON array, passed to the driver as it is.
type rawArray []byte

func (a rawArray) MarshalBSONValue() (byte, []byte, error) {
	return byte(bson.TypeArray), a, nil
}
