package memdb

import (
	"bytes"
	"math"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// same answers what comparing the values' BSON byte by byte answers.
func TestSameIsByteForByteEquality(t *testing.T) {
	values := []any{nil, missing, int32(1), int64(1), 1.0, math.Copysign(0, -1), 0.0, "1", true, false,
		bson.DateTime(1), bson.DateTime(2), bson.D{}, bson.A{},
		bson.D{{Key: "a", Value: int32(1)}, {Key: "b", Value: "x"}}, bson.D{{Key: "b", Value: "x"}, {Key: "a", Value: int32(1)}},
		bson.D{{Key: "a", Value: int64(1)}, {Key: "b", Value: "x"}}, bson.D{{Key: "a", Value: int32(1)}},
		bson.A{int32(1), bson.D{{Key: "c", Value: bson.A{}}}}, bson.A{int32(1), bson.D{{Key: "c", Value: bson.A{nil}}}}, bson.A{int32(1)}}
	for _, a := range values {
		for _, b := range values {
			bytewise := bytes.Equal(encode(bson.D{{Key: "v", Value: a}}), encode(bson.D{{Key: "v", Value: b}}))
			if a == missing || b == missing { // not BSON: only itself
				bytewise = a == b
			}
			if got := same(a, b); got != bytewise {
				t.Errorf("same(%#v, %#v) = %v, byte for byte %v", a, b, got, bytewise)
			}
		}
	}
}
