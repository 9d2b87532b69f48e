package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/edgehub/edgehub/hub"
)

// Why a stream ended, as its access-log line says it (`reason`).
const (
	endClientLeft   = "client_left"   // the client closed the connection or sent more than its request
	endShutdown     = "shutdown"      // the server ended its streams to stop
	endRevoked      = "revoked"       // its token, or its token's issuer, was revoked
	endExpired      = "expired"       // its token stopped being accepted (exp plus the leeway)
	endHub          = "ended"         // its hub ended it: tenant deleted or rotated, topic deleted
	endWriteTimeout = "write_timeout" // the client read nothing for --write-timeout
	endWriteFailed  = "write_failed"  // a write failed otherwise (the connection was reset)
	endPanic        = "panic"
)

// endCause is why a stream is being ended from outside its goroutine (a
// revocation, a token's expiry), recorded before the subscription is
// ended, so that the stream's goroutine, which then sees only the hub's
// ErrEnded, can tell it.
type endCause struct{ why atomic.Pointer[string] }

// ending returns end, which first records why.
func (c *endCause) ending(why string, end func()) func() {
	return func() {
		c.why.CompareAndSwap(nil, &why)
		end()
	}
}

// streamLog is what a stream's access-log line reports: kept only with
// --access-log, so that 10 000 idle streams hold no more for it.
type streamLog struct {
	opened              time.Time
	route, path, client string
}

// accounted is what a stream has written, counted by whoever writes it
// (its own goroutine or its pool writer, never both at once).
type accounted struct {
	bytes, events int64
}

// logged readies the stream's access-log line, if the server logs them.
func (st *sseStream) logged(w http.ResponseWriter, r *http.Request) {
	if !st.s.cfg.AccessLog {
		return
	}
	l := &streamLog{opened: time.Now(), path: r.URL.Path, client: r.RemoteAddr}
	if o := observedOf(w); o != nil {
		l.route = o.route
	}
	st.log = l
}

// measured is the size of parts for the access-log line, and 0 when the
// stream has none: without --access-log the writers count nothing.
func (st *sseStream) measured(parts [][]byte) int {
	if st.log == nil {
		return 0
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// sent counts a write that is done, for the access-log line: events
// event frames in bytes.
func (st *sseStream) sent(events, bytes int) {
	if st.log == nil {
		return
	}
	st.total.events += int64(events)
	st.total.bytes += int64(bytes)
}

// logEnd writes the stream's access-log line: how long it lasted, what it
// wrote, where it got to, and why it ended (err is serve's).
func (st *sseStream) logEnd(err error, panicked bool) {
	if st.log == nil {
		return
	}
	st.s.deps.Logger.LogAttrs(context.Background(), slog.LevelInfo, "stream ended",
		slog.String("route", st.log.route), slog.String("path", st.log.path),
		slog.String("reason", st.endReason(err, panicked)), slog.Duration("took", time.Since(st.log.opened)),
		slog.Int64("bytes", st.total.bytes), slog.Int64("events", st.total.events),
		slog.Int64("position", st.sub.Position()), slog.String("client", st.log.client))
}

// endReason names why the stream ended.
func (st *sseStream) endReason(err error, panicked bool) string {
	switch {
	case panicked:
		return endPanic
	case errors.Is(err, errEnding) || st.s.endCtx.Err() != nil:
		return endShutdown
	case errors.Is(err, hub.ErrEnded):
		if why := st.cause.why.Load(); why != nil {
			return *why
		}
		return endHub
	case errors.Is(err, errLeft) || errors.Is(err, context.Canceled):
		return endClientLeft // a response's context ends when net/http sees the client leave
	case errors.Is(err, os.ErrDeadlineExceeded):
		return endWriteTimeout
	}
	return endWriteFailed
}
