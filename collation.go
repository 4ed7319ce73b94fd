package mongolock

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ensureCollection makes sure that sp's collection may take lock
// statements: its default collation is checked, once per process (one
// round trip, listCollections), before the first statement; the TTL index
// is created in the background, for a lock's acquisitions (index).
func (p *Provider) ensureCollection(ctx context.Context, sp *lockCollection) error {
	if ctx == nil {
		return errNilContext
	}
	if err := ctx.Err(); err != nil {
		// Every operation passes here before its first statement, and a
		// done ctx starts none: the driver would start it, and fail it,
		// when its client has a server at hand.
		return err
	}
	c := &sp.collation
	for !c.passed.Load() {
		c.mu.Lock()
		switch {
		case c.decided:
			c.mu.Unlock()
			return c.refused
		case c.running != nil:
			running := c.running
			c.mu.Unlock()
			select {
			case <-running: // decided, or failed: look again
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		running := make(chan struct{})
		c.running = running
		c.mu.Unlock()

		refused, err := p.checkCollation(ctx, sp)
		c.mu.Lock()
		c.running = nil
		if err == nil {
			c.decided, c.refused = true, refused
			c.passed.Store(refused == nil)
		}
		c.mu.Unlock()
		close(running)
		if err != nil {
			return err
		}
	}
	return nil
}

// checkCollation reads the options of sp's collection and returns the
// refusal of a non-simple default collation, or err if they could not be
// read. Missing privilege to list collections decides too: the check is
// skipped, and logged, so that it never blocks locking.
func (p *Provider) checkCollation(ctx context.Context, sp *lockCollection) (refused, err error) {
	opts, err := sp.store.listCollections(ctx)
	if testHookListCollections != nil {
		opts, err = testHookListCollections(p, sp.name, opts, err)
	}
	switch {
	case isUnauthorized(err):
		p.tel.log.Warn("mongolock: could not check the lock collection's default collation (no privilege to list collections); names are compared exactly only if it has none",
			"collection", sp.name, "error", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	for _, o := range opts {
		if err := collationRefusal(sp.db, sp.name, o); err != nil {
			return err, nil
		}
	}
	return nil, nil
}

// collationRefusal returns the refusal of collection db.coll whose
// listCollections options are opts, if they carry a collation other than
// {locale: "simple"}; else nil.
func collationRefusal(db, coll string, opts bson.Raw) error {
	collation, err := opts.LookupErr("collation")
	if err != nil {
		return nil // none: the simple collation
	}
	if doc, ok := collation.DocumentOK(); ok {
		if locale, ok := doc.Lookup("locale").StringValueOK(); ok && locale == "simple" {
			return nil
		}
	}
	return fmt.Errorf("%w: %s.%s has the default collation %s, under which names that differ (in case, accents, …) can be one lock; create it without a collation, or use another collection (WithCollection)",
		ErrCollation, db, coll, collation)
}

// testHookListCollections, if not nil, replaces what listCollections
// returned for coll (the options of each collection listed, or an error)
// before it is judged.
var testHookListCollections func(p *Provider, coll string, opts []bson.Raw, err error) ([]bson.Raw, error)
