package mongolock

import (
	"math"
	"math/rand/v2"
	"time"
)

// backoff is the configured sleep between Acquire's attempts.
type backoff struct {
	min, max time.Duration
	adaptive bool
}

// next returns the sleep after the given number of failed attempts (1 for
// the first failure).
//
// Fixed mode draws uniformly from [min, max], as DistributedLock.MongoDB does.
// Adaptive mode starts at min and grows by x1.5 per failed attempt up to max,
// with +-20% jitter so that waiters that failed together do not retry
// together; the result always stays within [min, max].
func (b backoff) next(failures int) time.Duration {
	if !b.adaptive {
		return b.min + rand.N(b.max-b.min+1)
	}
	// Compare in floating point before converting: a value at or past
	// MaxInt64 would wrap around to a negative Duration.
	d := min(float64(b.min)*math.Pow(1.5, float64(max(failures-1, 0))), float64(b.max)) * (0.8 + 0.4*rand.Float64())
	if d >= float64(b.max) {
		return b.max
	}
	return max(time.Duration(d), b.min)
}

func (o config) backoff() backoff {
	return backoff{min: o.sleepMin, max: o.sleepMax, adaptive: o.adaptive}
}
