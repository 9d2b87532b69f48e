package limits

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/edgehub/edgehub/refusal"
)

// Failures throttles failed credential checks (the admin key's) per
// client address: each address has a bucket of burst failures that
// refills at rate a second. An address whose bucket is empty is refused
// before its credentials are looked at, the right ones included, so that
// no one guesses faster than the rate however fast they ask; a request
// that passes spends nothing, so an operator who knows the key is never
// slowed by it.
type Failures struct {
	rate  rate.Limit
	burst int

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
	pruneAt  int
}

// NewFailures makes the throttle: perSecond 0 turns it off; a burst of 0
// is one second's worth (at least 1), as for the publish rate.
func NewFailures(perSecond float64, burst int) *Failures {
	if burst <= 0 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	return &Failures{rate: rate.Limit(perSecond), burst: burst, limiters: map[string]*rate.Limiter{}, pruneAt: minPrune}
}

// Admit refuses addr while its bucket holds less than one failure: a
// 429 rate_limited whose RetryAfter is when it will hold one again.
func (f *Failures) Admit(addr string, now time.Time) *refusal.Error {
	if f.rate <= 0 {
		return nil
	}
	f.mu.Lock()
	lim := f.limiters[addr]
	f.mu.Unlock()
	if lim == nil {
		return nil
	}
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return nil
	}
	return &refusal.Error{Code: refusal.RateLimited, Message: "too many refused credentials from this address; try again later",
		RetryAfter: time.Duration((1 - tokens) / float64(f.rate) * float64(time.Second))}
}

// Failed spends one failure of addr. The bucket may go below empty:
// failures that were admitted together, on parallel connections, all
// count, and each makes the address wait longer.
func (f *Failures) Failed(addr string, now time.Time) {
	if f.rate <= 0 {
		return
	}
	f.mu.Lock()
	lim := f.limiters[addr]
	if lim == nil {
		if len(f.limiters) >= f.pruneAt {
			f.prune(now)
		}
		lim = rate.NewLimiter(f.rate, f.burst)
		f.limiters[addr] = lim
	}
	f.mu.Unlock()
	lim.ReserveN(now, 1) // never refused: one is within any burst, and the wait it reports is Admit's
}

// prune drops the buckets that are full again, which is what a new one
// starts with, so forgetting them changes nothing: the map stays as small
// as the set of addresses that failed lately.
func (f *Failures) prune(now time.Time) {
	for addr, lim := range f.limiters {
		if lim.TokensAt(now) >= float64(f.burst) {
			delete(f.limiters, addr)
		}
	}
	f.pruneAt = max(minPrune, 2*len(f.limiters))
}
