package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// tokenNow is the clock of the token tests; tokenExp an exp an hour on.
var (
	tokenNow    = time.Unix(1700000000, 0)
	tokenExp    = `1700003600`
	tokenTenant = Tenant{Name: "acme", SigningSecret: "the signing secret of acme"}
)

// signClaims makes an HS256 token of claims, a JSON object written as
// is, so that a test can write what no JSON encoder would (a date as a
// string, a claim's name in capitals, a claim twice).
func signClaims(secret, claims string) string {
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(unsigned))
	return unsigned + "." + enc.EncodeToString(m.Sum(nil))
}

// check is Token for a subscription to acme/orders at tokenNow, with
// audience as the server's.
func check(raw, audience string) error {
	lookup := func(_ context.Context, name string) (Tenant, error) {
		if name != tokenTenant.Name {
			return Tenant{}, errors.New("unknown tenant")
		}
		return tokenTenant, nil
	}
	v := Verifier{MaxTTL: 24 * time.Hour, Audience: audience}
	c, err := v.Verify(context.Background(), lookup, &memStore{}, raw, "acme", tokenNow)
	if err == nil && !c.Grant(Subscribe).Match("orders") {
		err = ErrForbidden
	}
	return err
}

// memStore is a tenant's issuers and revoked token ids, in memory.
type memStore struct {
	issuers []Issuer
	revoked map[string]bool
}

func (m *memStore) Issuers(context.Context, string) ([]Issuer, error) { return m.issuers, nil }

func (m *memStore) Revoked(_ context.Context, _, jti string) (bool, error) {
	return m.revoked[jti], nil
}

// A token's dates are JSON numbers, its claims are spelled as the
// contract spells them, and its aud, when it has one, holds the server's
// audience (by default the tenant's name); anything else is 401, not
// read as the library would read it.
func TestTokenClaimsAreStrict(t *testing.T) {
	const grant = `"tenant":"acme","subscribe":["*"]`
	for _, c := range []struct {
		name, claims, audience string
		ok                     bool
	}{
		{"numbers", `{` + grant + `,"exp":` + tokenExp + `,"nbf":1699990000}`, "", true},
		{"exp as a string", `{` + grant + `,"exp":"` + tokenExp + `"}`, "", false},
		{"nbf as a string", `{` + grant + `,"exp":` + tokenExp + `,"nbf":"1699990000"}`, "", false},
		{"exp a number, then a string", `{` + grant + `,"exp":` + tokenExp + `,"exp":"` + tokenExp + `"}`, "", false},
		{"EXP beside exp", `{` + grant + `,"exp":` + tokenExp + `,"EXP":"` + tokenExp + `"}`, "", false},
		{"Tenant for tenant", `{"Tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `}`, "", false},
		{"no aud", `{` + grant + `,"exp":` + tokenExp + `}`, "", true},
		{"aud the tenant", `{` + grant + `,"exp":` + tokenExp + `,"aud":"acme"}`, "", true},
		{"aud a list holding the tenant", `{` + grant + `,"exp":` + tokenExp + `,"aud":["billing","acme"]}`, "", true},
		{"aud another tenant", `{` + grant + `,"exp":` + tokenExp + `,"aud":"beta"}`, "", false},
		{"aud empty", `{` + grant + `,"exp":` + tokenExp + `,"aud":[]}`, "", false},
		{"aud null", `{` + grant + `,"exp":` + tokenExp + `,"aud":null}`, "", false},
		{"aud the configured audience", `{` + grant + `,"exp":` + tokenExp + `,"aud":"hub.example"}`, "hub.example", true},
		{"aud the tenant, not the configured audience", `{` + grant + `,"exp":` + tokenExp + `,"aud":"acme"}`, "hub.example", false},
		{"no aud, an audience configured", `{` + grant + `,"exp":` + tokenExp + `}`, "hub.example", true},
	} {
		err := check(signClaims(tokenTenant.SigningSecret, c.claims), c.audience)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case !c.ok && !errors.Is(err, ErrUnauthorized):
			t.Errorf("%s: %v, want unauthorized", c.name, err)
		}
	}
}

// Whatever a token's claims hold, a token accepted has a tenant claim
// naming acme, dates that are JSON numbers, claim names as the contract
// spells them, and no aud or one that holds the tenant's name.
func FuzzTokenClaims(f *testing.F) {
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `}`)
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":"` + tokenExp + `"}`)
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `,"nbf":"1"}`)
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `,"EXP":"9999999999"}`)
	f.Add(`{"TENANT":"acme","subscribe":["*"],"exp":` + tokenExp + `}`)
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `,"aud":["x","acme"]}`)
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":` + tokenExp + `,"aud":"beta"}`)
	f.Add(`{"tenant":"acme","subscribe":["*"],"exp":1.7000036e9,"aud":null}`)
	f.Fuzz(func(t *testing.T, claims string) {
		if check(signClaims(tokenTenant.SigningSecret, claims), "") != nil {
			return
		}
		dec := json.NewDecoder(strings.NewReader(claims))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("accepted claims that are no JSON object: %q", claims)
		}
		if m["tenant"] != "acme" {
			t.Fatalf("accepted without tenant acme: %q", claims)
		}
		for k, v := range m {
			if lower := strings.ToLower(k); lower != k && slices.Contains(claimNames, lower) {
				t.Fatalf("accepted the claim %q for %q: %q", k, lower, claims)
			}
			if _, number := v.(json.Number); (k == "exp" || k == "nbf") && !number {
				t.Fatalf("accepted %s %v, no JSON number: %q", k, v, claims)
			}
		}
		if aud, ok := m["aud"]; ok && aud != "acme" {
			list, _ := aud.([]any)
			if !slices.Contains(list, any("acme")) {
				t.Fatalf("accepted aud %v, which does not hold acme: %q", aud, claims)
			}
		}
	})
}
