package memdb

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// missingT is the value of a field that is not there: not null. $$REMOVE
// evaluates to it, $ifNull replaces it, $type names it "missing", and a
// field set to it is removed.
type missingT struct{}

var missing = missingT{}

// rank is the value's place in MongoDB's comparison order of BSON types
// (missing, null, numbers, string, object, array, bool, date); values of
// different ranks compare by rank. The statements use no other type.
func rank(v any) int {
	switch v.(type) {
	case missingT:
		return 0
	case nil:
		return 1
	case int32, int64, float64:
		return 2
	case string:
		return 3
	case bson.D:
		return 4
	case bson.A:
		return 5
	case bool:
		return 8
	case bson.DateTime:
		return 9
	}
	panic(notModelled("value of type %T", v))
}

// compare orders two values as MongoDB does, strings byte by byte (the
// simple collation), numbers exactly (an int64 beyond 2^53 is not rounded
// to a double).
func compare(a, b any) int {
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	switch x := a.(type) {
	case int32, int64, float64:
		return exact(a).Cmp(exact(b))
	case string:
		return strings.Compare(x, b.(string))
	case bson.DateTime:
		return cmp.Compare(x, b.(bson.DateTime))
	case missingT, nil:
		return 0
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

// number is v as a double, if it is a number.
func number(v any) (float64, bool) {
	if i, ok := integer(v); ok {
		return float64(i), true
	}
	f, ok := v.(float64)
	return f, ok
}

var typeNames = map[string]string{"memdb.missingT": "missing", "<nil>": "null", "int32": "int", "int64": "long",
	"float64": "double", "string": "string", "bson.D": "object", "bson.A": "array", "bool": "bool", "bson.DateTime": "date"}

// typeName is $type's answer.
func typeName(v any) string {
	if name, ok := typeNames[fmt.Sprintf("%T", v)]; ok {
		return name
	}
	panic(notModelled("$type of %T", v))
}

// truthy is a condition's value: false, null, missing and zero are false.
func truthy(v any) bool {
	if n, ok := number(v); ok {
		return n != 0
	}
	if b, ok := v.(bool); ok {
		return b
	}
	return !nullish(v)
}

func nullish(v any) bool { return v == nil || v == missing }
