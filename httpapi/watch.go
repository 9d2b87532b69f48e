package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/sse"
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
// client or the server leaves. A plain HTTP/1.1 stream is written on its
// connection, taken over from net/http (connWire), and the handler
// returns once it has nothing to do: it is parked (parked.go) with no
// goroutine, and a topic stream's live pushes are written by its writer
// in the server's pool (fanout.go). Any other stream is written here.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	st := s.openStream(w, r, tenant, topic)
	if st == nil {
		return
	}
	st.serveOn(w, r)
}

// serveOn writes an open stream until it ends or parks: on a connection
// taken over from net/http, here until it parks (which ends this
// goroutine's part); else on the response, here.
func (st *sseStream) serveOn(w http.ResponseWriter, r *http.Request) {
	s := st.s
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	st.logged(w, r)
	if cw, ok := s.takeOver(w, r); ok {
		// A taken-over stream sees its client leave on its connection:
		// its context is the server's, which EndStreams ends before it
		// wakes the stream.
		st.ctx, st.cancel = s.endCtx, func() {}
		st.wire = cw
		var w *writer
		if cw.raw != nil {
			w = s.fanout.writer()
		}
		if w != nil {
			st.cw, st.parker = cw, w.parker
			if st.topicSub != nil {
				st.w = w
				st.sub.OnReady(st.wake)
			} else { // a tenant stream parks, and has no writer
				st.sub.OnReady(st.wakeParked)
			}
			st.serve(st.open())
			return
		}
		st.sub.OnReady(cw.wake)
		// The hello is written on this goroutine, whose stack serving the
		// request has grown already, so that the stream's own goroutine
		// starts with a small one and keeps it while the stream idles.
		err := st.open()
		go st.serve(err)
		return
	}
	// The context of a stream on net/http's response also ends when
	// net/http sees its client leave.
	st.ctx, st.cancel = context.WithCancel(s.endCtx)
	stop := context.AfterFunc(r.Context(), st.cancel)
	defer stop()
	st.wire = s.newResponseWire(w)
	st.serve(st.open())
}

// openStream checks the request, registers its stream and returns it, or
// answers the refusal and returns nil. The stream holds its place under
// the stream limits until it is closed.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request, tenant, topic string) (st *sseStream) {
	// The stream keeps its names for life, not the request line they are
	// cut from.
	tenant, topic = strings.Clone(tenant), strings.Clone(topic)
	ten, aerr := s.authorizeTenant(r, tenant, topic, auth.Subscribe)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	release, refused := s.deps.Limits.OpenStream(tenant)
	if refused != nil {
		writeError(w, refused)
		return nil
	}
	defer func() {
		if st == nil {
			release() // refused after all
		}
	}()
	from, aerr := watchFrom(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	if s.faults.beforeRegister != nil {
		s.faults.beforeRegister(w)
	}
	sub, err := s.deps.Hubs.Watch(r.Context(), tenant, topic, from)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return nil // the client left
	case errors.Is(err, hub.ErrUnavailable):
		writeError(w, refusal.New(refusal.Unavailable, "the topic could not be opened"))
		return nil
	default:
		s.refuseRead(w, err, "state", tenant, topic) // the snapshot's
		return nil
	}
	if s.hooks.AfterRegister != nil {
		s.hooks.AfterRegister(tenant, topic)
	}
	// A tenant deleted or rotated between the credential check and the
	// registration has had its hubs stopped already; this stream may sit
	// on a new one. Both change the row first, so looking again catches
	// it. A revocation, stored first too, either finds the credential
	// held or is seen here.
	cause := &endCause{}
	release = s.holding(ten, cause.ending(endRevoked, sub.End), cause.ending(endExpired, sub.End), release)
	if aerr := s.stillThere(r, ten, topic); aerr != nil {
		sub.Close()
		writeError(w, aerr)
		return nil
	}
	s.deps.Metrics.StreamsOpen.Inc()
	return &sseStream{s: s, sub: topicSource{sub}, topicSub: sub, release: release, tenant: tenant, topic: topic, cause: cause}
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
	s   *Server
	sub source
	// topicSub is sub, for a topic's stream (nil for a tenant's): what
	// has a snapshot and may be written from the pool.
	topicSub *hub.Subscription
	// sel is a tenant stream's selection (nil for a topic's), which the
	// topic list counts it by; frames its protocol's wire format, nil for
	// the native one.
	sel           Selection
	frames        TenantFrames
	release       func() // gives back the stream's place under the limits
	tenant, topic string
	wire          wire
	// wrote is when the stream last wrote, in Unix nanoseconds: a
	// heartbeat is due Heartbeat after.
	wrote  atomic.Int64
	buf    []byte
	events int // event frames buffered since the last flush
	// cause is why the stream was ended from outside, if it was; log its
	// access-log line (nil without --access-log) and total what it wrote.
	cause *endCause
	log   *streamLog
	total accounted
	// ctx ends when the server ends its streams (or, on net/http's
	// response, when the client leaves); cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc

	// The fields below serve a stream on a connection taken over from
	// net/http (cw) that parks (parker; nil for any other stream), and a
	// topic stream's live pushes from its writer w in the server's pool
	// (fanout.go; nil for any other stream).
	cw     *connWire
	parker *parker
	w      *writer
	state  atomic.Int32 // who writes the stream: byOwn, inPool, ...
	// pingDue says the stream's own goroutine asks its writer for a
	// heartbeat.
	pingDue atomic.Bool
	// gone says the parker saw the stream's client leave (or speak).
	gone atomic.Bool
	// parkID is the stream's id in the parker, from its first park.
	parkID uint64
	// active is when the stream's goroutine last handed out its
	// subscription (Unix nanoseconds; 0 before the first time): a tenant
	// stream parks parkAfter later.
	active int64
	// mustNext says the writer handed the stream back for Next, and
	// restEvents is the events of the chunk rest that it left (cw.rest);
	// whoever writes the stream owns them.
	mustNext              bool
	restEvents, restBytes int
}

// pingAt is when a heartbeat is due, if nothing is written before.
func (st *sseStream) pingAt() time.Time {
	return time.Unix(0, st.wrote.Load()).Add(st.s.cfg.Heartbeat)
}

// serve writes the stream, once it has opened (helloErr is open's), until
// it ends, then ends its body and gives back everything it held; or until
// it parks, holding nothing of it.
func (st *sseStream) serve(helloErr error) {
	s := st.s
	err := helloErr
	parked := false
	defer func() {
		// A taken-over stream's goroutine has no net/http recovery: a
		// panic ends this stream only, as it would on net/http's.
		v := recover()
		if parked && v == nil {
			return
		}
		if v != nil {
			err = fmt.Errorf("panic: %v", v)
			s.deps.Logger.Error("stream panic", "tenant", st.tenant, "topic", st.topic, "panic", v)
		}
		st.cancel()
		st.logEnd(err, v != nil)
		if st.parker != nil {
			st.parker.forget(st)
		}
		st.wire.end()
		s.untrack(st)
		st.sub.Close()
		st.release()
		s.deps.Metrics.StreamsOpen.Dec()
		if err != nil && !errors.Is(err, hub.ErrEnded) && !errors.Is(err, context.Canceled) && !errors.Is(err, errEnding) {
			s.deps.Logger.Debug("stream closed", "tenant", st.tenant, "topic", st.topic, "position", st.sub.Position(), "err", err)
		}
	}()
	if err == nil {
		parked, err = st.run(st.ctx)
	}
}

// resume serves a stream taken out of the pool, on the goroutine of its
// own that whoever took it started.
func (st *sseStream) resume() { st.serve(nil) }

// errEnding is the end of a stream that opened while the server was
// ending its streams.
var errEnding = errors.New("the server is ending its streams")

// open counts the stream among the server's before its first byte, so
// that EndStreams shortens and waits for its hello too, and writes the
// hello.
func (st *sseStream) open() error {
	if !st.s.track(st) {
		return errEnding
	}
	return st.hello()
}

// hello writes the stream's first frames: the retry hint, hello, and the
// snapshot if it has one, whose data is written in pieces from its spool
// at the pace of a read answer: a client that does not read it holds it
// no longer than one would.
func (st *sseStream) hello() error {
	if st.frames != nil {
		st.buf = st.frames.AppendOpen(st.buf, st.sub.Head(), st.sub.Position())
		return st.flush()
	}
	st.buf = sse.Open(st.s.cfg.Retry, st.sub.Head(), st.sub.Position())
	if st.topicSub == nil || st.topicSub.Snapshot() == nil {
		return st.flush()
	}
	snap := st.topicSub.Snapshot()
	st.buf = sse.AppendSnapshotStart(st.buf, snap.Seq)
	p := st.s.pace()
	err := snap.Pieces(func(piece []byte) error {
		n := len(st.buf) + len(piece)
		err := st.wire.write(p.next(n), st.buf, piece)
		st.buf = st.buf[:0]
		if err == nil {
			st.sent(0, n)
		}
		return err
	})
	if err != nil {
		return err
	}
	return st.flush(sse.FrameEnd)
}

// run writes, after the hello, until ctx ends or the hub ends the stream,
// or it parks.
func (st *sseStream) run(ctx context.Context) (parked bool, err error) {
	sub := st.sub
	for {
		if st.parker != nil {
			if err := st.finish(); err != nil {
				return false, err
			}
			if st.gone.Load() {
				st.cw.consume()
				return false, errLeft
			}
			if err := ctx.Err(); err != nil {
				return false, err
			}
			if st.idle() {
				parked, err := st.park()
				if parked || err != nil {
					return parked, err
				}
				continue
			}
			st.mustNext = false
		}
		ping, err := st.wire.wait(ctx, sub.Ready(), st.wakeAt())
		if err != nil {
			return false, err
		}
		if ping && time.Now().Before(st.pingAt()) {
			continue // time to park, not to ping
		}
		if ping {
			st.buf = sse.AppendPing(st.buf)
			if err := st.flush(); err != nil {
				return false, err
			}
			continue
		}
		st.buf, err = sub.next(ctx, st, st.buf, flushBytes)
		st.active = time.Now().UnixNano()
		if ferr := st.flush(); ferr != nil {
			return false, ferr
		}
		if lag, ok := sub.Lag(); ok {
			st.s.deps.Metrics.DeliveryLag.Observe(lag.Seconds())
		}
		if err != nil {
			return false, err
		}
		if cap(st.buf) > idleBufferBytes && len(sub.Ready()) == 0 {
			st.buf = nil // nothing more to write now
		}
	}
}

// idle says the stream has nothing to do until it is signalled: a topic
// stream is live and its writer did not hand it back for Next; a tenant
// stream has no signal and no heartbeat due, and parkAt has come. Either
// may park.
func (st *sseStream) idle() bool {
	if st.cw.left {
		return false
	}
	if st.w != nil {
		return !st.mustNext && st.topicSub.Live()
	}
	now := time.Now()
	return len(st.sub.Ready()) == 0 && now.Before(st.pingAt()) && !now.Before(st.parkAt())
}

// wakeAt is when a wait with no signal ends: the next heartbeat, or, for
// a tenant stream that parks, parkAt if that comes first. A topic
// stream parks only once live, which its signal, not a time, brings.
func (st *sseStream) wakeAt() time.Time {
	at := st.pingAt()
	if st.parker == nil || st.w != nil {
		return at
	}
	if park := st.parkAt(); park.Before(at) {
		return park
	}
	return at
}

// parkAt is when a tenant stream that has handed out nothing since parks.
// A tenant stream's pushes are written by its own goroutine, which a park
// ends and a wake starts again: one that is busy keeps its goroutine, as
// starting one per push costs more than the wait. One that has handed
// out nothing since its hello parks at once.
func (st *sseStream) parkAt() time.Time {
	if st.active == 0 {
		return time.Time{}
	}
	return time.Unix(0, st.active).Add(min(parkAfter, st.s.cfg.Heartbeat/2))
}

// parkAfter is how long a tenant stream that writes nothing keeps its
// goroutine (at most half a heartbeat interval).
const parkAfter = time.Second

// source is what an sseStream writes: a topic's subscription or a
// tenant's.
type source interface {
	Head() int64
	Position() int64
	Ready() <-chan struct{}
	OnReady(wake func())
	Lag() (time.Duration, bool)
	Close()
	// next is the subscription's Next, with the stream as its encoder.
	next(ctx context.Context, st *sseStream, b []byte, limit int) ([]byte, error)
}

type topicSource struct{ *hub.Subscription }

func (t topicSource) next(ctx context.Context, st *sseStream, b []byte, limit int) ([]byte, error) {
	return t.Next(ctx, st, b, limit)
}

type tenantSource struct{ *hub.TenantSubscription }

func (t tenantSource) next(ctx context.Context, st *sseStream, b []byte, limit int) ([]byte, error) {
	if st.frames != nil {
		return t.Next(ctx, counted{st}, b, limit)
	}
	return t.Next(ctx, st, b, limit)
}

// counted writes a protocol's frames, counting those it writes as the
// native ones are counted.
type counted struct{ st *sseStream }

func (c counted) AppendTenantEvent(b []byte, e *event.OfTenant, envelope []byte) []byte {
	n := len(b)
	b = c.st.frames.AppendTenantEvent(b, e, envelope)
	if len(b) > n {
		c.st.events++
	}
	return b
}

func (c counted) AppendTopicGap(b []byte, id int64, topic string, to int64) []byte {
	n := len(b)
	b = c.st.frames.AppendTopicGap(b, id, topic, to)
	if len(b) > n {
		c.st.s.deps.Metrics.Gaps.Inc()
	}
	return b
}

// AppendTenantEvent is the SSE frame of a tenant stream's event.
func (st *sseStream) AppendTenantEvent(b []byte, e *event.OfTenant, envelope []byte) []byte {
	st.events++
	return sse.AppendTenantEvent(b, e, envelope)
}

// AppendTopicGap is the SSE frame of a tenant stream's gap.
func (st *sseStream) AppendTopicGap(b []byte, id int64, topic string, to int64) []byte {
	st.s.deps.Metrics.Gaps.Inc()
	return sse.AppendTopicGap(b, id, topic, to)
}

// AppendEvent is the SSE frame of an event, for the subscription.
func (st *sseStream) AppendEvent(b []byte, e *event.Event, envelope []byte) []byte {
	st.events++
	return sse.AppendEvent(b, e, envelope)
}

// AppendGap is the SSE frame of a gap, for the subscription.
func (st *sseStream) AppendGap(b []byte, from, to int64) []byte {
	st.s.deps.Metrics.Gaps.Inc()
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
	deadline := time.Now().Add(st.s.cfg.WriteTimeout) // or the server's end, if sooner (setWriteDeadline)
	parts := append([][]byte{st.buf}, extra...)
	err := st.wire.write(deadline, parts...)
	n := st.measured(parts)
	if err != nil {
		return err
	}
	st.sent(st.events, n)
	if st.events > 0 {
		st.s.deps.Metrics.Deliveries.Add(float64(st.events))
		st.events = 0
	}
	st.buf = st.buf[:0]
	if cap(st.buf) > 2*flushBytes {
		st.buf = nil
	}
	st.wrote.Store(time.Now().UnixNano())
	return nil
}
