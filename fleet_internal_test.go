package mongolock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFleetTargetsGiveTheExtraShardsToThoseThatHoldMost(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		holds map[string]int
		want  map[string]int
	}{
		{"a joiner with the smallest id takes the fewest", 10, map[string]int{"a": 0, "y": 5, "z": 5}, map[string]int{"a": 3, "y": 4, "z": 3}},
		{"ties go to the smaller id", 4, map[string]int{"a": 0, "b": 0, "c": 0}, map[string]int{"a": 2, "b": 1, "c": 1}},
		{"a leaver's shards spread over the rest", 12, map[string]int{"a": 4, "b": 4}, map[string]int{"a": 6, "b": 6}},
		{"more workers than shards", 2, map[string]int{"a": 0, "b": 1, "c": 1}, map[string]int{"a": 0, "b": 1, "c": 1}},
		{"the most loaded keeps the most", 7, map[string]int{"a": 1, "b": 6}, map[string]int{"a": 3, "b": 4}},
		// From a: 5, b: 5 to a: 4, b: 3, c: 3, workers give shards up at
		// different moments; the one that keeps one more stays a.
		{"who keeps one more stays so while the others give up theirs", 10, map[string]int{"a": 4, "b": 5, "c": 0}, map[string]int{"a": 4, "b": 3, "c": 3}},
		{"the same, later", 10, map[string]int{"a": 4, "b": 4, "c": 1}, map[string]int{"a": 4, "b": 3, "c": 3}},
	} {
		require.Equal(t, c.want, fleetTargets(c.n, c.holds), c.name)
	}
}
