package tests

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// policyKey is the admin key of these tests' servers.
const policyKey = "k-policy-0123456789abcdef0123456789"

// appSecret is the HS256 key of the issuers these tests register, as a
// Mercure application's publisher and subscriber keys are.
var appSecret = strings.Repeat("m", 40)

// answer is one HTTP answer, as far as these tests compare them.
type answer struct {
	status    int
	challenge string // WWW-Authenticate
	body      string
}

// request sends one request with the headers given (a form's content type
// when the body is one) and reads the whole answer.
func request(t *testing.T, method, url string, header map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)}
}

// message is the message of an error answer.
func (a answer) message(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("no error answer: %d %s", a.status, a.body)
	}
	return e.Error.Message
}

// policyServer starts a server with credentials whose Durable Streams
// and tenant-less tokens belong to acme, creates acme and returns its
// signing secret.
func policyServer(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + policyKey}, t.TempDir(), "127.0.0.1:0",
		append([]string{"--streams-tenant", "acme"}, args...)...)
	return p, p.createTenant(t, "acme")
}

// createTenant creates a tenant through the admin API and returns its
// signing secret.
func (p *proc) createTenant(t *testing.T, name string) string {
	t.Helper()
	st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/"+name, policyKey, "")
	var ten struct {
		SigningSecret string `json:"signing_secret"`
	}
	if st != 201 || json.Unmarshal(b, &ten) != nil {
		t.Fatalf("create tenant %s: %d %s", name, st, b)
	}
	return ten.SigningSecret
}

// putIssuer registers an issuer of acme and returns the answer.
func (p *proc) putIssuer(t *testing.T, name, body string) answer {
	t.Helper()
	return request(t, "PUT", p.base+"/v1/admin/tenants/acme/issuers/"+name, map[string]string{"Authorization": "Bearer " + policyKey}, body)
}

// hs256 signs claims with secret; a claim whose value is nil is left out.
func hs256(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	for k, v := range claims {
		if v == nil {
			delete(claims, k)
		}
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bearer is the Authorization header of a token ("": none).
func bearer(tok string) map[string]string {
	if tok == "" {
		return map[string]string{}
	}
	return map[string]string{"Authorization": "Bearer " + tok}
}

// Every 401 says which check failed, with the same message on a native
// route, on a Mercure publish (in the JSON and as the challenge's
// error_description, with error="invalid_token" unless no token was
// presented) and on a Durable Streams read; and a webhook signature's
// three checks on a native publish, its signature before its timestamp.
func TestEvery401SaysWhichCheckFailedOnEveryProtocol(t *testing.T) {
	p, secret := policyServer(t)
	if a := p.putIssuer(t, "app", `{"issuer":"app","alg":"HS256","key":"`+appSecret+`","max_ttl":"1h"}`); a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	now := time.Now()
	own := func(claims jwt.MapClaims) string {
		c := jwt.MapClaims{"tenant": "acme", "publish": []string{"*"}, "subscribe": []string{"*"}, "exp": now.Add(time.Hour).Unix()}
		for k, v := range claims {
			c[k] = v
		}
		return hs256(t, secret, c)
	}
	revoked := p.mintAcme(t, policyKey, `"*"`, `"*"`)
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/acme/tokens/"+jtiOf(t, revoked), policyKey, ""); st != 204 {
		t.Fatalf("revoke: %d %s", st, b)
	}
	for _, tc := range []struct{ name, token, says string }{
		{"no token", "", "missing credentials"},
		{"not a JWT", "garbage", "malformed token"},
		{"exp a string", signToken(secret, `{"tenant":"acme","publish":["*"],"exp":"`+strconv.FormatInt(now.Add(time.Hour).Unix(), 10)+`"}`), "malformed token"},
		{"a wrong secret", hs256(t, "not the secret of acme", jwt.MapClaims{"tenant": "acme", "exp": now.Add(time.Hour).Unix()}), "bad signature"},
		{"an iss nobody registered", hs256(t, appSecret, jwt.MapClaims{"iss": "nobody", "exp": now.Add(time.Hour).Unix()}), "unknown issuer"},
		{"expired", own(jwt.MapClaims{"exp": now.Add(-time.Hour).Unix()}), "expired token"},
		{"no exp", own(jwt.MapClaims{"exp": nil}), "no exp"},
		{"over the server's cap", own(jwt.MapClaims{"exp": now.Add(48 * time.Hour).Unix()}), "lifetime over the cap"},
		{"over the issuer's cap", hs256(t, appSecret, jwt.MapClaims{"iss": "app", "exp": now.Add(2 * time.Hour).Unix()}), "lifetime over the cap"},
		{"revoked", revoked, "revoked"},
		{"aud of another", own(jwt.MapClaims{"aud": "beta"}), "audience"},
	} {
		native := request(t, "GET", p.topicURL("orders", "events"), bearer(tc.token), "")
		mercure := request(t, "POST", p.base+"/v1/tenants/acme/.well-known/mercure",
			withHeader(bearer(tc.token), "Content-Type", "application/x-www-form-urlencoded"), "topic=orders&data=x")
		durable := request(t, "GET", p.base+"/v1/stream/orders?offset=-1", bearer(tc.token), "")
		for proto, a := range map[string]answer{"native": native, "Mercure": mercure, "Durable Streams": durable} {
			if a.status != 401 || !strings.HasPrefix(a.message(t), tc.says) || !strings.Contains(a.body, `"code":"unauthorized"`) {
				t.Errorf("%s, %s: %d %s, want 401 saying %q", tc.name, proto, a.status, a.body, tc.says)
			}
		}
		if native.body != mercure.body || native.body != durable.body {
			t.Errorf("%s: the three answers differ: %s, %s, %s", tc.name, native.body, mercure.body, durable.body)
		}
		want := `Bearer realm="mercure", error="invalid_token", error_description="` + native.message(t) + `"`
		if tc.token == "" {
			want = `Bearer realm="mercure", error_description="` + native.message(t) + `"`
		}
		if mercure.challenge != want {
			t.Errorf("%s: Mercure's challenge %q, want %q", tc.name, mercure.challenge, want)
		}
	}
	st, _, b := do(t, "GET", p.base+"/v1/admin/tenants/acme", policyKey, "")
	var ten struct {
		WebhookSecret string `json:"webhook_secret"`
	}
	if st != 200 || json.Unmarshal(b, &ten) != nil {
		t.Fatalf("read acme: %d %s", st, b)
	}
	notify := p.topicURL("orders", "notify")
	noID := signed(t, notify, ten.WebhookSecret, "msg_1", now, `1`)
	noID.Header.Del("webhook-id")
	for _, tc := range []struct {
		name string
		req  *http.Request
		says string
	}{
		{"a webhook without webhook-id", noID, "malformed webhook signature"},
		{"a webhook signed with another secret", signed(t, notify, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another key")), "msg_2", now, `1`), "bad signature: no webhook-signature"},
		{"a webhook signed with another secret, stale", signed(t, notify, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another key")), "msg_3", now.Add(-time.Hour), `1`), "bad signature: no webhook-signature"},
		{"a webhook well signed, stale", signed(t, notify, ten.WebhookSecret, "msg_4", now.Add(-time.Hour), `1`), "timestamp out of range"},
	} {
		st, b := send(t, tc.req)
		if a := (answer{status: st, body: string(b)}); st != 401 || !strings.HasPrefix(a.message(t), tc.says) {
			t.Errorf("%s: %d %s, want 401 saying %q", tc.name, st, b, tc.says)
		}
	}
}

// A tenant that does not exist answers every credential exactly as a
// tenant that exists and whose keys do not verify it does: status, body
// and challenge, on a native read and publish (a webhook's too, its body
// over the limit included), a Mercure publish and subscribe, and a
// Durable Streams read. The contract's one exception: a token another
// tenant's secret verifies is told apart by a tenant that exists (403,
// or the check its claims fail) and is 401 "bad signature" on one that
// does not, as the contract has a missing tenant's routes answer 401.
func TestMissingTenantAnswersAsKeysThatDoNotVerify(t *testing.T) {
	p, secret := policyServer(t, "--max-body", "1024")
	p.createTenant(t, "beta")
	if a := p.putIssuer(t, "app", `{"issuer":"app","alg":"HS256","key":"`+appSecret+`"}`); a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	hour := time.Now().Add(time.Hour).Unix()
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	webhook := map[string]string{"webhook-id": "msg_1", "webhook-timestamp": stamp, "webhook-signature": "v1,bm9wZQ=="}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	tokens := map[string]string{
		"no token":                "",
		"not a JWT":               "garbage",
		"a wrong secret":          hs256(t, "a secret of nobody", jwt.MapClaims{"tenant": "x", "subscribe": []string{"*"}, "exp": hour}),
		"acme's, good":            hs256(t, secret, jwt.MapClaims{"tenant": "acme", "publish": []string{"*"}, "subscribe": []string{"*"}, "exp": hour}),
		"acme's, expired":         hs256(t, secret, jwt.MapClaims{"tenant": "acme", "subscribe": []string{"*"}, "exp": time.Now().Add(-time.Hour).Unix()}),
		"acme's issuer's":         hs256(t, appSecret, jwt.MapClaims{"iss": "app", "subscribe": []string{"*"}, "exp": hour}),
		"acme's issuer's, no exp": hs256(t, appSecret, jwt.MapClaims{"iss": "app", "aud": "elsewhere", "exp": nil}),
	}
	for name, tok := range tokens {
		for _, route := range []struct {
			what, method, path, body string
			header                   map[string]string
		}{
			{"a native read", "GET", "/topics/orders/events", "", bearer(tok)},
			{"a native publish", "POST", "/topics/orders/notify", "1", bearer(tok)},
			{"a Mercure publish", "POST", "/.well-known/mercure", "topic=orders&data=x", withHeader(bearer(tok), "Content-Type", form["Content-Type"])},
			{"a Mercure subscribe", "GET", "/.well-known/mercure?topic=orders", "", bearer(tok)},
		} {
			if route.what == "a Mercure subscribe" && tok == "" {
				continue // anonymous subscribers: the tenant's Mercure setting
			}
			beta := request(t, route.method, p.base+"/v1/tenants/beta"+route.path, route.header, route.body)
			ghost := request(t, route.method, p.base+"/v1/tenants/ghost"+route.path, route.header, route.body)
			switch {
			case strings.HasPrefix(name, "acme's, "):
				if ghost.status != 401 || !strings.HasPrefix(ghost.message(t), "bad signature") || beta.status == 401 && beta.message(t) != "expired token: its exp is past, beyond 30 s of leeway" {
					t.Errorf("%s, %s: beta answers %+v, ghost %+v", name, route.what, beta, ghost)
				}
			case beta != ghost || beta.status/100 != 4:
				t.Errorf("%s, %s: beta answers %+v, ghost %+v", name, route.what, beta, ghost)
			}
		}
	}
	for name, h := range map[string]map[string]string{
		"a webhook signature that does not match": webhook,
		"a webhook body over the limit":           webhook,
	} {
		body := "1"
		if strings.Contains(name, "over the limit") {
			body = strings.Repeat("1", 2048)
		}
		beta := request(t, "POST", p.base+"/v1/tenants/beta/topics/orders/notify", h, body)
		ghost := request(t, "POST", p.base+"/v1/tenants/ghost/topics/orders/notify", h, body)
		if beta != ghost || beta.status/100 != 4 {
			t.Errorf("%s: beta answers %+v, ghost %+v", name, beta, ghost)
		}
	}
	claiming := func(tenant string) string {
		return hs256(t, "a secret of nobody", jwt.MapClaims{"tenant": tenant, "subscribe": []string{"*"}, "exp": hour})
	}
	beta := request(t, "GET", p.base+"/v1/stream/orders?offset=-1", bearer(claiming("beta")), "")
	ghost := request(t, "GET", p.base+"/v1/stream/orders?offset=-1", bearer(claiming("ghost")), "")
	if beta != ghost || beta.status != 401 {
		t.Errorf("Durable Streams: a token claiming beta answers %+v, one claiming ghost %+v", beta, ghost)
	}
}

// An issuer's policy is stored, echoed by the PUT's answer and by GET,
// one issuer and the list: max_ttl as given, require_exp, actions; left
// out, max_ttl is the server's flag (24h0m0s), require_exp true, actions
// both. A bad policy is 400 invalid_issuer and changes nothing stored.
func TestIssuerPolicyRoundTrip(t *testing.T) {
	p, _ := policyServer(t)
	type issuer struct {
		Name       string   `json:"name"`
		Key        string   `json:"key"`
		MaxTTL     *string  `json:"max_ttl"`
		RequireExp *bool    `json:"require_exp"`
		Actions    []string `json:"actions"`
	}
	read := func(a answer) issuer {
		t.Helper()
		var iss issuer
		if err := json.Unmarshal([]byte(a.body), &iss); err != nil {
			t.Fatalf("%d %s", a.status, a.body)
		}
		return iss
	}
	admin := map[string]string{"Authorization": "Bearer " + policyKey}
	get := func(name string) answer {
		return request(t, "GET", p.base+"/v1/admin/tenants/acme/issuers/"+name, admin, "")
	}
	check := func(what string, iss issuer, maxTTL string, requireExp bool, actions string) {
		t.Helper()
		got := ""
		if iss.MaxTTL != nil {
			got = *iss.MaxTTL
		}
		if got != maxTTL || iss.RequireExp == nil || *iss.RequireExp != requireExp || strings.Join(iss.Actions, ",") != actions || iss.Key != "" {
			t.Errorf("%s: %+v, want max_ttl %q require_exp %v actions %s", what, iss, maxTTL, requireExp, actions)
		}
	}
	key := `"alg":"HS256","key":"` + appSecret + `"`
	a := p.putIssuer(t, "subs", `{"issuer":"subs",`+key+`,"max_ttl":"0s","require_exp":false,"actions":["subscribe"]}`)
	if a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	check("the PUT's answer", read(a), "0s", false, "subscribe")
	check("GET", read(get("subs")), "0s", false, "subscribe")
	a = p.putIssuer(t, "app", `{"issuer":"app",`+key+`}`)
	check("defaults, the PUT's answer", read(a), "24h0m0s", true, "publish,subscribe")
	a = p.putIssuer(t, "app", `{"issuer":"app",`+key+`,"max_ttl":"90m","actions":["subscribe","publish"]}`)
	if a.status != 200 {
		t.Fatalf("replace: %d %s", a.status, a.body)
	}
	check("replaced", read(get("app")), "90m", true, "publish,subscribe")
	list := request(t, "GET", p.base+"/v1/admin/tenants/acme/issuers", admin, "")
	var all struct{ Issuers []issuer }
	if err := json.Unmarshal([]byte(list.body), &all); err != nil || len(all.Issuers) != 2 {
		t.Fatalf("list: %d %s", list.status, list.body)
	}
	check("listed", all.Issuers[0], "90m", true, "publish,subscribe")
	check("listed", all.Issuers[1], "0s", false, "subscribe")

	before := list.body
	for name, bad := range map[string]string{
		"max_ttl no duration":   `"max_ttl":"a day"`,
		"max_ttl a number":      `"max_ttl":3600`,
		"max_ttl negative":      `"max_ttl":"-1h"`,
		"require_exp a string":  `"require_exp":"no"`,
		"actions publish alone": `"actions":["publish"]`,
		"actions unknown":       `"actions":["admin"]`,
		"actions empty":         `"actions":[]`,
		"actions repeated":      `"actions":["subscribe","subscribe"]`,
		"actions a string":      `"actions":"subscribe"`,
	} {
		for _, issuerName := range []string{"app", "newcomer"} {
			a := p.putIssuer(t, issuerName, `{"issuer":"x",`+key+`,`+bad+`}`)
			if a.status != 400 || !strings.Contains(a.body, `"code":"invalid_issuer"`) {
				t.Errorf("%s, as %s: %d %s", name, issuerName, a.status, a.body)
			}
		}
	}
	if after := request(t, "GET", p.base+"/v1/admin/tenants/acme/issuers", admin, "").body; after != before {
		t.Errorf("refused registrations changed what is stored:\n%s\nwas\n%s", after, before)
	}
}

// edgehub tenant issuer add takes the policy as flags: --max-ttl,
// --no-require-exp, --actions; it prints the issuer as the server echoes
// it, and a bad value is the server's 400.
func TestCLIIssuerPolicyFlags(t *testing.T) {
	p, _ := policyServer(t)
	env := []string{"EDGEHUB_ADMIN_KEY=" + policyKey, "EDGEHUB_SERVER=" + p.base}
	keyFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(keyFile, []byte(appSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	add := []string{"tenant", "issuer", "add", "acme", "subs", "--alg", "HS256", "--key-file", keyFile, "--issuer", "subs"}
	out, errOut, code := cliRun(t, env, nil, "", append(add, "--max-ttl", "0s", "--no-require-exp", "--actions", "subscribe")...)
	if code != 0 || !strings.Contains(out, `"max_ttl":"0s"`) || !strings.Contains(out, `"require_exp":false`) || !strings.Contains(out, `"actions":["subscribe"]`) {
		t.Fatalf("issuer add with a policy: exit %d, %s %s", code, out, errOut)
	}
	out, errOut, code = cliRun(t, env, nil, "", "tenant", "issuer", "add", "acme", "app", "--alg", "HS256", "--key-file", keyFile, "--actions", "publish,subscribe")
	if code != 0 || !strings.Contains(out, `"max_ttl":"24h0m0s"`) || !strings.Contains(out, `"require_exp":true`) || !strings.Contains(out, `"actions":["publish","subscribe"]`) {
		t.Fatalf("issuer add with the defaults: exit %d, %s %s", code, out, errOut)
	}
	if out, _, code := cliRun(t, env, nil, "", "tenant", "issuer", "list", "acme"); code != 0 || !strings.Contains(out, `"require_exp":false`) {
		t.Fatalf("issuer list: exit %d, %s", code, out)
	}
	for _, bad := range [][]string{{"--actions", "admin"}, {"--max-ttl", "soon"}} {
		if _, errOut, code := cliRun(t, env, nil, "", append(add, bad...)...); code != 1 || !strings.Contains(errOut, "invalid_issuer") {
			t.Errorf("issuer add %v: exit %d, %q", bad, code, errOut)
		}
	}
}

// A subscribe-only issuer's tokens grant no publish whatever their
// claims say (native lists, the mercure claim, an authorization
// detail): 403 on a native and a Mercure publish; they still subscribe.
func TestSubscribeOnlyIssuerNeverPublishes(t *testing.T) {
	p, _ := policyServer(t)
	if a := p.putIssuer(t, "subs", `{"issuer":"subs","alg":"HS256","key":"`+appSecret+`","actions":["subscribe"]}`); a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	tok := hs256(t, appSecret, jwt.MapClaims{"iss": "subs", "exp": time.Now().Add(time.Hour).Unix(),
		"publish": []string{"*"}, "subscribe": []string{"*"}, "mercure": map[string]any{"publish": []string{"*"}},
		"authorization_details": []any{map[string]any{"type": "https://mercure.rocks/authorization-detail",
			"actions": []string{"publish"}, "topics": []any{map[string]any{"match": "*"}}}}})
	if st, _, b := do(t, "POST", p.topicURL("orders", "notify"), tok, `1`); st != 403 || !strings.Contains(string(b), `"code":"forbidden"`) {
		t.Errorf("a native publish: %d %s", st, b)
	}
	st, h, b := mercurePost(t, p.base+"/v1/tenants/acme/.well-known/mercure", url.Values{"topic": {"orders"}, "data": {"x"}}, bearer(tok))
	if st != 403 || !strings.Contains(h.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
		t.Errorf("a Mercure publish: %d %s %s", st, h.Get("WWW-Authenticate"), b)
	}
	s := p.watch(t, "orders", "", bearer(tok))
	s.hello(t)
	if st, _, b := do(t, "GET", p.topicURL("orders", "events"), tok, ""); st != 200 {
		t.Errorf("a read: %d %s", st, b)
	}
}

// A token without exp, from an issuer that accepts them, opens a stream
// that time does not end: it outlives a stream of a token whose exp is
// now (which ends at exp plus the 30 s of leeway) and still delivers; it
// ends when its jti is revoked, and the token is 401 "revoked" from then
// on, on every process's check.
func TestTokenWithoutExpEndsOnlyByRevocation(t *testing.T) {
	p, secret := policyServer(t)
	if a := p.putIssuer(t, "static", `{"issuer":"static","alg":"HS256","key":"`+appSecret+`","require_exp":false}`); a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	static := hs256(t, appSecret, jwt.MapClaims{"iss": "static", "jti": "static-1", "subscribe": []string{"*"}})
	expiring := hs256(t, secret, jwt.MapClaims{"tenant": "acme", "subscribe": []string{"*"}, "exp": time.Now().Unix()})
	forever := p.watch(t, "orders", "", bearer(static))
	forever.hello(t)
	tenant := p.watchTenant(t, "pattern=*", bearer(static))
	tenant.hello(t)
	bounded := p.watch(t, "orders", "", bearer(expiring))
	bounded.hello(t)
	bounded.ended(t) // at exp plus the leeway: 30 s
	publisher := p.mintAcme(t, policyKey, `"*"`, `"*"`)
	st, _, b := do(t, "POST", p.topicURL("orders", "notify"), publisher, `{"after":"the other ended"}`)
	var published struct{ Seq int64 }
	if st != 201 || json.Unmarshal(b, &published) != nil {
		t.Fatalf("publish: %d %s", st, b)
	}
	seq := published.Seq
	if e := forever.event(t); e.Seq != seq {
		t.Fatalf("the stream of the token without exp: %+v, want seq %d", e, seq)
	}
	if e := tenant.tenantEvent(t); e.Seq != seq {
		t.Fatalf("the tenant stream of the token without exp: %+v, want seq %d", e, seq)
	}
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/acme/tokens/static-1", policyKey, ""); st != 204 {
		t.Fatalf("revoke: %d %s", st, b)
	}
	forever.ended(t)
	tenant.ended(t)
	if st, _, b := do(t, "GET", p.topicURL("orders", "events"), static, ""); st != 401 || !strings.Contains(string(b), `"message":"revoked`) {
		t.Fatalf("the revoked token: %d %s", st, b)
	}
}

// challenge is an answer's WWW-Authenticate without its
// error_description, which says which check failed in the words of the
// answer's message.
func challenge(h http.Header) string {
	c, _, _ := strings.Cut(h.Get("WWW-Authenticate"), `, error_description="`)
	return c
}

// Webhook bodies sent to tenants that do not exist are read, as a wrong
// signature's are, from the same budget of bodies awaiting their
// signature, within the client address's share: 200 stalled uploads from
// one address, each to another tenant that does not exist, hold at most
// that share (8 MiB of the default 128 MiB of --max-publish-bytes: a
// quarter for unsigned bodies, a quarter of that per address), the rest
// are refused 429 at once, and a real tenant's signed webhooks from
// another address go through meanwhile.
func TestWebhookBodiesOfTenantsThatDoNotExistAreBounded(t *testing.T) {
	p, secrets, _ := fairServer(t, []string{"vic"})
	anon := http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {strconv.FormatInt(time.Now().Unix(), 10)}, "Webhook-Signature": {"v1,bm9wZQ=="}}
	const uploads, share = 200, 8 << 20
	answers := make(chan int, uploads)
	for i := range uploads {
		u := p.upload(t, "127.0.0.3", fmt.Sprintf("/v1/tenants/ghost-%d/topics/t/notify", i), anon, 1<<20, []byte(`"`))
		go func() {
			u.SetReadDeadline(time.Now().Add(2 * wait))
			resp, err := http.ReadResponse(bufio.NewReader(u), nil)
			if err != nil {
				answers <- -1
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	// Each held upload takes a piece of 64 KiB: 128 pieces fill the share.
	refused := 0
	for refused < uploads-share/(64<<10) {
		select {
		case status := <-answers:
			if status != http.StatusTooManyRequests {
				t.Fatalf("an upload to a tenant that does not exist ended with %d after %d were refused", status, refused)
			}
			refused++
		case <-time.After(wait):
			t.Fatalf("%d uploads refused, and they hold %d bytes", refused, p.held(t, "unsigned_bodies"))
		}
	}
	held := p.held(t, "unsigned_bodies")
	t.Logf("%d uploads to tenants that do not exist: %d refused, %d bytes held (the share: %d)", uploads, refused, held, share)
	if held > share {
		t.Fatalf("uploads to tenants that do not exist hold %d bytes, over the address's share of %d", held, share)
	}
	event := `"` + strings.Repeat("v", 100<<10) + `"`
	for i := range 10 {
		req := signed(t, p.base+"/v1/tenants/vic/topics/pay/notify", secrets["vic"].WebhookSecret, fmt.Sprintf("msg_%d", i), time.Now(), event)
		if status, b := send(t, req); status != http.StatusCreated {
			t.Fatalf("signed webhook %d of a real tenant: %d %s", i, status, b)
		}
	}
}
