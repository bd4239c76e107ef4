package endpoint

import "math/rand/v2"

// Derangement returns a uniformly random permutation of 0..n-1 with no
// fixed point, seeded: host i sends to host d[i], so every host sends
// exactly one flow and receives exactly one (the NDP/HULL permutation
// matrix). Rejection sampling: a random permutation is a derangement with
// probability about 1/e, so a few shuffles suffice. n < 2 has no
// derangement and returns nil.
func Derangement(n int, seed uint64) []int {
	if n < 2 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0xde4a))
	for {
		p := rng.Perm(n)
		ok := true
		for i, v := range p {
			if i == v {
				ok = false
				break
			}
		}
		if ok {
			return p
		}
	}
}
