package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/notify"
	"github.com/edgehub/edgehub/refusal"
)

// unauthorized is the one 401 of every tenant route, whatever was wrong
// with the credentials (refusal.BadCredentials says why).
func unauthorized() *refusal.Error {
	return refusal.New(refusal.Unauthorized, refusal.BadCredentials)
}

// token finds a bearer token in the Authorization header (the scheme is
// case-insensitive) or, on a stream's route (queryToken), in
// ?access_token=, for EventSource, which cannot set headers; another
// scheme in the header (a proxy's Basic) does not hide the query
// parameter. Elsewhere the query parameter is ignored: a URL ends up in
// proxies' and browsers' histories, and every other route can be called
// with a header.
func token(r *http.Request) string {
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(t)
	}
	if r.Context().Value(queryTokenKey{}) == nil {
		return ""
	}
	return r.URL.Query().Get("access_token")
}

// queryTokenKey marks, in a request's context, a route whose token may
// come as ?access_token=.
type queryTokenKey struct{}

// queryToken lets h's requests present their token as ?access_token=:
// the stream's route, which EventSource opens.
func queryToken(h topicHandler) topicHandler {
	return func(w http.ResponseWriter, r *http.Request, tenant, topic string) {
		h(w, allowQueryToken(r), tenant, topic)
	}
}

// allowQueryToken marks r as a request of a stream's route, whose token
// may come as ?access_token=.
func allowQueryToken(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), queryTokenKey{}, true))
}

// Access is what a request's credentials were found to be: the tenant as
// the check saw it (a commit or a stream holds on to its generation) and
// the token's grants and origin (nothing but the tenant for a webhook
// signature or dev mode).
type Access struct {
	Tenant auth.Tenant
	Token  auth.Token
	// Anonymous says the request came with no credentials at all, as
	// Mercure lets a subscriber: its stream takes an anonymous slot and
	// budget (plan 052), never the token streams'.
	Anonymous bool
}

// EndsAt is when a stream opened with a's token must end: when the token
// stops being accepted, its exp plus the leeway, so that a token still
// accepted opens a stream that lives until then and an expired one is
// refused, never opened and closed at once; zero for a token without
// exp (and in dev mode).
func (a Access) EndsAt() time.Time {
	if a.Token.Expires.IsZero() {
		return time.Time{}
	}
	return a.Token.Expires.Add(auth.Leeway)
}

// stillThere checks, outside dev mode, that the tenant authorized at the
// start of the request was neither deleted nor rotated while the request
// was being served (its generation would differ), and that the token was
// not revoked nor its issuer replaced or removed meanwhile; topic is the
// request's, for the log. A stream calls it once its credential is held
// (holdCredential): a revocation then either sees the stream or is seen.
func (s *Server) stillThere(r *http.Request, a Access, topic string) *refusal.Error {
	if s.cfg.Dev {
		return nil
	}
	t, aerr := s.tenant(r, a.Tenant.Name, topic, "token")
	if aerr != nil {
		return aerr
	}
	if t.Generation != a.Tenant.Generation {
		return s.refuseCredentials(r, a.Tenant.Name, topic, "token", errRevoked)
	}
	if err := s.stillValid(r.Context(), t.Name, a.Token); err != nil {
		return s.refuseCredentials(r, a.Tenant.Name, topic, "token", err)
	}
	return nil
}

// authorize checks a token for action on tenant/topic.
func (s *Server) authorize(r *http.Request, tenant, topic string, action auth.Action) *refusal.Error {
	_, aerr := s.authorizeTenant(r, tenant, topic, action)
	return aerr
}

// authorizeTenant checks a token for action on tenant/topic and returns
// what the check found. Dev mode needs no credentials (and returns only
// the tenant's name). A tenant that does not exist has no secret to check
// against: 401, like a bad token.
func (s *Server) authorizeTenant(r *http.Request, tenant, topic string, action auth.Action) (Access, *refusal.Error) {
	a, aerr := s.grants(r, tenant, topic)
	if aerr == nil && !a.Token.Grant(action).Match(topic) {
		aerr = s.refuseCredentials(r, tenant, topic, "token", auth.ErrForbidden)
	}
	return a, aerr
}

// grants checks a token of tenant and returns what it grants (dev mode:
// every topic); topic is the request's, for the log ("" for a route of
// several topics). A tenant that does not exist has no secret to check
// against: 401, like a bad token.
func (s *Server) grants(r *http.Request, tenant, topic string) (Access, *refusal.Error) {
	if s.cfg.Dev {
		every := auth.Everything()
		return Access{Tenant: auth.Tenant{Name: tenant}, Token: auth.Token{Publish: every, Subscribe: every}}, nil
	}
	raw, via := token(r), "token"
	if raw == "" {
		via = "none"
	}
	t, aerr := s.tenant(r, tenant, topic, via)
	if aerr != nil {
		return Access{Tenant: t}, aerr
	}
	if raw == "" {
		return Access{Tenant: t}, s.refuseCredentials(r, tenant, topic, via, errNoCredentials)
	}
	// The token of this tenant is checked against the very row read above,
	// so the generation returned is the one whose secret signed it.
	lookup := func(ctx context.Context, name string) (auth.Tenant, error) {
		if name == t.Name {
			return t, nil
		}
		return s.deps.Tenants.Tenant(ctx, name)
	}
	tok, err := s.verifier.Verify(r.Context(), lookup, s.deps.Tenants, raw, tenant, time.Now())
	if err != nil {
		if !errors.Is(err, auth.ErrUnauthorized) && !errors.Is(err, auth.ErrForbidden) {
			s.deps.Logger.Error("check a token", "tenant", tenant, "err", err)
			return Access{Tenant: t}, refusal.New(refusal.Unavailable, "the credentials could not be checked")
		}
		return Access{Tenant: t}, s.refuseCredentials(r, tenant, topic, "token", err)
	}
	return Access{Tenant: t, Token: tok}, nil
}

// authorizePublish accepts a token or, without one, a Standard Webhooks
// signature, which covers the body: it reads the body (within the limit)
// and returns it, so the caller does not read it twice; via tells what let
// the request in: a token, the signature, or dev mode.
func (s *Server) authorizePublish(r *http.Request, tenant, topic string, readBody func() ([]byte, *refusal.Error)) (t auth.Tenant, body []byte, via notify.Credentials, aerr *refusal.Error) {
	switch {
	case s.cfg.Dev:
		a, aerr := s.authorizeTenant(r, tenant, topic, auth.Publish)
		return a.Tenant, nil, notify.Dev, aerr
	case token(r) != "" || !auth.HasWebhook(r.Header):
		a, aerr := s.authorizeTenant(r, tenant, topic, auth.Publish)
		return a.Tenant, nil, notify.Token, aerr
	}
	if t, aerr = s.tenant(r, tenant, topic, "webhook"); aerr != nil {
		return t, nil, notify.Signature, aerr
	}
	if body, aerr = readBody(); aerr != nil {
		return t, nil, notify.Signature, aerr
	}
	if err := auth.Webhook(t.WebhookSecret, r.Header, body, time.Now()); err != nil {
		return t, body, notify.Signature, s.refuseCredentials(r, tenant, topic, "webhook", err)
	}
	return t, body, notify.Signature, nil
}

// tenant reads the tenant whose credentials a request on topic presents
// (via says how); one that does not exist has no secret to check them
// against, and is refused as bad credentials are.
func (s *Server) tenant(r *http.Request, name, topic, via string) (auth.Tenant, *refusal.Error) {
	t, err := s.deps.Tenants.Tenant(r.Context(), name)
	switch {
	case errors.Is(err, backlog.ErrNoTenant):
		return t, s.refuseCredentials(r, name, topic, via, err)
	case err != nil:
		s.deps.Logger.Error("read tenant", "tenant", name, "err", err)
		return t, refusal.New(refusal.Unavailable, "the tenant could not be read")
	}
	return t, nil
}

// errNoCredentials is the reason logged for a request that presented none.
var errNoCredentials = errors.New("no token and no webhook signature")

// errRevoked is the reason logged for a request whose tenant was rotated
// or deleted while it was served.
var errRevoked = errors.New("the tenant was rotated or deleted while the request was served")

// errTokenRevoked and errIssuerGone are the reasons logged for a stream
// whose token was revoked, or whose issuer was replaced or removed, while
// it opened.
var (
	errTokenRevoked = errors.New("the token was revoked")
	errIssuerGone   = errors.New("the token's issuer was replaced or removed")
)

// refuseCredentials logs, at warn, why the credentials that a request on
// tenant/topic presented (via a token, a webhook signature, or none) were
// refused: a security event. The reason is the auth package's or the
// store's error, which never holds a credential. It returns the refusal
// the client gets, which does not say why: one 401 whatever was wrong,
// or 403 for good credentials that do not cover the request.
func (s *Server) refuseCredentials(r *http.Request, tenant, topic, via string, err error) *refusal.Error {
	s.deps.Logger.LogAttrs(r.Context(), slog.LevelWarn, "credentials refused",
		slog.String("via", via), slog.String("tenant", tenant), slog.String("topic", topic),
		slog.String("reason", err.Error()), slog.String("client", r.RemoteAddr))
	return fromAuth(err)
}

func fromAuth(err error) *refusal.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrForbidden):
		return refusal.New(refusal.Forbidden, "the credentials do not cover this tenant, topic or action")
	default:
		return unauthorized()
	}
}
