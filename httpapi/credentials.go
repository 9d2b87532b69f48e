package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
)

// heldCredential is an open stream's token, as far as a revocation can
// name it: its issuer's registration and its id (plan 040).
type heldCredential struct {
	issuer  string
	version int64
	jti     string
	end     func() // ends the stream, as the hub ends one: it may resume
}

// holdCredential keeps, while a stream of tenant is open, what its token
// can be revoked by, and how to end it; forget lets go once it closes. A
// token that names neither (dev mode, an old token) holds nothing: only
// a rotation, which ends every stream of the tenant, reaches it.
func (s *Server) holdCredential(tenant string, tok auth.Token, end func()) (forget func()) {
	if tok.Issuer == "" && tok.JTI == "" {
		return func() {}
	}
	c := &heldCredential{issuer: tok.Issuer, version: tok.IssuerVersion, jti: tok.JTI, end: end}
	s.mu.Lock()
	if s.held[tenant] == nil {
		s.held[tenant] = map[*heldCredential]struct{}{}
	}
	s.held[tenant][c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.held[tenant], c)
		if len(s.held[tenant]) == 0 {
			delete(s.held, tenant)
		}
		s.mu.Unlock()
	}
}

// holding holds a's credential for a stream, which revoked ends when a
// revocation names it and expired when its token stops being accepted
// (Access.EndsAt), and returns its release, which lets go of both.
func (s *Server) holding(a Access, revoked, expired, release func()) func() {
	forget := s.holdCredential(a.Tenant.Name, a.Token, revoked)
	stop := func() bool { return false }
	if at := a.EndsAt(); !at.IsZero() {
		stop = time.AfterFunc(time.Until(at), expired).Stop
	}
	return func() { stop(); forget(); release() }
}

// Revoked ends the tenant's streams opened with what a revocation names
// (backlog.RevokedIssuer: an issuer's registration, replaced or removed;
// backlog.RevokedToken: a token id), here or, told by a hint, on another
// process; it returns how many it ended. The revocation is stored first,
// so a stream opening meanwhile either is held here already or sees it
// (stillThere).
func (s *Server) Revoked(tenant, kind, name string) int {
	var ends []func()
	s.mu.Lock()
	for c := range s.held[tenant] {
		if kind == backlog.RevokedIssuer && c.issuer == name || kind == backlog.RevokedToken && c.jti == name {
			ends = append(ends, c.end)
		}
	}
	s.mu.Unlock()
	for _, end := range ends {
		end()
	}
	if len(ends) > 0 {
		s.deps.Logger.LogAttrs(context.Background(), slog.LevelInfo, "streams ended by a revocation",
			slog.String("tenant", tenant), slog.String("kind", kind), slog.Int("streams", len(ends)))
	}
	return len(ends)
}

// stillValid checks again what a stream's token may have lost since it
// was verified: its id revoked, its issuer's registration replaced or
// removed.
func (s *Server) stillValid(ctx context.Context, tenant string, tok auth.Token) error {
	if tok.JTI != "" {
		revoked, err := s.deps.Tenants.Revoked(ctx, tenant, tok.JTI)
		if err != nil {
			return fmt.Errorf("look up revoked tokens: %w", err)
		}
		if revoked {
			return errTokenRevoked
		}
	}
	if tok.Issuer == "" {
		return nil
	}
	issuers, err := s.deps.Tenants.Issuers(ctx, tenant)
	if err != nil {
		return fmt.Errorf("read issuers: %w", err)
	}
	for _, iss := range issuers {
		if iss.Name == tok.Issuer && iss.Version == tok.IssuerVersion {
			return nil
		}
	}
	return errIssuerGone
}
