package auth

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is a signer of tokens that a tenant trusts besides its own
// signing secret (an identity provider, an application): its keys come
// from a JWKS URL or are one key given with its algorithm.
type Issuer struct {
	Name string `json:"name"`
	// Issuer is the iss its tokens carry; empty for tokens with none.
	Issuer string `json:"issuer,omitempty"`
	// Audience, when set, must be in the tokens' aud.
	Audience string `json:"audience,omitempty"`
	JWKSURL  string `json:"jwks_url,omitempty"`
	Alg      string `json:"alg,omitempty"`
	// Key is a PEM public key, or an HS algorithm's secret, which no
	// answer ever holds (Public).
	Key string `json:"key,omitempty"`
	// MaxTTL caps how far ahead its tokens' exp may lie, a Go duration
	// kept as it was given ("0s": no cap); empty, the server's
	// --max-token-ttl applies, whatever it is when a token is checked.
	MaxTTL string `json:"max_ttl,omitempty"`
	// ExpOptional accepts its tokens without exp (the registration's
	// require_exp false): an application that signs tokens the way
	// Mercure's documentation shows, with no exp, needs it; such tokens
	// end only by revocation. The zero value, an issuer as the contract
	// first had them, requires exp.
	ExpOptional bool `json:"-"`
	// Actions are what its tokens may grant (DefaultActions, or
	// SubscribeOnly: a subscriber's key never publishes, whatever the
	// claims it signs say).
	Actions []string `json:"actions"`
	// Version changes with every registration under the name: a stream
	// opened with an older one ends, and cached keys of it are unused.
	Version int64 `json:"-"`
}

// The algorithms a registered issuer may sign with, by family: a key
// verifies only its own family's, and "none" is none of them.
var families = map[string][]string{
	"HS":    {"HS256", "HS384", "HS512"},
	"RS":    {"RS256", "RS384", "RS512"},
	"PS":    {"PS256", "PS384", "PS512"},
	"ES":    {"ES256", "ES384", "ES512"},
	"EdDSA": {"EdDSA"},
}

// family is the family of alg, "" for an algorithm not accepted.
func family(alg string) string {
	for f, algs := range families {
		if slices.Contains(algs, alg) {
			return f
		}
	}
	return ""
}

// asymmetric are the algorithms a JWKS may verify: a public key set
// holds no shared secrets.
var asymmetric = slices.Concat(families["RS"], families["PS"], families["ES"], families["EdDSA"])

// MinSecret is the shortest HS secret an issuer may register.
const MinSecret = 32

// ErrInvalidIssuer says what is wrong with an issuer's registration.
var ErrInvalidIssuer = errors.New("invalid issuer")

// The actions an issuer's tokens may grant, as a registration names them.
const (
	ActionPublish   = "publish"
	ActionSubscribe = "subscribe"
)

// DefaultActions are an issuer's actions when its registration names
// none, and SubscribeOnly those of a subscriber's key; these two, in
// this order, are the only ones an issuer may have.
func DefaultActions() []string { return []string{ActionPublish, ActionSubscribe} }

// SubscribeOnly is the actions of an issuer whose tokens never publish.
func SubscribeOnly() []string { return []string{ActionSubscribe} }

// maxTTLBytes bounds max_ttl as given: a duration is a few bytes.
const maxTTLBytes = 64

// Check refuses a registration that could not verify tokens: exactly one
// of jwks_url and alg+key; a URL that is absolute https (or http when
// allowHTTP); an algorithm of the families; a key that parses for it;
// a max_ttl that is no duration of 0s or more; actions other than
// DefaultActions or SubscribeOnly.
func (iss *Issuer) Check(allowHTTP bool) error {
	const maxField = 2048
	for name, v := range map[string]string{"issuer": iss.Issuer, "audience": iss.Audience, "jwks_url": iss.JWKSURL} {
		if len(v) > maxField || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%w: %s is at most %d bytes of printable characters", ErrInvalidIssuer, name, maxField)
		}
	}
	if iss.MaxTTL != "" {
		if d, err := time.ParseDuration(iss.MaxTTL); err != nil || d < 0 || len(iss.MaxTTL) > maxTTLBytes {
			return fmt.Errorf(`%w: max_ttl is a duration of 0s or more, such as "1h" or "720h" ("0s": no cap)`, ErrInvalidIssuer)
		}
	}
	if !slices.Equal(iss.Actions, DefaultActions()) && !slices.Equal(iss.Actions, SubscribeOnly()) {
		return fmt.Errorf(`%w: actions is ["publish", "subscribe"] (the default) or ["subscribe"]`, ErrInvalidIssuer)
	}
	switch {
	case iss.JWKSURL != "" && (iss.Alg != "" || iss.Key != ""):
		return fmt.Errorf("%w: give either jwks_url or alg and key, not both", ErrInvalidIssuer)
	case iss.JWKSURL != "":
		u, err := url.Parse(iss.JWKSURL)
		if err != nil || u.Host == "" || !schemeAllowed(u.Scheme, allowHTTP) {
			how := "an absolute https URL"
			if allowHTTP {
				how = "an absolute https or http URL"
			}
			return fmt.Errorf("%w: jwks_url must be %s", ErrInvalidIssuer, how)
		}
		return nil
	case iss.Alg == "" || iss.Key == "":
		return fmt.Errorf("%w: give jwks_url, or alg and key", ErrInvalidIssuer)
	}
	if family(iss.Alg) == "" {
		return fmt.Errorf("%w: alg %q is not one of HS256/384/512, RS256/384/512, PS256/384/512, ES256/384/512, EdDSA", ErrInvalidIssuer, iss.Alg)
	}
	if _, err := iss.staticKey(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidIssuer, err)
	}
	return nil
}

// maxTTL is the issuer's own cap on its tokens' lifetimes, and whether
// it has one (else the server's applies). A value that does not parse,
// which Check refuses, counts as none.
func (iss *Issuer) maxTTL() (time.Duration, bool) {
	if iss.MaxTTL == "" {
		return 0, false
	}
	d, err := time.ParseDuration(iss.MaxTTL)
	return d, err == nil
}

// Cap is how far ahead of a check its tokens' exp may lie (0: no cap),
// given server, the server's --max-token-ttl.
func (iss *Issuer) Cap(server time.Duration) time.Duration {
	if d, own := iss.maxTTL(); own {
		return d
	}
	return server
}

// Allows says whether its tokens may grant action.
func (iss *Issuer) Allows(action Action) bool {
	name := ActionSubscribe
	if action == Publish {
		name = ActionPublish
	}
	return slices.Contains(iss.Actions, name)
}

// RevokedUntil is until when a revoked jti must stay revoked for a
// token of the issuer, signed at now, to stay refused: the zero time for
// ever (it accepts tokens without exp, or caps nothing). own is false
// when its cap is the server's, which the revocation's own end already
// covers.
func (iss *Issuer) RevokedUntil(now time.Time) (until time.Time, own bool) {
	d, own := iss.maxTTL()
	switch {
	case iss.ExpOptional || own && d == 0:
		return time.Time{}, true
	case !own:
		return time.Time{}, false
	}
	return now.Add(d + Leeway), true
}

// KeepRevoked is until when a revocation of a token id must be kept,
// made at now: until is what the server's own cap asks (zero: for ever),
// and the tenant's issuers may ask longer, or for ever.
func KeepRevoked(until, now time.Time, issuers []Issuer) time.Time {
	for i := range issuers {
		u, own := issuers[i].RevokedUntil(now)
		switch {
		case !own:
		case u.IsZero():
			return time.Time{}
		case !until.IsZero() && u.After(until):
			until = u
		}
	}
	return until
}

// Public is the issuer as an answer may show it: an HS secret left out.
func (iss Issuer) Public() Issuer {
	if family(iss.Alg) == "HS" {
		iss.Key = ""
	}
	return iss
}

// staticKey parses the registered key for its algorithm's family.
func (iss *Issuer) staticKey() (any, error) {
	key := []byte(iss.Key)
	var (
		k   any
		err error
	)
	switch family(iss.Alg) {
	case "HS":
		if len(key) < MinSecret {
			return nil, fmt.Errorf("an HS secret is at least %d bytes", MinSecret)
		}
		return key, nil
	case "RS", "PS":
		k, err = jwt.ParseRSAPublicKeyFromPEM(key)
	case "ES":
		k, err = jwt.ParseECPublicKeyFromPEM(key)
	case "EdDSA":
		k, err = jwt.ParseEdPublicKeyFromPEM(key)
	default:
		return nil, fmt.Errorf("alg %q unknown", iss.Alg)
	}
	if err != nil {
		return nil, fmt.Errorf("the key is not a PEM public key for %s: %w", iss.Alg, err)
	}
	return k, nil
}
