//go:build !linux

package mongolock

import "time"

// boot: outside Linux, the wall clock alone witnesses suspended time.
func (systemClocks) boot() (time.Duration, bool) { return 0, false }
