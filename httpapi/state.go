package httpapi

import (
	"net/http"

	"github.com/edgehub/edgehub/auth"
)

// state answers the topic's state and the sequence it folds. Its bytes are
// taken from the read budget inside the read, before the keys are read
// (429 overloaded if they are not free), and given back once the answer is
// written under the write deadline.
func (s *Server) state(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	if aerr := s.authorize(r, tenant, topic, auth.Subscribe); aerr != nil {
		writeError(w, aerr)
		return
	}
	h := s.hold()
	defer h.Release()
	st, err := s.deps.Log.State(r.Context(), tenant, topic, h.Try)
	if s.refuseRead(w, err, "state", tenant, topic) {
		return
	}
	s.writeAnswer(w, st.JSON, []byte{'\n'})
}
