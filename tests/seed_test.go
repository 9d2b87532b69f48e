package tests

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"
)

var chaosSeed = flag.Uint64("chaos.seed", 0, "seed of the random choices of the chaos runs and the other randomised tests; 0 picks one from the clock (each run logs its seed)")

// runSeed is the seed of one run: -chaos.seed when set, else one from the
// clock.
func runSeed() uint64 {
	if *chaosSeed != 0 {
		return *chaosSeed
	}
	if s := uint64(time.Now().UnixNano()); s != 0 {
		return s
	}
	return 1
}

// testSeed is runSeed for a randomised test other than a chaos run, logged
// so that a failure's choices can be made again.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	s := runSeed()
	t.Logf("seed %d (-chaos.seed=%d makes the same choices)", s, s)
	return s
}

// newRand is the random source of goroutine i of a run with the given seed:
// it draws the same numbers on every run with that seed. Each goroutine
// needs its own, as a *rand.Rand is not safe for concurrent use. The seed
// fixes the choices, not the scheduling: what a run sees still depends on
// timing.
func newRand(seed, i uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, i))
}
