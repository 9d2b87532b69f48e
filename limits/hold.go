package limits

import "context"

// Hold is what one request or stream holds of a Budget: taken in one or
// more parts before the bytes are allocated, given back together once
// what they pay for (an answer, a frame, a page) is written.
type Hold struct {
	budget *Budget
	holder string
	held   int64
}

// Hold starts an empty hold of holder's on the budget.
func (b *Budget) Hold(holder string) *Hold { return &Hold{budget: b, holder: holder} }

// Try takes n more bytes if they are free now, for an answer that has not
// started and can still be refused; the error is the *refusal.Error.
//
// A hold that is all its holder holds may grow past the holder's share,
// as one request larger than the share may: it then holds the share and
// runs alone, since the holder's other requests find the share taken.
func (h *Hold) Try(n int64) error {
	n, refused := h.budget.tryGrow(h.holder, n, h.held)
	if refused != nil {
		return refused
	}
	h.held += n
	return nil
}

// Wait takes n more bytes, waiting for them until ctx ends, for a stream
// that is open already and has no status left to refuse with.
func (h *Hold) Wait(ctx context.Context, n int64) error {
	n = h.budget.clamp(n)
	if err := h.budget.wait(ctx, h.holder, n); err != nil {
		return err
	}
	h.held += n
	return nil
}

// Held is the bytes the hold has taken.
func (h *Hold) Held() int64 { return h.held }

// Keep gives back all but n of the bytes held (all of them if n is
// less): what the hold paid for has shrunk to n.
func (h *Hold) Keep(n int64) {
	if n < h.held {
		h.budget.Shrink(h.holder, h.held-max(n, 0))
		h.held = max(n, 0)
	}
}

// Release gives back everything held; the hold can be used again.
func (h *Hold) Release() {
	h.budget.Shrink(h.holder, h.held)
	h.held = 0
}
