//go:build !race

package simulate

// defaultN is -simulate.n's default: make test's small form (make
// simulate asks for more).
const defaultN = 3000

// defaultFleetMoves is -simulate.fleet.moves's default, as defaultN.
const defaultFleetMoves = 1000
