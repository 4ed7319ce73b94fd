package main

import "testing"

func TestGuardCountsWhatItsRuleForbids(t *testing.T) {
	for _, c := range []struct {
		name   string
		slots  int
		enter  []bool // shared?
		broken int
	}{
		{"n exclusive holders", 4, []bool{false, false, false, false}, 0},
		{"n+1 exclusive holders", 4, []bool{false, false, false, false, false}, 1},
		{"readers alone", 1, []bool{true, true, true}, 0},
		{"a writer after readers", 1, []bool{true, true, false}, 1},
		{"a reader after a writer", 1, []bool{false, true}, 1},
		{"two writers", 1, []bool{false, false}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &guard{slots: c.slots}
			for _, shared := range c.enter {
				g.enter(shared)
			}
			if g.violations != c.broken || g.most != len(c.enter) {
				t.Errorf("violations %d, most %d; want %d, %d", g.violations, g.most, c.broken, len(c.enter))
			}
			for _, shared := range c.enter {
				g.leave(shared)
			}
			if g.shared != 0 || g.exclusive != 0 {
				t.Errorf("after every leave: %d shared, %d exclusive", g.shared, g.exclusive)
			}
		})
	}
}
