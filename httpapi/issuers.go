package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
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
// from, and what its tokens must say.
type issuerRequest struct {
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`
	JWKSURL  string `json:"jwks_url"`
	Alg      string `json:"alg"`
	Key      string `json:"key"`
}

// putIssuer registers or replaces an issuer. A replacement ends the
// streams its old registration's tokens opened, as a removal does: the
// keys that let them in may be the ones the admin meant to be rid of.
func (s *Server) putIssuer(w http.ResponseWriter, r *http.Request, tenant, name string) {
	var req issuerRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxIssuerBody+1))
	if err == nil && len(body) > maxIssuerBody {
		err = errors.New("too large")
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
		if err == nil && dec.More() {
			err = errors.New("trailing data")
		}
	}
	if err != nil {
		writeError(w, refusal.New(refusal.InvalidIssuer,
			`the body must be a JSON object of at most %d bytes: {"issuer", "audience", "jwks_url"} or {"issuer", "audience", "alg", "key"}`, maxIssuerBody))
		return
	}
	iss := auth.Issuer{Name: name, Issuer: req.Issuer, Audience: req.Audience, JWKSURL: req.JWKSURL, Alg: req.Alg, Key: req.Key}
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
	writeJSON(w, status, iss.Public())
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
	out := make([]auth.Issuer, len(list))
	for i, iss := range list {
		out[i] = iss.Public()
	}
	writeJSON(w, http.StatusOK, map[string][]auth.Issuer{"issuers": out})
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
			writeJSON(w, http.StatusOK, iss.Public())
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
// no such token can still be alive (the longest lifetime the server
// accepts, and the leeway; kept for good when lifetimes are not capped),
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
