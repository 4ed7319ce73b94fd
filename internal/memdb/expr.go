package memdb

import (
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// vars are what an expression reads, by name: NOW, REMOVE, ROOT and
// CURRENT (the document, whose fields "$field" paths read), and this
// inside $filter and $map.
type vars map[string]any

func newVars(now bson.DateTime, root bson.D) vars {
	return vars{"NOW": now, "REMOVE": missing, "ROOT": root, "CURRENT": root}
}

// eval evaluates an aggregation expression.
func eval(expr any, c vars) any {
	switch x := expr.(type) {
	case string:
		name, isVar := strings.CutPrefix(x, "$$")
		if !isVar && !strings.HasPrefix(x, "$") {
			return x
		} else if !isVar {
			name = "CURRENT." + x[1:]
		}
		parts := strings.Split(name, ".")
		v, ok := c[parts[0]]
		if !ok {
			panic(notModelled("variable %s", x))
		}
		for _, p := range parts[1:] { // a path through documents
			if _, isArr := v.(bson.A); isArr {
				panic(notModelled("path through an array"))
			}
			d, _ := v.(bson.D)
			v = get(d, p)
		}
		return v
	case bson.D:
		if isOperator(x) {
			if len(x) != 1 {
				panic(notModelled("expression object %v", x))
			}
			return operator(x[0].Key, x[0].Value, c)
		}
		return setFields(bson.D{}, x, c)
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = orNull(eval(e, c)) // an array holds no missing value
		}
		return out
	}
	return expr
}

// operator evaluates an expression operator: those that evaluate their
// arguments only as far as they need them here, the others by their
// function of the values of their arguments.
func operator(name string, arg any, c vars) any {
	args, ok := arg.(bson.A)
	if !ok {
		args = bson.A{arg}
	}
	switch name {
	case "$literal":
		return arg
	case "$filter", "$map":
		return iterate(name, as[bson.D](arg, name), c)
	case "$cond":
		checkArity(name, args, 3)
		if truthy(eval(args[0], c)) {
			return eval(args[1], c)
		}
		return eval(args[2], c)
	case "$ifNull":
		if len(args) < 2 {
			panic(notModelled("$ifNull with %d arguments", len(args)))
		}
		for _, a := range args[:len(args)-1] {
			if v := eval(a, c); !nullish(v) {
				return v
			}
		}
		return eval(args[len(args)-1], c)
	case "$and", "$or":
		for _, a := range args {
			if truthy(eval(a, c)) == (name == "$or") {
				return name == "$or"
			}
		}
		return name == "$and"
	}
	op, ok := operators[name]
	if !ok {
		panic(notModelled("expression operator %s", name))
	}
	checkArity(name, args, op.arity)
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = eval(a, c)
	}
	return op.f(name, vals)
}

// checkArity refuses an operator given other than want arguments (-1:
// any number).
func checkArity(name string, args bson.A, want int) {
	if want >= 0 && len(args) != want {
		panic(notModelled("%s with %d arguments", name, len(args)))
	}
}

// operators are the expression operators of the values of their
// arguments, with their number of arguments (-1: any).
var operators = map[string]struct {
	arity int
	f     func(name string, v []any) any
}{
	"$eq": {2, comparison}, "$ne": {2, comparison}, "$lt": {2, comparison},
	"$lte": {2, comparison}, "$gt": {2, comparison}, "$gte": {2, comparison},
	"$not":  {1, func(_ string, v []any) any { return !truthy(v[0]) }},
	"$type": {1, func(_ string, v []any) any { return typeName(v[0]) }},
	"$size": {1, func(name string, v []any) any { return int32(len(as[bson.A](v[0], name))) }},
	"$in": {2, func(name string, v []any) any {
		return slices.ContainsFunc(as[bson.A](v[1], name), func(el any) bool { return equal(v[0], el) })
	}},
	"$toLong": {1, func(_ string, v []any) any {
		if d, ok := v[0].(bson.DateTime); ok {
			return int64(d)
		} else if i, ok := integer(v[0]); ok {
			return i
		}
		panic(notModelled("$toLong of a %s", typeName(v[0])))
	}},
	"$add": {-1, arithmetic}, "$multiply": {-1, arithmetic},
	"$min": {-1, extreme}, "$max": {-1, extreme},
	"$range": {2, func(name string, v []any) any {
		from, ok1 := integer(v[0])
		to, ok2 := integer(v[1])
		if !ok1 || !ok2 {
			panic(notModelled("%s of a %s and a %s", name, typeName(v[0]), typeName(v[1])))
		}
		out := bson.A{}
		for i := from; i < to; i++ {
			out = append(out, int32(i))
		}
		return out
	}},
	"$slice": {2, func(name string, v []any) any { // [array, n]: its first n, or last -n
		n, ok := integer(v[1])
		if !ok {
			panic(notModelled("%s of a count of a %s", name, typeName(v[1])))
		}
		if nullish(v[0]) {
			return nil
		}
		arr := as[bson.A](v[0], name)
		if n < 0 {
			return append(bson.A{}, arr[len(arr)-min(len(arr), int(-n)):]...)
		}
		return append(bson.A{}, arr[:min(len(arr), int(n))]...)
	}},
	"$concat": {-1, func(name string, v []any) any { return strings.Join(allAs[string](name, v), "") }},
	"$concatArrays": {-1, func(name string, v []any) any {
		return append(bson.A{}, slices.Concat(allAs[bson.A](name, v)...)...)
	}},
	"$mergeObjects": {-1, func(name string, v []any) any {
		out := bson.D{}
		for _, e := range slices.Concat(allAs[bson.D](name, slices.DeleteFunc(v, nullish))...) {
			out = put(out, e.Key, e.Value)
		}
		return out
	}},
}

func comparison(name string, v []any) any { return compares(name, compare(v[0], v[1])) }

func compares(op string, r int) bool {
	return map[string]bool{"$eq": r == 0, "$ne": r != 0, "$lt": r < 0, "$lte": r <= 0, "$gt": r > 0, "$gte": r >= 0}[op]
}

// allAs is v, whose values name needs to be of type T.
func allAs[T any](name string, v []any) []T {
	out := make([]T, len(v))
	for i, x := range v {
		out[i] = as[T](x, name)
	}
	return out
}

// extreme is $min and $max of several values: null if every value is
// null or missing. Of one array, the server's are of its elements.
func extreme(name string, v []any) any {
	if len(v) == 1 && typeName(v[0]) == "array" {
		panic(notModelled("%s of one array", name))
	}
	var best any
	sign := map[string]int{"$min": -1, "$max": 1}[name]
	for _, x := range v {
		if !nullish(x) && (best == nil || compare(x, best)*sign > 0) {
			best = x
		}
	}
	return best
}

// iterate is $filter and $map, over $$this.
func iterate(name string, spec bson.D, c vars) any {
	body := map[string]string{"$filter": "cond", "$map": "in"}[name]
	for _, e := range spec {
		if e.Key != "input" && e.Key != body {
			panic(notModelled("%s option %s", name, e.Key))
		}
	}
	out := bson.A{}
	for _, el := range as[bson.A](eval(get(spec, "input"), c), name) {
		inner := maps.Clone(c)
		inner["this"] = el
		if v := eval(get(spec, body), inner); name == "$map" {
			out = append(out, orNull(v)) // an array holds no missing value
		} else if truthy(v) {
			out = append(out, el)
		}
	}
	return out
}

// arithmetic is $add and $multiply: int32 while it fits, else int64; past
// int64, a double, as the server goes on in doubles; $add of a date and
// numbers is a date that many milliseconds on. Null or missing makes null.
func arithmetic(name string, vals []any) any {
	mul := name == "$multiply"
	acc, f, dates, wide, isFloat := big.NewInt(0), 0.0, 0, false, false
	if mul {
		acc, f = big.NewInt(1), 1
	}
	for _, v := range vals {
		if d, ok := v.(bson.DateTime); ok && !mul {
			v, dates = int64(d), dates+1
		}
		if nullish(v) {
			return nil
		} else if rank(v) != 2 || dates > 1 {
			panic(notModelled("%s of a %s", name, typeName(v)))
		}
		x, _ := exact(v).Float64()
		i, isInt := integer(v)
		if mul {
			acc.Mul(acc, big.NewInt(i))
			f *= x
		} else {
			acc.Add(acc, big.NewInt(i))
			f += x
		}
		_, long := v.(int64)
		wide, isFloat = wide || long, isFloat || !isInt || !acc.IsInt64()
	}
	return arithmeticResult(acc.Int64(), f, dates > 0, wide, isFloat)
}

// arithmeticResult is the type the server gives a result: exactly n, or f
// where it went on in doubles; a date if an operand was one.
func arithmeticResult(n int64, f float64, date, wide, isFloat bool) any {
	switch {
	case date && isFloat:
		panic(notModelled("$add of a date past int64"))
	case date:
		return bson.DateTime(n)
	case isFloat:
		return f
	case !wide && n == int64(int32(n)):
		return int32(n)
	}
	return n
}

// parseStage refuses what the server refuses of stage s when it parses
// the statement, before it reads a document, and so also in a branch it
// would not take: a $map without input or in, a $filter without input or
// cond (the code and message of expression.cpp's checks).
func parseStage(s bson.E) {
	switch s.Key {
	case "$set", "$project", "$replaceWith":
		parseExpr(s.Key, s.Value)
	}
}

// required are the arguments each iterating operator cannot do without,
// in the order the server checks them, with its error's code.
var required = map[string][]struct {
	arg  string
	code int32
}{
	"$map":    {{"input", 16880}, {"in", 16882}},
	"$filter": {{"input", 28648}, {"cond", 28650}},
}

// parseExpr is parseStage of an expression, or of a part of one, of the
// stage named stage.
func parseExpr(stage string, expr any) {
	switch x := expr.(type) {
	case bson.D:
		if len(x) == 1 && x[0].Key == "$literal" {
			return
		}
		if len(x) == 1 {
			if args, ok := x[0].Value.(bson.D); ok {
				for _, r := range required[x[0].Key] {
					if get(args, r.arg) == missing {
						panic(refusal{r.code, fmt.Sprintf("Invalid %s :: caused by :: Missing '%s' parameter to %s", stage, r.arg, x[0].Key)})
					}
				}
			}
		}
		for _, e := range x {
			parseExpr(stage, e.Value)
		}
	case bson.A:
		for _, e := range x {
			parseExpr(stage, e)
		}
	}
}
