package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// failingTransport is a JWKS server that cannot be reached.
type failingTransport struct{}

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("connection refused")
}

// reasonCase is a credential and the reason it must be refused for.
type reasonCase struct {
	name string
	raw  string
	want Reason
}

// Every check a token can fail is told apart: each token of the table
// is refused for its reason and no other, checked against acme (its own
// secret, two static issuers, one whose JWKS cannot be had, one jti
// revoked). The checks after the signature are reached only by a token
// whose signature verified: the same claims under a key that does not
// verify are "bad signature" (invariant 8). And a tenant that does not
// exist (no secret, Nobody) refuses every token of the table exactly as
// a tenant of the same name whose keys verify none of them does
// (invariant 7).
func TestEveryReason(t *testing.T) {
	ks := signers(t)
	es, rs := ks["ES256"], ks["RS256"]
	appSecret := "the application's secret, of 32 bytes or more"
	app := signer{jwt.SigningMethodHS256, []byte(appSecret), appSecret}
	stranger := signer{jwt.SigningMethodHS256, []byte("not the secret of acme"), ""}
	own := signer{jwt.SigningMethodHS256, []byte(tokenTenant.SigningSecret), ""}
	store := &memStore{issuers: []Issuer{
		{Name: "idp", Issuer: "https://idp.test", Audience: "edgehub", Alg: "ES256", Key: es.registered, Version: 1, Actions: DefaultActions()},
		{Name: "app", Issuer: "app", Alg: "HS256", Key: appSecret, MaxTTL: "1h", Version: 1, Actions: DefaultActions()},
		{Name: "down", Issuer: "https://down.test", JWKSURL: "https://down.test/jwks", Version: 1, Actions: DefaultActions()},
	}, revoked: map[string]bool{"j-revoked": true}}
	ownClaims := func(claims jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"tenant": "acme", "iss": nil, "aud": nil}
		for k, v := range claims {
			c[k] = v
		}
		return c
	}
	past, ahead := tokenNow.Add(-time.Hour).Unix(), tokenNow.Add(time.Hour).Unix()
	cases := []reasonCase{
		{"not a JWT", "garbage", Malformed},
		{"claims not JSON", "eyJhbGciOiJIUzI1NiJ9.bm90IGpzb24." + base64.RawURLEncoding.EncodeToString([]byte("sig")), Malformed},
		{"EXP beside exp", signClaims(tokenTenant.SigningSecret, `{"tenant":"acme","subscribe":["*"],"exp":`+tokenExp+`,"EXP":1}`), Malformed},
		{"exp a string", signClaims(tokenTenant.SigningSecret, `{"tenant":"acme","subscribe":["*"],"exp":"`+tokenExp+`"}`), Malformed},
		{"publish not a list", own.issue(t, ownClaims(jwt.MapClaims{"publish": "orders"})), Malformed},
		{"a bad Mercure detail", own.issue(t, ownClaims(jwt.MapClaims{"authorization_details": []any{map[string]any{
			"type": mercureDetailType, "actions": []string{"publish"}, "topics": []any{"no object"}}}})), Malformed},
		{"alg none", signNone(`{"tenant":"acme","exp":` + tokenExp + `}`), BadSignature},
		{"the wrong secret", stranger.issue(t, ownClaims(nil)), BadSignature},
		{"the wrong secret, expired", stranger.issue(t, ownClaims(jwt.MapClaims{"exp": past})), BadSignature},
		{"the wrong secret, no exp", stranger.issue(t, ownClaims(jwt.MapClaims{"exp": nil})), BadSignature},
		{"another ES key", ks["ES384"].issue(t, nil), BadSignature},
		{"another ES key, wrong aud", ks["ES384"].issue(t, jwt.MapClaims{"aud": "other"}), BadSignature},
		{"an iss nobody registered", es.issue(t, jwt.MapClaims{"iss": "https://nobody.test"}), UnknownIssuer},
		{"no iss and no tenant", rs.issue(t, jwt.MapClaims{"iss": nil}), UnknownIssuer},
		{"an issuer whose keys cannot be had", rs.issue(t, jwt.MapClaims{"iss": "https://down.test"}), KeysUnavailable},
		{"expired", own.issue(t, ownClaims(jwt.MapClaims{"exp": past})), Expired},
		{"an issuer's, expired", es.issue(t, jwt.MapClaims{"exp": past}), Expired},
		{"not yet valid", own.issue(t, ownClaims(jwt.MapClaims{"nbf": ahead})), NotYetValid},
		{"no exp", own.issue(t, ownClaims(jwt.MapClaims{"exp": nil})), NoExp},
		{"an issuer's, no exp", es.issue(t, jwt.MapClaims{"exp": nil}), NoExp},
		{"over the server's cap", own.issue(t, ownClaims(jwt.MapClaims{"exp": tokenNow.Add(25 * time.Hour).Unix()})), TooLong},
		{"over the issuer's cap", app.issue(t, jwt.MapClaims{"iss": "app", "exp": tokenNow.Add(2 * time.Hour).Unix()}), TooLong},
		{"revoked", own.issue(t, ownClaims(jwt.MapClaims{"jti": "j-revoked"})), Revoked},
		{"an issuer's, revoked", es.issue(t, jwt.MapClaims{"jti": "j-revoked"}), Revoked},
		{"aud of another", own.issue(t, ownClaims(jwt.MapClaims{"aud": "beta"})), Audience},
		{"an issuer's, no aud", es.issue(t, jwt.MapClaims{"aud": nil}), Audience},
		{"an issuer's, wrong aud", es.issue(t, jwt.MapClaims{"aud": "other"}), Audience},
	}
	acme := func(_ context.Context, name string) (Tenant, error) {
		if name != "acme" {
			return Tenant{}, errors.New("unknown tenant")
		}
		return tokenTenant, nil
	}
	otherKeys := func(_ context.Context, name string) (Tenant, error) {
		return Tenant{Name: name, SigningSecret: "a secret that verifies none of them"}, nil
	}
	missing := func(context.Context, string) (Tenant, error) { return Tenant{}, errors.New("unknown tenant") }
	v := Verifier{MaxTTL: 24 * time.Hour, JWKS: NewJWKS(failingTransport{}, false)}
	for _, tc := range cases {
		_, err := v.Verify(context.Background(), acme, store, tc.raw, "acme", tokenNow)
		if got := ReasonOf(err); got != tc.want || !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: reason %d (%v), want %d", tc.name, got, err, tc.want)
		}
		_, gone := v.Verify(context.Background(), missing, Nobody, tc.raw, "acme", tokenNow)
		_, keyless := v.Verify(context.Background(), otherKeys, Nobody, tc.raw, "acme", tokenNow)
		if ReasonOf(gone) != ReasonOf(keyless) || errors.Is(gone, ErrForbidden) != errors.Is(keyless, ErrForbidden) || gone == nil {
			t.Errorf("%s: a tenant that does not exist: %v; one whose keys do not verify it: %v", tc.name, gone, keyless)
		}
	}
	// Another tenant's good token: acme tells it apart (403); checked as
	// a tenant that does not exist is (no secret looked up), it is a bad
	// signature, as for a tenant whose keys do not verify it.
	globex := signer{jwt.SigningMethodHS256, []byte("the signing secret of globex"), ""}
	other := globex.issue(t, jwt.MapClaims{"tenant": "globex", "iss": nil, "aud": nil})
	withGlobex := func(ctx context.Context, name string) (Tenant, error) {
		if name == "globex" {
			return Tenant{Name: "globex", SigningSecret: "the signing secret of globex"}, nil
		}
		return acme(ctx, name)
	}
	if _, err := v.Verify(context.Background(), withGlobex, store, other, "acme", tokenNow); !errors.Is(err, ErrForbidden) {
		t.Errorf("another tenant's good token: %v, want forbidden", err)
	}
	_, gone := v.Verify(context.Background(), missing, Nobody, other, "acme", tokenNow)
	_, keyless := v.Verify(context.Background(), otherKeys, Nobody, other, "acme", tokenNow)
	if ReasonOf(gone) != BadSignature || ReasonOf(keyless) != BadSignature {
		t.Errorf("another tenant's good token, checked as a tenant that does not exist: %v; by keys that do not verify it: %v", gone, keyless)
	}
}

// signNone is a token of claims with alg none and no signature.
func signNone(claims string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims)) + "."
}

// Every way a webhook signature fails is told apart, the signature
// before its timestamp, and an empty secret (a tenant that does not
// exist) verifies nothing, not even a signature made with an empty key.
func TestEveryWebhookReason(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the webhook key of acme, 32 bytes"))
	key, _ := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	now := time.Unix(1700000000, 0)
	body := []byte(`{"n":1}`)
	headers := func(id, ts string, key []byte) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(Sign(key, id, ts, body)))
		return h
	}
	fresh, stale := strconv.FormatInt(now.Unix(), 10), strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10)
	noID := headers("msg_1", fresh, key)
	noID.Del("webhook-id")
	for _, tc := range []struct {
		name   string
		secret string
		h      http.Header
		want   Reason
	}{
		{"no webhook-id", secret, noID, WebhookMalformed},
		{"a timestamp that is no number", secret, headers("msg_1", "yesterday", key), WebhookMalformed},
		{"another key", secret, headers("msg_1", fresh, []byte("another key")), WebhookSignature},
		{"another key, stale", secret, headers("msg_1", stale, []byte("another key")), WebhookSignature},
		{"stale", secret, headers("msg_1", stale, key), WebhookTimestamp},
		{"no secret", "", headers("msg_1", fresh, nil), WebhookSignature},
		{"no secret, stale", "", headers("msg_1", stale, nil), WebhookSignature},
	} {
		if got := ReasonOf(Webhook(tc.secret, tc.h, body, now)); got != tc.want {
			t.Errorf("%s: reason %d, want %d", tc.name, got, tc.want)
		}
	}
	if err := Webhook(secret, headers("msg_1", fresh, key), body, now); err != nil {
		t.Errorf("a good signature: %v", err)
	}
}
