package hub

import (
	"sync"

	"edgehub/event"
	"edgehub/faults"
)

// Stream is one watcher's link to its hub. The hub pushes committed events
// into its bounded queue without ever waiting; the watcher's own goroutine
// takes them out and writes them. When the queue would overflow, the hub
// stops pushing and marks the stream demoted: the watcher then reads what
// it missed from the backlog, so a slow reader costs the hub nothing and
// loses nothing.
type Stream struct {
	limit int // bytes of envelope data the queue may hold

	mu      sync.Mutex
	queue   []*Item
	bytes   int
	through int64 // sequence number of the newest event queued or owed
	demoted bool
	ended   bool
	ready   chan struct{}
}

// Item is a committed event with its frame encoded once for every stream.
type Item struct {
	Event event.Event
	Frame []byte
}

// NewStream makes a stream whose queue holds at most limit bytes of frames.
func NewStream(limit int) *Stream {
	return &Stream{limit: limit, ready: make(chan struct{}, 1)}
}

// Ready is signalled whenever the queue gains items, the stream is demoted
// or it is ended.
func (s *Stream) Ready() <-chan struct{} { return s.ready }

// Take hands the watcher everything queued, and whether the hub has stopped
// pushing (demoted: catch up from the backlog after these items) or ended
// the stream (ended: write these items, then close).
func (s *Stream) Take() (items []*Item, demoted, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items, s.queue, s.bytes = s.queue, nil, 0
	return items, s.demoted, s.ended
}

// Ended reports whether the hub has ended the stream, without taking what
// is queued.
func (s *Stream) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// live (re)arms the stream for pushes after position; called by the hub in
// the turn that adds it to the live set.
func (s *Stream) live(position int64) {
	s.mu.Lock()
	s.through = position
	s.demoted = false
	s.mu.Unlock()
}

// offer queues the items after the stream's position. It returns false,
// queueing nothing more, when they do not fit: the stream is then demoted.
func (s *Stream) offer(items []*Item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	added := false
	for _, it := range items {
		if it.Event.Seq <= s.through {
			continue // a stream that starts beyond the head waits for its position
		}
		if s.bytes+len(it.Frame) > s.limit && len(s.queue) > 0 {
			if faults.On("drop-slow") {
				s.through = it.Event.Seq // injected bug: the event is dropped
				continue
			}
			s.demoted = true
			s.signal()
			return false
		}
		s.queue = append(s.queue, it)
		s.bytes += len(it.Frame)
		s.through = it.Event.Seq
		added = true
	}
	if added {
		s.signal()
	}
	return true
}

// demote stops pushes; the watcher catches up from the backlog.
func (s *Stream) demote() {
	s.mu.Lock()
	s.demoted = true
	s.signal()
	s.mu.Unlock()
}

// end tells the watcher to close after what is queued (the hub is going
// away). A browser reconnects with Last-Event-ID and loses nothing.
func (s *Stream) end() {
	s.mu.Lock()
	s.ended = true
	s.signal()
	s.mu.Unlock()
}

func (s *Stream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}
