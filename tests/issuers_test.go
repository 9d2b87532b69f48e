package tests

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgehub/edgehub/pgtest"
)

// ended waits for s to end, skipping the frames it still carries.
func (s *stream) ended(t *testing.T) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-s.frames:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end")
		}
	}
}

// jtiOf reads the jti claim of a token, unverified.
func jtiOf(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct{ Jti string }
	if err != nil || json.Unmarshal(b, &c) != nil || c.Jti == "" {
		t.Fatalf("no jti in %s", b)
	}
	return c.Jti
}

// A revoked token is 401 from the answer on, and the streams it opened,
// a topic's and a tenant's, end; another token of the tenant is untouched.
func TestRevokedTokenEndsItsStreams(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	tok := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	other := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	topic := p.watch(t, "orders", "", auth(tok))
	topic.hello(t)
	tenant := p.watchTenant(t, "pattern=*", auth(tok))
	tenant.next(t)
	kept := p.watch(t, "orders", "", auth(other))
	kept.hello(t)
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/acme/tokens/"+jtiOf(t, tok), "k-123", ""); st != 204 {
		t.Fatalf("revoke: %d %s", st, b)
	}
	topic.ended(t)
	tenant.ended(t)
	if st, _, b := do(t, "POST", p.topicURL("orders", "notify"), tok, `1`); st != 401 {
		t.Fatalf("a revoked token publishes: %d %s", st, b)
	}
	if st, _, b := do(t, "POST", p.topicURL("orders", "notify"), other, `1`); st != 201 {
		t.Fatalf("another token: %d %s", st, b)
	}
	if e := kept.event(t); e.Seq != 1 {
		t.Fatalf("the other token's stream: %+v", e)
	}
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/acme/tokens/"+strings.Repeat("j", 257), "k-123", ""); st != 400 || !strings.Contains(string(b), "invalid_name") {
		t.Fatalf("a jti of 257 bytes: %d %s", st, b)
	}
}

// A registered issuer's tokens are verified with its key only, its iss
// and aud checked; an HS secret is never shown; bad registrations are
// 400 invalid_issuer and store nothing; a removed issuer's tokens are
// 401 and its streams end.
func TestIssuerTokens(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	issuers := p.base + "/v1/admin/tenants/acme/issuers"
	body, _ := json.Marshal(map[string]string{"issuer": "https://idp.test", "audience": "edgehub", "alg": "ES256", "key": pub})
	if st, _, b := do(t, "PUT", issuers+"/idp", "k-123", string(body)); st != 201 || !strings.Contains(string(b), `"alg":"ES256"`) {
		t.Fatalf("register: %d %s", st, b)
	}
	secret := strings.Repeat("s", 40)
	if st, _, b := do(t, "PUT", issuers+"/app", "k-123", `{"issuer":"app","alg":"HS384","key":"`+secret+`"}`); st != 201 || strings.Contains(string(b), secret) {
		t.Fatalf("register an HS issuer: %d %s", st, b)
	}
	for name, bad := range map[string]string{
		"not JSON":        `{`,
		"both sources":    `{"jwks_url":"https://x.test/jwks","alg":"ES256","key":"k"}`,
		"neither":         `{"issuer":"x"}`,
		"alg none":        `{"alg":"none","key":"` + secret + `"}`,
		"short secret":    `{"alg":"HS256","key":"short"}`,
		"plain http":      `{"jwks_url":"http://x.test/jwks"}`,
		"unknown field":   `{"jwks_uri":"https://x.test/jwks"}`,
		"a key not a PEM": `{"alg":"RS256","key":"` + secret + `"}`,
	} {
		if st, _, b := do(t, "PUT", issuers+"/bad", "k-123", bad); st != 400 || !strings.Contains(string(b), "invalid_issuer") {
			t.Fatalf("%s: %d %s", name, st, b)
		}
	}
	st, _, b := do(t, "GET", issuers, "k-123", "")
	var list struct{ Issuers []struct{ Name, Key string } }
	if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Issuers) != 2 || list.Issuers[0].Name != "app" || list.Issuers[0].Key != "" {
		t.Fatalf("list: %d %s", st, b)
	}
	sign := func(m jwt.SigningMethod, k any, claims jwt.MapClaims) string {
		t.Helper()
		if _, ok := claims["exp"]; !ok {
			claims["exp"] = time.Now().Add(time.Hour).Unix()
		}
		s, err := jwt.NewWithClaims(m, claims).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := sign(jwt.SigningMethodES256, key, jwt.MapClaims{"iss": "https://idp.test", "aud": "edgehub", "publish": []string{"orders"}, "subscribe": []string{"*"}})
	if st, _, b := do(t, "POST", p.topicURL("orders", "notify"), good, `1`); st != 201 {
		t.Fatalf("an issuer's token: %d %s", st, b)
	}
	mercure := sign(jwt.SigningMethodHS384, []byte(secret), jwt.MapClaims{"iss": "app", "mercure": map[string]any{"publish": []string{"https://example.com/books/{id}"}}})
	if st, _, b := do(t, "POST", p.topicURL(url.PathEscape("https://example.com/books/1"), "notify"), mercure, `1`); st != 201 {
		t.Fatalf("a Mercure claim's template: %d %s", st, b)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, bad := range map[string]string{
		"wrong aud":    sign(jwt.SigningMethodES256, key, jwt.MapClaims{"iss": "https://idp.test", "aud": "other", "publish": []string{"*"}}),
		"no aud":       sign(jwt.SigningMethodES256, key, jwt.MapClaims{"iss": "https://idp.test", "publish": []string{"*"}}),
		"wrong iss":    sign(jwt.SigningMethodES256, key, jwt.MapClaims{"iss": "https://evil.test", "aud": "edgehub", "publish": []string{"*"}}),
		"another key":  sign(jwt.SigningMethodES256, other, jwt.MapClaims{"iss": "https://idp.test", "aud": "edgehub", "publish": []string{"*"}}),
		"expired":      sign(jwt.SigningMethodES256, key, jwt.MapClaims{"iss": "https://idp.test", "aud": "edgehub", "publish": []string{"*"}, "exp": time.Now().Add(-time.Hour).Unix()}),
		"not yet":      sign(jwt.SigningMethodES256, key, jwt.MapClaims{"iss": "https://idp.test", "aud": "edgehub", "publish": []string{"*"}, "nbf": time.Now().Add(time.Hour).Unix()}),
		"HS as the ES": sign(jwt.SigningMethodHS256, []byte(pub), jwt.MapClaims{"iss": "https://idp.test", "aud": "edgehub", "publish": []string{"*"}}),
		"alg none":     sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"iss": "app", "publish": []string{"*"}}),
		"bad detail":   sign(jwt.SigningMethodHS384, []byte(secret), jwt.MapClaims{"iss": "app", "publish": []string{"*"}, "authorization_details": []any{map[string]any{"type": "https://mercure.rocks/authorization-detail", "actions": []string{"publish"}, "topics": []any{map[string]any{"match": "x", "match_type": "regex"}}}}}),
	} {
		if st, _, b := do(t, "POST", p.topicURL("orders", "notify"), bad, `1`); st != 401 {
			t.Fatalf("%s: %d %s", name, st, b)
		}
	}
	s := p.watch(t, "orders", "", map[string]string{"Authorization": "Bearer " + good})
	s.hello(t)
	if st, _, b := do(t, "DELETE", issuers+"/idp", "k-123", ""); st != 204 {
		t.Fatalf("remove: %d %s", st, b)
	}
	s.ended(t)
	if st, _, b := do(t, "POST", p.topicURL("orders", "notify"), good, `1`); st != 401 {
		t.Fatalf("a removed issuer's token: %d %s", st, b)
	}
	if st, _, b := do(t, "DELETE", issuers+"/idp", "k-123", ""); st != 404 || !strings.Contains(string(b), "unknown_issuer") {
		t.Fatalf("remove again: %d %s", st, b)
	}
	if st, _, b := do(t, "GET", issuers+"/idp", "k-123", ""); st != 404 || !strings.Contains(string(b), "unknown_issuer") {
		t.Fatalf("get a removed one: %d %s", st, b)
	}
}

// A token revoked, or an issuer removed, through one process of three
// sharing a PostgreSQL database ends the streams it opened on the other
// two (a topic's and a tenant's), and the token is 401 on each from
// then on. How long each end took is logged: the contract's bound is 1 s.
func TestRevocationEndsStreamsOnEveryProcess(t *testing.T) {
	url := pgtest.Database(t)
	const key = "k-revoke-everywhere-0123456789abcdef0"
	var ps []*proc
	for range 3 {
		ps = append(ps, startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--store", url))
	}
	a, b, c := ps[0], ps[1], ps[2]
	if st, _, body := do(t, "PUT", a.base+"/v1/admin/tenants/acme", key, ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, body)
	}
	secret := strings.Repeat("s", 40)
	if st, _, body := do(t, "PUT", a.base+"/v1/admin/tenants/acme/issuers/app", key, `{"issuer":"app","alg":"HS256","key":"`+secret+`"}`); st != 201 {
		t.Fatalf("register an issuer: %d %s", st, body)
	}
	issued, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "app", "subscribe": []string{"*"},
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	minted := a.mintAcme(t, key, `"*"`, `"*"`)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	for _, tc := range []struct {
		what, token, path string
		by                *proc
	}{
		{"a revoked token", minted, "/v1/admin/tenants/acme/tokens/" + jtiOf(t, minted), a},
		{"a removed issuer's token", issued, "/v1/admin/tenants/acme/issuers/app", a},
	} {
		var streams []*stream
		for _, p := range []*proc{b, c} {
			s := p.watch(t, "orders", "", bearer(tc.token))
			s.hello(t)
			ts := p.watchTenant(t, "pattern=*", bearer(tc.token))
			ts.hello(t)
			streams = append(streams, s, ts)
		}
		revoked := time.Now()
		if st, _, body := do(t, "DELETE", tc.by.base+tc.path, key, ""); st != 204 {
			t.Fatalf("%s: DELETE %s: %d %s", tc.what, tc.path, st, body)
		}
		var took []time.Duration
		for _, s := range streams {
			s.ended(t)
			took = append(took, time.Since(revoked).Round(time.Millisecond))
		}
		t.Logf("%s: its 4 streams on the other processes ended %v after the answer", tc.what, took)
		for _, p := range ps {
			if st, _, body := do(t, "GET", p.topicURL("orders", "events"), tc.token, ""); st != 401 {
				t.Fatalf("%s on %s: %d %s, want 401", tc.what, p.base, st, body)
			}
		}
	}
}
