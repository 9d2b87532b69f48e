package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
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
// with the issuers registered for that iss. What the token says of
// itself (alg, kid, iss, tenant) only chooses the keys to try: the first
// key that verifies it decides, and only then are its claims read, in
// accept. A refusal is a *Refusal whose reason does not depend on
// whether the tenant exists: a tenant that does not exist is one whose
// lookup finds no secret and whose store (Nobody) has no issuers.
func (v *Verifier) Verify(ctx context.Context, lookup Lookup, store Store, raw, tenant string, now time.Time) (Token, error) {
	unverified, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	if errors.Is(err, jwt.ErrTokenUnverifiable) {
		return Token{}, Refuse(BadSignature, "%v", err)
	}
	if err != nil {
		return Token{}, Refuse(Malformed, "%v", err)
	}
	var (
		hdr  header
		peek peeked
	)
	hdr.Alg, _ = unverified.Header["alg"].(string)
	hdr.Kid, _ = unverified.Header["kid"].(string)
	if mc, ok := unverified.Claims.(jwt.MapClaims); ok {
		peek.Tenant, _ = mc["tenant"].(string)
		peek.Iss, _ = mc["iss"].(string)
	}
	if family(hdr.Alg) == "" {
		return Token{}, Refuse(BadSignature, "alg %q is not accepted", hdr.Alg)
	}
	var tried []error
	if peek.Iss == "" && peek.Tenant != "" && hdr.Alg == jwt.SigningMethodHS256.Alg() {
		tok, err := v.own(ctx, lookup, store, raw, tenant, now)
		if decided(err) {
			return tok, err
		}
		tried = append(tried, err)
	}
	issuers, err := store.Issuers(ctx, tenant)
	if err != nil {
		return Token{}, fmt.Errorf("read the issuers of %s: %w", tenant, err)
	}
	for i := range issuers {
		if iss := &issuers[i]; iss.Issuer == peek.Iss {
			tok, err := v.issued(ctx, store, iss, hdr, raw, tenant, now)
			if decided(err) {
				return tok, err
			}
			tried = append(tried, fmt.Errorf("issuer %s: %w", iss.Name, err))
		}
	}
	if len(tried) == 0 {
		return Token{}, Refuse(UnknownIssuer, "no key of tenant %s is for a token with iss %q", tenant, peek.Iss)
	}
	reason := BadSignature
	for _, err := range tried {
		if ReasonOf(err) == KeysUnavailable {
			reason = KeysUnavailable // the token may be of the keys not had
		}
	}
	return Token{}, &Refusal{Reason: reason, detail: errors.Join(tried...)}
}

// decided says whether an attempt with one key ends the check: it
// verified the token (whatever its claims then said), or the store
// failed.
func decided(err error) bool {
	reason := ReasonOf(err)
	return err == nil || errors.Is(err, ErrForbidden) || reason == 0 || afterSignature(reason)
}

// Nobody is the store of a tenant that does not exist: no issuers,
// nothing revoked. Checked against it and a lookup that finds no secret,
// a token is refused as by a tenant whose keys do not verify it.
var Nobody Store = nobody{}

type nobody struct{}

func (nobody) Issuers(context.Context, string) ([]Issuer, error)     { return nil, nil }
func (nobody) Revoked(context.Context, string, string) (bool, error) { return false, nil }

// own checks a token signed with a tenant's secret (the admin API's):
// exp required, the server's cap.
func (v *Verifier) own(ctx context.Context, lookup Lookup, store Store, raw, tenant string, now time.Time) (Token, error) {
	_, err := jwt.ParseWithClaims(raw, jwt.MapClaims{}, func(t *jwt.Token) (any, error) {
		claimed, _ := t.Claims.(jwt.MapClaims)["tenant"].(string)
		ten, err := lookup(ctx, claimed)
		if err != nil {
			return nil, err
		}
		return []byte(ten.SigningSecret), nil
	}, parser(jwt.SigningMethodHS256.Alg())...)
	if err != nil {
		return Token{}, Refuse(BadSignature, "%v", err)
	}
	audience := v.Audience
	if audience == "" {
		audience = tenant
	}
	tok, claimed, err := v.accept(ctx, store, raw, policy{audience: audience, cap: v.MaxTTL, publish: true}, tenant, now)
	if err == nil && claimed != tenant {
		err = ErrForbidden
	}
	return tok, err
}

// issued checks a token with a registered issuer's keys, and then by
// the issuer's policy.
func (v *Verifier) issued(ctx context.Context, store Store, iss *Issuer, hdr header, raw, tenant string, now time.Time) (Token, error) {
	candidates, err := v.keysOf(ctx, iss, hdr.Kid, tenant)
	if err != nil {
		return Token{}, err
	}
	last := Refuse(BadSignature, "no key of the issuer verifies the token's alg")
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
		key := k.key
		if _, err := jwt.ParseWithClaims(raw, jwt.MapClaims{}, func(*jwt.Token) (any, error) { return key, nil }, parser(methods...)...); err != nil {
			last = Refuse(BadSignature, "%v", err)
			continue
		}
		tok, claimed, err := v.accept(ctx, store, raw, policy{audience: iss.Audience, audRequired: iss.Audience != "",
			cap: iss.Cap(v.MaxTTL), expOptional: iss.ExpOptional, publish: iss.Allows(Publish)}, tenant, now)
		if err == nil && claimed != "" && claimed != tenant {
			err = ErrForbidden
		}
		tok.Issuer, tok.IssuerVersion = iss.Name, iss.Version
		return tok, err
	}
	return Token{}, last
}

// keysOf are the keys of iss that may verify a token with kid: its
// static key, or those of its JWKS. Keys that cannot be had refuse the
// token as KeysUnavailable; a JWKS that lacks kid, as BadSignature.
func (v *Verifier) keysOf(ctx context.Context, iss *Issuer, kid, tenant string) ([]jwk, error) {
	if iss.JWKSURL == "" {
		key, err := iss.staticKey()
		if err != nil {
			return nil, Refuse(KeysUnavailable, "%v", err)
		}
		return []jwk{{alg: iss.Alg, key: key}}, nil
	}
	if v.JWKS == nil {
		return nil, Refuse(KeysUnavailable, "no JWKS fetcher")
	}
	keys, err := v.JWKS.keys(ctx, jwksID(tenant, iss), iss.JWKSURL, kid)
	if err != nil && ReasonOf(err) == 0 {
		return nil, Refuse(KeysUnavailable, "%w", err)
	}
	return keys, err
}

// parser are the options of every token's parse: the algorithms its key
// allows, and no check of its claims, which accept makes once the
// signature verified.
func parser(methods ...string) []jwt.ParserOption {
	return []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithoutClaimsValidation()}
}

// policy is what the owner of the key that verified a token says of its
// tokens.
type policy struct {
	// audience is what aud must hold when it is there ("": unchecked);
	// audRequired, that it must be there.
	audience    string
	audRequired bool
	// cap is how far ahead exp may lie (0: no cap); expOptional accepts
	// a token with none.
	cap         time.Duration
	expOptional bool
	// publish lets its tokens grant publish.
	publish bool
}

// accept reads a token whose signature verified, checking in this order
// (one reason comes out, whatever else is wrong): its claims are well
// formed, it has an exp (unless p.expOptional), it has not expired, its
// nbf has come, its aud holds p's audience, its exp is within p's cap,
// its jti is not revoked, its grants are well formed. It returns the
// tenant the token claims, if any.
func (v *Verifier) accept(ctx context.Context, store Store, raw string, p policy, tenant string, now time.Time) (Token, string, error) {
	c, present, payload, err := readClaims(raw)
	if err != nil {
		return Token{}, "", err
	}
	exp, nbf := c.ExpiresAt, c.NotBefore
	_, hasAud := present["aud"]
	switch {
	case exp == nil && !p.expOptional:
		return Token{}, "", Refuse(NoExp, "the token has no exp")
	case exp != nil && now.After(exp.Add(Leeway)):
		return Token{}, "", Refuse(Expired, "the token expired at %v", exp.UTC())
	case nbf != nil && now.Before(nbf.Add(-Leeway)):
		return Token{}, "", Refuse(NotYetValid, "the token is valid from %v", nbf.UTC())
	case p.audience != "" && (hasAud || p.audRequired) && !slices.Contains(c.Audience, p.audience):
		return Token{}, "", Refuse(Audience, "the token's aud does not hold %q", p.audience)
	case exp != nil && p.cap > 0 && exp.After(now.Add(p.cap+Leeway)):
		return Token{}, "", Refuse(TooLong, "the token's exp is more than %v ahead", p.cap)
	}
	if c.ID != "" {
		revoked, err := store.Revoked(ctx, tenant, c.ID)
		if err != nil {
			return Token{}, "", fmt.Errorf("look up revoked tokens of %s: %w", tenant, err)
		}
		if revoked {
			return Token{}, "", Refuse(Revoked, "the token %q was revoked", c.ID)
		}
	}
	pub, sub, payloads, err := grants(payload)
	if err != nil {
		return Token{}, "", err
	}
	if !p.publish {
		pub = Grant{}
	}
	tok := Token{Publish: pub, Subscribe: sub, Payloads: payloads, JTI: c.ID}
	if exp != nil {
		tok.Expires = exp.Time
	}
	return tok, c.Tenant, nil
}

// claimsOf decodes the payload of raw.
func claimsOf(raw string) ([]byte, error) {
	_, payload, _ := strings.Cut(raw, ".")
	payload, _, _ = strings.Cut(payload, ".")
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, Refuse(Malformed, "the claims are not base64url: %v", err)
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
