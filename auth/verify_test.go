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
		issuers: []Issuer{{Name: "idp", Issuer: "https://idp.test", Audience: "edgehub", Alg: alg, Key: key, Version: 1, Actions: DefaultActions()}},
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
		if err := (&Issuer{Name: "idp", Alg: alg, Key: s.registered, Actions: DefaultActions()}).Check(false); err != nil {
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

// A registration that could not verify anything, or whose policy is
// not one of the contract's, is refused: both or neither of jwks_url and
// a key, an unknown algorithm, none, a short HS secret, a key of another
// family, a plain http URL; a max_ttl that is no duration of 0s or more;
// actions other than both or subscribe alone. Each case is a good
// registration with one thing wrong, refused for that thing.
func TestIssuerCheckRefusesUnusableRegistrations(t *testing.T) {
	ks := signers(t)
	good := func(change func(*Issuer)) Issuer {
		iss := Issuer{Name: "idp", JWKSURL: "https://idp.test/jwks", Actions: DefaultActions()}
		change(&iss)
		return iss
	}
	for _, tc := range []struct {
		name, says string
		iss        Issuer
	}{
		{"both", "not both", good(func(i *Issuer) { i.Alg, i.Key = "ES256", ks["ES256"].registered })},
		{"neither", "give jwks_url", good(func(i *Issuer) { i.JWKSURL = "" })},
		{"alg none", "alg", good(func(i *Issuer) { i.JWKSURL, i.Alg, i.Key = "", "none", strings.Repeat("k", 40) })},
		{"unknown alg", "alg", good(func(i *Issuer) { i.JWKSURL, i.Alg, i.Key = "", "XS256", strings.Repeat("k", 40) })},
		{"short secret", "at least 32 bytes", good(func(i *Issuer) { i.JWKSURL, i.Alg, i.Key = "", "HS256", "short" })},
		{"an ES key for RS", "PEM", good(func(i *Issuer) { i.JWKSURL, i.Alg, i.Key = "", "RS256", ks["ES256"].registered })},
		{"an RS key for EdDSA", "PEM", good(func(i *Issuer) { i.JWKSURL, i.Alg, i.Key = "", "EdDSA", ks["RS256"].registered })},
		{"http", "https", good(func(i *Issuer) { i.JWKSURL = "http://idp.test/jwks" })},
		{"relative", "https", good(func(i *Issuer) { i.JWKSURL = "/jwks" })},
		{"control character", "printable", good(func(i *Issuer) { i.Issuer = "a\nb" })},
		{"max_ttl no duration", "max_ttl", good(func(i *Issuer) { i.MaxTTL = "a day" })},
		{"max_ttl without unit", "max_ttl", good(func(i *Issuer) { i.MaxTTL = "3600" })},
		{"max_ttl negative", "max_ttl", good(func(i *Issuer) { i.MaxTTL = "-1h" })},
		{"max_ttl too long", "max_ttl", good(func(i *Issuer) { i.MaxTTL = strings.Repeat("0", 70) + "1h" })},
		{"no actions", "actions", good(func(i *Issuer) { i.Actions = nil })},
		{"empty actions", "actions", good(func(i *Issuer) { i.Actions = []string{} })},
		{"publish alone", "actions", good(func(i *Issuer) { i.Actions = []string{"publish"} })},
		{"an unknown action", "actions", good(func(i *Issuer) { i.Actions = []string{"admin"} })},
		{"subscribe twice", "actions", good(func(i *Issuer) { i.Actions = []string{"subscribe", "subscribe"} })},
		{"a third action", "actions", good(func(i *Issuer) { i.Actions = []string{"publish", "subscribe", "admin"} })},
	} {
		if err := tc.iss.Check(false); !errors.Is(err, ErrInvalidIssuer) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want invalid issuer saying %q", tc.name, err, tc.says)
		}
	}
	for _, ok := range []Issuer{
		good(func(i *Issuer) { i.JWKSURL = "http://idp.test/jwks" }),
		good(func(i *Issuer) { i.MaxTTL, i.ExpOptional, i.Actions = "0s", true, SubscribeOnly() }),
		good(func(i *Issuer) { i.MaxTTL = "1h30m" }),
	} {
		if err := ok.Check(true); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	if got := (Issuer{Alg: "HS256", Key: ks["HS256"].registered}).Public().Key; got != "" {
		t.Errorf("an HS issuer's answer shows its secret: %q", got)
	}
}

// An issuer's policy (invariants 1-3): require_exp false accepts a token
// without exp, whose expiry is zero; max_ttl 0s takes an exp in 2100; a
// max_ttl below the server's cap caps lower, one above it higher, none
// the server's; subscribe-only tokens grant no publish from any claim.
// The tenant's own tokens keep their rules whatever the issuers say.
func TestIssuerPolicies(t *testing.T) {
	secret := "the application's secret, of 32 bytes or more"
	app := signer{jwt.SigningMethodHS256, []byte(secret), secret}
	own := signer{jwt.SigningMethodHS256, []byte(tokenTenant.SigningSecret), ""}
	year2100 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	at := func(d time.Duration) int64 { return tokenNow.Add(d).Unix() }
	everyPublish := jwt.MapClaims{"publish": []string{"*"}, "mercure": map[string]any{"publish": []string{"*"}, "subscribe": []string{"*"}},
		"authorization_details": []any{map[string]any{"type": mercureDetailType, "actions": []string{"publish", "subscribe"},
			"topics": []any{map[string]any{"match": "*"}}}}}
	for _, tc := range []struct {
		name    string
		policy  func(*Issuer)
		claims  jwt.MapClaims
		want    Reason // 0: accepted
		expires time.Time
		publish bool
	}{
		{"require_exp false, no exp", func(i *Issuer) { i.ExpOptional = true }, jwt.MapClaims{"exp": nil}, 0, time.Time{}, true},
		{"require_exp false, an exp", func(i *Issuer) { i.ExpOptional = true }, nil, 0, time.Unix(at(time.Hour), 0), true},
		{"require_exp false, expired", func(i *Issuer) { i.ExpOptional = true }, jwt.MapClaims{"exp": at(-time.Hour)}, Expired, time.Time{}, false},
		{"require_exp by default, no exp", func(*Issuer) {}, jwt.MapClaims{"exp": nil}, NoExp, time.Time{}, false},
		{"max_ttl 0s, exp in 2100", func(i *Issuer) { i.MaxTTL = "0s" }, jwt.MapClaims{"exp": year2100}, 0, time.Unix(year2100, 0), true},
		{"the server's cap, exp in 2100", func(*Issuer) {}, jwt.MapClaims{"exp": year2100}, TooLong, time.Time{}, false},
		{"the server's cap, 23h", func(*Issuer) {}, jwt.MapClaims{"exp": at(23 * time.Hour)}, 0, time.Unix(at(23*time.Hour), 0), true},
		{"max_ttl 1h under the server's 24h, 2h", func(i *Issuer) { i.MaxTTL = "1h" }, jwt.MapClaims{"exp": at(2 * time.Hour)}, TooLong, time.Time{}, false},
		{"max_ttl 1h, 59m", func(i *Issuer) { i.MaxTTL = "1h" }, jwt.MapClaims{"exp": at(59 * time.Minute)}, 0, time.Unix(at(59*time.Minute), 0), true},
		{"max_ttl 720h over the server's 24h, 48h", func(i *Issuer) { i.MaxTTL = "720h" }, jwt.MapClaims{"exp": at(48 * time.Hour)}, 0, time.Unix(at(48*time.Hour), 0), true},
		{"subscribe only", func(i *Issuer) { i.Actions = SubscribeOnly() }, everyPublish, 0, time.Unix(at(time.Hour), 0), false},
		{"both actions", func(*Issuer) {}, everyPublish, 0, time.Unix(at(time.Hour), 0), true},
	} {
		iss := Issuer{Name: "app", Issuer: "app", Alg: "HS256", Key: secret, Version: 1, Actions: DefaultActions()}
		tc.policy(&iss)
		claims := jwt.MapClaims{"iss": "app", "aud": nil, "exp": at(time.Hour), "publish": []string{"orders"}}
		for k, v := range tc.claims {
			claims[k] = v
		}
		v := Verifier{MaxTTL: 24 * time.Hour}
		tok, err := v.Verify(context.Background(), func(context.Context, string) (Tenant, error) { return tokenTenant, nil },
			&memStore{issuers: []Issuer{iss}}, app.issue(t, claims), "acme", tokenNow)
		switch {
		case ReasonOf(err) != tc.want || (tc.want == 0) != (err == nil):
			t.Errorf("%s: %v, want reason %d", tc.name, err, tc.want)
		case err != nil:
		case !tok.Expires.Equal(tc.expires):
			t.Errorf("%s: expires %v, want %v", tc.name, tok.Expires, tc.expires)
		case tok.Grant(Publish).Match("orders") != tc.publish || !tok.Grant(Subscribe).Match("orders"):
			t.Errorf("%s: publish %v subscribe %v, want publish %v", tc.name, tok.Grant(Publish).Match("orders"), tok.Grant(Subscribe).Match("orders"), tc.publish)
		}
	}
	// The tenant's own secret: exp required and the server's cap, even
	// beside an issuer without iss that takes anything.
	lenient := Issuer{Name: "any", Alg: "HS256", Key: secret, MaxTTL: "0s", ExpOptional: true, Version: 1, Actions: DefaultActions()}
	v := Verifier{MaxTTL: 24 * time.Hour}
	for claims, want := range map[string]Reason{
		`{"tenant":"acme","subscribe":["*"]}`:                        NoExp,
		`{"tenant":"acme","subscribe":["*"],"exp":4102444800}`:       TooLong,
		`{"tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `}`: 0,
	} {
		_, err := v.Verify(context.Background(), func(context.Context, string) (Tenant, error) { return tokenTenant, nil },
			&memStore{issuers: []Issuer{lenient}}, own.issueRaw(t, claims), "acme", tokenNow)
		if ReasonOf(err) != want || (want == 0) != (err == nil) {
			t.Errorf("the tenant's own token %s: %v, want reason %d", claims, err, want)
		}
	}
}

// issueRaw signs claims, a JSON object written as is, with s's HS key.
func (s signer) issueRaw(t *testing.T, claims string) string {
	t.Helper()
	return signClaims(string(s.private.([]byte)), claims)
}
