package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Store is where a check finds what it verifies against: the tenant's
// signing secret (Lookup), the issuers it trusts, and the token ids
// revoked.
type Store interface {
	Issuers(ctx context.Context, tenant string) ([]Issuer, error)
	Revoked(ctx context.Context, tenant, jti string) (bool, error)
}

// Verifier checks tokens.
type Verifier struct {
	// MaxTTL refuses a token whose exp is further ahead (0: no cap).
	MaxTTL time.Duration
	// Audience is what a tenant-signed token's aud, when it has one, must
	// hold; empty: the tenant's name.
	Audience string
	// JWKS fetches registered issuers' key sets.
	JWKS *JWKS
}

// Token is what a good token of a tenant allows, and what it was signed
// by, which a stream it opened keeps: revoking either ends the stream.
type Token struct {
	Publish, Subscribe Grant
	// Payloads are its subscriptions' payloads (Mercure's).
	Payloads Payloads
	// Issuer is the registered issuer whose key verified the token, ""
	// for the tenant's own signing secret, and IssuerVersion the
	// registration's version.
	Issuer        string
	IssuerVersion int64
	JTI           string
	Expires       time.Time
}

// Grant is what the token allows for action.
func (t *Token) Grant(action Action) Grant {
	if action == Publish {
		return t.Publish
	}
	return t.Subscribe
}

// header and peeked are what a token says of itself before any check:
// only which key to try.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

type peeked struct {
	Tenant string `json:"tenant"`
	Iss    string `json:"iss"`
}

// Verify checks raw as a token for tenant, at now. A token with no iss
// is tried with the signing secret of the tenant it claims (HS256: a good
// token of another tenant is told apart, ErrForbidden, from a bad one),
// then with the issuers registered without an iss; one with an iss, only
// with the issuers registered for that iss. The first key that verifies
// it decides; then its claims are read strictly, its lifetime capped,
// its jti looked up among the revoked, and its grants read.
func (v *Verifier) Verify(ctx context.Context, lookup Lookup, store Store, raw, tenant string, now time.Time) (Token, error) {
	var (
		hdr  header
		peek peeked
	)
	unverified, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	hdr.Alg, _ = unverified.Header["alg"].(string)
	hdr.Kid, _ = unverified.Header["kid"].(string)
	if mc, ok := unverified.Claims.(jwt.MapClaims); ok {
		peek.Tenant, _ = mc["tenant"].(string)
		peek.Iss, _ = mc["iss"].(string)
	}
	if family(hdr.Alg) == "" {
		return Token{}, fmt.Errorf("%w: alg %q is not accepted", ErrUnauthorized, hdr.Alg)
	}
	var errs []error
	if peek.Iss == "" && peek.Tenant != "" && hdr.Alg == jwt.SigningMethodHS256.Alg() {
		tok, err := v.own(ctx, lookup, store, raw, tenant, now)
		if err == nil || errors.Is(err, ErrForbidden) || errors.Is(err, ErrTooLong) {
			return tok, err
		}
		errs = append(errs, err)
	}
	issuers, err := store.Issuers(ctx, tenant)
	if err != nil {
		return Token{}, fmt.Errorf("read the issuers of %s: %w", tenant, err)
	}
	for i := range issuers {
		if iss := &issuers[i]; iss.Issuer == peek.Iss {
			tok, err := v.issued(ctx, store, iss, hdr, raw, tenant, now)
			if err == nil || errors.Is(err, ErrForbidden) {
				return tok, err
			}
			errs = append(errs, fmt.Errorf("issuer %s: %w", iss.Name, err))
		}
	}
	if len(errs) == 0 {
		return Token{}, fmt.Errorf("%w: no key of tenant %s is for a token with iss %q", ErrUnauthorized, tenant, peek.Iss)
	}
	return Token{}, fmt.Errorf("%w: %w", ErrUnauthorized, errors.Join(errs...))
}

// own checks a token signed with a tenant's secret (the admin API's).
func (v *Verifier) own(ctx context.Context, lookup Lookup, store Store, raw, tenant string, now time.Time) (Token, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) {
		t, err := lookup(ctx, c.Tenant)
		if err != nil {
			return nil, err
		}
		return []byte(t.SigningSecret), nil
	}, v.options(now, []string{jwt.SigningMethodHS256.Alg()})...)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	audience := v.Audience
	if audience == "" {
		audience = tenant
	}
	tok, err := v.accept(ctx, store, raw, c.RegisteredClaims, audience, tenant, now)
	if err == nil && c.Tenant != tenant {
		err = ErrForbidden
	}
	return tok, err
}

// issued checks a token with a registered issuer's keys.
func (v *Verifier) issued(ctx context.Context, store Store, iss *Issuer, hdr header, raw, tenant string, now time.Time) (Token, error) {
	var candidates []jwk
	if iss.JWKSURL == "" {
		key, err := iss.staticKey()
		if err != nil {
			return Token{}, err
		}
		candidates = []jwk{{alg: iss.Alg, key: key}}
	} else {
		if v.JWKS == nil {
			return Token{}, errors.New("no JWKS fetcher")
		}
		keys, err := v.JWKS.keys(ctx, jwksID(tenant, iss), iss.JWKSURL, hdr.Kid)
		if err != nil {
			return Token{}, err
		}
		candidates = keys
	}
	last := errors.New("no key of the issuer verifies the token's alg")
	for _, k := range candidates {
		// A key verifies its own family only: a JWK's alg names it, a JWK
		// without one is held to its type by the library.
		methods := asymmetric
		if k.alg != "" {
			if f := family(k.alg); f == "" || f == "HS" && iss.JWKSURL != "" {
				continue // a JWKS holds no shared secret, and no other kind
			}
			methods = families[family(k.alg)]
		}
		var c Claims
		opts := v.options(now, methods)
		if iss.Issuer != "" {
			opts = append(opts, jwt.WithIssuer(iss.Issuer))
		}
		if iss.Audience != "" {
			opts = append(opts, jwt.WithAudience(iss.Audience))
		}
		key := k.key
		if _, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return key, nil }, opts...); err != nil {
			last = err
			continue
		}
		tok, err := v.accept(ctx, store, raw, c.RegisteredClaims, iss.Audience, tenant, now)
		if err == nil && c.Tenant != "" && c.Tenant != tenant {
			err = ErrForbidden
		}
		tok.Issuer, tok.IssuerVersion = iss.Name, iss.Version
		return tok, err
	}
	return Token{}, last
}

// options are the checks every token gets: the algorithms its key
// allows, a required exp, nbf, and the leeway.
func (v *Verifier) options(now time.Time, methods []string) []jwt.ParserOption {
	return []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway), jwt.WithTimeFunc(func() time.Time { return now })}
}

// accept reads a verified token: its claims strictly, its lifetime, its
// jti, its grants.
func (v *Verifier) accept(ctx context.Context, store Store, raw string, rc jwt.RegisteredClaims, audience, tenant string, now time.Time) (Token, error) {
	payload, err := claimsOf(raw)
	if err != nil {
		return Token{}, err
	}
	if err := strictClaims(payload, rc.Audience, audience); err != nil {
		return Token{}, err
	}
	if v.MaxTTL > 0 && rc.ExpiresAt.After(now.Add(v.MaxTTL+Leeway)) {
		return Token{}, ErrTooLong
	}
	if rc.ID != "" {
		revoked, err := store.Revoked(ctx, tenant, rc.ID)
		if err != nil {
			return Token{}, fmt.Errorf("look up revoked tokens of %s: %w", tenant, err)
		}
		if revoked {
			return Token{}, fmt.Errorf("%w: the token %q was revoked", ErrUnauthorized, rc.ID)
		}
	}
	pub, sub, payloads, err := grants(payload)
	if err != nil {
		return Token{}, err
	}
	return Token{Publish: pub, Subscribe: sub, Payloads: payloads, JTI: rc.ID, Expires: rc.ExpiresAt.Time}, nil
}

// claimsOf decodes the payload of raw, a token whose signature is good.
func claimsOf(raw string) ([]byte, error) {
	_, payload, _ := strings.Cut(raw, ".")
	payload, _, _ = strings.Cut(payload, ".")
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: the claims are not base64url: %v", ErrUnauthorized, err)
	}
	return b, nil
}

// jwksID is the key set's name in the fetcher: a new registration under
// the issuer's name starts with no keys kept.
func jwksID(tenant string, iss *Issuer) string {
	return tenant + "/" + iss.Name + "/" + strconv.FormatInt(iss.Version, 10)
}

// ForgetIssuer lets go of what the fetcher keeps of every registration
// of the tenant's issuer name (names hold no '/').
func (v *Verifier) ForgetIssuer(tenant, name string) {
	if v.JWKS != nil {
		v.JWKS.Forget(tenant + "/" + name + "/")
	}
}
