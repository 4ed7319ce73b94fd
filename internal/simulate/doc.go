// Package simulate runs the soak's checks over the in-memory store in
// simulated time: TestSimulate (make simulate). See its tests.
package simulate
