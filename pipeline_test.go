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
	for _, join := range []bool{false, true} {
		f := fairness{proc: newLockID(), join: join, entryLife: 2500 * time.Millisecond}
		tmpl := newAcquireTemplate(30*time.Second, f)
		require.NotEmpty(t, tmpl.at)
		for range 3 {
			id := newLockID()
			f.lockID = id
			_, want, err := bson.MarshalValue(acquireUpdate(id, 30*time.Second, f))
			require.NoError(t, err)
			require.Equal(t, want, []byte(tmpl.with(id)), "join=%v", join)
		}
	}
}
