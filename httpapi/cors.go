package httpapi

import (
	"net/http"
	"slices"
	"strings"
)

// corsHeaders are the request headers a browser on another origin may send:
// a reconnecting EventSource's long Last-Event-ID is one that triggers a
// preflight.
const corsHeaders = "Authorization, Content-Type, Last-Event-ID, Idempotency-Key, Event-Type, Event-Key, webhook-id, webhook-timestamp, webhook-signature"

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
// a literal "*" (credentials are never allowed), a listed origin with
// itself; every answer says it varies by Origin, so a cache never hands
// one origin's answer to another.
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
		allow := origin
		if anyOrigin {
			allow = "*"
		}
		h.Set("Access-Control-Allow-Origin", allow)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "Retry-After")
		next.ServeHTTP(w, r)
	})
}
