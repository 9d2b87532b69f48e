package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/spool"
)

// ErrEnded ends a subscription whose hub went away (its tenant was deleted
// or rotated, or the server is stopping); its client reconnects from its
// position and loses nothing.
var ErrEnded = errors.New("stream ended")

// catchUpBytes bounds the event data of one catch-up page: a subscription
// whose client stops reading while it catches up holds about this much.
const catchUpBytes = 256 << 10

// Encoder is a wire format: each method appends one whole frame to b. The
// SSE writer is one; a long-poll or another streaming protocol is another.
type Encoder interface {
	// AppendEvent appends the frame of e. envelope, unless nil, is e's
	// envelope (see event.Event.AppendEnvelope) already encoded: a live
	// event's is encoded once for every stream.
	AppendEvent(b []byte, e *event.Event, envelope []byte) []byte
	// AppendGap appends the frame saying that events from..to were removed
	// by retention before the stream could be given them.
	AppendGap(b []byte, from, to int64) []byte
}

// Subscription is one stream's side of the join protocol: it hands its
// transport every event after its position exactly once, in order, with a
// gap only where retention removed events. While it is behind the hub's
// head it reads the backlog in pages; at the head it asks the hub to go
// live and then hands out what the hub pushes; when the hub demotes it (its
// queue was full) it reads the backlog again. Next must be called from one
// goroutine at a time.
type Subscription struct {
	// The fields down to stream are set by Router.Watch and then fixed.
	router        *Router
	tenant, topic string
	hub           *actor.PID // the hub it is registered with
	head          int64      // the hub's head at registration, for hello
	snapshot      *Snapshot  // the state it starts from, until written
	stream        *stream    // its link with the hub, shared with it

	// The fields below are owned by the goroutine that calls Next.

	// position is the newest sequence number handed out, or skipped by a
	// gap: the stream owes every event after it.
	position int64
	// live says the hub pushes to this stream; false, it reads the backlog.
	live bool
	// page is what is left of the catch-up page being handed out, read
	// when the topic's head was pageHead; pages counts the pages read
	// since the stream last asked to go live.
	page     []event.Event
	pageHead int64
	pages    int
	// atHead says the last page reached the head it was read at, or
	// until: the next step is to ask the hub to go live.
	atHead bool
	// until, if not 0, is as far as the stream reads the backlog before it
	// asks to go live: the hub keeps the commits after it (hub.recent).
	until int64
	// items are live events taken from the queue, those before next
	// handed out already (their places emptied), and the array goes back
	// to the queue at the next take; demoted and ended are what the hub
	// said with them.
	items          []*item
	next           int
	demoted, ended bool
	// freshAfter is the hub's head when it took the stream live: the
	// events after it were pushed as they were committed, those up to it
	// given from the hub's recent commits. pushed says that the last Next
	// handed out one of the former, and learned is the oldest one's
	// (item.learned): what Lag reports.
	freshAfter int64
	pushed     bool
	learned    int64
	// hold is the read budget's bytes of the snapshot or page being
	// written, disk the spool budget's of the snapshot, and frames the read
	// budget's of the live frames the last Next handed out past
	// freeFrameBytes: all of them the tenant's.
	hold, disk, frames *limits.Hold
}

// Snapshot is the state a snapshot stream starts from, as of Seq, its
// encoding waiting in a spool (on disk if it is large) to be written.
type Snapshot struct {
	Seq int64
	*spool.Spool
}

// freeFrameBytes is how much of the frames one Next hands out from the
// live queue a stream holds without taking them from the read budget:
// part of what every stream costs anyway. Past it, a live stream's write
// buffer is counted too, so that many stalled live streams hold no more
// than the budget.
const freeFrameBytes = 4 << 10

// Head is the topic's head when the stream registered (or its snapshot's
// sequence, if later); Position at first is where the stream starts: the
// two numbers of the hello frame.
func (s *Subscription) Head() int64 { return s.head }

// Position is the newest sequence number handed out, or where the stream
// starts before anything is.
func (s *Subscription) Position() int64 { return s.position }

// Snapshot is the topic's state as of Position, to be written before the
// first Next, or nil if the watch asked for none.
func (s *Subscription) Snapshot() *Snapshot { return s.snapshot }

// Ready is signalled whenever Next has something to do: events pushed, a
// page to read, a demotion or the end.
func (s *Subscription) Ready() <-chan struct{} { return s.stream.ready }

// OnReady has wake called, on the hub's goroutine or the subscription's,
// each time Ready is signalled while empty, for a transport that waits
// for something else than Ready (a connection's readability) and must be
// woken. wake must not block. Call it before the first Next, from the
// goroutine that calls Next or one that starts it.
func (s *Subscription) OnReady(wake func()) { s.stream.onReady(wake) }

// Next appends to b, with enc, the frames the stream is owed next, and
// stops once b holds limit bytes or more. Calling it says that what the
// previous call returned, and the snapshot, have been written: their
// bytes are given back to the read budget. It may block while it reads the backlog or waits for the hub's
// answer to go live, never while it is live. What it returns must be
// written even with an error, which is ErrEnded once the hub has ended
// the stream, or ctx.Err().
func (s *Subscription) Next(ctx context.Context, enc Encoder, b []byte, limit int) ([]byte, error) {
	s.pushed = false
	s.frames.Release()
	if len(s.page) == 0 {
		s.hold.Release()
		s.dropSnapshot()
	}
	if s.live {
		return s.handLiveTo(ctx, enc, b, limit)
	}
	if err := ctx.Err(); err != nil {
		return b, err
	}
	if s.atHead {
		return s.goLive(ctx, enc, b, limit)
	}
	return s.catchUp(ctx, enc, b, limit)
}

// dropSnapshot gives up the snapshot, once it is written, and its bytes.
func (s *Subscription) dropSnapshot() {
	if s.snapshot != nil {
		s.snapshot.Close() //nolint:errcheck // an unlinked file: nothing is lost if its close fails
		s.snapshot = nil
	}
	s.disk.Release()
}

// handLive hands out what the hub queued to o; after it, a demotion
// sends the stream back to the backlog and an end ends it. Each event
// handed out is let go of in the queue's count (item.refs); the frames
// past freeFrameBytes are taken from the read budget first, waiting for
// room if there is none, until ctx ends; o without an Encoder never
// waits, and says errMustWait instead, as it does for an event that has
// no shared frame.
func (s *Subscription) handLive(ctx context.Context, o *handOut) error {
	var freed int64
	defer func() { s.router.opts.ReadBudget.Shrink(s.tenant, freed) }()
	for {
		for s.next < len(s.items) && !o.full() {
			it := s.items[s.next]
			if o.enc == nil && it.Frame == nil {
				return errMustWait
			}
			if need := int64(o.n+len(it.Envelope)+event.EnvelopeOverhead) - freeFrameBytes; need > s.frames.Held() {
				more := max(need-s.frames.Held(), freeFrameBytes)
				if o.enc == nil {
					if s.frames.Try(more) != nil {
						return errMustWait
					}
				} else if err := s.frames.Wait(ctx, more); err != nil {
					return err
				}
			}
			if !s.pushed && it.Event.Seq > s.freshAfter {
				s.pushed, s.learned = true, it.learned
			}
			o.add(it)
			s.position = it.Event.Seq
			freed += release(s.items[s.next : s.next+1])
			s.items[s.next] = nil
			s.next++
		}
		switch {
		case s.next < len(s.items):
			s.stream.signal() // the rest next time
			return nil
		case s.ended:
			return ErrEnded
		case s.demoted:
			s.live, s.demoted = false, false
			s.stream.signal()
			return nil
		}
		// Everything taken is handed out: take what the hub queued since,
		// with what it said since. Its signal may have been spent on a
		// wake-up that handed out the last of the previous take, so the
		// queue is looked at now, not on the next signal.
		spare := s.items[:0] // every place emptied as it was handed out
		if cap(spare) > spareItems {
			spare = nil // a burst's array is not kept for life
		}
		s.items, s.demoted, s.ended = s.stream.take(spare)
		s.next = 0
		if len(s.items) == 0 && !s.demoted && !s.ended {
			return nil
		}
	}
}

// errMustWait stops NextFrames where Next would wait (for read budget)
// or copy (an event with no shared frame).
var errMustWait = errors.New("the stream must wait")

// handOut is where handLive puts the live events it hands out: their
// frames appended to b by enc (Next), or, with no enc, their shared
// frames added to parts by reference (NextFrames). n is the bytes handed
// out (with what b held before), up to limit; parts holds at most
// maxParts.
type handOut struct {
	enc      Encoder
	b        []byte
	parts    [][]byte
	maxParts int
	n, limit int
}

func (o *handOut) full() bool {
	return o.n >= o.limit || o.enc == nil && len(o.parts) >= o.maxParts
}

func (o *handOut) add(it *item) {
	if o.enc == nil {
		o.parts = append(o.parts, it.Frame)
		o.n += len(it.Frame)
		return
	}
	before := len(o.b)
	o.b = o.enc.AppendEvent(o.b, &it.Event, it.Envelope)
	o.n += len(o.b) - before
}

// handLiveTo is handLive for Next: frames appended to b with enc.
func (s *Subscription) handLiveTo(ctx context.Context, enc Encoder, b []byte, limit int) ([]byte, error) {
	o := handOut{enc: enc, b: b, n: len(b), limit: limit}
	err := s.handLive(ctx, &o)
	return o.b, err
}

// Live says the stream is at the head with nothing to hand out but what
// the hub pushes (no catch-up page, no snapshot to give back): what
// NextFrames serves. Call it from the goroutine that calls Next.
func (s *Subscription) Live() bool { return s.live && s.snapshot == nil && len(s.page) == 0 }

// NextFrames is Next for a transport that writes live events by
// reference, from a goroutine that must never block: it adds to parts the
// frames (Options.Framing) of the live events the stream is owed, shared
// with every other stream and read-only, and stops at maxParts of them or
// once they hold limit bytes. Calling it says that what the previous call
// (or Next) returned has been written, as Next does. It never waits:
// live is false when the stream needs Next instead, on a goroutine that
// may block (it is no longer live, or was ended, or its frames need read
// budget that is not free now, or an event has no shared frame), and
// Ready is then signalled. The frames it returns must be written either
// way, before Next is called.
func (s *Subscription) NextFrames(parts [][]byte, maxParts, limit int) (_ [][]byte, live bool) {
	s.pushed = false
	s.frames.Release()
	if !s.Live() {
		s.stream.signal()
		return parts, false
	}
	o := handOut{parts: parts, maxParts: maxParts, limit: limit}
	if err := s.handLive(context.Background(), &o); err != nil || !s.live {
		s.stream.signal()
		return o.parts, false
	}
	return o.parts, true
}

// spareItems is the largest array of live items a stream keeps between
// takes (two of them: its queue's and its own), so that a stream that is
// pushed a few events at a time allocates nothing for them, and an idle
// one keeps a few hundred bytes at most.
const spareItems = 32

// catchUp hands out the backlog after the position, a page at a time. A
// page that reaches the head it was read at ends the reading; the hub then
// decides whether that is still its head.
func (s *Subscription) catchUp(ctx context.Context, enc Encoder, b []byte, limit int) ([]byte, error) {
	if len(s.page) == 0 {
		if hook := s.router.opts.Hooks.BetweenPages; hook != nil && s.pages > 0 {
			hook(s.tenant, s.topic)
		}
		// The hub ends its streams when the tenant is rotated or deleted:
		// a stream catching up must not read on with revoked credentials.
		if s.stream.isEnded() {
			return b, ErrEnded
		}
		page, err := s.readPage(ctx)
		if err != nil {
			return b, err
		}
		s.pages++
		if page.Trimmed > s.position {
			b = enc.AppendGap(b, s.position+1, page.Trimmed)
			s.position = page.Trimmed
		}
		s.page, s.pageHead = page.Events, page.Head
		s.atHead = len(page.Events) == 0
	}
	for len(s.page) > 0 && len(b) < limit {
		if e := &s.page[0]; e.Seq > s.position {
			b = enc.AppendEvent(b, e, nil)
			s.position = e.Seq
		}
		s.page[0] = event.Event{} // its frame holds it now
		s.page = s.page[1:]
	}
	if len(s.page) == 0 {
		s.page = nil // the page's array goes with its last event
	}
	if len(s.page) == 0 && (s.position >= s.pageHead || s.until > 0 && s.position >= s.until) {
		s.atHead = true
	}
	s.stream.signal() // the rest of the page, the next one, or going live
	return b, nil
}

// goLive asks the hub to take the stream live at its position and waits
// for the answer, or for the end: a hub that ends its streams may stop
// before it answers. Items or a demotion pushed before the answer mean the
// hub took it live; the answer is on its way, and handLive takes them.
func (s *Subscription) goLive(ctx context.Context, enc Encoder, b []byte, limit int) ([]byte, error) {
	s.atHead, s.pages = false, 0
	// A hub that ended the stream may have stopped: it would never answer.
	if s.stream.isEnded() {
		return b, ErrEnded
	}
	reply := make(chan liveReply, 1)
	s.router.opts.root.Send(s.hub, &goLive{stream: s.stream, position: s.position, reply: reply})
	if hook := s.router.opts.Hooks.AfterGoLive; hook != nil {
		hook(s.tenant, s.topic)
	}
	for {
		select {
		case r := <-reply:
			s.until = r.until
			if !r.live {
				s.stream.signal() // the head moved on: read more
				return b, nil
			}
			// The hub may have pushed (or demoted) since it took the
			// stream live, and that signal may already be spent.
			s.live, s.freshAfter = true, r.head
			return s.handLiveTo(ctx, enc, b, limit)
		case <-s.stream.done:
			return b, ErrEnded
		case <-ctx.Done():
			return b, ctx.Err()
		}
	}
}

// readPage reads the next catch-up page with its bytes taken from the read
// budget, waiting for them if other answers hold it all, so that many
// streams catching up at once hold no more than the budget. The bytes of a
// page of catchUpBytes are taken before it is read; a page of one larger
// event takes the rest if it is free now, and otherwise waits for it
// without holding the page and reads it again.
func (s *Subscription) readPage(ctx context.Context) (backlog.Page, error) {
	opts := s.router.opts
	want := int64(catchUpBytes + event.EnvelopeOverhead*(opts.PageSize+1))
	for {
		if err := s.hold.Wait(ctx, want); err != nil {
			return backlog.Page{}, fmt.Errorf("catch up %s/%s after %d: %w", s.tenant, s.topic, s.position, err)
		}
		limit := opts.PageSize
		if s.until > 0 {
			limit = int(min(int64(limit), max(1, s.until-s.position)))
		}
		page, err := opts.Log.Read(ctx, s.tenant, s.topic, s.position, limit, catchUpBytes)
		if err != nil {
			return page, fmt.Errorf("catch up %s/%s after %d: %w", s.tenant, s.topic, s.position, err)
		}
		size := event.EnvelopesBytes(page.Events)
		if size <= want || s.hold.Try(size-want) == nil {
			return page, nil
		}
		s.hold.Release()
		want = size
	}
}

// Lag is how long ago the process learned that the oldest of the events
// that the last Next handed out, of those the hub pushed to the stream as
// they were committed, was durable; ok is false if it handed out none
// (events read from the backlog, or given from the hub's recent commits
// as the stream went live, do not count). A transport calls it once it
// has written what Next returned: the commit-to-delivery lag.
func (s *Subscription) Lag() (lag time.Duration, ok bool) {
	if !s.pushed {
		return 0, false
	}
	return time.Duration(s.router.opts.clock() - s.learned), true
}

// End ends the stream as its hub's going away does, from any goroutine:
// Next hands out what is queued, then ErrEnded, and the client resumes
// from its position. A revoked credential ends its streams so.
func (s *Subscription) End() { s.stream.end() }

// Close takes the stream out of its hub and gives back what it holds.
func (s *Subscription) Close() {
	s.hold.Release()
	s.frames.Release()
	s.dropSnapshot()
	freed := release(s.stream.close()) + release(s.items[s.next:])
	s.items, s.next = nil, 0
	s.router.opts.ReadBudget.Shrink(s.tenant, freed)
	s.router.opts.root.Send(s.hub, &unwatch{stream: s.stream})
}
