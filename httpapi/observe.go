package httpapi

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/refusal"
)

// observed is the ResponseWriter every request is answered through: it
// keeps what the access log and the request series report. It hands
// Hijack and Unwrap through, so streams still take their connection over
// and http.ResponseController still reaches the connection.
type observed struct {
	http.ResponseWriter
	route  string
	status int
	code   refusal.Code
	bytes  int64
	// logged says that the route logged the request's security event
	// itself (sampled: adminAllowed), so its request line is not one.
	logged bool
}

func (o *observed) WriteHeader(status int) {
	if o.status == 0 {
		o.status = status
	}
	o.ResponseWriter.WriteHeader(status)
}

func (o *observed) Write(b []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	n, err := o.ResponseWriter.Write(b)
	o.bytes += int64(n)
	return n, err
}

// Unwrap is for http.ResponseController.
func (o *observed) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// Hijack takes the connection over for a stream, whose answer begins then.
func (o *observed) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := o.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("this connection cannot be taken over")
	}
	conn, brw, err := hj.Hijack()
	if err == nil {
		o.status = http.StatusOK
	}
	return conn, brw, err
}

// observedOf finds the request's observed writer under w, if any.
func observedOf(w http.ResponseWriter) *observed {
	for {
		if o, ok := w.(*observed); ok {
			return o
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// named records which route answers a request, for the series' route
// label: the router's pattern, never the path, so the label set is
// bounded whatever clients ask for.
func named(route string, h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		if o := observedOf(w); o != nil {
			o.route = route
		}
		h(w, r, ps)
	}
}

// observe counts every request by route and status, and its refusals by
// code, and logs it with --access-log; security events (securityEvent)
// are logged at warn either way. The log line has the path but never the
// query string (which may carry access_token) nor any header.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := &observed{ResponseWriter: w, route: "unmatched"}
		start := time.Now()
		next.ServeHTTP(o, r)
		took := time.Since(start)
		if o.status == 0 {
			o.status = http.StatusOK
		}
		status := strconv.Itoa(o.status)
		m := s.deps.Metrics
		m.HTTPRequests.WithLabelValues(o.route, status).Inc()
		m.HTTPSeconds.WithLabelValues(o.route).Observe(took.Seconds())
		if o.code != "" {
			m.Refusals.WithLabelValues(string(o.code)).Inc()
		}
		level := slog.LevelInfo
		if securityEvent(o) {
			level = slog.LevelWarn
		}
		if !s.cfg.AccessLog && level < slog.LevelWarn {
			return
		}
		s.deps.Logger.LogAttrs(r.Context(), level, "request",
			slog.String("method", r.Method), slog.String("route", o.route), slog.String("path", r.URL.Path),
			slog.Int("status", o.status), slog.String("code", string(o.code)), slog.Int64("bytes", o.bytes),
			slog.Duration("took", took), slog.String("client", r.RemoteAddr))
	})
}

// securityEvent says whether an answer reads as someone trying what they
// may not, and was not logged as such by its route: refused credentials
// (401, 403), or an idempotency key reused for another request or set
// beside a webhook's id (a signed webhook replayed on another topic, or
// with another body or key, reads so).
func securityEvent(o *observed) bool {
	switch {
	case o.logged:
		return false
	case o.status == http.StatusUnauthorized || o.status == http.StatusForbidden:
		return true
	case o.code == refusal.IdempotencyKeyReused || o.code == refusal.InvalidIdempotencyKey:
		return true
	}
	return false
}
