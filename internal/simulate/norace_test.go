//go:build !race

package simulate

// defaultN is -simulate.n's default: make test's small form (make
// simulate asks for more).
const defaultN = 3000

// defaultFleetMoves is -simulate.fleet.moves's default, as defaultN.
const defaultFleetMoves = 1000

// mustFindSeeds is how many seeds each must-find test runs, as defaultN.
const mustFindSeeds = 3
