package limits

import "context"

// Hold is what one request or stream holds of a Budget: taken in one or
// more parts before the bytes are allocated, given back together once
// what they pay for (an answer, a frame, a page) is written.
type Hold struct {
	budget   *Budget
	releases []func()
}

// Hold starts an empty hold on the budget.
func (b *Budget) Hold() *Hold { return &Hold{budget: b} }

// Try takes n more bytes if they are free now, for an answer that has not
// started and can still be refused; the error is the *refusal.Error.
func (h *Hold) Try(n int64) error {
	release, refused := h.budget.TryTake(n)
	if refused != nil {
		return refused
	}
	h.releases = append(h.releases, release)
	return nil
}

// Wait takes n more bytes, waiting for them until ctx ends, for a stream
// that is open already and has no status left to refuse with.
func (h *Hold) Wait(ctx context.Context, n int64) error {
	release, err := h.budget.Take(ctx, n)
	if err != nil {
		return err
	}
	h.releases = append(h.releases, release)
	return nil
}

// Release gives back everything held; the hold can be used again.
func (h *Hold) Release() {
	for _, r := range h.releases {
		r()
	}
	h.releases = h.releases[:0]
}
