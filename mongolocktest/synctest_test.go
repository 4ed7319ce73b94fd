package mongolocktest_test

import (
	"testing"
	"testing/synctest"
)

// A test in a testing/synctest bubble runs on the bubble's clock (the
// body is Example_simulatedTime's).
func TestLeaseRunsOutInSimulatedTime(t *testing.T) {
	synctest.Test(t, leaseRunsOut)
}
