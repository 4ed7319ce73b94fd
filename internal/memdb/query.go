package memdb

import (
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// matches reports whether document d matches the query filter.
func matches(d bson.D, filter bson.D, now bson.DateTime) bool {
	for _, e := range filter {
		switch e.Key {
		case "$or", "$and":
			subs, ok := e.Value.(bson.A)
			if !ok || len(subs) == 0 {
				panic(failure{e.Key + " needs a non-empty array"})
			}
			some := slices.ContainsFunc([]any(subs), func(s any) bool { return matches(d, asDoc(s, e.Key), now) })
			all := !slices.ContainsFunc([]any(subs), func(s any) bool { return !matches(d, asDoc(s, e.Key), now) })
			if (e.Key == "$or" && !some) || (e.Key == "$and" && !all) {
				return false
			}
		case "$expr":
			if !truthy(eval(e.Value, &evalCtx{now: now, root: d})) {
				return false
			}
		default:
			if strings.HasPrefix(e.Key, "$") {
				panic(notModelled("query operator %s", e.Key))
			}
			leaves := pathValues(d, strings.Split(e.Key, "."))
			if spec, ok := e.Value.(bson.D); ok && isOperator(spec) {
				for _, o := range spec {
					if !matchOp(leaves, o, now) {
						return false
					}
				}
			} else if !matchOp(leaves, bson.E{Key: "$eq", Value: e.Value}, now) {
				return false
			}
		}
	}
	return true
}

// pathValues are the values a query's dotted path reaches: through an
// array, by index, and into each of its documents ({"holders.id": x}
// matches a document whose holders has one with id x).
func pathValues(v any, parts []string) []any {
	if len(parts) == 0 {
		return []any{v}
	}
	switch x := v.(type) {
	case bson.D:
		if f := get(x, parts[0]); f != missing {
			return pathValues(f, parts[1:])
		}
	case bson.A:
		var out []any
		if i, err := strconv.Atoi(parts[0]); err == nil && i >= 0 && i < len(x) {
			out = append(out, pathValues(x[i], parts[1:])...)
		}
		for _, el := range x {
			if doc, ok := el.(bson.D); ok {
				out = append(out, pathValues(doc, parts)...)
			}
		}
		return out
	}
	return nil
}

// matchOp reports whether one of the values a path reaches satisfies a
// query operator; an array satisfies it also by one of its elements.
func matchOp(leaves []any, o bson.E, now bson.DateTime) bool {
	var candidates []any
	for _, l := range leaves {
		candidates = append(candidates, l)
		if a, ok := l.(bson.A); ok {
			candidates = append(candidates, a...)
		}
	}
	eq := func(want any) bool {
		if _, ok := want.(bson.Regex); ok {
			panic(notModelled("regular expression in a query"))
		}
		if nullish(want) { // null matches a missing field too
			return len(leaves) == 0 || slices.ContainsFunc(candidates, nullish)
		}
		return slices.ContainsFunc(candidates, func(c any) bool { return equal(c, want) })
	}
	switch o.Key {
	case "$eq":
		return eq(o.Value)
	case "$ne":
		return !eq(o.Value)
	case "$in", "$nin":
		list, ok := o.Value.(bson.A)
		if !ok {
			panic(failure{o.Key + " needs an array"})
		}
		return slices.ContainsFunc([]any(list), eq) == (o.Key == "$in")
	case "$exists":
		return truthy(o.Value) == (len(leaves) > 0)
	case "$gt", "$gte", "$lt", "$lte":
		if nullish(o.Value) {
			panic(notModelled("%s null", o.Key))
		}
		// Type-bracketed: a string range never matches a number.
		return slices.ContainsFunc(candidates, func(c any) bool {
			if rank(c) != rank(o.Value) {
				return false
			}
			r := compare(c, o.Value)
			return map[string]bool{"$gt": r > 0, "$gte": r >= 0, "$lt": r < 0, "$lte": r <= 0}[o.Key]
		})
	case "$elemMatch":
		q := asDoc(o.Value, "$elemMatch")
		if isOperator(q) {
			panic(notModelled("$elemMatch of operators on the elements"))
		}
		return slices.ContainsFunc(leaves, func(l any) bool {
			a, _ := l.(bson.A)
			return slices.ContainsFunc([]any(a), func(el any) bool { d, ok := el.(bson.D); return ok && matches(d, q, now) })
		})
	}
	panic(notModelled("query operator %s", o.Key))
}

// project applies a projection, of a find or a $project stage: _id, the
// included fields in the document's order, then the computed ones in the
// projection's order; $slice in place, $elemMatch's first matching element
// last.
func project(d bson.D, spec bson.D, now bson.DateTime) bson.D {
	keepID, including := true, false
	whole := map[string]bool{}
	nested := map[string][]string{}
	slices_ := map[string]int{}
	var computed, elemMatch bson.D
	for _, e := range spec {
		if sub, ok := e.Value.(bson.D); ok && len(sub) == 1 && (sub[0].Key == "$slice" || sub[0].Key == "$elemMatch") {
			if sub[0].Key == "$slice" {
				n, ok := integer(sub[0].Value)
				if !ok || n == 0 {
					panic(notModelled("$slice %v", sub[0].Value))
				}
				slices_[e.Key] = int(n)
			} else {
				including = true
				elemMatch = append(elemMatch, bson.E{Key: e.Key, Value: sub[0].Value})
			}
			continue
		}
		_, isNum := number(e.Value)
		_, isBool := e.Value.(bool)
		switch {
		case (isNum || isBool) && !truthy(e.Value) && e.Key == "_id":
			keepID = false
		case isNum || isBool:
			if !truthy(e.Value) {
				panic(notModelled("exclusion projection of %s", e.Key))
			}
			including = true
			if head, rest, dotted := strings.Cut(e.Key, "."); dotted {
				nested[head] = append(nested[head], rest)
			} else {
				whole[e.Key] = true
			}
		default:
			if strings.Contains(e.Key, ".") {
				panic(notModelled("computed projection of path %q", e.Key))
			}
			including = true
			computed = append(computed, e)
		}
	}
	out := bson.D{}
	for _, f := range d {
		v := f.Value
		switch n, sliced := slices_[f.Key]; {
		case f.Key == "_id":
			if !keepID || get(computed, "_id") != missing {
				continue
			}
		case sliced:
			if a, ok := v.(bson.A); ok {
				if n > 0 {
					v = a[:min(n, len(a))]
				} else {
					v = a[max(0, len(a)+n):]
				}
			}
		case whole[f.Key] || !including:
		case nested[f.Key] != nil:
			if v = projectPaths(v, nested[f.Key]); v == missing {
				continue
			}
		default:
			continue
		}
		out = append(out, bson.E{Key: f.Key, Value: v})
	}
	c := &evalCtx{now: now, root: d}
	for _, e := range computed {
		out = put(out, e.Key, eval(e.Value, c))
	}
	for _, e := range elemMatch {
		a, _ := get(d, e.Key).(bson.A)
		q := asDoc(e.Value, "$elemMatch")
		if i := slices.IndexFunc([]any(a), func(el any) bool { x, ok := el.(bson.D); return ok && matches(x, q, now) }); i >= 0 {
			out = put(out, e.Key, bson.A{a[i]})
		}
	}
	return out
}

// projectPaths keeps the dotted paths of v: of a document, its fields; of
// an array, of each document in it (other elements go).
func projectPaths(v any, paths []string) any {
	switch x := v.(type) {
	case bson.D:
		spec := bson.D{{Key: "_id", Value: false}}
		if get(x, "_id") != missing && slices.Contains(paths, "_id") {
			spec = nil
		}
		for _, p := range paths {
			spec = append(spec, bson.E{Key: p, Value: true})
		}
		return project(x, spec, 0)
	case bson.A:
		out := bson.A{}
		for _, el := range x {
			if r := projectPaths(el, paths); r != missing {
				out = append(out, r)
			}
		}
		return out
	}
	return missing
}
