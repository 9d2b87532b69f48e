package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
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
	s.serveTenant(w, r, ten, sel, from, nil)
}

// Selection is a tenant stream's selection as the hub and the topic list
// see it: what it selects, and, so that streams that select alike are
// counted as one group, a key and its exact names; and what it holds,
// which its stream is charged for.
type Selection interface {
	hub.Selection
	Key() string
	Names(topic string) bool
	// Heap is what the selection holds (its compiled selectors, at
	// least), taken from the budgets for the stream's life before
	// Compile spends the time to compile them.
	Heap() int64
	// Work is what testing its patterns costs per byte of a topic, at
	// most: each topic its tenant's hub has not tested yet is tested
	// against every live pattern, so the patterns' work is taken from
	// the matching budgets for the stream's life too.
	Work() int64
	// Compile compiles the selectors, once the stream holds what they
	// cost; its refusal (a malformed pattern) is the stream's answer.
	Compile() *refusal.Error
}

// TenantFrames is a protocol's wire format of a tenant stream
// (Mercure's): its headers, its first bytes, and its frames, which may
// leave out what its client may not see.
type TenantFrames interface {
	hub.TenantEncoder
	// Header sets the stream's headers once it is registered at position.
	Header(h http.Header, position int64)
	// AppendOpen appends the stream's first bytes.
	AppendOpen(b []byte, head, position int64) []byte
	// Opened is told once the stream is registered and its credentials
	// still hold, before its first byte; ended is called once it ends. A
	// refusal is answered instead of the stream.
	Opened() (ended func(), refused *refusal.Error)
}

// ServeTenantStream serves a protocol's tenant stream for a, whose
// credentials were checked: it registers with the tenant's hub at from
// before its first byte, holds one place under the stream limits (an
// anonymous one's, for an Anonymous a) and its selection's heap from the
// budgets (openTenantStream), writes frames (the native ones if nil),
// and ends when a's token stops being accepted (Access.EndsAt).
func (g *Gate) ServeTenantStream(w http.ResponseWriter, r *http.Request, a Access, sel Selection, from hub.From, frames TenantFrames) {
	g.s.serveTenant(w, r, a, sel, from, frames)
}

// serveTenant registers a tenant stream and writes it (ServeTenantStream).
func (s *Server) serveTenant(w http.ResponseWriter, r *http.Request, ten Access, sel Selection, from hub.From, frames TenantFrames) {
	tenant := ten.Tenant.Name
	release, refused := s.openTenantStream(r, ten, sel)
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
	cause := &endCause{}
	release = s.holding(ten, cause.ending(endRevoked, sub.End), cause.ending(endExpired, sub.End), release)
	if aerr := s.stillThere(r, ten, ""); aerr != nil {
		sub.Close()
		release()
		writeError(w, aerr)
		return
	}
	if frames != nil {
		ended, refused := frames.Opened()
		if refused != nil {
			sub.Close()
			release()
			writeError(w, refused)
			return
		}
		held := release
		release = func() {
			held()
			ended()
		}
		frames.Header(w.Header(), sub.Position())
	}
	s.deps.Metrics.StreamsOpen.Inc()
	st := &sseStream{s: s, sub: tenantSource{sub}, sel: sel, release: release, tenant: tenant, frames: frames, cause: cause}
	st.serveOn(w, r)
}

// openTenantStream takes what a tenant stream holds for its life, before
// it registers: a place under the stream limits, and its selection's
// heap from the budgets, which refuse with 429 what does not fit now;
// only then does it compile the selection, so that a client without a
// place makes the server compile nothing. A stream with a token takes
// them from its tenant's (the stream caps, the tenant's share of the
// read budget); an anonymous one from the anonymous caps and budget, by
// tenant and by client address (the connection's peer, as for unsigned
// webhook bodies), so that anonymous subscribers never take what the
// tenant's token streams need. release gives everything back.
func (s *Server) openTenantStream(r *http.Request, ten Access, sel Selection) (release func(), refused *refusal.Error) {
	tenant := ten.Tenant.Name
	type charge struct {
		budget *limits.Budget
		holder string
		n      int64
	}
	heap, work := sel.Heap(), sel.Work()
	var charges []charge
	var slot func()
	if ten.Anonymous {
		client := clientHost(r)
		slot, refused = s.deps.Limits.OpenAnonymousStream(tenant, client)
		charges = []charge{{s.deps.AnonymousSelectors, tenant, heap}, {s.deps.AnonymousByClient, client, heap},
			{s.deps.AnonymousWork, tenant, work}, {s.deps.AnonymousWorkByClient, client, work}}
	} else {
		slot, refused = s.deps.Limits.OpenStream(tenant)
		charges = []charge{{s.deps.ReadBudget, tenant, heap}, {s.deps.MatchWork, tenant, work}}
	}
	if refused != nil {
		return nil, refused
	}
	var taken []charge
	var once sync.Once
	release = func() {
		once.Do(func() {
			for _, c := range taken {
				c.budget.Shrink(c.holder, c.n)
			}
			slot()
		})
	}
	for _, c := range charges {
		if !c.budget.Grow(c.holder, c.n) {
			release()
			return nil, &refusal.Error{Code: refusal.Overloaded, RetryAfter: 5 * time.Second,
				Message: fmt.Sprintf("the selectors (about %d KiB compiled, %d steps of matching per byte of a topic) do not fit in what this tenant's or this client's streams may hold now", heap>>10, work)}
		}
		taken = append(taken, c)
	}
	if aerr := sel.Compile(); aerr != nil {
		release()
		return nil, aerr
	}
	return release, nil
}
