package limits

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/edgehub/edgehub/refusal"
)

// Budget bounds the bytes that requests of one kind hold at once across
// the server (publish bodies in flight, read answers being written), so
// that many clients together cannot make it hold more than that, and the
// bytes one holder (a tenant, a client address) holds of it, so that one
// holder cannot take it all from the others: a tenant's stalled readers
// make its own reads wait or 429, never another tenant's. A zero total
// turns it off.
type Budget struct {
	total int64 // fixed; 0: off
	share int64 // most one holder may hold; fixed, at most total
	what  string

	mu      sync.Mutex
	used    int64            // bytes held in all
	holders map[string]int64 // bytes held by each holder; none at 0
	// waiters are the takers waiting for bytes, oldest first. A waiter
	// that does not fit in the whole budget makes the later ones wait too
	// (a large taker is not starved by small ones), but one that waits
	// only for its holder's share keeps no one else waiting.
	waiters list.List
}

type waiter struct {
	holder string
	n      int64
	ready  chan struct{} // closed once the bytes are taken for it
}

// NewBudget makes a budget of total bytes of which one holder may hold at
// most share (0, or more than total: all of it); what names the bytes in
// refusals.
func NewBudget(total, share int64, what string) *Budget {
	if share <= 0 || share > total {
		share = total
	}
	return &Budget{total: total, share: share, what: what, holders: map[string]int64{}}
}

// Held is the bytes held in all, for metrics and tests.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// clamp lets a request larger than a holder's whole share still run,
// alone among that holder's.
func (b *Budget) clamp(n int64) int64 { return max(1, min(n, b.share)) }

// fits says whether holder may take n more bytes now.
func (b *Budget) fits(holder string, n int64) bool {
	return b.used+n <= b.total && b.holders[holder]+n <= b.share
}

func (b *Budget) take(holder string, n int64) {
	b.used += n
	b.holders[holder] += n
}

// TryTake takes n bytes for holder if they are free now; otherwise it
// refuses with overloaded, which a client retries after Retry-After.
// release gives them back and may be called more than once. It does not
// queue behind waiting takers: a request has a status to refuse with, a
// waiting stream has only its wait, and one holder's requests are
// bounded by its share.
func (b *Budget) TryTake(holder string, n int64) (release func(), refused *refusal.Error) {
	n = b.clamp(n)
	if refused := b.tryTake(holder, n); refused != nil {
		return nil, refused
	}
	return b.releaser(holder, n), nil
}

// tryGrow takes up to n more bytes for a hold of holder's that holds held
// already: n, or only what is left of the share if the hold is all the
// holder holds (it runs alone), or it refuses.
func (b *Budget) tryGrow(holder string, n, held int64) (int64, *refusal.Error) {
	if b.total <= 0 {
		return n, nil
	}
	n = b.clamp(n)
	b.mu.Lock()
	if b.holders[holder] == held && held+n > b.share {
		n = b.share - held
		if b.used+n <= b.total {
			b.take(holder, n)
			b.mu.Unlock()
			return n, nil
		}
	}
	b.mu.Unlock()
	return n, b.tryTake(holder, n)
}

// tryTake takes n bytes, clamped already, or refuses.
func (b *Budget) tryTake(holder string, n int64) *refusal.Error {
	if b.total <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fits(holder, n) {
		msg := "the server holds as many %s as it allows; retry shortly"
		if b.holders[holder]+n > b.share {
			msg = "this tenant holds as many %s as one may; retry shortly"
		}
		return &refusal.Error{Code: refusal.Overloaded, RetryAfter: time.Second, Message: fmt.Sprintf(msg, b.what)}
	}
	b.take(holder, n)
	return nil
}

// wait takes n bytes, clamped already, waiting for them until ctx ends.
func (b *Budget) wait(ctx context.Context, holder string, n int64) error {
	if b.total <= 0 {
		return nil
	}
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.fits(holder, n) {
		b.take(holder, n)
		b.mu.Unlock()
		return nil
	}
	w := &waiter{holder: holder, n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.grant()
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted as ctx ended: give the bytes back.
			b.mu.Unlock()
			b.Shrink(holder, n)
		default:
			b.waiters.Remove(e)
			b.grant() // the waiter may have kept later ones waiting
			b.mu.Unlock()
		}
		return fmt.Errorf("wait for %d bytes of %s: %w", n, b.what, ctx.Err())
	}
}

// grant hands bytes to the waiters that fit, oldest first, stopping at
// the first that does not fit in the whole budget; b.mu is held.
func (b *Budget) grant() {
	for e := b.waiters.Front(); e != nil; {
		w, next := e.Value.(*waiter), e.Next()
		switch {
		case b.holders[w.holder]+w.n > b.share:
			// Waits for its own holder's bytes: others go ahead.
		case b.used+w.n > b.total:
			return
		default:
			b.take(w.holder, w.n)
			b.waiters.Remove(e)
			close(w.ready)
		}
		e = next
	}
}

func (b *Budget) releaser(holder string, n int64) func() {
	done := false
	return func() {
		if !done {
			done = true
			b.Shrink(holder, n)
		}
	}
}

// Grow takes n bytes for holder if they are free now, for a holder that
// keeps a running total and gives it back in parts with Shrink (the
// hubs' recent events, the events queued for live streams). It takes
// nothing and says false when they are not free.
func (b *Budget) Grow(holder string, n int64) bool {
	if b.total <= 0 || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fits(holder, n) {
		return false
	}
	b.take(holder, n)
	return true
}

// Shrink gives back n bytes that holder took.
func (b *Budget) Shrink(holder string, n int64) {
	if b.total <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if left := b.holders[holder] - n; left > 0 {
		b.holders[holder] = left
	} else {
		delete(b.holders, holder)
	}
	if b.waiters.Len() > 0 {
		b.grant()
	}
}
