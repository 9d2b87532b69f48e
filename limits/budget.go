package limits

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/edgehub/edgehub/refusal"
)

// Budget bounds the bytes that requests of one kind hold at once across
// the server (publish bodies in flight, read answers being written), so
// that many clients together cannot make it hold more than that. A zero
// total turns it off.
type Budget struct {
	total int64
	sem   *semaphore.Weighted
	what  string
}

// NewBudget makes a budget of total bytes; what names them in refusals.
func NewBudget(total int64, what string) *Budget {
	b := &Budget{total: total, what: what}
	if total > 0 {
		b.sem = semaphore.NewWeighted(total)
	}
	return b
}

// clamp lets a request larger than the whole budget still run, alone.
func (b *Budget) clamp(n int64) int64 { return max(1, min(n, b.total)) }

// TryTake takes n bytes if they are free now; otherwise it refuses with
// overloaded, which a client retries after Retry-After. release gives them
// back and may be called more than once.
func (b *Budget) TryTake(n int64) (release func(), refused *refusal.Error) {
	if b.sem == nil {
		return func() {}, nil
	}
	n = b.clamp(n)
	if !b.sem.TryAcquire(n) {
		return nil, &refusal.Error{Code: refusal.Overloaded, RetryAfter: time.Second,
			Message: fmt.Sprintf("the server holds as many %s as it allows; retry shortly", b.what)}
	}
	return b.releaser(n), nil
}

// Take waits for n bytes (a stream that is already open has no status to
// refuse with) until ctx ends.
func (b *Budget) Take(ctx context.Context, n int64) (release func(), err error) {
	if b.sem == nil {
		return func() {}, nil
	}
	n = b.clamp(n)
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("wait for %d bytes of %s: %w", n, b.what, err)
	}
	return b.releaser(n), nil
}

func (b *Budget) releaser(n int64) func() {
	done := false
	return func() {
		if !done {
			done = true
			b.sem.Release(n)
		}
	}
}

// Grow takes n bytes if they are free now, for a holder that keeps a
// running total and gives it back in parts with Shrink (the hubs' recent
// events). It takes nothing and says false when they are not free.
func (b *Budget) Grow(n int64) bool {
	if b.sem == nil || n <= 0 {
		return true
	}
	return b.sem.TryAcquire(n)
}

// Shrink gives back n bytes that Grow took.
func (b *Budget) Shrink(n int64) {
	if b.sem != nil && n > 0 {
		b.sem.Release(n)
	}
}
