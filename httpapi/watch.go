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
	if aerr := s.authorize(r, tenant, topic, auth.Subscribe); aerr != nil {
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
	var snap *backlog.State
	if v := r.URL.Query().Get("snapshot"); fromNow && (v == "1" || v == "true") {
		st, err := s.deps.Log.State(r.Context(), tenant, topic)
		if err != nil {
			s.deps.Logger.Error("read state", "tenant", tenant, "topic", topic, "err", err)
			writeError(w, errorf(http.StatusServiceUnavailable, "unavailable", "the topic's state could not be read"))
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
	// A tenant deleted between the credential check and the registration
	// has had its hubs stopped already; this stream may sit on a new one.
	// The deletion removes the row first, so looking again here catches it.
	if aerr := s.stillThere(r, tenant); aerr != nil {
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
	}
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
	if snap != nil {
		p.buf = sse.AppendSnapshot(p.buf, snap)
	}
	if err := p.flush(); err != nil {
		return
	}
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
		p.appendItem(it)
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

// appendItem queues a live event's frame. Items come in order from the hub;
// one at or below the position was already written and is skipped.
func (p *pump) appendItem(it *hub.Item) {
	if it.Event.Seq <= p.pos && !faults.On("replay-after-live") {
		return
	}
	p.buf = append(p.buf, it.Frame...)
	p.pos = it.Event.Seq
	p.delivered++
}

// catchUp writes the backlog after the position, page by page, then asks
// the hub to go live. A short page means the backlog's head was reached at
// that read; the hub decides whether that is still its head.
func (p *pump) catchUp(ctx context.Context) error {
	for {
		page, err := p.s.deps.Log.Read(ctx, p.tenant, p.topic, p.pos, p.s.cfg.PageSize, catchUpBytes)
		if err != nil {
			return fmt.Errorf("catch up %s/%s after %d: %w", p.tenant, p.topic, p.pos, err)
		}
		if page.Trimmed > p.pos {
			p.buf = sse.AppendGap(p.buf, p.pos+1, page.Trimmed)
			p.pos = page.Trimmed
		}
		for i := range page.Events {
			if e := &page.Events[i]; e.Seq > p.pos {
				p.buf = sse.AppendEvent(p.buf, e)
				p.pos = e.Seq
				p.delivered++
			}
			if len(p.buf) >= flushBytes {
				if err := p.flush(); err != nil {
					return err
				}
			}
		}
		if err := p.flush(); err != nil {
			return err
		}
		if len(page.Events) < p.s.cfg.PageSize {
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

// flush writes whatever frames are buffered, whole, under a fresh write
// deadline: a client that stops reading holds only its own goroutine, and
// for no longer than the write timeout.
func (p *pump) flush() error {
	if len(p.buf) == 0 {
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
	if err := p.rc.Flush(); err != nil {
		return fmt.Errorf("flush frames: %w", err)
	}
	if p.delivered > 0 {
		p.s.deps.Metrics.Deliveries.Add(float64(p.delivered))
		p.delivered = 0
	}
	p.buf = p.buf[:0]
	if !p.heartbeat.Stop() {
		select {
		case <-p.heartbeat.C:
		default:
		}
	}
	p.heartbeat.Reset(p.s.cfg.Heartbeat)
	return nil
}
