//go:build !race

package simulate

// defaultN is -simulate.n's default: make test's small form (make
// simulate asks for more).
const defaultN = 3000
