// Package auth checks who may do what: tenant tokens (HS256 JWTs signed
// with the tenant's signing secret, with topic patterns per action) and
// Standard Webhooks signatures made with the tenant's webhook secret.
package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// Mint signs a token for t with the given patterns, valid for ttl.
func Mint(t Tenant, publish, subscribe []string, ttl time.Duration, now time.Time) (string, error) {
	c := Claims{Tenant: t.Name, Publish: publish, Subscribe: subscribe,
		RegisteredClaims: jwt.RegisteredClaims{IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))}}
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

// ErrTooLong refuses a token whose exp lies further ahead than the
// longest lifetime allowed: a tenant holds its own signing secret and
// could otherwise sign itself a token that never expires.
var ErrTooLong = fmt.Errorf("%w: the token lives longer than allowed", ErrUnauthorized)

// Grants checks raw as a token of tenant and returns its claims, whose
// patterns a route that names no one topic (a tenant stream) matches
// each topic against. The key is the signing secret of the tenant the
// token names, so that a good token of another tenant is told apart
// (ErrForbidden) from a bad one (unauthorized). A token whose exp is more
// than maxTTL (plus Leeway) ahead of now is refused (maxTTL 0: no cap),
// and so is one whose claims are not what they seem (strictClaims): an
// aud, when the token has one, must hold audience, or the tenant's name
// if audience is empty.
func Grants(ctx context.Context, lookup Lookup, raw, tenant string, now time.Time, maxTTL time.Duration, audience string) (Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, func(tok *jwt.Token) (any, error) {
		claims, _ := tok.Claims.(*Claims)
		if claims == nil || claims.Tenant == "" {
			return nil, errors.New("no tenant claim")
		}
		t, err := lookup(ctx, claims.Tenant)
		if err != nil {
			return nil, err
		}
		return []byte(t.SigningSecret), nil
	}, jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway), jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil {
		return c, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	if audience == "" {
		audience = tenant
	}
	if err := strictClaims(raw, c, audience); err != nil {
		return c, err
	}
	if maxTTL > 0 && c.ExpiresAt.After(now.Add(maxTTL+Leeway)) {
		return c, ErrTooLong
	}
	if c.Tenant != tenant {
		return c, ErrForbidden
	}
	return c, nil
}

// Patterns are the topic patterns the claims grant for action.
func (c *Claims) Patterns(action Action) []string {
	if action == Publish {
		return c.Publish
	}
	return c.Subscribe
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
var claimNames = []string{"tenant", "publish", "subscribe", "iss", "sub", "aud", "exp", "nbf", "iat", "jti"}

// strictClaims refuses what golang-jwt lets through, reading the claims
// of raw (whose signature is good, so whose payload decodes) as they are:
// a claim of claimNames spelled otherwise ("EXP", "Tenant"), which would
// stand in for it unseen; an exp or nbf that is not a JSON number (the
// library reads "1999999999", a string, as a date); an aud, when there is
// one, that does not hold audience (c is raw's claims as parsed).
func strictClaims(raw string, c Claims, audience string) error {
	_, payload, _ := strings.Cut(raw, ".")
	payload, _, _ = strings.Cut(payload, ".")
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return fmt.Errorf("%w: the claims are not base64url: %v", ErrUnauthorized, err)
	}
	var claims map[string]json.RawMessage
	if err := json.Unmarshal(b, &claims); err != nil {
		return fmt.Errorf("%w: the claims are not a JSON object: %v", ErrUnauthorized, err)
	}
	for name := range claims {
		for _, known := range claimNames {
			if name != known && strings.EqualFold(name, known) {
				return fmt.Errorf("%w: the claim %q is not spelled %q", ErrUnauthorized, name, known)
			}
		}
	}
	for _, name := range []string{"exp", "nbf"} {
		if v, ok := claims[name]; ok && !isNumber(v) {
			return fmt.Errorf("%w: the claim %s is not a JSON number", ErrUnauthorized, name)
		}
	}
	if _, ok := claims["aud"]; ok && !slices.Contains(c.Audience, audience) {
		return fmt.Errorf("%w: the token's aud does not hold %q", ErrUnauthorized, audience)
	}
	return nil
}

// isNumber reports whether v, a valid JSON value, is a number.
func isNumber(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))
}

// MatchAny reports whether topic matches one of the patterns, where '*'
// matches any run of characters, the empty run included.
func MatchAny(patterns []string, topic string) bool {
	for _, p := range patterns {
		if match(p, topic) {
			return true
		}
	}
	return false
}

// match is a glob with '*' only, in linear time: on a mismatch it backs up
// to the last star and lets it take one more character.
func match(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
