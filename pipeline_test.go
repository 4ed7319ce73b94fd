package mongolock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// An attempt's pre-encoded pipeline is byte for byte what encoding
// acquireUpdate with its lockId gives.
func TestAcquireTemplateEncodesAcquireUpdate(t *testing.T) {
	for _, shape := range []fairness{{join: false}, {join: true}, {from: "handover"}} {
		f := shape
		f.proc, f.entryLife = newLockID(), 2500*time.Millisecond
		tmpl := newAcquireTemplate(30*time.Second, f)
		require.NotEmpty(t, tmpl.at)
		require.Equal(t, f.from != "", len(tmpl.fromAt) > 0)
		for range 3 {
			id, from := newLockID(), newLockID()
			f.lockID = id
			if f.from != "" {
				f.from = from
			}
			_, want, err := bson.MarshalValue(acquireUpdate(id, 30*time.Second, f))
			require.NoError(t, err)
			require.Equal(t, want, []byte(tmpl.with(id, from)), "shape %+v", shape)
		}
	}
}
