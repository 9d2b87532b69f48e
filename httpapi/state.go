package httpapi

import (
	"edgehub/auth"
	"net/http"
)

// state answers the topic's state and the sequence it folds.
func (s *Server) state(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	if aerr := s.authorize(r, tenant, topic, auth.Subscribe); aerr != nil {
		writeError(w, aerr)
		return
	}
	st, err := s.deps.Log.State(r.Context(), tenant, topic)
	if err != nil {
		s.deps.Logger.Error("read state", "tenant", tenant, "topic", topic, "err", err)
		writeError(w, errorf(http.StatusServiceUnavailable, "unavailable", "the topic's state could not be read"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(st.AppendJSON(nil), '\n')) //nolint:errcheck // the client may be gone
}
