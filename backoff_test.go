package mongolock

// The sleeps between Acquire's attempts. The statistical assertions use many
// draws and bounds tens of standard deviations wide: a correct backoff fails
// them with negligible probability (far below 1e-9 per run).

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const backoffDraws = 4000

type backoffSample struct {
	lo, hi time.Duration
	mean   float64
}

func drawMany(b backoff, failures int) backoffSample {
	s := backoffSample{lo: math.MaxInt64, hi: math.MinInt64}
	var sum float64
	for range backoffDraws {
		d := b.next(failures)
		s.lo, s.hi = min(s.lo, d), max(s.hi, d)
		sum += float64(d)
	}
	s.mean = sum / backoffDraws
	return s
}

func TestFixedBackoffDrawsUniformlyWithinMinMax(t *testing.T) {
	for _, b := range []backoff{
		{min: 10 * time.Millisecond, max: 800 * time.Millisecond}, // the defaults
		{min: time.Millisecond, max: 20 * time.Millisecond},
		{min: time.Nanosecond, max: 3 * time.Nanosecond},
	} {
		width := float64(b.max - b.min)
		for _, failures := range []int{1, 2, 10, 1000} {
			s := drawMany(b, failures)
			require.GreaterOrEqual(t, s.lo, b.min, "%+v after %d failures", b, failures)
			require.LessOrEqual(t, s.hi, b.max, "%+v after %d failures", b, failures)
			// Uniform, whatever the number of failures: both ends of the
			// range are reached, and the mean is in the middle (its standard
			// deviation is width/sqrt(12*backoffDraws), under 0.5% of width).
			require.Less(t, float64(s.lo-b.min), 0.05*width+1, "%+v: low end never drawn", b)
			require.Less(t, float64(b.max-s.hi), 0.05*width+1, "%+v: high end never drawn", b)
			require.InDelta(t, float64(b.min)+width/2, s.mean, 0.1*width, "%+v: mean", b)
		}
	}
}

func TestFixedBackoffWithMinEqualToMaxAlwaysSleepsThatLong(t *testing.T) {
	b := backoff{min: 7 * time.Millisecond, max: 7 * time.Millisecond}
	for failures := range 20 {
		require.Equal(t, 7*time.Millisecond, b.next(failures+1))
	}
}

func TestAdaptiveBackoffGrowsByHalfPerFailureUpToMaxWithJitter(t *testing.T) {
	b := backoff{min: 10 * time.Millisecond, max: 800 * time.Millisecond, adaptive: true}
	for failures := 1; failures <= 30; failures++ {
		base := float64(b.min) * math.Pow(1.5, float64(failures-1))
		capped := base >= float64(b.max)
		base = min(base, float64(b.max))
		s := drawMany(b, failures)
		t.Logf("after %2d failures: base %v, drawn %v..%v, mean %v", failures,
			time.Duration(base), s.lo, s.hi, time.Duration(s.mean))

		// Never outside [min, max], and never beyond +-20% of the base.
		require.GreaterOrEqual(t, s.lo, b.min, "after %d failures", failures)
		require.LessOrEqual(t, s.hi, b.max, "after %d failures", failures)
		require.GreaterOrEqual(t, float64(s.lo), 0.8*base-1, "after %d failures: below -20%%", failures)
		require.LessOrEqual(t, float64(s.hi), 1.2*base+1, "after %d failures: above +20%%", failures)

		switch {
		case failures == 1:
			// Starts at min: the jitter below min is clamped to it.
			require.Equal(t, b.min, s.lo, "the first sleep is at least min")
			require.Greater(t, float64(s.hi), 1.15*base, "the first sleep has no upward jitter")
		case !capped && 1.2*base <= float64(b.max):
			// Jitter is spread over most of +-20%, and the sleep grows x1.5.
			require.Less(t, float64(s.lo), 0.85*base, "after %d failures: no downward jitter", failures)
			require.Greater(t, float64(s.hi), 1.15*base, "after %d failures: no upward jitter", failures)
			require.InDelta(t, base, s.mean, 0.03*base, "after %d failures: mean", failures)
		case capped:
			// At the cap: below it by up to 20%, never above.
			require.Equal(t, b.max, s.hi, "after %d failures: the cap is reached", failures)
			require.Less(t, float64(s.lo), 0.85*float64(b.max), "after %d failures: no jitter below the cap", failures)
		}
	}
}

func TestAdaptiveBackoffGrowthOfTheMeanIsOneAndAHalf(t *testing.T) {
	b := backoff{min: time.Millisecond, max: time.Hour, adaptive: true}
	prev := drawMany(b, 2).mean
	for failures := 3; failures <= 12; failures++ {
		mean := drawMany(b, failures).mean
		// Each mean's standard deviation is ~0.2% of its base, so the ratio
		// of two is 1.5 within well under 0.05.
		require.InDelta(t, 1.5, mean/prev, 0.05, "after %d failures", failures)
		prev = mean
	}
}

func TestAdaptiveBackoffStaysWithinBoundsForAnyFailureCount(t *testing.T) {
	for _, b := range []backoff{
		{min: 10 * time.Millisecond, max: 800 * time.Millisecond, adaptive: true},
		{min: 5 * time.Millisecond, max: 5 * time.Millisecond, adaptive: true},
		{min: time.Nanosecond, max: time.Nanosecond, adaptive: true},
		{min: time.Millisecond, max: math.MaxInt64, adaptive: true},
	} {
		for _, failures := range []int{math.MinInt, -1, 0, 1, 2, 50, 100, 1000, 1 << 20, math.MaxInt} {
			for range 200 {
				d := b.next(failures)
				require.GreaterOrEqual(t, d, b.min, "%+v after %d failures", b, failures)
				require.LessOrEqual(t, d, b.max, "%+v after %d failures", b, failures)
			}
		}
	}
}

// A cap near the largest Duration ("no cap, in effect") must not make the
// float arithmetic overflow: after many failures the sleep stays near the
// cap, within its -20% jitter, rather than wrapping around to min.
func TestAdaptiveBackoffAtTheLargestCapDoesNotWrapAroundToMin(t *testing.T) {
	b := backoff{min: time.Millisecond, max: math.MaxInt64, adaptive: true}
	for range 200 {
		d := b.next(1000)
		require.GreaterOrEqual(t, float64(d), 0.8*float64(b.max)*(1-1e-9), "after 1000 failures: %v", d)
	}
}
