package mongolock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FenceField is the field that FencedUpdateOne and FencedFindOneAndUpdate
// keep in each document they write: the highest fencing token any fenced
// write to the document carried, an int64.
//
// Index it, or read it, under this name; do not write it yourself (a
// fenced update that writes it is ErrInvalidArgument).
const FenceField = "_mongolockFencingToken"

// A TokenSource gives the fencing token a fenced write carries: a *Handle
// of any kind, a *Leadership, or one part of a CompositeHandle.
//
// A *Handle of any kind is a Lock's, a Semaphore's slot, an RWLock's
// reader or writer; a part of a CompositeHandle is
// CompositeHandle.Handles()[i], for the resource that part guards.
//
// A fenced write asks its source whether it still holds before it sends
// anything: a Handle or a Leadership looks at its lease and whether it was
// released. A type of another package that also has a method
// Context() context.Context (as a Handle has) is asked through it: once
// that context is done, the write is refused unsent, with an error
// wrapping ErrLockLost if context.Cause says so, else ErrReleased. A type
// with FencingToken alone is trusted to hold; the token check on the
// server still refuses it once a later holder has written.
type TokenSource interface {
	// FencingToken returns the token the write carries, as
	// Handle.FencingToken does.
	FencingToken() int64
}

// FencedUpdateOne is coll.UpdateOne(ctx, filter, update, opts...) applied
// only if the matched document's FenceField is missing or at most
// h.FencingToken(): against a higher token, it fails with ErrFenced.
//
// The update also sets FenceField to that token (it never lowers it).
// Filter and token check are one atomic round trip:
// a holder that lost its lock without knowing it (paused past its lease)
// cannot overwrite what a later holder wrote. Its errors are *Error, of
// "fenced update one", naming h's lock if h is a *Handle or a *Leadership;
// the driver's among them are seen through (errors.As,
// mongo.IsDuplicateKeyError).
//
// update is an operator update (a document of $set, $inc, ...) or an
// update pipeline (mongo.Pipeline, bson.A, []bson.D or []any); a replacement
// document, or an update that writes FenceField, is ErrInvalidArgument.
//
// When nothing matched, it reads the document that filter matches, without
// the token check, in a second round trip (only then): if that document
// carries a higher token, the error wraps ErrFenced; otherwise the result
// reports MatchedCount 0 as UpdateOne's does. The read comes after the
// update, so a document written in between decides; either way, nothing
// was written by this call.
//
// With options.UpdateOne().SetUpsert(true), filter must have an equality
// on _id (e.g. bson.D{{"_id", "invoice-7"}}), else ErrInvalidArgument: a
// stale writer whose token check fails would otherwise insert a second
// document beside the real one. Its insert then fails on _id's unique
// index, and that is reported as ErrFenced.
//
// ctx may carry a session (mongo.NewSessionContext, the callback of
// Session.WithTransaction): both round trips run in it.
//
// With a handle known lost, or whose lease's local deadline has passed
// (its process stopped past it, the machine suspended), it sends nothing
// and returns an error wrapping ErrLockLost: it looks at the lease first,
// as the handle's Context's Err does, so that the first write after the
// holder runs again is refused. With a released handle (Release, its
// Provider's Close; a CompositeHandle's part once the CompositeHandle is
// released) it sends nothing and returns an error wrapping ErrReleased.
func FencedUpdateOne(ctx context.Context, coll *mongo.Collection, h TokenSource, filter, update any,
	opts ...options.Lister[options.UpdateOneOptions]) (_ *mongo.UpdateResult, err error) {
	defer func() { err = fenceError(opFencedUpdateOne, h, err) }()
	fenced, err := fence(coll, h, filter, update, opts, func(o options.UpdateOneOptions) *bool { return o.Upsert })
	if err != nil {
		return nil, err
	}
	for tries := 0; ; tries++ {
		res, err := coll.UpdateOne(ctx, fenced.filter, fenced.update, opts...)
		switch {
		case isDuplicateKey(err):
			if again, err := fenced.duplicate(ctx, tries, err); !again {
				return nil, err
			}
		case err != nil:
			return res, err
		case res.MatchedCount == 0 && res.UpsertedCount == 0:
			return res, fenced.noMatch(ctx)
		default:
			return res, nil
		}
	}
}

// FencedFindOneAndUpdate is coll.FindOneAndUpdate(ctx, filter, update,
// opts...) fenced as FencedUpdateOne is: against a higher token, the
// result's Err wraps ErrFenced.
//
// It is applied only if the matched document's FenceField is missing or at
// most h.FencingToken(), with FencedUpdateOne's rules for update, upsert
// and sessions. When nothing matched, the result's Err is an error
// wrapping ErrFenced if the document filter matches carries a higher token
// (read in a second round trip, only then), else mongo.ErrNoDocuments
// itself, as FindOneAndUpdate reports no match. Its other errors are
// *Error, of "fenced find one and update", as FencedUpdateOne's.
func FencedFindOneAndUpdate(ctx context.Context, coll *mongo.Collection, h TokenSource, filter, update any,
	opts ...options.Lister[options.FindOneAndUpdateOptions]) (res *mongo.SingleResult) {
	defer func() {
		if err := res.Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			res = errResult(fenceError(opFencedFindOneAndUpdate, h, err))
		}
	}()
	fenced, err := fence(coll, h, filter, update, opts, func(o options.FindOneAndUpdateOptions) *bool { return o.Upsert })
	if err != nil {
		return errResult(err)
	}
	for tries := 0; ; tries++ {
		res := coll.FindOneAndUpdate(ctx, fenced.filter, fenced.update, opts...)
		err := res.Err()
		switch {
		case isDuplicateKey(err):
			if again, err := fenced.duplicate(ctx, tries, err); !again {
				return errResult(err)
			}
		// An upsert that returns the document before the update also
		// reports no document: then it did insert.
		case errors.Is(err, mongo.ErrNoDocuments) && !fenced.upsert:
			if err := fenced.noMatch(ctx); err != nil {
				return errResult(err)
			}
			return res
		default:
			return res
		}
	}
}

// listed is the options that opts set (nil ones skipped).
func listed[T any](opts []options.Lister[T]) (T, error) {
	var o T
	for _, l := range opts {
		if l == nil {
			continue
		}
		for _, set := range l.List() {
			if err := set(&o); err != nil {
				return o, err
			}
		}
	}
	return o, nil
}

// errResult is a SingleResult whose Err (and Decode) is err.
func errResult(err error) *mongo.SingleResult {
	return mongo.NewSingleResultFromDocument(bson.D{}, err, nil)
}

// fencedWrite is one fenced write: the user's filter and update with the
// token check and the token's record added.
type fencedWrite struct {
	coll           *mongo.Collection
	token          int64
	upsert         bool // opts set upsert
	userFilter     any
	filter, update any
}

// fence checks a fenced write's arguments, and adds the token check and
// the token's record; upsertOf reads the upsert option of opts.
func fence[O any](coll *mongo.Collection, h TokenSource, filter, update any, opts []options.Lister[O], upsertOf func(O) *bool) (*fencedWrite, error) {
	o, err := listed(opts)
	if err != nil {
		return nil, err
	}
	if coll == nil || h == nil || filter == nil || update == nil {
		return nil, invalidf("fenced write: nil collection, token source, filter or update")
	}
	token := h.FencingToken()
	if token <= 0 {
		return nil, invalidf("fenced write: fencing token %d: not an acquisition's", token)
	}
	if err := notHeld(h); err != nil {
		return nil, fmt.Errorf("fenced write with token %d: not sent: %w", token, err)
	}
	raw, err := marshalDoc(filter)
	if err != nil {
		return nil, invalidf("fenced write: filter: %v", err)
	}
	upsert := upsertOf(o) != nil && *upsertOf(o)
	if upsert && !hasIDEquality(raw) {
		return nil, invalidf("fenced write: an upsert's filter needs an equality on _id")
	}
	w := &fencedWrite{coll: coll, token: token, upsert: upsert, userFilter: raw}
	w.filter = obj("$and", bson.A{raw, obj("$or", bson.A{obj(FenceField, obj("$exists", false)), obj(FenceField, obj("$lte", token))})})
	w.update, err = fenceUpdate(update, token)
	return w, err
}

// notHeld returns why h's acquisition no longer holds, as far as this
// process knows, or nil: a handle's loss (looking at its lease first) or
// release; for another type, its Context's end, if it has one.
func notHeld(h TokenSource) error {
	switch s := h.(type) {
	case interface{ heldState() error }: // a *Handle, a *Leadership
		return s.heldState()
	case interface{ Context() context.Context }:
		ctx := s.Context()
		if ctx == nil || ctx.Err() == nil {
			return nil
		}
		cause := context.Cause(ctx)
		if !errors.Is(cause, ErrLockLost) {
			return fmt.Errorf("%w: its Context ended: %w", ErrReleased, cause)
		}
		return inner(cause)
	}
	return nil
}

// marshalDoc marshals a filter or an update document.
func marshalDoc(v any) (bson.Raw, error) {
	if r, ok := v.(bson.Raw); ok {
		return r, r.Validate()
	}
	return bson.Marshal(v)
}

// hasIDEquality reports whether filter's top level says _id equals a value
// (not an operator expression such as {$in: ...}).
func hasIDEquality(filter bson.Raw) bool {
	v, err := filter.LookupErr("_id")
	if err != nil {
		return false
	}
	if d, ok := v.DocumentOK(); ok {
		if elems, err := d.Elements(); err == nil && len(elems) > 0 && strings.HasPrefix(elems[0].Key(), "$") {
			return false
		}
	}
	return true
}

// fenceUpdate adds the token's record to an operator update or a pipeline.
func fenceUpdate(update any, token int64) (any, error) {
	if stages, ok := pipelineStages(update); ok {
		return fencePipeline(stages, token)
	}
	return fenceOperators(update, token)
}

// fencePipeline adds a last $set stage with $max of FenceField.
func fencePipeline(stages []any, token int64) (any, error) {
	out := make(bson.A, 0, len(stages)+1)
	for _, s := range stages {
		raw, err := marshalDoc(s)
		if err != nil {
			return nil, invalidf("fenced write: pipeline stage: %v", err)
		}
		if writesFence(raw) {
			return nil, invalidf("fenced write: the update writes %s", FenceField)
		}
		out = append(out, raw)
	}
	return append(out, set(FenceField, obj("$max", bson.A{"$" + FenceField, token}))), nil
}

// fenceOperators adds FenceField to the operator update's $max, which it
// keeps, or a $max of its own.
func fenceOperators(update any, token int64) (any, error) {
	raw, err := marshalDoc(update)
	if err != nil {
		return nil, invalidf("fenced write: update: %v", err)
	}
	elems, err := raw.Elements()
	if err != nil || len(elems) == 0 {
		return nil, invalidf("fenced write: an empty update")
	}
	out := make(bson.D, 0, len(elems)+1)
	var max bson.D
	for _, e := range elems {
		if !strings.HasPrefix(e.Key(), "$") {
			return nil, invalidf("fenced write: a replacement document (field %q): use an operator update or a pipeline", e.Key())
		}
		fields, ok := e.Value().DocumentOK()
		if !ok {
			return nil, invalidf("fenced write: operator %s takes a document", e.Key())
		}
		if touches(fields) || e.Key() == "$rename" && renamesOntoFence(fields) {
			return nil, invalidf("fenced write: the update writes %s", FenceField)
		}
		if e.Key() == "$max" {
			var d bson.D
			if err := bson.Unmarshal(fields, &d); err != nil {
				return nil, invalidf("fenced write: $max: %v", err)
			}
			max = d
			continue
		}
		out = append(out, bson.E{Key: e.Key(), Value: fields})
	}
	return append(out, bson.E{Key: "$max", Value: append(max, bson.E{Key: FenceField, Value: token})}), nil
}

// pipelineStages returns update's stages if it is a pipeline (an array).
func pipelineStages(update any) ([]any, bool) {
	switch u := update.(type) {
	case mongo.Pipeline:
		return pipelineStages([]bson.D(u))
	case bson.A:
		return u, true
	case []bson.D:
		s := make([]any, len(u))
		for i := range u {
			s[i] = u[i]
		}
		return s, true
	case []any:
		return u, true
	}
	return nil, false
}

// isFence reports whether a dotted path is FenceField or inside it.
func isFence(path string) bool { return path == FenceField || strings.HasPrefix(path, FenceField+".") }

// touches reports whether an operator's fields name FenceField.
func touches(fields bson.Raw) bool {
	elems, _ := fields.Elements()
	return slices.ContainsFunc(elems, func(e bson.RawElement) bool { return isFence(e.Key()) })
}

// renamesOntoFence reports whether a $rename's fields have FenceField as
// a target.
func renamesOntoFence(fields bson.Raw) bool {
	elems, _ := fields.Elements()
	return slices.ContainsFunc(elems, func(e bson.RawElement) bool {
		s, ok := e.Value().StringValueOK()
		return ok && isFence(s)
	})
}

// writesFence reports whether a pipeline stage writes FenceField: a $set,
// $addFields or $unset of it. (A stage that drops it is harmless: the last
// stage sets it to the token, which the filter checked.)
func writesFence(stage bson.Raw) bool {
	elems, _ := stage.Elements()
	for _, e := range elems {
		switch e.Key() {
		case "$set", "$addFields":
			if d, ok := e.Value().DocumentOK(); ok && touches(d) {
				return true
			}
		case "$unset": // a field, or an array of them
			vals := []bson.RawValue{e.Value()}
			if a, ok := e.Value().ArrayOK(); ok {
				vals, _ = a.Values()
			}
			for _, v := range vals {
				if s, ok := v.StringValueOK(); ok && isFence(s) {
					return true
				}
			}
		}
	}
	return false
}

// noMatch tells a refusal from no match, by reading the document the
// user's filter matches: ErrFenced if it carries a higher token.
func (w *fencedWrite) noMatch(ctx context.Context) error {
	var doc struct {
		Token *int64 `bson:"_mongolockFencingToken"`
	}
	err := w.coll.FindOne(ctx, w.userFilter, options.FindOne().
		SetProjection(bson.D{{Key: FenceField, Value: 1}}).
		SetSort(bson.D{{Key: FenceField, Value: -1}})).Decode(&doc)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil
	case err != nil:
		return fmt.Errorf("fenced write: telling a refusal from no match: %w", err)
	case doc.Token != nil && *doc.Token > w.token:
		return fmt.Errorf("fenced write with token %d: %w (%d)", w.token, ErrFenced, *doc.Token)
	}
	return nil
}

// duplicate handles a duplicate key from an upsert: the document with the
// filter's _id exists. With a higher token, that is the refusal; with a
// lower one, another upsert inserted it at the same moment, and the write
// is tried once more (it then matches). Another key's duplicate is err.
func (w *fencedWrite) duplicate(ctx context.Context, tries int, err error) (again bool, _ error) {
	if fencedErr := w.noMatch(ctx); fencedErr != nil {
		return false, fencedErr
	}
	if tries == 0 {
		return true, nil
	}
	return false, err
}

// fenceError is err, if any, as the error of the fenced write op with
// the token source h: every error of a fenced write is made here.
func fenceError(op string, h TokenSource, err error) error {
	if err == nil {
		return nil
	}
	if l, ok := h.(*Leadership); ok && l != nil {
		h = l.Handle
	}
	var name string
	if s, ok := h.(*Handle); ok && s != nil && s.acquisition != nil {
		name = shortName(s.Name())
	}
	return &Error{Op: op, Name: name, Err: err}
}
