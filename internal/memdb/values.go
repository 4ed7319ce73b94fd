package memdb

import (
	"cmp"
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// missingT is the value of a field that is not there: not null. $$REMOVE
// evaluates to it, $ifNull replaces it, $type names it "missing", and a
// field set to it is removed.
type missingT struct{}

var missing = missingT{}

// rank is the value's place in MongoDB's comparison order of BSON types
// (MinKey, missing, null, numbers, string, object, array, binary,
// ObjectId, bool, date, timestamp, regex, MaxKey); values of different
// ranks compare by rank.
func rank(v any) int {
	switch v.(type) {
	case bson.MinKey:
		return -1
	case missingT, bson.Undefined:
		return 0
	case nil, bson.Null:
		return 5
	case int32, int64, float64, bson.Decimal128:
		return 10
	case string, bson.Symbol:
		return 15
	case bson.D:
		return 20
	case bson.A:
		return 25
	case bson.Binary:
		return 30
	case bson.ObjectID:
		return 35
	case bool:
		return 40
	case bson.DateTime:
		return 45
	case bson.Timestamp:
		return 47
	case bson.Regex:
		return 50
	case bson.MaxKey:
		return 127
	}
	panic(notModelled("value of type %T", v))
}

// compare orders two values as MongoDB does, strings byte by byte (the
// simple collation).
func compare(a, b any) int {
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	switch x := a.(type) {
	case int32, int64, float64:
		return compareNumbers(a, b)
	case string:
		return strings.Compare(x, b.(string))
	case bool:
		y := b.(bool)
		if x == y {
			return 0
		} else if y {
			return -1
		}
		return 1
	case bson.DateTime:
		return cmp.Compare(x, b.(bson.DateTime))
	case bson.ObjectID:
		y := b.(bson.ObjectID)
		return strings.Compare(string(x[:]), string(y[:]))
	case bson.D:
		y := b.(bson.D)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := cmp.Compare(rank(x[i].Value), rank(y[i].Value)); c != 0 {
				return c
			}
			if c := strings.Compare(x[i].Key, y[i].Key); c != 0 {
				return c
			}
			if c := compare(x[i].Value, y[i].Value); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x), len(y))
	case bson.A:
		y := b.(bson.A)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := compare(x[i], y[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x), len(y))
	case missingT, nil, bson.Null, bson.MinKey, bson.MaxKey, bson.Undefined:
		return 0
	}
	panic(notModelled("comparison of %T", a))
}

func equal(a, b any) bool { return compare(a, b) == 0 }

// compareNumbers compares int32, int64 and float64 values exactly: an
// int64 token beyond 2^53 is not rounded to a double.
func compareNumbers(a, b any) int {
	ia, aInt := integer(a)
	ib, bInt := integer(b)
	if aInt && bInt {
		return cmp.Compare(ia, ib)
	}
	fa, fb := float(a), float(b)
	switch {
	case math.IsNaN(fa) || math.IsNaN(fb): // NaN sorts below every number
		return cmp.Compare(boolInt(!math.IsNaN(fa)), boolInt(!math.IsNaN(fb)))
	case aInt:
		return -compareFloatInt(fb, ia)
	case bInt:
		return compareFloatInt(fa, ib)
	}
	return cmp.Compare(fa, fb)
}

// compareFloatInt compares a double with an int64 without rounding.
func compareFloatInt(f float64, i int64) int {
	switch {
	case f < -0x1p63:
		return -1
	case f >= 0x1p63:
		return 1
	}
	t := math.Trunc(f)
	if c := cmp.Compare(int64(t), i); c != 0 {
		return c
	}
	return cmp.Compare(f, t) // the fraction decides
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
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

func float(v any) float64 {
	switch x := v.(type) {
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	}
	panic(notModelled("number of type %T", v))
}

// number is v as a double, if it is a number.
func number(v any) (float64, bool) {
	switch v.(type) {
	case int32, int64, float64:
		return float(v), true
	}
	return 0, false
}

// typeName is $type's answer.
func typeName(v any) string {
	switch v.(type) {
	case missingT:
		return "missing"
	case nil, bson.Null:
		return "null"
	case int32:
		return "int"
	case int64:
		return "long"
	case float64:
		return "double"
	case string:
		return "string"
	case bson.D:
		return "object"
	case bson.A:
		return "array"
	case bool:
		return "bool"
	case bson.DateTime:
		return "date"
	case bson.ObjectID:
		return "objectId"
	}
	panic(notModelled("$type of %T", v))
}

// truthy is a condition's value: false, null, missing and zero are false.
func truthy(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case nil, missingT, bson.Null, bson.Undefined:
		return false
	}
	if n, ok := number(v); ok {
		return n != 0
	}
	return true
}

func nullish(v any) bool {
	switch v.(type) {
	case nil, missingT, bson.Null, bson.Undefined:
		return true
	}
	return false
}
