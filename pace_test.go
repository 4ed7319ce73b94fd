package mongolock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPaceEstimatesWhenTheHolderProcessIsDone(t *testing.T) {
	var p pace
	t0 := time.Now()
	first := func(holder string, streak int) turn {
		return turn{inLine: true, soon: true, first: true, holder: holder, streak: streak}
	}
	_, ok := p.observe(first("A", 2), t0)
	require.False(t, ok, "one look tells no pace")
	// Two acquisitions by A in 24 ms: 12 ms each; 8-4 more, plus half the
	// current one.
	left, ok := p.observe(first("A", 4), t0.Add(24*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 4*12*time.Millisecond+6*time.Millisecond, left)
	left, ok = p.observe(first("A", maxStreak), t0.Add(72*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 6*time.Millisecond, left, "last acquisition of the turn: half of it left")

	// Another holder's process: the time per acquisition seen so far
	// stands until its own is timed.
	left, ok = p.observe(first("B", 5), t0.Add(80*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 3*12*time.Millisecond+6*time.Millisecond, left)
	// Second in line: first once the holder's turn is over; third: a
	// whole turn more.
	left, ok = p.observe(turn{inLine: true, soon: true, ahead: 1, holder: "B", streak: 5}, t0.Add(85*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 3*12*time.Millisecond+6*time.Millisecond, left)
	left, ok = p.observe(turn{inLine: true, soon: true, ahead: 2, holder: "B", streak: 5}, t0.Add(86*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 3*12*time.Millisecond+6*time.Millisecond+maxStreak*12*time.Millisecond, left)

	// A turn that ended early (C after 2 acquisitions): behind the first
	// in line, no estimate (poll as usual); first in line, as before.
	_, _ = p.observe(first("C", 1), t0.Add(90*time.Millisecond))
	_, _ = p.observe(first("C", 2), t0.Add(92*time.Millisecond))
	_, ok = p.observe(turn{inLine: true, soon: true, ahead: 1, holder: "D", streak: 1}, t0.Add(95*time.Millisecond))
	require.False(t, ok, "waits out a whole turn after a turn that was not full")
	_, ok = p.observe(first("D", 1), t0.Add(96*time.Millisecond))
	require.True(t, ok)

	// Out of line (or no other holder): forgotten.
	_, ok = p.observe(turn{holder: "B", streak: 6}, t0.Add(100*time.Millisecond))
	require.False(t, ok)
	_, ok = p.observe(first("B", 3), t0.Add(110*time.Millisecond))
	require.False(t, ok, "one look tells no pace")
	// The same streak seen again times nothing: streaks are timed from
	// when they are first seen.
	_, ok = p.observe(first("B", 3), t0.Add(130*time.Millisecond))
	require.False(t, ok)
	left, ok = p.observe(first("B", 4), t0.Add(140*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 4*30*time.Millisecond+15*time.Millisecond, left)

	// A's turn to be seen full (8 by B, then C): processes behind the first
	// wait turns out. This process's own turn (the holder is itself: no
	// holder) starts the timing over but keeps that: the next holder's
	// pace, once timed, serves a process behind the first at once.
	_, _ = p.observe(first("B", 8), t0.Add(300*time.Millisecond))
	_, _ = p.observe(first("C", 1), t0.Add(310*time.Millisecond))
	_, ok = p.observe(turn{inLine: true, soon: true}, t0.Add(400*time.Millisecond))
	require.False(t, ok)
	_, _ = p.observe(turn{inLine: true, soon: true, ahead: 2, holder: "E", streak: 1}, t0.Add(500*time.Millisecond))
	left, ok = p.observe(turn{inLine: true, soon: true, ahead: 2, holder: "E", streak: 2}, t0.Add(510*time.Millisecond))
	require.True(t, ok, "full turns forgotten over this process's own turn")
	require.Equal(t, 6*10*time.Millisecond+5*time.Millisecond+maxStreak*10*time.Millisecond, left)
	// Out of line: everything is forgotten.
	_, _ = p.observe(turn{holder: "E", streak: 3}, t0.Add(520*time.Millisecond))
	_, _ = p.observe(turn{inLine: true, soon: true, ahead: 1, holder: "E", streak: 4}, t0.Add(530*time.Millisecond))
	_, ok = p.observe(turn{inLine: true, soon: true, ahead: 1, holder: "E", streak: 5}, t0.Add(540*time.Millisecond))
	require.False(t, ok, "full turns kept out of line")
}
