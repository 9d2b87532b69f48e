package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/notify"
	"github.com/edgehub/edgehub/refusal"
)

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
// several topics). A tenant that does not exist is checked as a tenant
// with no secret that verifies anything and no issuers (auth.Nobody), so
// that a token gets from it exactly the answer it gets from a tenant whose
// keys do not verify it; no other tenant's secret is looked up for it
// either, so another tenant's good token is 401 there, as the contract
// has a missing tenant's routes answer (an existing tenant tells it
// apart, 403).
func (s *Server) grants(r *http.Request, tenant, topic string) (Access, *refusal.Error) {
	if s.cfg.Dev {
		every := auth.Everything()
		return Access{Tenant: auth.Tenant{Name: tenant}, Token: auth.Token{Publish: every, Subscribe: every}}, nil
	}
	t, missing, aerr := s.tenantOf(r, tenant)
	if aerr != nil {
		return Access{Tenant: t}, aerr
	}
	raw := token(r)
	if raw == "" {
		return Access{Tenant: t}, s.refuseCredentials(r, tenant, topic, "none", absent(missing, errNoCredentials))
	}
	// The token of this tenant is checked against the very row read above,
	// so the generation returned is the one whose secret signed it.
	lookup := func(ctx context.Context, name string) (auth.Tenant, error) {
		switch {
		case missing:
			return t, backlog.ErrNoTenant
		case name == tenant:
			return t, nil
		}
		return s.deps.Tenants.Tenant(ctx, name)
	}
	var store auth.Store = s.deps.Tenants
	if missing {
		store = auth.Nobody
	}
	tok, err := s.verifier.Verify(r.Context(), lookup, store, raw, tenant, time.Now())
	if err != nil {
		if !errors.Is(err, auth.ErrUnauthorized) && !errors.Is(err, auth.ErrForbidden) {
			s.deps.Logger.Error("check a token", "tenant", tenant, "err", err)
			return Access{Tenant: t}, refusal.New(refusal.Unavailable, "the credentials could not be checked")
		}
		return Access{Tenant: t}, s.refuseCredentials(r, tenant, topic, "token", absent(missing, err))
	}
	return Access{Tenant: t, Token: tok}, nil
}

// absent adds to the logged reason err that the tenant does not exist
// (backlog.ErrNoTenant), when it does not: the server's log says so, the
// answer does not.
func absent(missing bool, err error) error {
	if !missing {
		return err
	}
	return fmt.Errorf("%w (%w)", err, backlog.ErrNoTenant)
}

// authorizePublish accepts a token or, without one, a Standard Webhooks
// signature, which covers the body: it reads the body (within the limit)
// and returns it, so the caller does not read it twice; via tells what let
// the request in: a token, the signature, or dev mode. A tenant that does
// not exist has its body read too, and checked against no secret: its
// answer is the one a wrong secret gets.
func (s *Server) authorizePublish(r *http.Request, tenant, topic string, readBody func() ([]byte, *refusal.Error)) (t auth.Tenant, body []byte, via notify.Credentials, aerr *refusal.Error) {
	switch {
	case s.cfg.Dev:
		a, aerr := s.authorizeTenant(r, tenant, topic, auth.Publish)
		return a.Tenant, nil, notify.Dev, aerr
	case token(r) != "" || !auth.HasWebhook(r.Header):
		a, aerr := s.authorizeTenant(r, tenant, topic, auth.Publish)
		return a.Tenant, nil, notify.Token, aerr
	}
	t, missing, aerr := s.tenantOf(r, tenant)
	if aerr != nil {
		return t, nil, notify.Signature, aerr
	}
	if body, aerr = readBody(); aerr != nil {
		return t, nil, notify.Signature, aerr
	}
	if err := auth.Webhook(t.WebhookSecret, r.Header, body, time.Now()); err != nil {
		return t, body, notify.Signature, s.refuseCredentials(r, tenant, topic, "webhook", absent(missing, err))
	}
	return t, body, notify.Signature, nil
}

// tenantOf reads the tenant whose credentials a request presents;
// missing when it does not exist (the zero Tenant, whose secrets are
// empty), which the caller checks them against as a tenant with no keys.
// Only a failure of the store refuses: 503.
func (s *Server) tenantOf(r *http.Request, name string) (t auth.Tenant, missing bool, aerr *refusal.Error) {
	t, err := s.deps.Tenants.Tenant(r.Context(), name)
	switch {
	case errors.Is(err, backlog.ErrNoTenant):
		return auth.Tenant{}, true, nil
	case err != nil:
		s.deps.Logger.Error("read tenant", "tenant", name, "err", err)
		return t, false, refusal.New(refusal.Unavailable, "the tenant could not be read")
	}
	return t, false, nil
}

// tenant reads the tenant of a request on topic whose credentials, if
// any, were checked already or need none (via says how), and refuses
// one that does not exist: a request with no credentials (an anonymous
// subscriber's) for lacking them, as on a tenant that exists; one with
// a credential because the tenant went away while it was served.
func (s *Server) tenant(r *http.Request, name, topic, via string) (auth.Tenant, *refusal.Error) {
	t, missing, aerr := s.tenantOf(r, name)
	if !missing {
		return t, aerr
	}
	reason := errRevoked
	if via == "none" {
		reason = errNoCredentials
	}
	return t, s.refuseCredentials(r, name, topic, via, absent(true, reason))
}

// errNoCredentials is the refusal of a request that presented none.
var errNoCredentials = auth.Refuse(auth.Missing, "no token and no webhook signature")

// errRevoked refuses a request whose tenant was rotated or deleted while
// it was served.
var errRevoked = auth.Refuse(auth.Revoked, "the tenant was rotated or deleted while the request was served")

// errTokenRevoked and errIssuerGone refuse a stream whose token was
// revoked, or whose issuer was replaced or removed, while it opened.
var (
	errTokenRevoked = auth.Refuse(auth.Revoked, "the token was revoked")
	errIssuerGone   = auth.Refuse(auth.Revoked, "the token's issuer was replaced or removed")
)

// refuseCredentials logs, at warn, why the credentials that a request on
// tenant/topic presented (via a token, a webhook signature, or none) were
// refused: a security event. The reason is the auth package's or the
// store's error, which never holds a credential. It returns the refusal
// the client gets (fromAuth).
func (s *Server) refuseCredentials(r *http.Request, tenant, topic, via string, err error) *refusal.Error {
	s.deps.Logger.LogAttrs(r.Context(), slog.LevelWarn, "credentials refused",
		slog.String("via", via), slog.String("tenant", tenant), slog.String("topic", topic),
		slog.String("reason", err.Error()), slog.String("client", r.RemoteAddr))
	return fromAuth(err)
}

// unauthorized words, for the client, each check a credential can fail:
// the one place a 401's message is chosen, on every route and protocol.
// The words never say whether the tenant exists, and keep to the
// characters an RFC 6750 error_description may hold (Mercure's
// challenge carries them).
var unauthorized = map[auth.Reason]string{
	auth.Missing:          "missing credentials: the request presents no token (and no webhook signature)",
	auth.Malformed:        "malformed token: not a JWT whose claims are spelled and typed as specified",
	auth.BadSignature:     "bad signature: no key trusted here verifies the token, or its alg is not accepted",
	auth.UnknownIssuer:    "unknown issuer: no issuer trusted here signs tokens with the token's iss (or without one)",
	auth.KeysUnavailable:  "issuer keys unavailable: the keys of the token's issuer cannot be fetched now",
	auth.Expired:          "expired token: its exp is past, beyond 30 s of leeway",
	auth.NotYetValid:      "token not yet valid: its nbf is ahead, beyond 30 s of leeway",
	auth.NoExp:            "no exp: the token has no exp, and its issuer requires one",
	auth.TooLong:          "lifetime over the cap: the token's exp is further ahead than its issuer allows",
	auth.Revoked:          "revoked: the token, or what it was checked against, was revoked",
	auth.Audience:         "audience: the token's aud does not hold the audience expected here",
	auth.WebhookMalformed: "malformed webhook signature: webhook-id, webhook-timestamp (Unix seconds) and webhook-signature are all required",
	auth.WebhookSignature: "bad signature: no webhook-signature matches the webhook secret",
	auth.WebhookTimestamp: "timestamp out of range: webhook-timestamp is more than 5 minutes from the server's clock",
}

// fromAuth is the answer to a credential check's error: 403 for good
// credentials that do not cover the request, 401 saying which check
// failed, 503 for a check that could not be made.
func fromAuth(err error) *refusal.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrForbidden):
		return refusal.New(refusal.Forbidden, "the credentials do not cover this tenant, topic or action")
	}
	if message, ok := unauthorized[auth.ReasonOf(err)]; ok {
		return refusal.New(refusal.Unauthorized, "%s", message)
	}
	return refusal.New(refusal.Unavailable, "the credentials could not be checked")
}
