package httpapi

import (
	"net/http"
	"slices"
)

// corsHeaders are the request headers a browser on another origin may send:
// a reconnecting EventSource's long Last-Event-ID is one that triggers a
// preflight.
const corsHeaders = "Authorization, Content-Type, Last-Event-ID, Idempotency-Key, Event-Type, Event-Key, webhook-id, webhook-timestamp, webhook-signature"

// cors lets pages of the --cors-origins origins use the API: it answers
// their preflights and marks their answers readable.
func (s *Server) cors(next http.Handler) http.Handler {
	if len(s.cfg.CORSOrigins) == 0 {
		return next
	}
	any := slices.Contains(s.cfg.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !(any || slices.Contains(s.cfg.CORSOrigins, origin)) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "Retry-After")
		next.ServeHTTP(w, r)
	})
}
