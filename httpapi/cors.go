package httpapi

import (
	"net/http"
	"slices"
	"strings"
)

// corsHeaders are the request headers a browser on another origin may send:
// a reconnecting EventSource's long Last-Event-ID is one that triggers a
// preflight.
const corsHeaders = "Authorization, Content-Type, Last-Event-ID, Idempotency-Key, Event-Type, Event-Key, webhook-id, webhook-timestamp, webhook-signature, " +
	// Durable Streams' (package durable).
	"If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, Stream-Forked-From, Stream-Fork-Offset, " +
	"Stream-Fork-Sub-Offset, Producer-Id, Producer-Epoch, Producer-Seq, Edgehub-Tenant"

// corsExposed are the answer headers such a page may read: the limits'
// Retry-After, what Mercure's read (where a resumed stream starts, the
// subscriptions' cursor), and what Durable Streams clients read of every
// answer.
const corsExposed = "Retry-After, Link, Mercure-Last-Event-ID, Last-Event-ID, ETag, Location, Stream-Next-Offset, Stream-Up-To-Date, Stream-Closed, Stream-Cursor, " +
	"Stream-TTL, Stream-Expires-At, Stream-Sse-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq"

// adminPrefix is where the admin API lives: its answers hold secrets, and
// no page of any origin has business reading them, so CORS never applies.
// Nor does it to the console (consolePath and below), whose API takes the
// admin key too: a page of another origin could otherwise test keys
// through its visitors' browsers.
const (
	adminPrefix = "/v1/admin/"
	consolePath = "/console"
)

// noCORS says whether path is the admin API's or the console's.
func noCORS(path string) bool {
	return strings.HasPrefix(path, adminPrefix) || path == consolePath || strings.HasPrefix(path, consolePath+"/")
}

// cors lets pages of the --cors-origins origins use the API: it answers
// their preflights and marks their answers readable. "*" is answered with
// a literal "*", a listed origin with itself, and, on the paths a
// protocol allows credentials on (Gate.AllowCredentials: Mercure's, whose
// browsers present their token in a cookie), with
// Access-Control-Allow-Credentials too, so that a page's
// EventSource(url, {withCredentials: true}) sends it; never for "*",
// which would let every site read with its visitors' cookies. Every
// answer says it varies by Origin, so a cache never hands one origin's
// answer to another.
func (s *Server) cors(next http.Handler) http.Handler {
	if len(s.cfg.CORSOrigins) == 0 {
		return next
	}
	anyOrigin := slices.Contains(s.cfg.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if noCORS(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		if origin == "" || (!anyOrigin && !slices.Contains(s.cfg.CORSOrigins, origin)) {
			next.ServeHTTP(w, r)
			return
		}
		listed := slices.Contains(s.cfg.CORSOrigins, origin)
		allow := origin
		if !listed {
			allow = "*"
		}
		h.Set("Access-Control-Allow-Origin", allow)
		if listed && slices.ContainsFunc(s.credentialed, func(match func(string) bool) bool { return match(r.URL.EscapedPath()) }) {
			h.Set("Access-Control-Allow-Credentials", "true")
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, HEAD, DELETE")
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExposed)
		next.ServeHTTP(w, r)
	})
}
