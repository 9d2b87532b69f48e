package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/server"
)

// head reads a topic's head (and state) with a subscribe token.
func topicView(t *testing.T, base, tenant, topic, tok string) (head int64, state string) {
	t.Helper()
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	_, b := do(t, base, call{method: "GET", path: "/v1/tenants/" + tenant + "/topics/" + topic + "/events", header: bearer})
	var ev struct{ Head int64 }
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("events: %s", b)
	}
	_, sb := do(t, base, call{method: "GET", path: "/v1/tenants/" + tenant + "/topics/" + topic + "/state", header: bearer})
	return ev.Head, strings.TrimSpace(string(sb))
}

// The replay matrix: one webhook, signed for real and captured, replayed
// within its 5 minutes to every variation a replayer controls (another
// topic, type, key, op, header, Idempotency-Key, NDJSON). Only the true
// repeat is answered (200 duplicate); nothing appends anything anywhere,
// and no state key changes.
func TestCapturedWebhookReplayMatrix(t *testing.T) {
	base := authServer(t, nil)
	tn := createTenant(t, base, "wh")
	tok := mint(t, base, "wh", `{"publish":["*"],"subscribe":["*"]}`)
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/wh/topics/orders/notify?key=o1", body: `{"status":"paid"}`, header: bearer}); status != 201 {
		t.Fatalf("victim state: %d %s", status, b)
	}
	body := `{"audit":"login"}`
	now := strconv.FormatInt(time.Now().Unix(), 10)
	captured := map[string]string{"webhook-id": "msg_42", "webhook-timestamp": now,
		"webhook-signature": sign(tn.WebhookSecret, "msg_42", now, []byte(body))}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range captured {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/wh/topics/audit/notify", body: body, header: captured}); status != 201 || string(b) != `{"seq":1,"duplicate":false}`+"\n" {
		t.Fatalf("the original delivery: %d %s", status, b)
	}
	for _, c := range []struct {
		name   string
		c      call
		status int
		code   string
	}{
		{"true repeat", call{path: "/v1/tenants/wh/topics/audit/notify"}, 200, ""},
		{"as NDJSON", call{path: "/v1/tenants/wh/topics/audit/notify", ctype: "application/x-ndjson"}, 200, ""},
		{"another topic", call{path: "/v1/tenants/wh/topics/audit2/notify"}, 422, "idempotency_key_reused"},
		{"the victim's topic", call{path: "/v1/tenants/wh/topics/orders/notify"}, 422, "idempotency_key_reused"},
		{"another type", call{path: "/v1/tenants/wh/topics/audit/notify?type=refund.issued"}, 422, "idempotency_key_reused"},
		{"Event-Type header", call{path: "/v1/tenants/wh/topics/audit/notify", header: map[string]string{"Event-Type": "refund.issued"}}, 422, "idempotency_key_reused"},
		{"a key", call{path: "/v1/tenants/wh/topics/audit/notify?key=o1"}, 422, "idempotency_key_reused"},
		{"Event-Key header", call{path: "/v1/tenants/wh/topics/orders/notify", header: map[string]string{"Event-Key": "o2"}}, 422, "idempotency_key_reused"},
		{"delete of a victim key", call{path: "/v1/tenants/wh/topics/orders/notify?key=o1&op=delete"}, 422, "idempotency_key_reused"},
		{"an Idempotency-Key of its own", call{path: "/v1/tenants/wh/topics/audit/notify", header: map[string]string{"Idempotency-Key": "r1"}}, 400, "invalid_idempotency_key"},
		{"Idempotency-Key to another topic", call{path: "/v1/tenants/wh/topics/fresh/notify", header: map[string]string{"Idempotency-Key": "r2"}}, 400, "invalid_idempotency_key"},
	} {
		c.c.method, c.c.body, c.c.header = "POST", body, with(c.c.header)
		status, b := do(t, base, c.c)
		if status != c.status || (c.code != "" && errorCode(t, b) != c.code) {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, b, c.status, c.code)
		}
		if c.status == 200 && string(b) != `{"seq":1,"duplicate":true}`+"\n" {
			t.Errorf("%s: %s", c.name, b)
		}
	}
	for topic, want := range map[string]int64{"audit": 1, "audit2": 0, "orders": 1, "fresh": 0} {
		if h, _ := topicView(t, base, "wh", topic, tok); h != want {
			t.Errorf("topic %s has head %d, want %d: a replay appended", topic, h, want)
		}
	}
	if _, st := topicView(t, base, "wh", "orders", tok); st != `{"seq":1,"state":{"o1":{"status":"paid"}}}` {
		t.Errorf("the victim's state changed: %s", st)
	}
	// An Idempotency-Key equal to the webhook-id is the same key.
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/wh/topics/audit/notify", body: body,
		header: with(map[string]string{"Idempotency-Key": "msg_42"})}); status != 200 {
		t.Errorf("Idempotency-Key equal to webhook-id: %d %s", status, b)
	}
}

// held is a publish whose body is held open: it has passed its credential
// check (the BeforeBody hook has run) and waits to be finished.
type held struct {
	w    *io.PipeWriter
	done chan heldAnswer
}

type heldAnswer struct {
	status int
	body   string
}

func holdPublish(t *testing.T, base, path string, header map[string]string, started <-chan struct{}) *held {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", base+path, pr)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	h := &held{w: pw, done: make(chan heldAnswer, 1)}
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			h.done <- heldAnswer{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		h.done <- heldAnswer{status: resp.StatusCode, body: string(b)}
	}()
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the publish never reached its body")
	}
	return h
}

func (h *held) finish(t *testing.T, body string) heldAnswer {
	t.Helper()
	io.WriteString(h.w, body)
	h.w.Close()
	select {
	case a := <-h.done:
		return a
	case <-time.After(wait):
		t.Fatal("no answer")
		panic("unreachable")
	}
}

// A publish whose credentials were checked before its tenant was deleted
// and created again under the same name (or rotated) never commits into
// the tenant as it is now, with a token or with a webhook signature: the
// commit compares the tenant's generation, not its name.
func TestPublishStraddlingDeleteAndRecreateCommitsNothing(t *testing.T) {
	started := make(chan struct{}, 1)
	srvBase := startServer(t, server.Hooks{HTTP: bodyHooks(func(string, string) { started <- struct{}{} })}, func(c *server.Config) {
		c.Dev, c.AdminKey = false, adminKey
	})
	for _, change := range []string{"recreate", "rotate"} {
		for _, kind := range []string{"token", "webhook"} {
			t.Run(change+"/"+kind, func(t *testing.T) {
				name := "s-" + change + "-" + kind
				tn := createTenant(t, srvBase, name)
				var header map[string]string
				body := `{"injected":true}`
				if kind == "token" {
					header = map[string]string{"Authorization": "Bearer " + mint(t, srvBase, name, `{"publish":["*"]}`)}
				} else {
					now := strconv.FormatInt(time.Now().Unix(), 10)
					header = map[string]string{"webhook-id": "msg_s", "webhook-timestamp": now,
						"webhook-signature": sign(tn.WebhookSecret, "msg_s", now, []byte(body))}
				}
				h := holdPublish(t, srvBase, "/v1/tenants/"+name+"/topics/x/notify", header, started)
				if change == "recreate" {
					if status, _ := admin(t, srvBase, "DELETE", name, ""); status != 204 {
						t.Fatalf("delete: %d", status)
					}
					createTenant(t, srvBase, name)
				} else if status, b := admin(t, srvBase, "POST", name+"/rotate", ""); status != 200 {
					t.Fatalf("rotate: %d %s", status, b)
				}
				if a := h.finish(t, body); a.status != 401 {
					t.Fatalf("the straddling publish: %d %s", a.status, a.body)
				}
				if head, _ := topicView(t, srvBase, name, "x", mint(t, srvBase, name, `{"subscribe":["*"]}`)); head != 0 {
					t.Fatalf("the straddling publish committed: head %d", head)
				}
			})
		}
	}
}

// Rotation replaces both secrets: old tokens and signatures are 401 at
// once, open streams end, the data stays and new tokens read it.
func TestRotateRevokesCredentialsAndEndsStreams(t *testing.T) {
	base := authServer(t, nil)
	old := createTenant(t, base, "rot")
	tok := mint(t, base, "rot", `{"publish":["*"],"subscribe":["*"]}`)
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	if status, _ := do(t, base, call{method: "POST", path: "/v1/tenants/rot/topics/x/notify", body: "1", header: bearer}); status != 201 {
		t.Fatal("publish")
	}
	fc := openFrames(t, base, "/v1/tenants/rot/topics/x/watch?after=0&access_token="+tok)
	next(t, fc) // hello
	next(t, fc) // event 1
	status, b := admin(t, base, "POST", "rot/rotate", "")
	var renewed auth.Tenant
	if err := json.Unmarshal(b, &renewed); err != nil || status != 200 || renewed.Name != "rot" ||
		renewed.SigningSecret == old.SigningSecret || renewed.WebhookSecret == old.WebhookSecret || !strings.HasPrefix(renewed.WebhookSecret, "whsec_") {
		t.Fatalf("rotate: %d %s", status, b)
	}
	select {
	case _, open := <-fc:
		if open {
			t.Fatal("a frame came after the rotation")
		}
	case <-time.After(wait):
		t.Fatal("the stream was not ended")
	}
	if status, _ := do(t, base, call{method: "GET", path: "/v1/tenants/rot/topics/x/events", header: bearer}); status != 401 {
		t.Fatalf("old token after rotation: %d", status)
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	oldHook := map[string]string{"webhook-id": "m1", "webhook-timestamp": now, "webhook-signature": sign(old.WebhookSecret, "m1", now, []byte("2"))}
	if status, _ := do(t, base, call{method: "POST", path: "/v1/tenants/rot/topics/x/notify", body: "2", header: oldHook}); status != 401 {
		t.Fatalf("old webhook secret after rotation: %d", status)
	}
	newHook := map[string]string{"webhook-id": "m1", "webhook-timestamp": now, "webhook-signature": sign(renewed.WebhookSecret, "m1", now, []byte("2"))}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/rot/topics/x/notify", body: "2", header: newHook}); status != 201 {
		t.Fatalf("new webhook secret: %d %s", status, b)
	}
	if head, _ := topicView(t, base, "rot", "x", mint(t, base, "rot", `{"subscribe":["*"]}`)); head != 2 {
		t.Fatalf("data after rotation: head %d", head)
	}
	if status, b := admin(t, base, "POST", "nosuch/rotate", ""); status != 404 || errorCode(t, b) != "unknown_tenant" {
		t.Fatalf("rotate of an unknown tenant: %d %s", status, b)
	}
}

// Tokens live at most --max-token-ttl: the admin API refuses a longer
// ttl, and a self-signed token whose exp lies further ahead is 401.
func TestTokenLifetimeIsCapped(t *testing.T) {
	base := authServer(t, func(c *server.Config) { c.MaxTokenTTL = 24 * time.Hour })
	tn := createTenant(t, base, "ttl")
	if status, b := admin(t, base, "POST", "ttl/tokens", `{"subscribe":["*"],"ttl":"25h"}`); status != 400 || errorCode(t, b) != "invalid_ttl" {
		t.Fatalf("ttl over the cap: %d %s", status, b)
	}
	mint(t, base, "ttl", `{"subscribe":["*"],"ttl":"24h"}`)
	selfSigned := func(exp time.Time) string {
		c := auth.Claims{Tenant: "ttl", Subscribe: []string{"*"}, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(exp)}}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(tn.SigningSecret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for exp, want := range map[time.Duration]int{23 * time.Hour: 200, 48 * time.Hour: 401, 8000 * 24 * time.Hour: 401} {
		if status, _ := do(t, base, call{method: "GET", path: "/v1/tenants/ttl/topics/x/events",
			header: map[string]string{"Authorization": "Bearer " + selfSigned(time.Now().Add(exp))}}); status != want {
			t.Errorf("self-signed token living %v: %d, want %d", exp, status, want)
		}
	}
}

// Every 401 says which check failed, and never whether the tenant
// exists: each credential gets from a tenant that does not exist exactly
// what it gets from one that exists and whose keys do not verify it (a
// 413 for a webhook body over the limit included). The contract's one
// exception: a token that another tenant's secret verifies is told
// apart by a tenant that exists (403, or what its claims fail), and is
// 401 "bad signature" on one that does not.
func TestEvery401SaysWhichCheckFailed(t *testing.T) {
	base := authServer(t, func(c *server.Config) { c.MaxBody = 1 << 10 })
	createTenant(t, base, "known")
	other := createTenant(t, base, "other")
	sign := func(secret string, exp time.Time) string {
		c := auth.Claims{Tenant: "other", Publish: []string{"*"}, Subscribe: []string{"*"}, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(exp)}}
		s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
		return s
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	webhook := map[string]string{"webhook-id": "msg_1", "webhook-timestamp": strconv.FormatInt(time.Now().Unix(), 10), "webhook-signature": "v1,bm9wZQ=="}
	for _, tc := range []struct {
		name, method, route, body string
		header                    map[string]string
		status                    int
		says                      string
		missing                   string // what a tenant that does not exist says, if not the same
	}{
		{"no token", "GET", "topics/x/events", "", nil, 401, "missing credentials", ""},
		{"no credentials on a publish", "POST", "topics/x/notify", "1", nil, 401, "missing credentials", ""},
		{"not a JWT", "GET", "topics/x/events", "", bearer("nope"), 401, "malformed token", ""},
		{"a wrong secret", "GET", "topics/x/events", "", bearer(sign("not a secret of anyone", time.Now().Add(time.Hour))), 401, "bad signature", ""},
		{"another tenant's, expired", "GET", "topics/x/events", "", bearer(sign(other.SigningSecret, time.Now().Add(-time.Hour))), 401, "expired token", "bad signature"},
		{"another tenant's, good", "GET", "topics/x/events", "", bearer(sign(other.SigningSecret, time.Now().Add(time.Hour))), 403, "do not cover", "bad signature"},
		{"a webhook signature that does not match", "POST", "topics/x/notify", "1", webhook, 401, "bad signature: no webhook-signature", ""},
		{"a webhook body over the limit", "POST", "topics/x/notify", strings.Repeat("1", 2<<10), webhook, 413, "", ""},
	} {
		var answers [2]string
		for i, tenant := range []string{"known", "nosuch"} {
			status, says := tc.status, tc.says
			if tenant == "nosuch" && tc.missing != "" {
				status, says = 401, tc.missing
			}
			st, b := do(t, base, call{method: tc.method, path: "/v1/tenants/" + tenant + "/" + tc.route, body: tc.body, header: tc.header})
			if st != status || !strings.Contains(string(b), says) {
				t.Errorf("%s, tenant %s: %d %s, want %d saying %q", tc.name, tenant, st, b, status, says)
			}
			answers[i] = string(b)
		}
		if answers[0] != answers[1] && tc.missing == "" {
			t.Errorf("%s: a tenant that exists answers %s, one that does not %s", tc.name, answers[0], answers[1])
		}
	}
}

// With --cors-origins '*', pages of any origin get a literal '*', the
// admin API is never offered to any page, and answers vary by Origin.
func TestCORSWildcardSparesTheAdminAPI(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.CORSOrigins, c.AdminKey = []string{"*"}, adminKey })
	get := func(method, path string, header map[string]string) *http.Response {
		req, _ := http.NewRequest(method, base+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get("GET", "/v1/tenants/t/topics/x/events", map[string]string{"Origin": "https://any.example"}); r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("wildcard answer: %v", r.Header)
	}
	if r := get("OPTIONS", "/v1/admin/tenants/x", map[string]string{"Origin": "null", "Access-Control-Request-Method": "DELETE"}); r.Header.Get("Access-Control-Allow-Origin") != "" || r.StatusCode == 204 {
		t.Fatalf("admin preflight allowed: %d %v", r.StatusCode, r.Header)
	}
	if r := get("GET", "/v1/admin/tenants/x", map[string]string{"Origin": "https://any.example", "Authorization": "Bearer " + adminKey}); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("admin answer offered to a page: %v", r.Header)
	}
	if r := get("GET", "/healthz", nil); r.Header.Get("Vary") != "Origin" {
		t.Fatalf("no Vary: Origin without an Origin: %v", r.Header)
	}
}

// Nor does --cors-origins '*' offer the console to other origins: its
// API takes the admin key, which a page elsewhere could otherwise test
// through its visitors' browsers. No preflight of it is answered, and
// none of its answers names an origin; a path that only begins like it
// is no console path.
func TestCORSWildcardSparesTheConsole(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.CORSOrigins, c.Dev, c.AdminKey = []string{"*"}, false, adminKey })
	answer := func(method, path string, header map[string]string) *http.Response {
		req, _ := http.NewRequest(method, base+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/console", "/console/console.js", "/console/api/mode", "/console/api/topics/acme/orders"} {
		pre := answer("OPTIONS", path, map[string]string{"Origin": "https://any.example", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"})
		if pre.Header.Get("Access-Control-Allow-Origin") != "" || pre.StatusCode == 204 {
			t.Errorf("preflight of %s allowed: %d %v", path, pre.StatusCode, pre.Header)
		}
		get := answer("GET", path, map[string]string{"Origin": "https://any.example", "Authorization": "Bearer " + adminKey})
		if get.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET %s offered to a page: %v", path, get.Header)
		}
	}
	if r := answer("GET", "/consoles", map[string]string{"Origin": "https://any.example"}); r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("/consoles, no console path, was spared: %v", r.Header)
	}
}

// Quotas answer 429 quota_exceeded with Retry-After and store nothing.
func TestQuotaRefusalsOverHTTP(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.MaxTenantTopics, c.MaxStateBytes = 1, 64 })
	publish(t, base, "one", "1")
	resp, err := http.Post(base+"/v1/tenants/t/topics/two/notify", "application/json", strings.NewReader("1"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || errorCode(t, b) != "quota_exceeded" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second topic: %d %s %v", resp.StatusCode, b, resp.Header)
	}
	status, b := do(t, base, call{method: "POST", path: "/v1/tenants/t/topics/one/notify?key=k", body: `"` + strings.Repeat("x", 100) + `"`})
	if status != 429 || errorCode(t, b) != "quota_exceeded" {
		t.Fatalf("state over its cap: %d %s", status, b)
	}
	_, b = do(t, base, call{method: "GET", path: "/v1/tenants/t/topics/one/state"})
	if strings.TrimSpace(string(b)) != `{"seq":1,"state":{}}` {
		t.Fatalf("state after refusals: %s", b)
	}
}

func bodyHooks(beforeBody func(tenant, topic string)) httpapi.Hooks {
	return httpapi.Hooks{BeforeBody: beforeBody}
}

// A publish whose client leaves before its commit is answered still holds
// its body (it waits in the committer), so its bytes stay taken from the
// budget until the commit answers: clients that upload and hang up cannot
// get around --max-publish-bytes.
func TestPublishBodyStaysCountedUntilItsCommitAnswers(t *testing.T) {
	base, release := leftPublisher(t, func(c *server.Config) { c.MaxPublishBytes = int64(len(`{"left":1}`)) }, "", `{"left":1}`)
	status, b := do(t, base, call{method: "POST", path: "/v1/tenants/t/topics/y/notify", body: `{"b":2}`})
	if status != 429 || errorCode(t, b) != "overloaded" {
		t.Fatalf("a publish while the left one waits for its commit: %d %s", status, b)
	}
	release()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(wait):
		t.Fatalf("waited in vain for %s", what)
	}
}

// A stream still catching up when its tenant is rotated ends too, before
// its next page: it does not read on with revoked credentials.
func TestRotateEndsStreamsThatAreCatchingUp(t *testing.T) {
	between, resume := make(chan struct{}, 1), make(chan struct{})
	base := startServer(t, server.Hooks{Hub: hub.Hooks{BetweenPages: func(string, string) {
		signal(between)
		<-resume
	}}}, func(c *server.Config) { c.Dev, c.AdminKey, c.PageSize, c.RecentEvents = false, adminKey, 10, -1 })
	createTenant(t, base, "cu")
	tok := mint(t, base, "cu", `{"publish":["*"],"subscribe":["*"]}`)
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	var batch strings.Builder
	for i := range 100 {
		fmt.Fprintf(&batch, "%d\n", i)
	}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/cu/topics/x/notify", ctype: "application/x-ndjson", body: batch.String(), header: bearer}); status != 201 {
		t.Fatalf("batch: %d %s", status, b)
	}
	// A live stream on the topic: the hub ends all its streams in one turn,
	// so once this one has ended, the one catching up has been ended too.
	lc := openFrames(t, base, "/v1/tenants/cu/topics/x/watch?access_token="+tok)
	next(t, lc) // hello
	cc := openFrames(t, base, "/v1/tenants/cu/topics/x/watch?after=0&access_token="+tok)
	waitFor(t, between, "the first page")
	if status, b := admin(t, base, "POST", "cu/rotate", ""); status != 200 {
		t.Fatalf("rotate: %d %s", status, b)
	}
	for range lc {
	}
	close(resume)
	n := 0
	for range cc {
		n++
	}
	if n > 1+10 {
		t.Fatalf("the catching-up stream went on after the rotation: %d frames, hello and one page of 10 expected", n)
	}
}

// A token request without a ttl gets the default hour, or the cap when
// that is shorter.
func TestDefaultTTLFitsUnderTheCap(t *testing.T) {
	base := authServer(t, func(c *server.Config) { c.MaxTokenTTL = 10 * time.Minute })
	createTenant(t, base, "short")
	mint(t, base, "short", `{"subscribe":["*"]}`)
}
