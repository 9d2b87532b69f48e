package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/refusal"
)

// unauthorized is the one 401 of every tenant route, whatever was wrong
// with the credentials (refusal.BadCredentials says why).
func unauthorized() *refusal.Error {
	return refusal.New(refusal.Unauthorized, refusal.BadCredentials)
}

// token finds a bearer token in the Authorization header (the scheme is
// case-insensitive) or, for EventSource, which cannot set headers, in
// ?access_token=; another scheme in the header (a proxy's Basic) does not
// hide the query parameter.
func token(r *http.Request) string {
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(t)
	}
	return r.URL.Query().Get("access_token")
}

// stillThere checks, outside dev mode, that the tenant authorized at the
// start of the request was neither deleted nor rotated while the request
// was being served (its generation would differ).
func (s *Server) stillThere(r *http.Request, authorized auth.Tenant) *refusal.Error {
	if s.cfg.Dev {
		return nil
	}
	t, aerr := s.tenant(r, authorized.Name)
	if aerr != nil {
		return aerr
	}
	if t.Generation != authorized.Generation {
		return unauthorized()
	}
	return nil
}

// authorize checks a token for action on tenant/topic.
func (s *Server) authorize(r *http.Request, tenant, topic string, action auth.Action) *refusal.Error {
	_, aerr := s.authorizeTenant(r, tenant, topic, action)
	return aerr
}

// authorizeTenant checks a token for action on tenant/topic and returns
// the tenant as the check saw it, whose generation a commit or a stream
// then holds on to. Dev mode needs no credentials (and returns only the
// name). A tenant that does not exist has no secret to check against:
// 401, like a bad token.
func (s *Server) authorizeTenant(r *http.Request, tenant, topic string, action auth.Action) (auth.Tenant, *refusal.Error) {
	if s.cfg.Dev {
		return auth.Tenant{Name: tenant}, nil
	}
	t, aerr := s.tenant(r, tenant)
	if aerr != nil {
		return t, aerr
	}
	raw := token(r)
	if raw == "" {
		return t, unauthorized()
	}
	// The token of this tenant is checked against the very row read above,
	// so the generation returned is the one whose secret signed it.
	lookup := func(ctx context.Context, name string) (auth.Tenant, error) {
		if name == t.Name {
			return t, nil
		}
		return s.deps.Tenants.Tenant(ctx, name)
	}
	return t, fromAuth(auth.Token(r.Context(), lookup, raw, tenant, topic, action, time.Now(), s.cfg.MaxTokenTTL))
}

// authorizePublish accepts a token or, without one, a Standard Webhooks
// signature, which covers the body: it reads the body (within the limit)
// and returns it, so the caller does not read it twice; signed tells that
// the signature, not a token, let the request in.
func (s *Server) authorizePublish(r *http.Request, tenant, topic string, readBody func() ([]byte, *refusal.Error)) (t auth.Tenant, body []byte, signed bool, aerr *refusal.Error) {
	if s.cfg.Dev || token(r) != "" || !auth.HasWebhook(r.Header) {
		t, aerr = s.authorizeTenant(r, tenant, topic, auth.Publish)
		return t, nil, false, aerr
	}
	if t, aerr = s.tenant(r, tenant); aerr != nil {
		return t, nil, false, aerr
	}
	if body, aerr = readBody(); aerr != nil {
		return t, nil, false, aerr
	}
	return t, body, true, fromAuth(auth.Webhook(t.WebhookSecret, r.Header, body, time.Now()))
}

func (s *Server) tenant(r *http.Request, name string) (auth.Tenant, *refusal.Error) {
	t, err := s.deps.Tenants.Tenant(r.Context(), name)
	switch {
	case errors.Is(err, backlog.ErrNoTenant):
		return t, unauthorized()
	case err != nil:
		s.deps.Logger.Error("read tenant", "tenant", name, "err", err)
		return t, refusal.New(refusal.Unavailable, "the tenant could not be read")
	}
	return t, nil
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
