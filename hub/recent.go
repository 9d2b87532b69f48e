package hub

import (
	"time"

	"github.com/edgehub/edgehub/limits"
)

// recent is a hub's newest committed events, contiguous up to its head: a
// stream whose position is among them joins the live set in one turn and
// is given the rest from here, without reading the backlog. It holds at
// most limit events, and their envelopes' bytes come from a budget that
// all hubs share, so the total is bounded however many topics are active.
type recent struct {
	limit  int            // most events kept; fixed
	budget *limits.Budget // shared by every hub; fixed
	items  []*item        // in sequence order, items[0] the oldest
	bytes  int64          // of the envelopes in items, taken from budget
	// floor is the newest sequence number the buffer may no longer hold
	// (keepAfter): none of its items is numbered at or below it.
	floor int64
}

// first is the sequence number of the oldest event buffered, or next (the
// head's successor) when none is.
func (r *recent) first(next int64) int64 {
	if len(r.items) == 0 {
		return next
	}
	return r.items[0].Event.Seq
}

// covers says whether every event after position up to head is buffered
// (or none is owed).
func (r *recent) covers(position, head int64) bool {
	return position+1 >= r.first(head+1)
}

// after is the buffered events after position; covers must hold.
func (r *recent) after(position int64) []*item {
	if len(r.items) == 0 || position >= r.items[len(r.items)-1].Event.Seq {
		return nil
	}
	return r.items[max(0, position+1-r.items[0].Event.Seq):]
}

// add appends a commit's items, which follow the newest buffered one,
// but those at or below the floor (the buffer holds none of the items
// before them either). The oldest go to make room, in the count and in
// the budget; if the budget cannot take the commit even then, the buffer
// is left empty, which is contiguous too, and the next commit starts it
// again.
func (r *recent) add(items []*item) {
	if r.limit <= 0 {
		return
	}
	for len(items) > 0 && items[0].Event.Seq <= r.floor {
		items = items[1:]
	}
	n := int64(0)
	for _, it := range items {
		n += it.size()
	}
	for !r.budget.Grow("", n) {
		if len(r.items) == 0 {
			return
		}
		r.dropOldest()
	}
	r.items = append(r.items, items...)
	r.bytes += n
	for len(r.items) > r.limit {
		r.dropOldest()
	}
}

func (r *recent) dropOldest() {
	n := r.items[0].size()
	r.budget.Shrink("", n)
	r.bytes -= n
	r.items[0] = nil
	r.items = r.items[1:]
}

// reset empties the buffer and gives its bytes back.
func (r *recent) reset() {
	r.budget.Shrink("", r.bytes)
	r.items, r.bytes = nil, 0
}

// keepAfter has the buffer hold, from now on, only events numbered above
// seq: those it holds up to seq go now, and add skips any that come later.
func (r *recent) keepAfter(seq int64) {
	r.floor = max(r.floor, seq)
	for len(r.items) > 0 && r.items[0].Event.Seq <= r.floor {
		r.dropOldest()
	}
}

// expire drops the events committed before cutoff.
func (r *recent) expire(cutoff time.Time) {
	for len(r.items) > 0 && r.items[0].Event.Time.Before(cutoff) {
		r.dropOldest()
	}
}
