package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signer is one algorithm's key pair: the private key that signs, and
// what an issuer registers (the PEM public key, or the HS secret).
type signer struct {
	method     jwt.SigningMethod
	private    any
	registered string
}

// signers makes a key pair for every algorithm the contract names.
func signers(t *testing.T) map[string]signer {
	t.Helper()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec := map[string]*ecdsa.PrivateKey{}
	for alg, curve := range map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()} {
		if ec[alg], err = ecdsa.GenerateKey(curve, rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	pemOf := func(pub crypto.PublicKey) string {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	secret := "an HS secret of at least 32 bytes, shared"
	out := map[string]signer{}
	for _, alg := range []string{"HS256", "HS384", "HS512"} {
		out[alg] = signer{jwt.GetSigningMethod(alg), []byte(secret), secret}
	}
	for _, alg := range []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"} {
		out[alg] = signer{jwt.GetSigningMethod(alg), rsaKey, pemOf(&rsaKey.PublicKey)}
	}
	for alg, k := range ec {
		out[alg] = signer{jwt.GetSigningMethod(alg), k, pemOf(&k.PublicKey)}
	}
	out["EdDSA"] = signer{jwt.SigningMethodEdDSA, edPriv, pemOf(edPub)}
	return out
}

// issue signs claims with s; claims exp and iss default to an hour after
// tokenNow and the test issuer's.
func (s signer) issue(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"iss": "https://idp.test", "aud": "edgehub", "exp": tokenNow.Add(time.Hour).Unix(), "subscribe": []string{"orders"}}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	raw, err := jwt.NewWithClaims(s.method, c).SignedString(s.private)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// verifyIssued checks raw for acme at tokenNow against the one issuer
// registered with alg and key, and says whether it may subscribe to orders.
func verifyIssued(raw, alg, key string, revoked ...string) (Token, error) {
	store := &memStore{
		issuers: []Issuer{{Name: "idp", Issuer: "https://idp.test", Audience: "edgehub", Alg: alg, Key: key, Version: 1}},
		revoked: map[string]bool{},
	}
	for _, jti := range revoked {
		store.revoked[jti] = true
	}
	noTenant := func(context.Context, string) (Tenant, error) { return Tenant{}, errors.New("unknown tenant") }
	v := Verifier{MaxTTL: 24 * time.Hour}
	tok, err := v.Verify(context.Background(), noTenant, store, raw, "acme", tokenNow)
	if err == nil && !tok.Grant(Subscribe).Match("orders") {
		err = ErrForbidden
	}
	return tok, err
}

// Every algorithm the contract names verifies with an issuer registered
// by its static key, and the token is known by its issuer and jti.
func TestIssuerVerifiesEveryAlgorithm(t *testing.T) {
	for alg, s := range signers(t) {
		if err := (&Issuer{Name: "idp", Alg: alg, Key: s.registered}).Check(false); err != nil {
			t.Errorf("%s: registration refused: %v", alg, err)
			continue
		}
		tok, err := verifyIssued(s.issue(t, jwt.MapClaims{"jti": "j-" + alg}), alg, s.registered)
		if err != nil {
			t.Errorf("%s: %v", alg, err)
			continue
		}
		if tok.Issuer != "idp" || tok.IssuerVersion != 1 || tok.JTI != "j-"+alg {
			t.Errorf("%s: token of issuer %q v%d jti %q", alg, tok.Issuer, tok.IssuerVersion, tok.JTI)
		}
	}
}

// A key verifies its own family only; alg none, a wrong aud or iss, an
// expired or not yet valid token, one with no exp, and a revoked jti are
// all 401 (ErrUnauthorized), within the 30 s of leeway.
func TestIssuerRefusesWhatItDidNotSign(t *testing.T) {
	ks := signers(t)
	rs, es, hs := ks["RS256"], ks["ES256"], ks["HS256"]
	// An RS token signed with HMAC over the RS public key's PEM: the
	// classic confusion, which a PEM registered for RS must not verify.
	confused := signer{jwt.SigningMethodHS256, []byte(rs.registered), ""}
	none := func() string {
		enc := base64.RawURLEncoding
		return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
			enc.EncodeToString([]byte(`{"iss":"https://idp.test","aud":"edgehub","exp":1700003600,"subscribe":["orders"]}`)) + "."
	}()
	for _, tc := range []struct {
		name, raw, alg, key string
		revoked             []string
	}{
		{"alg none", none, "RS256", rs.registered, nil},
		{"HS over an RS public key", confused.issue(t, nil), "RS256", rs.registered, nil},
		{"RS token to an HS key", rs.issue(t, nil), "HS256", hs.registered, nil},
		{"ES token to an RS key", es.issue(t, nil), "RS256", rs.registered, nil},
		{"another ES key", ks["ES384"].issue(t, nil), "ES256", es.registered, nil},
		{"wrong aud", es.issue(t, jwt.MapClaims{"aud": "someone-else"}), "ES256", es.registered, nil},
		{"no aud", es.issue(t, jwt.MapClaims{"aud": nil}), "ES256", es.registered, nil},
		{"wrong iss", es.issue(t, jwt.MapClaims{"iss": "https://evil.test"}), "ES256", es.registered, nil},
		{"expired beyond the leeway", es.issue(t, jwt.MapClaims{"exp": tokenNow.Add(-31 * time.Second).Unix()}), "ES256", es.registered, nil},
		{"not yet valid beyond the leeway", es.issue(t, jwt.MapClaims{"nbf": tokenNow.Add(31 * time.Second).Unix()}), "ES256", es.registered, nil},
		{"no exp", es.issue(t, jwt.MapClaims{"exp": nil}), "ES256", es.registered, nil},
		{"revoked", es.issue(t, jwt.MapClaims{"jti": "j-1"}), "ES256", es.registered, []string{"j-1"}},
	} {
		if _, err := verifyIssued(tc.raw, tc.alg, tc.key, tc.revoked...); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: %v, want unauthorized", tc.name, err)
		}
	}
	for _, tc := range []struct{ name, raw string }{
		{"expired within the leeway", es.issue(t, jwt.MapClaims{"exp": tokenNow.Add(-29 * time.Second).Unix()})},
		{"valid within the leeway", es.issue(t, jwt.MapClaims{"nbf": tokenNow.Add(29 * time.Second).Unix()})},
		{"aud among several", es.issue(t, jwt.MapClaims{"aud": []string{"other", "edgehub"}})},
	} {
		if _, err := verifyIssued(tc.raw, "ES256", es.registered); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := verifyIssued(es.issue(t, jwt.MapClaims{"subscribe": []string{"refunds"}}), "ES256", es.registered); !errors.Is(err, ErrForbidden) {
		t.Errorf("a good token that does not cover the topic: %v, want forbidden", err)
	}
	if _, err := verifyIssued(es.issue(t, jwt.MapClaims{"tenant": "globex"}), "ES256", es.registered); !errors.Is(err, ErrForbidden) {
		t.Errorf("a good token naming another tenant: %v, want forbidden", err)
	}
}

// A registration that could not verify anything is refused: both or
// neither of jwks_url and a key, an unknown algorithm, none, a short HS
// secret, a key of another family, a plain http URL.
func TestIssuerCheckRefusesUnusableRegistrations(t *testing.T) {
	ks := signers(t)
	for _, tc := range []struct {
		name string
		iss  Issuer
	}{
		{"both", Issuer{JWKSURL: "https://idp.test/jwks", Alg: "ES256", Key: ks["ES256"].registered}},
		{"neither", Issuer{Issuer: "https://idp.test"}},
		{"alg none", Issuer{Alg: "none", Key: strings.Repeat("k", 40)}},
		{"unknown alg", Issuer{Alg: "XS256", Key: strings.Repeat("k", 40)}},
		{"short secret", Issuer{Alg: "HS256", Key: "short"}},
		{"an ES key for RS", Issuer{Alg: "RS256", Key: ks["ES256"].registered}},
		{"an RS key for EdDSA", Issuer{Alg: "EdDSA", Key: ks["RS256"].registered}},
		{"http", Issuer{JWKSURL: "http://idp.test/jwks"}},
		{"relative", Issuer{JWKSURL: "/jwks"}},
		{"control character", Issuer{Issuer: "a\nb", JWKSURL: "https://idp.test/jwks"}},
	} {
		if err := tc.iss.Check(false); !errors.Is(err, ErrInvalidIssuer) {
			t.Errorf("%s: %v, want invalid issuer", tc.name, err)
		}
	}
	if err := (&Issuer{JWKSURL: "http://idp.test/jwks"}).Check(true); err != nil {
		t.Errorf("http with --jwks-allow-http: %v", err)
	}
	if got := (Issuer{Alg: "HS256", Key: ks["HS256"].registered}).Public().Key; got != "" {
		t.Errorf("an HS issuer's answer shows its secret: %q", got)
	}
}
