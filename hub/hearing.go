package hub

import "sync/atomic"

// Hearing is whether the process hears the hints that the other processes
// sharing its log send of their commits (backlog.Store.Listen), and so
// whether its hubs know how far the log has got. A hub that may have
// missed a hint since it read its head gives no stream its recent
// commits: count retention may have removed some of them after commits
// the hub never heard of (hub.forgetIfDeaf).
//
// It is one counter, to which each change between hearing and not adds
// one: it is odd while the process hears, and a hub that finds the odd
// value it noted when it read its head has missed no hint since (but those
// that a connection lost before the listener noticed, at most
// backlog.listenPing or so).
type Hearing struct {
	changes atomic.Uint64
}

// Set records that the process hears hints (on), or may be missing them
// (off). The listener calls it as it connects and as it loses its
// connection.
func (h *Hearing) Set(on bool) {
	for {
		c := h.changes.Load()
		if (c%2 == 1) == on || h.changes.CompareAndSwap(c, c+1) {
			return
		}
	}
}

// On says whether the process hears hints now.
func (h *Hearing) On() bool { return h.changes.Load()%2 == 1 }

// mark is a moment to compare with later, in heardSince.
func (h *Hearing) mark() uint64 { return h.changes.Load() }

// heardSince says that the process heard hints at mark and has heard them
// without a break since.
func (h *Hearing) heardSince(mark uint64) bool {
	return mark%2 == 1 && h.changes.Load() == mark
}
