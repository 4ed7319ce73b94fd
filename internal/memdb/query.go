package memdb

import (
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// matches reports whether document d matches the query filter.
func matches(d bson.D, filter bson.D) bool {
	for _, e := range filter {
		spec, ok := e.Value.(bson.D)
		if !ok || !isOperator(spec) {
			spec = bson.D{{Key: "$eq", Value: e.Value}}
		}
		switch leaves := pathValues(d, strings.Split(e.Key, ".")); {
		case e.Key == "$or":
			if !slices.ContainsFunc(as[bson.A](e.Value, e.Key), func(s any) bool { return matches(d, as[bson.D](s, e.Key)) }) {
				return false
			}
		case strings.HasPrefix(e.Key, "$"):
			panic(notModelled("query operator %s", e.Key))
		case slices.ContainsFunc(spec, func(o bson.E) bool { return !matchOp(leaves, o) }):
			return false
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
			out = pathValues(x[i], parts[1:])
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
func matchOp(leaves []any, o bson.E) bool {
	switch o.Key {
	case "$in":
		return slices.ContainsFunc(as[bson.A](o.Value, o.Key), func(v any) bool { return matchOp(leaves, bson.E{Key: "$eq", Value: v}) })
	case "$exists":
		return truthy(o.Value) == (len(leaves) > 0)
	case "$elemMatch":
		return slices.ContainsFunc(leaves, func(l any) bool { return firstMatch(l, o.Value) >= 0 })
	case "$eq", "$gt", "$gte", "$lt", "$lte":
		if nullish(o.Value) {
			panic(notModelled("a query for null"))
		}
	default:
		panic(notModelled("query operator %s", o.Key))
	}
	for _, l := range leaves {
		elems, _ := l.(bson.A)
		// Type-bracketed: a string range never matches a number.
		if slices.ContainsFunc(append(bson.A{l}, elems...), func(v any) bool {
			return rank(v) == rank(o.Value) && compares(o.Key, compare(v, o.Value))
		}) {
			return true
		}
	}
	return false
}

// firstMatch is the index of the first document of array a that query q
// ($elemMatch's) matches, or -1.
func firstMatch(a, q any) int {
	f := as[bson.D](q, "$elemMatch")
	if isOperator(f) {
		panic(notModelled("$elemMatch of operators on the elements"))
	}
	arr, _ := a.(bson.A)
	return slices.IndexFunc(arr, func(el any) bool { d, ok := el.(bson.D); return ok && matches(d, f) })
}

// project applies an inclusion projection, of a find or a $project stage:
// _id, the included fields in the document's order (an array of
// {$slice: -n} by its last n elements), then the computed ones in the
// projection's order, then an $elemMatch's first matching element.
func project(d bson.D, spec bson.D, c vars) bson.D {
	p := projection{keep: map[string][]string{"_id": {""}}, last: map[string]int{}}
	for _, e := range spec {
		p.add(e)
	}
	if len(p.last) > 0 && !p.inclusion && p.computed == nil && p.elemMatch == nil {
		panic(notModelled("$slice without an inclusion: the server keeps every field"))
	}
	out := bson.D{}
	for _, f := range d {
		if v := p.kept(f); v != missing {
			out = append(out, bson.E{Key: f.Key, Value: v})
		}
	}
	for _, e := range p.computed {
		out = put(out, e.Key, eval(e.Value, c))
	}
	for _, e := range p.elemMatch {
		if i := firstMatch(get(d, e.Key), e.Value); i >= 0 {
			out = put(out, e.Key, bson.A{get(d, e.Key).(bson.A)[i]})
		}
	}
	return out
}

// projection is an inclusion projection, read field by field.
type projection struct {
	keep      map[string][]string // a field's kept subfields ("": whole)
	last      map[string]int      // a field's {$slice: -n}: n
	computed  bson.D              // fields of expressions
	elemMatch bson.D              // fields of an $elemMatch
	inclusion bool                // a field is included by name
}

// add reads one field e of the projection. A number or a boolean includes
// or excludes; an object of one operator applies it; any other value is
// an expression, of a top-level field that is not _id.
func (p *projection) add(e bson.E) {
	field, rest, dotted := strings.Cut(e.Key, ".")
	op, arg := "", any(nil)
	if sub, _ := e.Value.(bson.D); len(sub) == 1 && !dotted {
		op, arg = sub[0].Key, sub[0].Value
	}
	n, _ := integer(arg)
	flag := rank(e.Value) == 2 || e.Value == true || e.Value == false // includes or excludes
	switch {
	case op == "$slice" && n < 0:
		p.keep[field], p.last[field] = []string{""}, int(-n)
	case op == "$elemMatch":
		p.elemMatch = append(p.elemMatch, bson.E{Key: e.Key, Value: arg})
	case flag && truthy(e.Value) && !strings.Contains(rest, "."):
		p.keep[field], p.inclusion = append(p.keep[field], rest), true
	case flag || dotted || e.Key == "_id" || op == "$slice": // an exclusion, or what the model does not evaluate
		panic(notModelled("projection of %s: %v", e.Key, e.Value))
	default:
		p.computed = append(p.computed, e)
	}
}

// kept is what the projection keeps of field f: missing if nothing.
func (p projection) kept(f bson.E) any {
	paths, kept := p.keep[f.Key]
	if a, ok := f.Value.(bson.A); ok && p.last[f.Key] > 0 { // its paths are {""}: no subfield to pick
		return a[max(0, len(a)-p.last[f.Key]):]
	}
	switch {
	case !kept:
		return missing
	case slices.Contains(paths, ""):
		return f.Value
	}
	return projectPaths(f.Value, paths)
}

// projectPaths keeps fields of v (of a document, or of each document of
// an array; other elements go).
func projectPaths(v any, fields []string) any {
	switch x := v.(type) {
	case bson.D:
		return slices.DeleteFunc(slices.Clone(x), func(e bson.E) bool { return !slices.Contains(fields, e.Key) })
	case bson.A:
		out := bson.A{}
		for _, el := range x {
			if r := projectPaths(el, fields); r != missing {
				out = append(out, r)
			}
		}
		return out
	}
	return missing
}
