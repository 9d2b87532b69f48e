package hub

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgehub/edgehub/event"
)

// item is a committed event with its envelope encoded once, in the
// committer's goroutine, for every stream that is sent it, and with its
// frame too when the router has a Framing.
type item struct {
	Event    event.Event // the event as committed
	Envelope []byte      // its JSON envelope, shared by every stream; read-only
	// Frame is the event's frame (Options.Framing) around Envelope, which
	// is a part of it, shared by every stream that writes frames by
	// reference (Subscription.NextFrames); read-only. Nil without a
	// Framing.
	Frame []byte
	// learned is when the process learned that the event was durable, on
	// the router's clock (Options.clock).
	learned int64
	// refs counts the live queues (and the hub, while it offers the item)
	// that hold the item and have not handed it out: while there is one,
	// its envelope's bytes are taken, once, from its tenant's share of
	// the read budget (hub.pin); the last to let go gives them back.
	refs atomic.Int32
}

// size is the bytes the item's encoding holds: what the read budget and
// the recent commits count for it.
func (it *item) size() int64 {
	if it.Frame != nil {
		return int64(len(it.Frame))
	}
	return int64(len(it.Envelope))
}

// release lets go of one reference to each of items and returns the bytes
// of those that nothing holds any more: what the caller gives back to the
// read budget.
func release(items []*item) (freed int64) {
	for _, it := range items {
		if it.refs.Add(-1) == 0 {
			freed += it.size()
		}
	}
	return freed
}

// link is what a hub and one subscription share besides the queue of a
// stream (topic or tenant): the signals and the flags that say what the
// hub decided. Its mutex guards the flags and the queue of the stream
// that embeds it.
type link struct {
	// ready is signalled (capacity 1, never blocking) whenever the queue
	// gains items, the stream is demoted or ended, or the subscription has
	// more of its own work to do.
	ready chan struct{}
	// done is closed when the hub ends the stream: unlike a signal on
	// ready, it cannot be taken by one wait and missed by the next.
	done chan struct{}
	// wake, if set (Subscription.OnReady), is called after each signal
	// that finds ready empty; it must not block.
	wake func()

	mu      sync.Mutex // guards the fields below and the embedding stream's queue
	demoted bool       // the hub stopped pushing; read the backlog after queue
	ended   bool       // the hub is gone; write queue, then close
	closed  bool       // the subscription is closed: nothing more is queued
}

func newLink() link {
	return link{ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// onReady sets wake (see Subscription.OnReady).
func (l *link) onReady(wake func()) {
	l.mu.Lock()
	l.wake = wake
	l.mu.Unlock()
}

// isEnded reports whether the hub has ended the stream, taking nothing.
func (l *link) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// demote stops pushes; the subscription catches up from the backlog.
func (l *link) demote() {
	l.mu.Lock()
	l.demoted = true
	l.signal()
	l.mu.Unlock()
}

// end tells the subscription to close after what is queued (the hub is
// going away). A browser reconnects with Last-Event-ID and loses nothing.
func (l *link) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		l.ended = true
		close(l.done)
	}
	l.signal()
}

func (l *link) signal() {
	select {
	case l.ready <- struct{}{}:
		if l.wake != nil {
			l.wake()
		}
	default:
	}
}

// stream is the link between the hub and one subscription. The hub pushes
// committed events into its bounded queue without ever waiting; the
// subscription's goroutine takes them out. When the queue would overflow,
// the hub stops pushing and marks the stream demoted: the subscription
// then reads what it missed from the backlog, so a slow reader costs the
// hub nothing and loses nothing.
type stream struct {
	link
	limit int // bytes of envelopes the queue may hold; fixed
	// overflow, set only in a faults build, replaces demotion (faults_on.go).
	overflow func(s *stream, it *item) bool

	// queue holds events pushed and not yet taken, in sequence order
	// (guarded by link.mu).
	queue []*item
	bytes int // of the envelopes in queue
	// through is the newest sequence number the stream holds or has been
	// given: the hub pushes only what comes after it. This is the one place
	// where an event already delivered is told from a new one.
	through int64
}

func newStream(limit int) *stream {
	return &stream{link: newLink(), limit: limit}
}

// take hands over everything queued, and whether the hub has stopped
// pushing (demoted) or ended the stream after these items. spare, an
// array the caller has emptied (no pointer left in it), becomes the
// queue: the subscription gives back the array of its last take, so that
// the two arrays take turns and a push allocates nothing once they have
// grown to the stream's usual batch.
func (s *stream) take(spare []*item) (items []*item, demoted, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items, s.queue, s.bytes = s.queue, spare[:0], 0
	return items, s.demoted, s.ended
}

// close stops the queueing for good and hands over what was queued, for a
// subscription that is closing and lets go of it.
func (s *stream) close() []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	items := s.queue
	s.queue, s.bytes = nil, 0
	return items
}

// arm (re)starts pushes after position; the hub calls it in the turn that
// adds the stream to its live set.
func (s *stream) arm(position int64) {
	s.mu.Lock()
	s.through = position
	s.demoted = false
	s.mu.Unlock()
}

// offer queues the items after the stream's position. It returns false,
// queueing nothing more, when they do not fit: the stream is then demoted.
func (s *stream) offer(items []*item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true // the hub takes it out when the unwatch comes
	}
	added := false
	for _, it := range items {
		if it.Event.Seq <= s.through {
			continue // a stream that starts beyond the head waits for its position
		}
		if s.bytes+len(it.Envelope) > s.limit && len(s.queue) > 0 {
			if s.overflow != nil && s.overflow(s, it) {
				continue
			}
			s.demoted = true
			s.signal()
			return false
		}
		it.refs.Add(1)
		s.queue = append(s.queue, it)
		s.bytes += len(it.Envelope)
		s.through = it.Event.Seq
		added = true
	}
	if added {
		s.signal()
	}
	return true
}

// streamSet is one of the hub's named sets of streams, as etcd's watcher
// groups are: a stream is in exactly one of them while it is registered.
// Its gauge counts the streams in every hub's set of this kind; add,
// remove and clear are the only ways to change the set, and move the
// gauge with it, so a scrape sees the sets' sizes as of the hubs' last
// turns.
type streamSet[S comparable] struct {
	m     map[S]struct{}
	gauge prometheus.Gauge // shared by the sets of this kind of every hub
}

func newStreamSet[S comparable](gauge prometheus.Gauge) streamSet[S] {
	return streamSet[S]{m: map[S]struct{}{}, gauge: gauge}
}

func (set streamSet[S]) add(s S) {
	if _, ok := set.m[s]; ok {
		panic("hub: stream added to a set twice")
	}
	set.m[s] = struct{}{}
	set.gauge.Inc()
}

// remove takes s out of the set, if it is there.
func (set streamSet[S]) remove(s S) {
	if _, ok := set.m[s]; ok {
		delete(set.m, s)
		set.gauge.Dec()
	}
}

func (set streamSet[S]) clear() {
	set.gauge.Sub(float64(len(set.m)))
	clear(set.m)
}

func (set streamSet[S]) has(s S) bool {
	_, ok := set.m[s]
	return ok
}

func (set streamSet[S]) len() int { return len(set.m) }
