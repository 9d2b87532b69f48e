package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
)

// tstream is the link between a tenant hub and one tenant subscription:
// the hub pushes the events the stream's selection matches into its
// bounded queue, never waiting; when they do not fit, it stops and marks
// the stream demoted, and the subscription reads the rest from the log.
type tstream struct {
	link
	sel   Selection // fixed
	limit int       // bytes of envelopes the queue may hold; fixed

	queue   []*titem // guarded by link.mu
	bytes   int
	through int64 // the newest position queued or given: pushes come after it
}

func newTStream(sel Selection, limit int) *tstream {
	return &tstream{link: newLink(), sel: sel, limit: limit}
}

// take hands over everything queued, and whether the hub has demoted or
// ended the stream after these items.
func (s *tstream) take() (items []*titem, demoted, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items, s.queue, s.bytes = s.queue, nil, 0
	return items, s.demoted, s.ended
}

// close stops the queueing for good and hands over what was queued.
func (s *tstream) close() []*titem {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.queue
	s.closed, s.queue, s.bytes = true, nil, 0
	return items
}

// arm (re)starts pushes after position, in the hub turn that takes the
// stream live.
func (s *tstream) arm(position int64) {
	s.mu.Lock()
	s.through, s.demoted = position, false
	s.mu.Unlock()
}

// offer queues the items after the stream's position, or says false,
// queueing nothing more, when they do not fit.
func (s *tstream) offer(items []*titem) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true
	}
	added := false
	for _, it := range items {
		if it.Pos <= s.through {
			continue
		}
		if s.bytes+len(it.Envelope) > s.limit && len(s.queue) > 0 {
			s.demoted = true
			s.signal()
			return false
		}
		it.refs.Add(1)
		s.queue = append(s.queue, it)
		s.bytes += len(it.Envelope)
		s.through = it.Pos
		added = true
	}
	if added {
		s.signal()
	}
	return true
}

// TenantEncoder is a wire format of tenant streams: each method appends
// one whole frame to b.
type TenantEncoder interface {
	// AppendTenantEvent appends the frame of e; envelope, unless nil, is
	// its tenant envelope already encoded.
	AppendTenantEvent(b []byte, e *event.OfTenant, envelope []byte) []byte
	// AppendTopicGap appends the frame saying that retention removed the
	// topic's events up to sequence to, some of which the stream was
	// owed; id is the position of the frame before it.
	AppendTopicGap(b []byte, id int64, topic string, to int64) []byte
}

// TenantSubscription is one tenant stream's side of the join protocol:
// every event of a selected topic after its position, exactly once, in
// position order, with a gap frame where retention removed events it was
// owed. Behind the tenant hub's head it reads the log by position; at the
// head it asks the hub to go live. Next must be called from one goroutine
// at a time.
type TenantSubscription struct {
	router *Router
	tenant string
	hub    *actor.PID
	head   int64
	stream *tstream

	// position is the newest position handed out or read past: every
	// selected event after it is owed. framed is the position of the
	// last frame written (hello's at first), a gap frame's id.
	position, framed int64
	live             bool
	page             []event.OfTenant
	gaps             []backlog.TopicGap
	pageNext         int64
	pageHead         int64
	atHead           bool
	items            []*titem
	// written are the live items the last Next handed out: their bytes
	// stay taken from the read budget until the next Next says they are
	// written.
	written        []*titem
	demoted, ended bool
	pushed         bool
	learned        int64
	hold           *limits.Hold
}

// Head is the tenant's head when the stream registered; Position at first
// is where it starts: the two numbers of the hello frame.
func (s *TenantSubscription) Head() int64 { return s.head }

// Position is the newest position handed out or read past.
func (s *TenantSubscription) Position() int64 { return s.position }

// Ready is signalled whenever Next has something to do.
func (s *TenantSubscription) Ready() <-chan struct{} { return s.stream.ready }

// OnReady has wake called each time Ready is signalled while empty (see
// Subscription.OnReady).
func (s *TenantSubscription) OnReady(wake func()) { s.stream.onReady(wake) }

// Next appends to b, with enc, the frames the stream is owed next, and
// stops once b holds limit bytes or more. It may block while it reads the
// log or waits for the hub's answer to go live. What it returns must be
// written even with an error, which is ErrEnded once the hub has ended
// the stream, or ctx.Err().
func (s *TenantSubscription) Next(ctx context.Context, enc TenantEncoder, b []byte, limit int) ([]byte, error) {
	s.pushed = false
	s.releaseWritten()
	if len(s.page) == 0 {
		s.hold.Release()
	}
	if s.live {
		return s.handLive(enc, b, limit)
	}
	if err := ctx.Err(); err != nil {
		return b, err
	}
	if s.atHead {
		return s.goLive(ctx, enc, b, limit)
	}
	return s.catchUp(ctx, enc, b, limit)
}

func (s *TenantSubscription) handLive(enc TenantEncoder, b []byte, limit int) ([]byte, error) {
	for {
		for len(s.items) > 0 && len(b) < limit {
			it := s.items[0]
			if !s.pushed {
				s.pushed, s.learned = true, it.learned
			}
			b = enc.AppendTenantEvent(b, &it.OfTenant, it.Envelope)
			s.position, s.framed = it.Pos, it.Pos
			s.written = append(s.written, it)
			s.items[0] = nil
			s.items = s.items[1:]
		}
		switch {
		case len(s.items) > 0:
			s.stream.signal()
			return b, nil
		case s.ended:
			return b, ErrEnded
		case s.demoted:
			s.live, s.demoted = false, false
			s.stream.signal()
			return b, nil
		}
		s.items, s.demoted, s.ended = s.stream.take()
		if len(s.items) == 0 && !s.demoted && !s.ended {
			s.items = nil
			return b, nil
		}
	}
}

// catchUp hands out the log after the position, a page at a time, the
// page's gaps first: a gap's removed events all come before the page's
// events of its topic.
func (s *TenantSubscription) catchUp(ctx context.Context, enc TenantEncoder, b []byte, limit int) ([]byte, error) {
	if len(s.page) == 0 && len(s.gaps) == 0 {
		if hook := s.router.opts.Hooks.BetweenTenantPages; hook != nil {
			hook(s.tenant)
		}
		if s.stream.isEnded() {
			return b, ErrEnded
		}
		page, err := s.readPage(ctx)
		if err != nil {
			return b, err
		}
		s.page, s.gaps, s.pageNext, s.pageHead = page.Events, page.Gaps, page.Next, page.Head
	}
	for len(s.gaps) > 0 && len(b) < limit {
		b = enc.AppendTopicGap(b, s.framed, s.gaps[0].Topic, s.gaps[0].To)
		s.gaps = s.gaps[1:]
	}
	for len(s.gaps) == 0 && len(s.page) > 0 && len(b) < limit {
		if e := &s.page[0]; e.Pos > s.position {
			b = enc.AppendTenantEvent(b, e, nil)
			s.position, s.framed = e.Pos, e.Pos
		}
		s.page[0] = event.OfTenant{}
		s.page = s.page[1:]
	}
	if len(s.page) == 0 && len(s.gaps) == 0 {
		// The page is handed out: what it read past is not owed, and a
		// page that reached the head it was read at ends the reading.
		s.page, s.gaps = nil, nil
		s.position = max(s.position, s.pageNext)
		s.atHead = s.position >= s.pageHead
	}
	s.stream.signal()
	return b, nil
}

// goLive asks the hub to take the stream live at its position and waits
// for the answer, or for the end.
func (s *TenantSubscription) goLive(ctx context.Context, enc TenantEncoder, b []byte, limit int) ([]byte, error) {
	s.atHead = false
	if s.stream.isEnded() {
		return b, ErrEnded
	}
	reply := make(chan tenantLive, 1)
	s.router.opts.root.Send(s.hub, &tenantGoLive{stream: s.stream, position: s.position, reply: reply})
	if hook := s.router.opts.Hooks.AfterTenantGoLive; hook != nil {
		hook(s.tenant)
	}
	select {
	case r := <-reply:
		if !r.live {
			s.stream.signal() // the head moved on: read more
			return b, nil
		}
		s.live = true
		return s.handLive(enc, b, limit)
	case <-s.stream.done:
		return b, ErrEnded
	case <-ctx.Done():
		return b, ctx.Err()
	}
}

// readPage reads the next page of the log with its bytes taken from the
// read budget first, as a topic's catch-up does.
func (s *TenantSubscription) readPage(ctx context.Context) (backlog.TenantPage, error) {
	opts := s.router.opts
	if err := s.hold.Wait(ctx, int64(catchUpBytes+event.EnvelopeOverhead*(opts.PageSize+1))); err != nil {
		return backlog.TenantPage{}, fmt.Errorf("catch up tenant %s after %d: %w", s.tenant, s.position, err)
	}
	page, err := opts.Log.ReadTenant(ctx, s.tenant, s.position, s.stream.sel, opts.PageSize, catchUpBytes)
	if err != nil {
		return page, fmt.Errorf("catch up tenant %s after %d: %w", s.tenant, s.position, err)
	}
	return page, nil
}

// Lag is what Subscription.Lag is, for the events the hub pushed.
func (s *TenantSubscription) Lag() (time.Duration, bool) {
	if !s.pushed {
		return 0, false
	}
	return time.Duration(s.router.opts.clock() - s.learned), true
}

// releaseWritten gives back the bytes of the live items written.
func (s *TenantSubscription) releaseWritten() {
	if len(s.written) == 0 {
		return
	}
	s.router.opts.ReadBudget.Shrink(s.tenant, releaseT(s.written))
	clear(s.written)
	s.written = s.written[:0]
}

// End ends the stream as Subscription.End does.
func (s *TenantSubscription) End() { s.stream.end() }

// Close takes the stream out of its hub and gives back what it holds.
func (s *TenantSubscription) Close() {
	s.hold.Release()
	s.releaseWritten()
	freed := releaseT(s.stream.close()) + releaseT(s.items)
	s.router.opts.ReadBudget.Shrink(s.tenant, freed)
	s.items = nil
	s.router.opts.root.Send(s.hub, &tenantUnwatch{stream: s.stream})
	s.router.tenantStreams(s.tenant, -1)
}

// WatchTenant registers a stream of the tenant's topics that sel selects
// with the tenant's hub and returns its subscription once it is
// registered, as Watch does for one topic (no snapshot).
func (r *Router) WatchTenant(ctx context.Context, tenant string, sel Selection, from From) (*TenantSubscription, error) {
	r.tenantStreams(tenant, 1)
	sub := &TenantSubscription{router: r, tenant: tenant, stream: newTStream(sel, r.opts.StreamBuffer), hold: r.opts.ReadBudget.Hold(tenant)}
	reply := make(chan tenantJoined, 1)
	r.tenants.Send(tenantKey(tenant), &tenantWatch{stream: sub.stream, position: from.After, fromNow: from.Now, reply: reply})
	var j tenantJoined
	select {
	case j = <-reply:
	case <-ctx.Done():
		go func() {
			if j := <-reply; j.err == nil {
				r.opts.root.Send(j.hub, &tenantUnwatch{stream: sub.stream})
			}
			r.tenantStreams(tenant, -1)
		}()
		return nil, ctx.Err()
	}
	if j.err != nil {
		r.tenantStreams(tenant, -1)
		return nil, j.err
	}
	sub.hub, sub.head, sub.position, sub.framed, sub.live = j.hub, j.head, j.position, j.position, j.live
	if !sub.live {
		sub.stream.signal()
	}
	return sub, nil
}

// tenantStreams counts the tenant streams open on each tenant: a commit
// of a tenant that has none goes to no tenant hub.
func (r *Router) tenantStreams(tenant string, delta int) {
	r.watchedMu.Lock()
	defer r.watchedMu.Unlock()
	r.watchedAll.Add(int64(delta))
	if n := r.watched[tenant] + delta; n > 0 {
		r.watched[tenant] = n
	} else {
		delete(r.watched, tenant)
	}
}

// tenantWatched says whether the tenant has tenant streams open here.
func (r *Router) tenantWatched(tenant string) bool {
	if r.watchedAll.Load() == 0 {
		return false // most commits, on a server with no tenant stream
	}
	r.watchedMu.Lock()
	defer r.watchedMu.Unlock()
	return r.watched[tenant] > 0
}

// committedTenant passes a commit of this process's to its tenant's hub,
// if the tenant has tenant streams here; it runs in the committer's
// goroutine, which encodes the tenant envelopes.
func (r *Router) committedTenant(tenant, topic string, events []event.Event) {
	if len(events) == 0 || !r.tenantWatched(tenant) {
		return
	}
	of := make([]event.OfTenant, len(events))
	for i := range events {
		of[i] = event.OfTenant{Topic: topic, Event: events[i]}
	}
	r.tenants.Notify(tenantKey(tenant), &tenantCommit{items: tenantItems(of, r.opts.clock())})
}
