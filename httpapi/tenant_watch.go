package httpapi

import (
	"errors"
	"net/http"

	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/refusal"
)

// tenantWatch is GET /v1/tenants/{tenant}/watch: one stream, one cursor
// (the tenant's position), any number of topics (plan 039). It registers
// with the tenant's hub before its first byte, as a topic's watch does,
// and holds one place under the stream limits.
func (s *Server) tenantWatch(w http.ResponseWriter, r *http.Request, tenant string) {
	r = allowQueryToken(r) // EventSource cannot set headers
	ten, aerr := s.grants(r, tenant, "")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	sel, aerr := selectors(r, ten.Token.Subscribe)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	from, aerr := watchFrom(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	from.Snapshot = false // a tenant stream has none
	release, refused := s.deps.Limits.OpenStream(tenant)
	if refused != nil {
		writeError(w, refused)
		return
	}
	sub, err := s.deps.Hubs.WatchTenant(r.Context(), tenant, sel, from)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		release()
		return // the client left
	default:
		release()
		if !errors.Is(err, hub.ErrUnavailable) {
			s.deps.Logger.Error("open a tenant stream", "tenant", tenant, "err", err)
		}
		writeError(w, refusal.New(refusal.Unavailable, "the tenant's order could not be opened"))
		return
	}
	if s.hooks.AfterRegister != nil {
		s.hooks.AfterRegister(tenant, "")
	}
	// As for a topic's stream: a tenant deleted or rotated since the check
	// has had its hubs stopped, and this stream may sit on a new one; a
	// revocation since then is seen, or sees the credential held.
	release = s.holding(ten, sub.End, release)
	if aerr := s.stillThere(r, ten, ""); aerr != nil {
		sub.Close()
		release()
		writeError(w, aerr)
		return
	}
	s.deps.Metrics.StreamsOpen.Inc()
	st := &sseStream{s: s, sub: tenantSource{sub}, sel: sel, release: release, tenant: tenant}
	st.serveOn(w, r)
}
