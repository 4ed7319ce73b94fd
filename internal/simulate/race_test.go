//go:build race

package simulate

// defaultN is -simulate.n's default: make test's small form, smaller
// under the race detector, which slows the simulation about fivefold.
const defaultN = 1000

// defaultFleetMoves is -simulate.fleet.moves's default, as defaultN.
const defaultFleetMoves = 300

// mustFindSeeds is how many seeds each must-find test runs, as defaultN.
const mustFindSeeds = 2
