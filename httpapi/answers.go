package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/refusal"
)

// hold starts an empty hold on the server's read budget.
func (s *Server) hold() *limits.Hold { return s.deps.ReadBudget.Hold() }

// refuseRead answers a read whose bytes the budget refused with 429
// overloaded and any other failure with 503, and reports whether err was
// one at all.
func (s *Server) refuseRead(w http.ResponseWriter, err error, what, tenant, topic string) bool {
	if err == nil {
		return false
	}
	var refused *refusal.Error
	if errors.As(err, &refused) {
		writeError(w, refused)
		return true
	}
	s.deps.Logger.Error("read "+what, "tenant", tenant, "topic", topic, "err", err)
	writeError(w, refusal.New(refusal.Unavailable, "the topic's %s could not be read", what))
	return true
}

// withWriteDeadline gives every answer a write deadline when its request
// comes in, so that no answer (an error, an admin answer, /metrics) waits
// on a client that stopped reading for longer than the write timeout.
// Streams and the large read answers set a fresh one before they write.
// It also replaces the deadline that a previous request on a kept-alive
// connection left behind.
func (s *Server) withWriteDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.WriteTimeout > 0 {
			// A writer without deadlines (a test's recorder) writes without one.
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) //nolint:errcheck // see above
		}
		h.ServeHTTP(w, r)
	})
}

// writeAnswer writes a 200 JSON answer, built whole beforehand, in parts
// and under a fresh write deadline: a client that stops reading holds the
// answer for at most the write timeout. A client that is gone or too slow
// gets nothing more, which is all there is to do about it.
func (s *Server) writeAnswer(w http.ResponseWriter, parts ...[]byte) {
	w.Header().Set("Content-Type", "application/json")
	if s.cfg.WriteTimeout > 0 {
		// As in withWriteDeadline, a writer without deadlines writes without one.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) //nolint:errcheck // see above
	}
	w.WriteHeader(http.StatusOK)
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			s.deps.Logger.Debug("answer not written", "err", err)
			return
		}
	}
}
