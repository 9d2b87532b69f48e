package httpapi

import (
	"context"
	"edgehub/auth"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"edgehub/backlog"
	"edgehub/event"
	"edgehub/faults"
	"edgehub/hub"
	"edgehub/sse"
)

// errStreamEnded stops a stream whose hub or server is going away; the
// client reconnects with Last-Event-ID and loses nothing.
var errStreamEnded = errors.New("stream ended")

// watch registers a stream with its hub, then, and only then, sends the
// headers and hello, and pumps frames until the client or server leaves.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	ten, aerr := s.authorizeTenant(r, tenant, topic, auth.Subscribe)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	release, refused := s.deps.Limits.OpenStream(tenant)
	if refused != nil {
		refuseLimit(w, refused)
		return
	}
	defer release()
	after, fromNow := int64(0), true
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, ok := parsePosition(v)
		if !ok {
			writeError(w, errorf(http.StatusBadRequest, "invalid_position", "Last-Event-ID must be a non-negative integer"))
			return
		}
		after, fromNow = n, false
	} else if v, ok := r.URL.Query()["after"]; ok {
		n, valid := parsePosition(v[0])
		if !valid {
			writeError(w, errorf(http.StatusBadRequest, "invalid_position", "after must be a non-negative integer"))
			return
		}
		after, fromNow = n, false
	}
	// A snapshot stream starts exactly at the sequence its state folds: the
	// state and its sequence come from one read transaction, and the stream
	// registers at that position, catching up if the hub is already past
	// it. A stream with a position has the state already and gets none.
	// Its bytes are taken from the read budget before the keys are read
	// (429 overloaded if they are not free) and held until the snapshot
	// frame is flushed.
	var snap *event.State
	snapHold := s.hold()
	defer snapHold.release()
	if v := r.URL.Query().Get("snapshot"); fromNow && (v == "1" || v == "true") {
		st, err := s.deps.Log.State(r.Context(), tenant, topic, snapHold.try)
		if s.refuseRead(w, err, "state", tenant, topic) {
			return
		}
		snap, after, fromNow = &st, st.Seq, false
		if s.hooks.AfterSnapshot != nil {
			s.hooks.AfterSnapshot(tenant, topic)
		}
	}

	if faults.On("register-late") {
		// Injected bug: onopen fires before the stream is registered.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush() //nolint:errcheck // injected fault
		time.Sleep(20 * time.Millisecond)
	}
	st := hub.NewStream(s.cfg.StreamBuffer)
	joinedc := make(chan hub.Joined, 1)
	s.deps.Hubs.Send(hub.Key(tenant, topic), &hub.Watch{Stream: st, After: after, FromNow: fromNow, Reply: joinedc})
	var joined hub.Joined
	select {
	case joined = <-joinedc:
	case <-r.Context().Done():
		// The hub registers the stream anyway; take it out once it has.
		go func() {
			if j := <-joinedc; j.Err == nil {
				s.deps.Root.Send(j.Hub, &hub.Unwatch{Stream: st})
			}
		}()
		return
	}
	if joined.Err != nil {
		writeError(w, errorf(http.StatusServiceUnavailable, "unavailable", "the topic could not be opened"))
		return
	}
	defer s.deps.Root.Send(joined.Hub, &hub.Unwatch{Stream: st})
	s.deps.Metrics.StreamsOpen.Inc()
	defer s.deps.Metrics.StreamsOpen.Dec()
	if s.hooks.AfterRegister != nil {
		s.hooks.AfterRegister(tenant, topic)
	}
	// A tenant deleted or rotated between the credential check and the
	// registration has had its hubs stopped already; this stream may sit
	// on a new one. Both change the row first, so looking again catches it.
	if aerr := s.stillThere(r, ten); aerr != nil {
		writeError(w, aerr)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	p := &pump{
		s: s, w: w, rc: http.NewResponseController(w), st: st, hubPID: joined.Hub,
		tenant: tenant, topic: topic, pos: joined.Position, live: joined.Position >= joined.Head,
		page: s.hold(),
	}
	defer p.page.release()
	s.track(p)
	defer s.untrack(p)
	p.heartbeat = time.NewTimer(s.cfg.Heartbeat)
	defer p.heartbeat.Stop()
	// The hub's head may trail a snapshot read: the commit notice can be on
	// its way. Hello never reports a head below what the stream has seen.
	head := joined.Head
	if snap != nil {
		head = max(head, snap.Seq)
	}
	p.buf = sse.Open(s.cfg.Retry, head, joined.Position)
	var snapData [][]byte
	if snap != nil {
		p.buf = sse.AppendSnapshotStart(p.buf, snap.Seq)
		snapData = [][]byte{snap.JSON, sse.FrameEnd}
	}
	if err := p.flush(snapData...); err != nil {
		return
	}
	snapHold.release()
	err := p.run(r.Context())
	if err != nil && !errors.Is(err, errStreamEnded) && !errors.Is(err, context.Canceled) {
		s.deps.Logger.Debug("stream closed", "tenant", tenant, "topic", topic, "position", p.pos, "err", err)
	}
}

const (
	// flushBytes is how much a stream buffers before it writes.
	flushBytes = 64 << 10
	// catchUpBytes bounds the event data of one catch-up page: a stream
	// that stops reading while it catches up holds about this much.
	catchUpBytes = 256 << 10
)

// pump writes one stream's frames. It alternates between two modes: live,
// writing what the hub queued, and catching up, reading the backlog in
// pages until the hub agrees that it has reached the head.
type pump struct {
	s      *Server
	w      http.ResponseWriter
	rc     *http.ResponseController
	st     *hub.Stream
	hubPID *actor.PID
	tenant string
	topic  string

	pos       int64 // the newest sequence number written (or skipped by a gap)
	live      bool
	page      *readHold // the read budget's bytes of the catch-up page being written
	buf       []byte
	delivered int
	heartbeat *time.Timer
}

func (p *pump) run(ctx context.Context) error {
	for {
		if !p.live {
			if err := p.catchUp(ctx); err != nil {
				return err
			}
			continue
		}
		select {
		case <-p.st.Ready():
			if err := p.drain(); err != nil {
				return err
			}
		case <-p.heartbeat.C:
			p.buf = append(p.buf, sse.Ping...)
			if err := p.flush(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-p.s.ending:
			return errStreamEnded
		}
	}
}

// drain writes what the hub queued; a demotion sends the stream back to
// the backlog after these items, an end closes it after them.
func (p *pump) drain() error {
	items, demoted, ended := p.st.Take()
	for _, it := range items {
		if err := p.appendItem(it); err != nil {
			return err
		}
	}
	if err := p.flush(); err != nil {
		return err
	}
	if ended {
		return errStreamEnded
	}
	if demoted {
		p.s.deps.Metrics.Demotions.Inc()
		p.live = false
	}
	return nil
}

// appendItem queues a live event's frame, writing what is buffered first
// if the frame would take the buffer past flushBytes. Items come in order
// from the hub; one at or below the position was already written and is
// skipped.
func (p *pump) appendItem(it *hub.Item) error {
	if it.Event.Seq <= p.pos && !faults.On("replay-after-live") {
		return nil
	}
	if err := p.makeRoom(len(it.Frame)); err != nil {
		return err
	}
	p.buf = append(p.buf, it.Frame...)
	p.pos = it.Event.Seq
	p.delivered++
	return nil
}

// makeRoom writes what is buffered if n more bytes would take the buffer
// past flushBytes; a frame larger than that is buffered alone.
func (p *pump) makeRoom(n int) error {
	if len(p.buf) > 0 && len(p.buf)+n > flushBytes {
		return p.flush()
	}
	return nil
}

// catchUp writes the backlog after the position, page by page, then asks
// the hub to go live. A page that reaches the head as it was read ends the
// reading; the hub decides whether that is still its head.
func (p *pump) catchUp(ctx context.Context) error {
	for {
		// The hub ends its streams when the tenant is rotated or deleted;
		// a stream catching up must not read on with revoked credentials.
		if p.st.Ended() {
			return errStreamEnded
		}
		page, err := p.readPage(ctx)
		if err != nil {
			return err
		}
		if page.Trimmed > p.pos {
			p.buf = sse.AppendGap(p.buf, p.pos+1, page.Trimmed)
			p.pos = page.Trimmed
		}
		for i := range page.Events {
			if e := &page.Events[i]; e.Seq > p.pos {
				if err := p.makeRoom(sse.EventFrameBound(e)); err != nil {
					return err
				}
				p.buf = sse.AppendEvent(p.buf, e)
				p.pos = e.Seq
				p.delivered++
			}
			page.Events[i] = event.Event{} // its frame holds it now
		}
		if err := p.flush(); err != nil {
			return err
		}
		p.page.release()
		if len(page.Events) == 0 || p.pos >= page.Head {
			break
		}
		if p.s.hooks.BetweenPages != nil {
			p.s.hooks.BetweenPages(p.tenant, p.topic)
		}
		select {
		case <-p.s.ending:
			return errStreamEnded
		default:
		}
	}
	reply := make(chan bool, 1)
	p.s.deps.Root.Send(p.hubPID, &hub.GoLive{Stream: p.st, Position: p.pos, Reply: reply})
	if p.s.hooks.AfterGoLive != nil {
		p.s.hooks.AfterGoLive(p.tenant, p.topic)
	}
	for {
		select {
		case p.live = <-reply:
			if p.live {
				// The hub may have pushed (or demoted) since it took the
				// stream live, and that signal may already be spent.
				return p.drain()
			}
			return nil
		case <-p.st.Ready():
			if p.st.Ended() {
				return errStreamEnded
			}
			// Items or a demotion before the answer mean the hub took the
			// stream live; the answer is waiting and drain takes them.
		case <-ctx.Done():
			return ctx.Err()
		case <-p.s.ending:
			return errStreamEnded
		}
	}
}

// readPage reads the next catch-up page with its bytes taken from the read
// budget, waiting for them if other answers hold it all, so that many
// streams catching up at once hold no more than the budget. The bytes of a
// page of catchUpBytes are taken before it is read; a page of one larger
// event takes the rest if it is free now, and otherwise waits for it
// without holding the page and reads it again.
func (p *pump) readPage(ctx context.Context) (backlog.Page, error) {
	want := int64(catchUpBytes + envelopeBytes*(p.s.cfg.PageSize+1))
	for {
		if err := p.takePage(ctx, want); err != nil {
			return backlog.Page{}, err
		}
		page, err := p.s.deps.Log.Read(ctx, p.tenant, p.topic, p.pos, p.s.cfg.PageSize, catchUpBytes)
		if err != nil {
			return page, fmt.Errorf("catch up %s/%s after %d: %w", p.tenant, p.topic, p.pos, err)
		}
		size := pageBytes(page.Events)
		if size <= want || p.page.try(size-want) == nil {
			return page, nil
		}
		p.page.release()
		want = size
	}
}

// takePage takes n bytes of the read budget for a page, waiting for them
// if they are not free now, until the client leaves or the server ends.
func (p *pump) takePage(ctx context.Context, n int64) error {
	if p.page.try(n) == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.s.ending:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := p.page.wait(ctx, n); err != nil {
		select {
		case <-p.s.ending:
			return errStreamEnded
		default:
		}
		return fmt.Errorf("catch up %s/%s after %d: %w", p.tenant, p.topic, p.pos, err)
	}
	return nil
}

// flush writes whatever frames are buffered, whole, and then extra (the
// rest of a frame that is held elsewhere), under a fresh write deadline: a
// client that stops reading holds only its own goroutine, and for no
// longer than the write timeout. A buffer that one burst grew past twice
// flushBytes is dropped, so an idle stream does not keep it for life.
func (p *pump) flush(extra ...[]byte) error {
	if len(p.buf) == 0 && len(extra) == 0 {
		return nil
	}
	deadline := time.Now().Add(p.s.cfg.WriteTimeout)
	select {
	case <-p.s.ending:
		deadline = time.Now().Add(endGrace)
	default:
	}
	if err := p.rc.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	if _, err := p.w.Write(p.buf); err != nil {
		return fmt.Errorf("write frames: %w", err)
	}
	for _, b := range extra {
		if _, err := p.w.Write(b); err != nil {
			return fmt.Errorf("write frames: %w", err)
		}
	}
	if err := p.rc.Flush(); err != nil {
		return fmt.Errorf("flush frames: %w", err)
	}
	if p.delivered > 0 {
		p.s.deps.Metrics.Deliveries.Add(float64(p.delivered))
		p.delivered = 0
	}
	p.buf = p.buf[:0]
	if cap(p.buf) > 2*flushBytes {
		p.buf = nil
	}
	if !p.heartbeat.Stop() {
		select {
		case <-p.heartbeat.C:
		default:
		}
	}
	p.heartbeat.Reset(p.s.cfg.Heartbeat)
	return nil
}
