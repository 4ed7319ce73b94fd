package memdb

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// evalCtx is what an expression reads: $$NOW, the document ($$ROOT, and
// "$field" paths), and $$this inside $filter and $map.
type evalCtx struct {
	now  bson.DateTime
	root bson.D
	this []any // the enclosing iterations' elements, innermost last
}

// eval evaluates an aggregation expression.
func eval(expr any, c *evalCtx) any {
	switch x := expr.(type) {
	case string:
		if !strings.HasPrefix(x, "$") {
			return x
		}
		parts := strings.Split(x[1:], ".")
		if !strings.HasPrefix(x, "$$") {
			return walk(c.root, parts)
		}
		switch parts[0] {
		case "$NOW":
			return walk(c.now, parts[1:])
		case "$REMOVE":
			return walk(missing, parts[1:])
		case "$ROOT", "$CURRENT":
			return walk(c.root, parts[1:])
		case "$this":
			if len(c.this) > 0 {
				return walk(c.this[len(c.this)-1], parts[1:])
			}
		}
		panic(notModelled("variable %s", x))
	case bson.D:
		if isOperator(x) {
			if len(x) != 1 {
				panic(notModelled("expression object %v", x))
			}
			return operator(x[0].Key, x[0].Value, c)
		}
		out := bson.D{}
		for _, e := range x {
			if strings.ContainsAny(e.Key, ".$") {
				panic(notModelled("object field %q", e.Key))
			}
			out = put(out, e.Key, eval(e.Value, c))
		}
		return out
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			if v := eval(e, c); v != missing {
				out[i] = v
			} // else null, as an array holds no missing value
		}
		return out
	}
	return expr
}

// walk follows a field path through documents; paths through arrays are
// not modelled.
func walk(v any, parts []string) any {
	for _, p := range parts {
		switch x := v.(type) {
		case bson.D:
			v = get(x, p)
		case bson.A:
			panic(notModelled("path through an array"))
		default:
			return missing
		}
	}
	return v
}

func operator(name string, arg any, c *evalCtx) any {
	switch name {
	case "$literal":
		return arg
	case "$filter", "$map":
		return iterate(name, as[bson.D](arg, name), c)
	}
	args, ok := arg.(bson.A)
	if !ok {
		args = bson.A{arg}
	}
	vals := func() []any {
		out := make([]any, len(args))
		for i, a := range args {
			out[i] = eval(a, c)
		}
		return out
	}
	arity := func(want int) {
		if len(args) != want {
			panic(notModelled("%s with %d arguments", name, len(args)))
		}
	}
	switch name {
	case "$cond":
		arity(3)
		if truthy(eval(args[0], c)) {
			return eval(args[1], c)
		}
		return eval(args[2], c)
	case "$ifNull":
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
	case "$not":
		arity(1)
		return !truthy(eval(args[0], c))
	case "$eq", "$ne", "$lt", "$lte", "$gt", "$gte":
		arity(2)
		v := vals()
		return compares(name, compare(v[0], v[1]))
	case "$type":
		arity(1)
		return typeName(eval(args[0], c))
	case "$add", "$multiply":
		return arithmetic(name, vals())
	case "$toLong":
		arity(1)
		switch v := eval(args[0], c).(type) {
		case bson.DateTime:
			return int64(v)
		case int32, int64:
			n, _ := integer(v)
			return n
		default:
			panic(notModelled("$toLong of a %s", typeName(v)))
		}
	case "$min", "$max":
		var best any // null if every value is null or missing
		for _, v := range vals() {
			if r := compare(v, best); !nullish(v) && (best == nil || (name == "$max" && r > 0) || (name == "$min" && r < 0)) {
				best = v
			}
		}
		return best
	case "$concat", "$concatArrays":
		var s string
		arr := bson.A{}
		for _, v := range vals() {
			switch x := v.(type) {
			case string:
				s += x
			case bson.A:
				arr = append(arr, x...)
			}
			if want := map[string]string{"$concat": "string", "$concatArrays": "array"}[name]; typeName(v) != want {
				panic(notModelled("%s of a %s", name, typeName(v)))
			}
		}
		if name == "$concat" {
			return s
		}
		return arr
	case "$size":
		arity(1)
		return int32(len(as[bson.A](eval(args[0], c), name)))
	case "$in":
		arity(2)
		v := vals()
		for _, el := range as[bson.A](v[1], name) {
			if equal(v[0], el) {
				return true
			}
		}
		return false
	case "$mergeObjects":
		out := bson.D{}
		for _, v := range vals() {
			if !nullish(v) {
				for _, e := range as[bson.D](v, name) {
					out = put(out, e.Key, e.Value)
				}
			}
		}
		return out
	}
	panic(notModelled("expression operator %s", name))
}

func compares(op string, r int) bool {
	return map[string]bool{"$eq": r == 0, "$ne": r != 0, "$lt": r < 0, "$lte": r <= 0, "$gt": r > 0, "$gte": r >= 0}[op]
}

// iterate is $filter and $map, over $$this.
func iterate(name string, spec bson.D, c *evalCtx) any {
	body := map[string]string{"$filter": "cond", "$map": "in"}[name]
	for _, e := range spec {
		if e.Key != "input" && e.Key != body {
			panic(notModelled("%s option %s", name, e.Key))
		}
	}
	out := bson.A{}
	for _, el := range as[bson.A](eval(get(spec, "input"), c), name) {
		v := eval(get(spec, body), &evalCtx{now: c.now, root: c.root, this: append(c.this[:len(c.this):len(c.this)], el)})
		if name == "$map" {
			out = append(out, v)
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
	var date *bson.DateTime
	acc, wide, isFloat, facc := int64(0), false, false, 0.0
	if name == "$multiply" {
		acc, facc = 1, 1
	}
	for _, v := range vals {
		if nullish(v) {
			return nil
		}
		if d, ok := v.(bson.DateTime); ok && date == nil && name == "$add" {
			date = &d
			continue
		}
		i, isInt := integer(v)
		f, isF := v.(float64)
		if !isInt && !isF {
			panic(notModelled("%s of a %s", name, typeName(v)))
		} else if isInt {
			f = float64(i)
		}
		_, long := v.(int64)
		wide = wide || long
		r := acc + i
		overflow := isF || (i > 0 && r < acc) || (i < 0 && r > acc)
		if name == "$multiply" {
			r = acc * i
			overflow = isF || acc != 0 && (r/acc != i || (acc == -1 && i == -1<<63))
			facc *= f
		} else {
			facc += f
		}
		isFloat = isFloat || overflow
		acc = r
	}
	switch {
	case date != nil && isFloat:
		panic(notModelled("$add of a date past int64"))
	case date != nil:
		return *date + bson.DateTime(acc)
	case isFloat:
		return facc
	case !wide && acc == int64(int32(acc)):
		return int32(acc)
	}
	return acc
}
