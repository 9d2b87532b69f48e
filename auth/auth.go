// Package auth checks who may do what: tenant tokens (HS256 JWTs signed
// with the tenant's signing secret, with topic patterns per action) and
// Standard Webhooks signatures made with the tenant's webhook secret.
package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Errors of a check: bad or missing credentials, or good ones that do not
// cover the tenant, topic or action.
var (
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
)

// Leeway is the clock skew allowed on a token's exp.
const Leeway = 30 * time.Second

// Action is what a token must allow.
type Action int

// The two actions: publish (notify) and subscribe (watch, events, state).
const (
	Publish Action = iota
	Subscribe
)

// Claims are a tenant token's claims.
type Claims struct {
	Tenant    string   `json:"tenant"`
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
	jwt.RegisteredClaims
}

// Lookup finds a tenant's secrets; backlog.ErrNoTenant when there is none.
type Lookup func(ctx context.Context, name string) (Tenant, error)

// Mint signs a token for t with the given patterns, valid for ttl, with a
// random jti by which the admin API can revoke it.
func Mint(t Tenant, publish, subscribe []string, ttl time.Duration, now time.Time) (string, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("make a token id: %w", err)
	}
	c := Claims{Tenant: t.Name, Publish: publish, Subscribe: subscribe,
		RegisteredClaims: jwt.RegisteredClaims{IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID: base64.RawURLEncoding.EncodeToString(id)}}
	if c.Publish == nil {
		c.Publish = []string{}
	}
	if c.Subscribe == nil {
		c.Subscribe = []string{}
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(t.SigningSecret))
	if err != nil {
		return "", fmt.Errorf("sign token for %s: %w", t.Name, err)
	}
	return s, nil
}

// TenantOf is the tenant a token claims, read without checking it, for a
// route whose path names no tenant: Token then checks the token against
// that tenant's secret.
func TenantOf(raw string) string {
	var c Claims
	if _, _, err := jwt.NewParser().ParseUnverified(raw, &c); err != nil {
		return ""
	}
	return c.Tenant
}

// claimNames are the claims a token is read for. encoding/json, which
// golang-jwt decodes them with, matches names without regard to case.
var claimNames = []string{"tenant", "publish", "subscribe", "mercure", "authorization_details", "iss", "sub", "aud", "exp", "nbf", "iat", "jti"}

// readClaims reads the claims of a token whose signature is good, as
// they are written, refusing (Malformed) what golang-jwt would let
// through: a claim of claimNames spelled otherwise ("EXP", "Tenant"),
// which would stand in for it unseen; an exp or nbf that is not a JSON
// number (the library reads "1999999999", a string, as a date); a claim
// of the wrong type. It returns the claims, which names the token holds,
// and the payload, for the grants.
func readClaims(raw string) (Claims, map[string]json.RawMessage, []byte, error) {
	var c Claims
	payload, err := claimsOf(raw)
	if err != nil {
		return c, nil, nil, err
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(payload, &present); err != nil {
		return c, nil, nil, Refuse(Malformed, "the claims are not a JSON object: %v", err)
	}
	for name := range present {
		for _, known := range claimNames {
			if name != known && strings.EqualFold(name, known) {
				return c, nil, nil, Refuse(Malformed, "the claim %q is not spelled %q", name, known)
			}
		}
	}
	for _, name := range []string{"exp", "nbf"} {
		if v, ok := present[name]; ok && !isNumber(v) {
			return c, nil, nil, Refuse(Malformed, "the claim %s is not a JSON number", name)
		}
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, nil, nil, Refuse(Malformed, "a claim is not of its type: %v", err)
	}
	return c, present, payload, nil
}

// isNumber reports whether v, a valid JSON value, is a number.
func isNumber(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))
}

// MatchAny reports whether topic matches one of the native patterns,
// where '*' matches any run of characters, the empty run included.
func MatchAny(patterns []string, topic string) bool { return Globs(patterns).Match(topic) }
