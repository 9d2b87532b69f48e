package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"edgehub/auth"
	"edgehub/backlog"
)

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

// stillThere checks, outside dev mode, that the tenant was not deleted
// while the request was being served.
func (s *Server) stillThere(r *http.Request, tenant string) *apiError {
	if s.cfg.Dev {
		return nil
	}
	_, aerr := s.tenant(r, tenant)
	return aerr
}

// authorize checks a token for action on tenant/topic. Dev mode needs no
// credentials. A tenant that does not exist has no secret to check
// against: 401, like a bad token.
func (s *Server) authorize(r *http.Request, tenant, topic string, action auth.Action) *apiError {
	if s.cfg.Dev {
		return nil
	}
	if _, aerr := s.tenant(r, tenant); aerr != nil {
		return aerr
	}
	raw := token(r)
	if raw == "" {
		return errorf(http.StatusUnauthorized, "unauthorized", "a bearer token is required")
	}
	return fromAuth(auth.Token(r.Context(), s.deps.Tenants.Tenant, raw, tenant, topic, action, time.Now()))
}

// authorizePublish accepts a token or, without one, a Standard Webhooks
// signature, which covers the body: it reads the body (within the limit)
// and returns it, so the caller does not read it twice.
func (s *Server) authorizePublish(r *http.Request, tenant, topic string, readBody func() ([]byte, *apiError)) ([]byte, *apiError) {
	if s.cfg.Dev || token(r) != "" || !auth.HasWebhook(r.Header) {
		return nil, s.authorize(r, tenant, topic, auth.Publish)
	}
	t, aerr := s.tenant(r, tenant)
	if aerr != nil {
		return nil, aerr
	}
	body, aerr := readBody()
	if aerr != nil {
		return nil, aerr
	}
	return body, fromAuth(auth.Webhook(t.WebhookSecret, r.Header, body, time.Now()))
}

func (s *Server) tenant(r *http.Request, name string) (backlog.Tenant, *apiError) {
	t, err := s.deps.Tenants.Tenant(r.Context(), name)
	switch {
	case errors.Is(err, backlog.ErrNoTenant):
		return t, errorf(http.StatusUnauthorized, "unauthorized", "unknown tenant or bad credentials")
	case err != nil:
		s.deps.Logger.Error("read tenant", "tenant", name, "err", err)
		return t, errorf(http.StatusServiceUnavailable, "unavailable", "the tenant could not be read")
	}
	return t, nil
}

func fromAuth(err error) *apiError {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrForbidden):
		return errorf(http.StatusForbidden, "forbidden", "the credentials do not cover this tenant, topic or action")
	default:
		return errorf(http.StatusUnauthorized, "unauthorized", "unknown tenant or bad credentials")
	}
}
