package memdb

import (
	"cmp"
	"math"
	"math/big"
	"reflect"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// missingT is the value of a field that is not there: not null. $$REMOVE
// evaluates to it, $ifNull replaces it, $type names it "missing", and a
// field set to it is removed.
type missingT struct{}

var missing = missingT{}

// bsonTypes are the Go types of the values the model evaluates (the
// statements use no other): each one's BSON type as $type names it, and
// its rank, its place in MongoDB's comparison order of types; values of
// different ranks compare by rank.
var bsonTypes = map[reflect.Type]bsonTypeT{reflect.TypeFor[missingT](): {"missing", 0}, nil: {"null", 1},
	reflect.TypeFor[int32](): {"int", 2}, reflect.TypeFor[int64](): {"long", 2}, reflect.TypeFor[float64](): {"double", 2},
	reflect.TypeFor[string](): {"string", 3}, reflect.TypeFor[bson.D](): {"object", 4}, reflect.TypeFor[bson.A](): {"array", 5},
	reflect.TypeFor[bool](): {"bool", 8}, reflect.TypeFor[bson.DateTime](): {"date", 9}}

type bsonTypeT struct {
	name string
	rank int
}

func bsonType(v any) bsonTypeT {
	t, ok := bsonTypes[reflect.TypeOf(v)]
	if !ok {
		panic(notModelled("value of type %T", v))
	}
	return t
}

// typeName is $type's answer.
func typeName(v any) string { return bsonType(v).name }

func rank(v any) int { return bsonType(v).rank }

// compare orders two values as MongoDB does, strings byte by byte (the
// simple collation), numbers exactly (an int64 beyond 2^53 is not rounded
// to a double).
func compare(a, b any) int {
	if c := cmp.Compare(rank(a), rank(b)); c != 0 || rank(a) < 2 {
		return c
	}
	switch x := a.(type) {
	case int32, int64, float64:
		return exact(a).Cmp(exact(b))
	case string:
		return strings.Compare(x, b.(string))
	case bson.DateTime:
		return cmp.Compare(x, b.(bson.DateTime))
	}
	panic(notModelled("comparison of %T", a))
}

func equal(a, b any) bool { return compare(a, b) == 0 }

func exact(v any) *big.Float {
	if i, ok := integer(v); ok {
		return new(big.Float).SetInt64(i)
	}
	if f := v.(float64); !math.IsNaN(f) {
		return big.NewFloat(f)
	}
	panic(notModelled("NaN"))
}

func integer(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// truthy is a condition's value: false, null, missing and zero are false.
func truthy(v any) bool {
	return !nullish(v) && v != false && (rank(v) != 2 || exact(v).Sign() != 0)
}

func nullish(v any) bool { return v == nil || v == missing }

// as is v, which what needs to be a T.
func as[T any](v any, what string) T {
	t, ok := v.(T)
	if !ok {
		panic(notModelled("%s of a %T", what, v))
	}
	return t
}
