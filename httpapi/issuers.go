package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/refusal"
)

// maxIssuerBody bounds an issuer's registration: a PEM key is a few KiB.
const maxIssuerBody = 64 << 10

// maxJTI bounds a revoked token id, which the store keeps until the
// token's lifetime has passed.
const maxJTI = 256

// The refusals of bad issuer names and token ids.
const (
	issuerRule = "issuer names follow the name rules of tenants"
	jtiRule    = "a token id is 1 to 256 bytes"
)

// adminNamedRoute is adminRoute for a route that names one thing of the
// tenant (an issuer, a token id) in its last parameter. Names are checked
// before credentials, as the tenant's are: a name that valid refuses is
// 400 invalid_name, saying rule.
func (s *Server) adminNamedRoute(param string, valid func(string) bool, rule string, h func(w http.ResponseWriter, r *http.Request, tenant, name string)) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		name := p.ByName(param)
		if !valid(name) {
			writeError(w, refusal.New(refusal.InvalidName, "%s", rule))
			return
		}
		s.adminRoute(func(w http.ResponseWriter, r *http.Request, tenant string) { h(w, r, tenant, name) })(w, r, p)
	}
}

// validJTI is the rule of token ids: 1 to maxJTI bytes, anything in them.
func validJTI(jti string) bool { return jti != "" && len(jti) <= maxJTI }

// issuerRequest is a registration's body: where the issuer's keys come
// from, what its tokens must say, and its policy (absent fields take
// their defaults).
type issuerRequest struct {
	Issuer     string   `json:"issuer"`
	Audience   string   `json:"audience"`
	JWKSURL    string   `json:"jwks_url"`
	Alg        string   `json:"alg"`
	Key        string   `json:"key"`
	MaxTTL     string   `json:"max_ttl"`
	RequireExp *bool    `json:"require_exp"`
	Actions    []string `json:"actions"`
}

// issuer is the registration of name that req asks for, its defaults
// filled in: the server's cap (max_ttl absent, null or empty), exp
// required, both actions. Actions are a set: their order is the
// canonical one.
func (req *issuerRequest) issuer(name string) auth.Issuer {
	iss := auth.Issuer{Name: name, Issuer: req.Issuer, Audience: req.Audience, JWKSURL: req.JWKSURL, Alg: req.Alg, Key: req.Key,
		MaxTTL: req.MaxTTL, ExpOptional: req.RequireExp != nil && !*req.RequireExp, Actions: auth.DefaultActions()}
	if req.Actions != nil {
		iss.Actions = slices.Sorted(slices.Values(req.Actions))
	}
	return iss
}

// issuerAnswer is an issuer as the admin API shows it: an HS secret left
// out (auth.Issuer.Public), require_exp spelled out, and max_ttl always
// (the server's --max-token-ttl when the registration named none).
type issuerAnswer struct {
	auth.Issuer
	RequireExp bool `json:"require_exp"`
}

func (s *Server) answerOf(iss auth.Issuer) issuerAnswer {
	a := issuerAnswer{Issuer: iss.Public(), RequireExp: !iss.ExpOptional}
	if a.MaxTTL == "" {
		a.MaxTTL = s.cfg.MaxTokenTTL.String()
	}
	return a
}

// putIssuer registers or replaces an issuer. A replacement ends the
// streams its old registration's tokens opened, as a removal does: the
// keys that let them in may be the ones the admin meant to be rid of.
func (s *Server) putIssuer(w http.ResponseWriter, r *http.Request, tenant, name string) {
	var req issuerRequest
	if err := decodeObject(r, maxIssuerBody, &req); err != nil {
		writeError(w, refusal.New(refusal.InvalidIssuer,
			`the body must be a JSON object of at most %d bytes: {"issuer", "audience", "jwks_url"} or {"issuer", "audience", "alg", "key"}, with "max_ttl", "require_exp" and "actions" if need be`, maxIssuerBody))
		return
	}
	iss := req.issuer(name)
	if err := iss.Check(s.cfg.JWKSAllowHTTP); err != nil {
		writeError(w, refusal.New(refusal.InvalidIssuer, "%s", err.Error()))
		return
	}
	iss, created, err := s.deps.Tenants.PutIssuer(r.Context(), tenant, iss)
	if errors.Is(err, backlog.ErrTooManyIssuers) {
		writeError(w, refusal.New(refusal.InvalidIssuer, "%s", err.Error()))
		return
	}
	if s.refuseAdmin(w, err, "given an issuer", tenant) {
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
		s.verifier.ForgetIssuer(tenant, name)
		s.Revoked(tenant, backlog.RevokedIssuer, name)
	}
	s.adminAction(r, "issuer registered", tenant, slog.String("issuer", name), slog.Bool("created", created))
	writeJSON(w, status, s.answerOf(iss))
}

// getIssuers lists the tenant's issuers, HS secrets left out.
func (s *Server) getIssuers(w http.ResponseWriter, r *http.Request, tenant string) {
	if _, ok := s.adminTenant(w, r, tenant); !ok {
		return
	}
	list, err := s.deps.Tenants.Issuers(r.Context(), tenant)
	if s.refuseAdmin(w, err, "read", tenant) {
		return
	}
	out := make([]issuerAnswer, len(list))
	for i, iss := range list {
		out[i] = s.answerOf(iss)
	}
	writeJSON(w, http.StatusOK, map[string][]issuerAnswer{"issuers": out})
}

// getIssuer answers one issuer, 404 unknown_issuer if there is none.
func (s *Server) getIssuer(w http.ResponseWriter, r *http.Request, tenant, name string) {
	if _, ok := s.adminTenant(w, r, tenant); !ok {
		return
	}
	list, err := s.deps.Tenants.Issuers(r.Context(), tenant)
	if s.refuseAdmin(w, err, "read", tenant) {
		return
	}
	for _, iss := range list {
		if iss.Name == name {
			writeJSON(w, http.StatusOK, s.answerOf(iss))
			return
		}
	}
	writeError(w, refusal.New(refusal.UnknownIssuer, "tenant %s has no issuer %q", tenant, name))
}

// deleteIssuer removes an issuer: from the commit on its tokens are 401,
// and the streams they opened end, here now and elsewhere when the hint
// arrives.
func (s *Server) deleteIssuer(w http.ResponseWriter, r *http.Request, tenant, name string) {
	err := s.deps.Tenants.DeleteIssuer(r.Context(), tenant, name)
	if errors.Is(err, backlog.ErrNoIssuer) {
		writeError(w, refusal.New(refusal.UnknownIssuer, "tenant %s has no issuer %q", tenant, name))
		return
	}
	if s.refuseAdmin(w, err, "rid of an issuer", tenant) {
		return
	}
	s.verifier.ForgetIssuer(tenant, name)
	ended := s.Revoked(tenant, backlog.RevokedIssuer, name)
	s.adminAction(r, "issuer removed", tenant, slog.String("issuer", name), slog.Int("streams", ended))
	w.WriteHeader(http.StatusNoContent)
}

// revokeToken refuses every token of the tenant with the id jti, until
// no such token can still be alive (the longest lifetime the server or
// one of the tenant's issuers accepts, and the leeway; kept for good
// when lifetimes are not capped, or an issuer takes tokens without exp),
// and ends the streams such tokens opened.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, tenant, jti string) {
	var until time.Time
	if s.cfg.MaxTokenTTL > 0 {
		until = time.Now().Add(s.cfg.MaxTokenTTL + auth.Leeway)
	}
	err := s.deps.Tenants.Revoke(r.Context(), tenant, jti, until)
	if s.refuseAdmin(w, err, "rid of a token", tenant) {
		return
	}
	ended := s.Revoked(tenant, backlog.RevokedToken, jti)
	s.adminAction(r, "token revoked", tenant, slog.String("jti", jti), slog.Int("streams", ended))
	w.WriteHeader(http.StatusNoContent)
}
