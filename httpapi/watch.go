package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"edgehub/auth"
	"edgehub/event"
	"edgehub/hub"
	"edgehub/refusal"
	"edgehub/sse"
)

const (
	// flushBytes is how much a stream buffers before it writes.
	flushBytes = 64 << 10
	// idleBufferBytes is the most buffer a stream keeps while it has
	// nothing to write: a catch-up or a burst grows its buffer to
	// flushBytes, and an idle stream should not keep that for life.
	idleBufferBytes = 4 << 10
)

// watch registers a stream with its hub, then, and only then, sends the
// headers and hello, and writes what its subscription hands out until the
// client or the server leaves.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	ten, aerr := s.authorizeTenant(r, tenant, topic, auth.Subscribe)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	release, refused := s.deps.Limits.OpenStream(tenant)
	if refused != nil {
		writeError(w, refused)
		return
	}
	defer release()
	from, aerr := watchFrom(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if s.faults.beforeRegister != nil {
		s.faults.beforeRegister(w)
	}
	sub, err := s.deps.Hubs.Watch(r.Context(), tenant, topic, from)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return // the client left
	case errors.Is(err, hub.ErrUnavailable):
		writeError(w, refusal.New(refusal.Unavailable, "the topic could not be opened"))
		return
	default:
		s.refuseRead(w, err, "state", tenant, topic) // the snapshot's
		return
	}
	defer sub.Close()
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
	st := &sseStream{s: s, w: w, rc: http.NewResponseController(w), heartbeat: time.NewTimer(s.cfg.Heartbeat)}
	defer st.heartbeat.Stop()
	s.track(st)
	defer s.untrack(st)
	err = st.run(r.Context(), sub)
	if err != nil && !errors.Is(err, hub.ErrEnded) && !errors.Is(err, context.Canceled) {
		s.deps.Logger.Debug("stream closed", "tenant", tenant, "topic", topic, "position", sub.Position(), "err", err)
	}
}

// watchFrom reads where a stream starts, first match wins: Last-Event-ID
// (a browser's reconnect sends it with the original URL), then after,
// then live from now, with a snapshot if asked for.
func watchFrom(r *http.Request) (hub.From, *refusal.Error) {
	q := r.URL.Query()
	snapshot := q.Get("snapshot") == "1" || q.Get("snapshot") == "true"
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, ok := parsePosition(v)
		if !ok {
			return hub.From{}, refusal.New(refusal.InvalidPosition, "Last-Event-ID must be a non-negative integer")
		}
		return hub.From{After: n, Snapshot: snapshot}, nil
	}
	if v, ok := q["after"]; ok {
		n, valid := parsePosition(v[0])
		if !valid {
			return hub.From{}, refusal.New(refusal.InvalidPosition, badAfter)
		}
		return hub.From{After: n, Snapshot: snapshot}, nil
	}
	return hub.From{Now: true, Snapshot: snapshot}, nil
}

// sseStream writes one subscription as Server-Sent Events: hello, the
// snapshot if there is one, then whatever the subscription hands out,
// whole frames at a time, with a heartbeat in silences.
type sseStream struct {
	s         *Server
	w         http.ResponseWriter
	rc        *http.ResponseController
	heartbeat *time.Timer
	buf       []byte
	delivered int // event frames buffered since the last flush
}

// run writes until the client leaves, the server ends the stream, or the
// hub does.
func (st *sseStream) run(ctx context.Context, sub *hub.Subscription) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(st.s.endCtx, cancel)()
	st.buf = sse.Open(st.s.cfg.Retry, sub.Head(), sub.Position())
	if snap := sub.Snapshot(); snap != nil {
		st.buf = sse.AppendSnapshotStart(st.buf, snap.Seq)
		if err := st.flush(snap.JSON, sse.FrameEnd); err != nil {
			return err
		}
	} else if err := st.flush(); err != nil {
		return err
	}
	for {
		select {
		case <-sub.Ready():
			var err error
			st.buf, err = sub.Next(ctx, st, st.buf, flushBytes)
			if ferr := st.flush(); ferr != nil {
				return ferr
			}
			if err != nil {
				return err
			}
			if cap(st.buf) > idleBufferBytes && len(sub.Ready()) == 0 {
				st.buf = nil // nothing more to write now
			}
		case <-st.heartbeat.C:
			st.buf = sse.AppendPing(st.buf)
			if err := st.flush(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AppendEvent is the SSE frame of an event, for the subscription.
func (st *sseStream) AppendEvent(b []byte, e *event.Event, envelope []byte) []byte {
	st.delivered++
	return sse.AppendEvent(b, e, envelope)
}

// AppendGap is the SSE frame of a gap, for the subscription.
func (st *sseStream) AppendGap(b []byte, from, to int64) []byte {
	return sse.AppendGap(b, from, to)
}

// flush writes whatever frames are buffered, whole, and then extra (the
// rest of a frame that is held elsewhere), under a fresh write deadline: a
// client that stops reading holds only its own goroutine, and for no
// longer than the write timeout. A buffer that one burst grew past twice
// flushBytes is dropped, so an idle stream does not keep it for life.
func (st *sseStream) flush(extra ...[]byte) error {
	if len(st.buf) == 0 && len(extra) == 0 {
		return nil
	}
	deadline := time.Now().Add(st.s.cfg.WriteTimeout)
	if st.s.endCtx.Err() != nil {
		deadline = time.Now().Add(endGrace)
	}
	if err := st.rc.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	if _, err := st.w.Write(st.buf); err != nil {
		return fmt.Errorf("write frames: %w", err)
	}
	for _, b := range extra {
		if _, err := st.w.Write(b); err != nil {
			return fmt.Errorf("write frames: %w", err)
		}
	}
	if err := st.rc.Flush(); err != nil {
		return fmt.Errorf("flush frames: %w", err)
	}
	if st.delivered > 0 {
		st.s.deps.Metrics.Deliveries.Add(float64(st.delivered))
		st.delivered = 0
	}
	st.buf = st.buf[:0]
	if cap(st.buf) > 2*flushBytes {
		st.buf = nil
	}
	st.heartbeat.Reset(st.s.cfg.Heartbeat)
	return nil
}
