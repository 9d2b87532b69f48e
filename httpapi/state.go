package httpapi

import (
	"net/http"

	"github.com/edgehub/edgehub/auth"
)

// state answers the topic's state and the sequence it folds. It is read
// into a spool whose bytes, in memory and on disk, are taken from the
// tenant's shares of the budgets as it is read (429 overloaded if they
// are not free, before anything is sent), then written in pieces at the
// answers' pace, then given back.
func (s *Server) state(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	if aerr := s.authorize(r, tenant, topic, auth.Subscribe); aerr != nil {
		writeError(w, aerr)
		return
	}
	a := s.newAnswer(tenant, s.deps.ReadBudget.Hold(tenant), false)
	defer a.close()
	_, err := s.deps.Log.State(r.Context(), tenant, topic, a)
	if err == nil {
		err = a.Done()
	}
	if s.refuseRead(w, err, "state", tenant, topic) {
		return
	}
	s.write(w, a)
}
