package memdb

import (
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// evalCtx is what an expression reads: $$NOW, the document ($$ROOT, and
// "$field" paths), and the variables of $filter and $map ($$this).
type evalCtx struct {
	now  bson.DateTime
	root bson.D
	vars map[string]any
}

func (c *evalCtx) with(name string, v any) *evalCtx {
	vars := map[string]any{name: v}
	for k, x := range c.vars {
		if k != name {
			vars[k] = x
		}
	}
	return &evalCtx{now: c.now, root: c.root, vars: vars}
}

// eval evaluates an aggregation expression.
func eval(expr any, c *evalCtx) any {
	switch x := expr.(type) {
	case string:
		switch {
		case strings.HasPrefix(x, "$$"):
			parts := strings.Split(x[2:], ".")
			return walk(variable(parts[0], c), parts[1:])
		case strings.HasPrefix(x, "$"):
			return walk(c.root, strings.Split(x[1:], "."))
		}
		return x
	case bson.D:
		if isOperator(x) {
			if len(x) != 1 {
				panic(failure{"an expression object has one operator"})
			}
			return operator(x[0].Key, x[0].Value, c)
		}
		var out bson.D
		for _, e := range x {
			if strings.ContainsAny(e.Key, ".$") {
				panic(notModelled("object field %q", e.Key))
			}
			if v := eval(e.Value, c); v != missing {
				out = append(out, bson.E{Key: e.Key, Value: v})
			}
		}
		if out == nil {
			out = bson.D{}
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

func variable(name string, c *evalCtx) any {
	switch name {
	case "NOW":
		return c.now
	case "REMOVE":
		return missing
	case "ROOT", "CURRENT":
		return c.root
	}
	if v, ok := c.vars[name]; ok {
		return v
	}
	panic(notModelled("variable $$%s", name))
}

// walk follows a field path: through an array, it collects the path's
// values of the documents in it.
func walk(v any, parts []string) any {
	if len(parts) == 0 {
		return v
	}
	switch x := v.(type) {
	case bson.D:
		return walk(get(x, parts[0]), parts[1:])
	case bson.A:
		out := bson.A{}
		for _, el := range x {
			switch el.(type) {
			case bson.D:
				if r := walk(el, parts); r != missing {
					out = append(out, r)
				}
			case bson.A:
				panic(notModelled("path %v through nested arrays", parts))
			}
		}
		return out
	}
	return missing
}

func operator(name string, arg any, c *evalCtx) any {
	switch name {
	case "$literal":
		return arg
	case "$filter", "$map":
		return iterate(name, asDoc(arg, name), c)
	}
	var args bson.A
	if a, ok := arg.(bson.A); ok {
		args = a
	} else {
		args = bson.A{arg}
	}
	n := len(args)
	at := func(i int) any { return eval(args[i], c) }
	arity := func(want int) {
		if n != want {
			panic(failure{name + ": wrong number of arguments"})
		}
	}
	switch name {
	case "$cond":
		if d, ok := arg.(bson.D); ok {
			args, n = bson.A{get(d, "if"), get(d, "then"), get(d, "else")}, 3
		}
		arity(3)
		if truthy(at(0)) {
			return at(1)
		}
		return at(2)
	case "$ifNull":
		for i := 0; i < n-1; i++ {
			if v := at(i); !nullish(v) {
				return v
			}
		}
		return at(n - 1)
	case "$and", "$or":
		for i := range n {
			if truthy(at(i)) == (name == "$or") {
				return name == "$or"
			}
		}
		return name == "$and"
	case "$not":
		arity(1)
		return !truthy(at(0))
	case "$eq", "$ne", "$lt", "$lte", "$gt", "$gte":
		arity(2)
		r := compare(at(0), at(1))
		return map[string]bool{"$eq": r == 0, "$ne": r != 0, "$lt": r < 0, "$lte": r <= 0, "$gt": r > 0, "$gte": r >= 0}[name]
	case "$type":
		arity(1)
		return typeName(at(0))
	case "$add", "$multiply":
		vals := make([]any, n)
		for i := range n {
			vals[i] = at(i)
		}
		return arithmetic(name, vals)
	case "$toLong":
		arity(1)
		return toLong(at(0))
	case "$min", "$max":
		vals := []any{}
		for i := range n {
			vals = append(vals, at(i))
		}
		if a, ok := vals[0].(bson.A); ok && n == 1 {
			vals = a
		}
		var best any // null if every value is null or missing
		for _, v := range vals {
			if nullish(v) {
				continue
			}
			if r := compare(v, best); best == nil || (name == "$max" && r > 0) || (name == "$min" && r < 0) {
				best = v
			}
		}
		return best
	case "$concat", "$concatArrays":
		var s string
		arr := bson.A{}
		for i := range n {
			switch v := at(i).(type) {
			case string:
				s += v
				if name != "$concat" {
					panic(failure{"$concatArrays of a string"})
				}
			case bson.A:
				arr = append(arr, v...)
				if name != "$concatArrays" {
					panic(failure{"$concat of an array"})
				}
			default:
				if nullish(v) {
					return nil
				}
				panic(failure{name + " of a " + typeName(v)})
			}
		}
		if name == "$concat" {
			return s
		}
		return arr
	case "$size":
		arity(1)
		a, ok := at(0).(bson.A)
		if !ok {
			panic(failure{"$size of a non-array"})
		}
		return int32(len(a))
	case "$in":
		arity(2)
		x := at(0)
		a, ok := at(1).(bson.A)
		if !ok {
			panic(failure{"$in needs an array"})
		}
		for _, el := range a {
			if equal(x, el) {
				return true
			}
		}
		return false
	case "$mergeObjects":
		out := bson.D{}
		for i := range n {
			v := at(i)
			if nullish(v) {
				continue
			}
			d, ok := v.(bson.D)
			if !ok {
				panic(failure{"$mergeObjects of a " + typeName(v)})
			}
			for _, e := range d {
				out = put(out, e.Key, e.Value)
			}
		}
		return out
	}
	panic(notModelled("expression operator %s", name))
}

// iterate is $filter and $map.
func iterate(name string, spec bson.D, c *evalCtx) any {
	in := eval(get(spec, "input"), c)
	as := "this"
	if v, ok := get(spec, "as").(string); ok {
		as = v
	}
	for _, e := range spec {
		if e.Key != "input" && e.Key != "as" && e.Key != map[string]string{"$filter": "cond", "$map": "in"}[name] {
			panic(notModelled("%s option %s", name, e.Key))
		}
	}
	if nullish(in) {
		return nil
	}
	arr, ok := in.(bson.A)
	if !ok {
		panic(failure{name + " of a non-array"})
	}
	out := bson.A{}
	for _, el := range arr {
		ec := c.with(as, el)
		if name == "$filter" {
			if truthy(eval(get(spec, "cond"), ec)) {
				out = append(out, el)
			}
		} else {
			v := eval(get(spec, "in"), ec)
			if v == missing {
				v = nil
			}
			out = append(out, v)
		}
	}
	return out
}

// arithmetic is $add and $multiply: int32 while it fits, else int64, else
// a double; a double makes a double; $add of a date and numbers is a date
// that many milliseconds on. Null or missing makes null.
func arithmetic(name string, vals []any) any {
	var date *bson.DateTime
	acc, wide, isFloat := int64(0), false, false
	facc := 0.0
	if name == "$multiply" {
		acc, facc = 1, 1
	}
	for _, v := range vals {
		if nullish(v) {
			return nil
		}
		switch x := v.(type) {
		case bson.DateTime:
			if date != nil || name != "$add" {
				panic(failure{name + " of a date and a date, or multiplying a date"})
			}
			date = &x
			continue
		case int64:
			wide = true
		case float64:
			isFloat = true
		case int32:
		default:
			panic(failure{name + " of a " + typeName(v)})
		}
		f := float(v)
		if name == "$add" {
			facc += f
		} else {
			facc *= f
		}
		if i, ok := integer(v); ok && !isFloat {
			r, overflow := acc+i, false
			if name == "$add" {
				overflow = (i > 0 && r < acc) || (i < 0 && r > acc)
			} else {
				r = acc * i
				overflow = acc != 0 && (r/acc != i || (acc == -1 && i == math.MinInt64))
			}
			if overflow {
				isFloat = true
			}
			acc = r
		}
	}
	switch {
	case date != nil && isFloat:
		panic(notModelled("$add of a date and a double"))
	case date != nil:
		return *date + bson.DateTime(acc)
	case isFloat:
		return facc
	case !wide && acc == int64(int32(acc)):
		return int32(acc)
	}
	return acc
}

func toLong(v any) any {
	switch x := v.(type) {
	case bson.DateTime:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case bool:
		return int64(boolInt(x))
	case float64:
		if math.IsNaN(x) || x < -0x1p63 || x >= 0x1p63 {
			panic(failure{"$toLong of a double out of range"})
		}
		return int64(x)
	}
	if nullish(v) {
		return nil
	}
	panic(notModelled("$toLong of a %s", typeName(v)))
}
