package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/metrics"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/notify"
	"github.com/edgehub/edgehub/refusal"
)

// Protocol is a wire protocol served beside the native API over the same
// hubs (Durable Streams): it mounts its routes on the server, and reaches
// credentials, limits, budgets, commits and the error shape through the
// Gate, so that what the protocols share is written once, here.
type Protocol interface {
	Mount(g *Gate)
}

// Gate is what a Protocol's routes share with the native ones.
type Gate struct{ s *Server }

// Handle mounts a route: it is named in the access log and the metrics,
// and counted among the routes the OpenAPI document must describe.
func (g *Gate) Handle(method, path string, h httprouter.Handle) { g.s.route(method, path, h) }

// HandleStream mounts a GET route that is a stream; every other GET
// route answers HEAD too.
func (g *Gate) HandleStream(path string, h httprouter.Handle) { g.s.streamRoute(path, h) }

// Dev says the server runs in dev mode: no credentials.
func (g *Gate) Dev() bool { return g.s.cfg.Dev }

// Hubs is the typed way into the hubs.
func (g *Gate) Hubs() *hub.Router { return g.s.deps.Hubs }

// Log is the backlog the hubs commit to, for reads.
func (g *Gate) Log() backlog.Log { return g.s.deps.Log }

// Metrics are the server's.
func (g *Gate) Metrics() *metrics.Metrics { return g.s.deps.Metrics }

// Logger is the server's.
func (g *Gate) Logger() *slog.Logger { return g.s.deps.Logger }

// Ending is done once the server ends its streams (SIGTERM).
func (g *Gate) Ending() context.Context { return g.s.endCtx }

// WriteError answers a refusal in the contract's shape.
func (g *Gate) WriteError(w http.ResponseWriter, e *refusal.Error) { writeError(w, e) }

// TenantOf is the tenant a request on a route without one in its path
// acts for: in dev mode, fallback; with a bearer token, the tenant it
// claims (the check of the token follows); otherwise the tenant the
// Edgehub-Tenant header names (a webhook), or fallback.
func (g *Gate) TenantOf(r *http.Request, fallback string) string {
	if g.s.cfg.Dev {
		return fallback
	}
	if raw := token(r); raw != "" {
		if t := auth.TenantOf(raw); names.Valid(t) {
			return t
		}
		return fallback
	}
	if t := r.Header.Get("Edgehub-Tenant"); t != "" {
		return t
	}
	return fallback
}

// AuthorizeRead checks the credentials of a read of tenant/topic and
// returns what the check found.
func (g *Gate) AuthorizeRead(r *http.Request, tenant, topic string) (Access, *refusal.Error) {
	return g.s.authorizeTenant(r, tenant, topic, auth.Subscribe)
}

// AuthorizeWrite checks the credentials of a write that carries no body
// (a delete), as a publish's.
func (g *Gate) AuthorizeWrite(r *http.Request, tenant, topic string) (Access, *refusal.Error) {
	return g.s.authorizeTenant(r, tenant, topic, auth.Publish)
}

// Admission is a write let in by Admit: its tenant, its body, and the
// budgets the body holds until Commit has answered.
type Admission struct{ ad admitted }

// Body is the request's body, read within the limits.
func (a *Admission) Body() []byte { return a.ad.body }

// Release gives back what the body holds; Commit hands it on if the
// client leaves before the answer.
func (a *Admission) Release() { a.ad.release() }

// Admit checks a write's credentials (a token, or a webhook signature
// over its body), the tenant's rate, then options, which are told how
// the request got in (a check that needs more than the write's grant,
// such as a fork's read of its source, cannot pass on a signature), and
// reads its body, as a native publish is admitted. The Admission must be
// released, even with a refusal.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request, tenant, topic string, options func(via notify.Credentials) *refusal.Error) (*Admission, *refusal.Error) {
	ad, aerr := g.s.admitPublish(w, r, tenant, topic, options)
	return &Admission{ad: ad}, aerr
}

// AdmitNamedInBody admits a write whose topics its body names (a Mercure
// publish's form), so that no grant can be checked before the body is
// read: the token (none needed in dev mode), the tenant's rate, then the
// body within the limits. The caller checks the token's grants against
// the topics it finds. The Admission must be released, even with a
// refusal.
func (g *Gate) AdmitNamedInBody(w http.ResponseWriter, r *http.Request, tenant string) (*Admission, Access, *refusal.Error) {
	s := g.s
	ad := admitted{release: func() {}}
	a, aerr := s.grants(r, tenant, "")
	if aerr != nil {
		return &Admission{ad: ad}, a, aerr
	}
	if l := s.deps.Limits.Publish(tenant, time.Now()); l != nil {
		return &Admission{ad: ad}, a, l
	}
	hold := s.deps.PublishBodies.Hold(tenant)
	ad.release = hold.Release
	body, aerr := s.readBody(w, r, tenant, "", hold)
	ad.tenant, ad.body = a.Tenant, body
	return &Admission{ad: ad}, a, aerr
}

// Commit hands req, admitted as a, to its hub and waits for its commit.
// It answers the refusals every publish can meet and then reports false.
func (g *Gate) Commit(w http.ResponseWriter, r *http.Request, req *backlog.Publish, a *Admission) (backlog.Result, bool) {
	res, ok := g.s.commit(w, r, req, a.ad.tenant, &a.ad)
	if ok {
		g.s.countPublish(res)
	}
	return res, ok
}

// CommitQuiet commits a request that carries no body (a delete, a
// touch) for tenant ten.
func (g *Gate) CommitQuiet(w http.ResponseWriter, r *http.Request, req *backlog.Publish, ten auth.Tenant) (backlog.Result, bool) {
	ad := admitted{tenant: ten, release: func() {}}
	return g.s.commit(w, r, req, ten, &ad)
}

// OpenStream takes a place under the stream limits for a stream of
// tenant; release gives it back.
func (g *Gate) OpenStream(tenant string) (release func(), refused *refusal.Error) {
	return g.s.deps.Limits.OpenStream(tenant)
}

// StillThere checks, after a stream registered and held its credential
// (HoldCredential), that its tenant was not deleted or rotated meanwhile,
// nor its token revoked.
func (g *Gate) StillThere(r *http.Request, a Access, topic string) *refusal.Error {
	return g.s.stillThere(r, a, topic)
}

// HoldCredential keeps, while a stream is open, what its token can be
// revoked by: a revocation calls end, and so does the moment the token
// stops being accepted (Access.EndsAt). forget lets go.
func (g *Gate) HoldCredential(a Access, end func()) (forget func()) {
	return g.s.holding(a, end, end, func() {})
}

// Heartbeat is the silence after which a stream gets a comment line.
func (g *Gate) Heartbeat() time.Duration { return g.s.cfg.Heartbeat }

// WriteTimeout is how long one write to a stream may block.
func (g *Gate) WriteTimeout() time.Duration { return g.s.cfg.WriteTimeout }

// Hold is a hold on the tenant's share of the read budget, for the bytes
// of a read answer the protocol builds in memory; release it once the
// answer is written.
func (g *Gate) Hold(tenant string) *limits.Hold { return g.s.deps.ReadBudget.Hold(tenant) }

// AuthorizeSubscriber checks the credentials of a subscriber who may
// come with none (Mercure's anonymous subscribers, who see only public
// updates): without a token, an Access that grants nothing, for a tenant
// that exists and lets anonymous subscribers in (any, in dev mode),
// Anonymous, and anonymous true; else the very refusal a tenant that does
// not exist gets, so that a stranger cannot tell them apart. With a
// token, what it grants, as for any stream. An anonymous stream takes
// the anonymous streams' slots and budgets (ServeTenantStream).
func (g *Gate) AuthorizeSubscriber(r *http.Request, tenant string) (a Access, anonymous bool, aerr *refusal.Error) {
	s := g.s
	if token(r) != "" {
		a, aerr = s.grants(r, tenant, "")
		return a, false, aerr
	}
	if s.cfg.Dev {
		return Access{Tenant: auth.Tenant{Name: tenant}, Anonymous: true}, true, nil
	}
	t, aerr := s.tenant(r, tenant, "", "none")
	if aerr == nil && !t.Mercure.Anonymous {
		aerr = s.refuseCredentials(r, tenant, "", "none", errNoCredentials)
	}
	return Access{Tenant: t, Anonymous: true}, true, aerr
}
