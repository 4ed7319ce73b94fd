package mongolock

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// CollationRefusal is the refusal of a collection whose listCollections
// options are opts, or nil.
func CollationRefusal(opts bson.Raw) error { return collationRefusal("db", "coll", opts) }

// SetListCollections makes f replace what listCollections returned for each
// of p's collations checks, before it is judged. Call it before p is used.
func SetListCollections(p *Provider, f func(coll string, opts []bson.Raw, err error) ([]bson.Raw, error)) {
	listCollectionsHooks.Store(p, f)
}

var listCollectionsHooks sync.Map // *Provider -> the func

func init() {
	testHookListCollections = func(p *Provider, coll string, opts []bson.Raw, err error) ([]bson.Raw, error) {
		if f, ok := listCollectionsHooks.Load(p); ok {
			return f.(func(string, []bson.Raw, error) ([]bson.Raw, error))(coll, opts, err)
		}
		return opts, err
	}
}
