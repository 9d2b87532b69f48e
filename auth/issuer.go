package auth

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

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

// Check refuses a registration that could not verify tokens: exactly one
// of jwks_url and alg+key; a URL that is absolute https (or http when
// allowHTTP); an algorithm of the families; a key that parses for it.
func (iss *Issuer) Check(allowHTTP bool) error {
	const maxField = 2048
	for name, v := range map[string]string{"issuer": iss.Issuer, "audience": iss.Audience, "jwks_url": iss.JWKSURL} {
		if len(v) > maxField || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%w: %s is at most %d bytes of printable characters", ErrInvalidIssuer, name, maxField)
		}
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
