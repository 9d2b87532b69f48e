package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/server"
)

const adminKey = "test-admin-key"

func authServer(t *testing.T, tweak func(*server.Config)) string {
	t.Helper()
	return startServer(t, server.Hooks{}, func(c *server.Config) {
		c.Dev, c.AdminKey = false, adminKey
		if tweak != nil {
			tweak(c)
		}
	})
}

func admin(t *testing.T, base, method, path, body string) (int, []byte) {
	t.Helper()
	return do(t, base, call{method: method, path: "/v1/admin/tenants/" + path, body: body,
		header: map[string]string{"Authorization": "Bearer " + adminKey}})
}

func createTenant(t *testing.T, base, name string) auth.Tenant {
	t.Helper()
	status, b := admin(t, base, "PUT", name, "")
	var tn auth.Tenant
	if err := json.Unmarshal(b, &tn); err != nil || (status != 201 && status != 200) {
		t.Fatalf("create tenant %s: %d %s", name, status, b)
	}
	return tn
}

func mint(t *testing.T, base, tenant, body string) string {
	t.Helper()
	status, b := admin(t, base, "POST", tenant+"/tokens", body)
	var tok struct{ Token string }
	if err := json.Unmarshal(b, &tok); err != nil || status != 201 {
		t.Fatalf("mint: %d %s", status, b)
	}
	return tok.Token
}

func TestAdminAPI(t *testing.T) {
	base := authServer(t, nil)
	status, b := admin(t, base, "PUT", "acme", "")
	var first auth.Tenant
	json.Unmarshal(b, &first)
	if status != 201 || first.Name != "acme" || first.SigningSecret == "" || !strings.HasPrefix(first.WebhookSecret, "whsec_") {
		t.Fatalf("create: %d %s", status, b)
	}
	if status, b = admin(t, base, "PUT", "acme", ""); status != 200 || !bytes.Contains(b, []byte(first.SigningSecret)) {
		t.Fatalf("create again: %d %s", status, b)
	}
	if status, b = admin(t, base, "GET", "acme", ""); status != 200 || !bytes.Contains(b, []byte(first.WebhookSecret)) {
		t.Fatalf("get: %d %s", status, b)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "nobody", "", 404, "unknown_tenant"},
		{"DELETE", "nobody", "", 404, "unknown_tenant"},
		{"POST", "nobody/tokens", `{}`, 404, "unknown_tenant"},
		{"POST", "acme/tokens", `{"ttl":"soon"}`, 400, "invalid_ttl"},
		{"POST", "acme/tokens", `{"ttl":"-1h"}`, 400, "invalid_ttl"},
		{"POST", "acme/tokens", `{"publish":`, 400, "invalid_json"},
		{"PUT", ".bad", "", 400, "invalid_name"},
	} {
		status, b := admin(t, base, tc.method, tc.path, tc.body)
		if status != tc.status || errorCode(t, b) != tc.code {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, status, b)
		}
	}
	for _, key := range []string{"", "Bearer wrong", "Basic " + adminKey} {
		c := call{method: "GET", path: "/v1/admin/tenants/acme", header: map[string]string{"Authorization": key}}
		if status, b := do(t, base, c); status != 401 || errorCode(t, b) != "unauthorized" {
			t.Errorf("admin key %q: %d %s", key, status, b)
		}
	}
}

// Deleting a tenant removes its data and ends its open streams; its routes
// then answer 401, and a tenant created again under the name starts empty.
func TestDeleteTenantEndsStreamsAndRemovesData(t *testing.T) {
	base := authServer(t, nil)
	createTenant(t, base, "gone")
	tok := mint(t, base, "gone", `{"publish":["*"],"subscribe":["*"]}`)
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/gone/topics/x/notify", body: "1", header: bearer}); status != 201 {
		t.Fatalf("publish: %d %s", status, b)
	}
	fc := openFrames(t, base, "/v1/tenants/gone/topics/x/watch?after=0&access_token="+tok)
	next(t, fc) // hello
	next(t, fc) // event 1
	if status, _ := admin(t, base, "DELETE", "gone", ""); status != 204 {
		t.Fatalf("delete: %d", status)
	}
	select {
	case _, open := <-fc:
		if open {
			t.Fatal("a frame came after the tenant was deleted")
		}
	case <-time.After(wait):
		t.Fatal("the stream was not ended")
	}
	if status, _ := do(t, base, call{method: "GET", path: "/v1/tenants/gone/topics/x/events", header: bearer}); status != 401 {
		t.Fatalf("after delete: %d", status)
	}
	createTenant(t, base, "gone")
	tok = mint(t, base, "gone", `{"subscribe":["*"]}`)
	_, b := do(t, base, call{method: "GET", path: "/v1/tenants/gone/topics/x/events", header: map[string]string{"Authorization": "Bearer " + tok}})
	if !strings.Contains(string(b), `"head":0`) {
		t.Fatalf("recreated tenant is not empty: %s", b)
	}
}

// The isolation matrix: two tenants, each kind of token, each route.
func TestIsolationMatrix(t *testing.T) {
	base := authServer(t, nil)
	a := createTenant(t, base, "a")
	createTenant(t, base, "b")
	tokens := map[string]string{
		"none":        "",
		"garbage":     "not.a.token",
		"a-pub":       mint(t, base, "a", `{"publish":["orders-*"]}`),
		"a-sub":       mint(t, base, "a", `{"subscribe":["orders-*"]}`),
		"a-all":       mint(t, base, "a", `{"publish":["*"],"subscribe":["*"]}`),
		"b-all":       mint(t, base, "b", `{"publish":["*"],"subscribe":["*"]}`),
		"a-wrong-key": mustMint(t, auth.Tenant{Name: "a", SigningSecret: "not the secret"}, time.Now(), time.Hour),
		"a-expired":   mustMint(t, a, time.Now().Add(-2*time.Hour), time.Hour),
		"a-in-leeway": mustMint(t, a, time.Now().Add(-time.Hour-10*time.Second), time.Hour),
	}
	routes := map[string]call{
		"notify": {method: "POST", path: "/notify", body: "1"},
		"events": {method: "GET", path: "/events"},
		"state":  {method: "GET", path: "/state"},
	}
	type want map[string]int // route -> status
	cases := []struct {
		token, tenant, topic string
		want                 want
	}{
		{"none", "a", "orders-1", want{"notify": 401, "events": 401, "state": 401}},
		{"garbage", "a", "orders-1", want{"notify": 401, "events": 401, "state": 401}},
		{"a-wrong-key", "a", "orders-1", want{"notify": 401, "events": 401, "state": 401}},
		{"a-expired", "a", "orders-1", want{"notify": 401, "events": 401, "state": 401}},
		{"a-in-leeway", "a", "orders-1", want{"notify": 201, "events": 200, "state": 200}},
		{"a-pub", "a", "orders-1", want{"notify": 201, "events": 403, "state": 403}},
		{"a-pub", "a", "invoices", want{"notify": 403, "events": 403, "state": 403}},
		{"a-sub", "a", "orders-1", want{"notify": 403, "events": 200, "state": 200}},
		{"a-all", "a", "invoices", want{"notify": 201, "events": 200, "state": 200}},
		{"b-all", "a", "orders-1", want{"notify": 403, "events": 403, "state": 403}},
		{"a-all", "b", "orders-1", want{"notify": 403, "events": 403, "state": 403}},
		{"a-all", "nobody", "orders-1", want{"notify": 401, "events": 401, "state": 401}},
	}
	for _, tc := range cases {
		for name, c := range routes {
			c.path = "/v1/tenants/" + tc.tenant + "/topics/" + tc.topic + c.path
			if tok := tokens[tc.token]; tok != "" {
				c.header = map[string]string{"Authorization": "Bearer " + tok}
			}
			status, b := do(t, base, c)
			if status != tc.want[name] {
				t.Errorf("%s on %s/%s %s: %d %s, want %d", tc.token, tc.tenant, tc.topic, name, status, b, tc.want[name])
			}
			if status >= 400 {
				code := errorCode(t, b)
				if (status == 401 && code != "unauthorized") || (status == 403 && code != "forbidden") {
					t.Errorf("%s on %s: code %s for %d", tc.token, name, code, status)
				}
			}
		}
		// watch, by header and as a browser would, with ?access_token=.
		for _, viaQuery := range []bool{false, true} {
			path := "/v1/tenants/" + tc.tenant + "/topics/" + tc.topic + "/watch"
			c := call{method: "GET", path: path}
			if tok := tokens[tc.token]; tok != "" && viaQuery {
				c.path += "?access_token=" + tok
			} else if tok != "" {
				c.header = map[string]string{"Authorization": "Bearer " + tok}
			}
			status := watchStatus(t, base, c)
			if want := tc.want["events"]; status != want {
				t.Errorf("%s on %s/%s watch (query %v): %d, want %d", tc.token, tc.tenant, tc.topic, viaQuery, status, want)
			}
		}
	}
}

func mustMint(t *testing.T, tn auth.Tenant, now time.Time, ttl time.Duration) string {
	t.Helper()
	tok, err := auth.Mint(tn, []string{"*"}, []string{"*"}, ttl, now)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// watchStatus opens a watch and closes it as soon as the status is known.
func watchStatus(t *testing.T, base string, c call) int {
	t.Helper()
	req, _ := http.NewRequest(c.method, base+c.path, nil)
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func sign(secret, id, ts string, body []byte) string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	return "v1," + base64.StdEncoding.EncodeToString(auth.Sign(key, id, ts, body))
}

// Standard Webhooks: a good signature publishes (and webhook-id is the
// idempotency key); every way of getting it wrong is 401 and stores nothing.
func TestWebhookSignatures(t *testing.T) {
	base := authServer(t, nil)
	tn := createTenant(t, base, "hooks")
	other := createTenant(t, base, "other")
	body := []byte(`{"event":"paid"}`)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	hook := func(id, ts, sig string, b []byte) (int, []byte) {
		h := map[string]string{}
		for k, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
			if v != "" {
				h[k] = v
			}
		}
		return do(t, base, call{method: "POST", path: "/v1/tenants/hooks/topics/pay/notify", body: string(b), header: h})
	}
	stale := strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10)
	future := strconv.FormatInt(time.Now().Add(6*time.Minute).Unix(), 10)
	for name, c := range map[string][4]string{
		"wrong secret":      {"msg_1", now, sign(other.WebhookSecret, "msg_1", now, body), string(body)},
		"stale timestamp":   {"msg_1", stale, sign(tn.WebhookSecret, "msg_1", stale, body), string(body)},
		"future timestamp":  {"msg_1", future, sign(tn.WebhookSecret, "msg_1", future, body), string(body)},
		"tampered body":     {"msg_1", now, sign(tn.WebhookSecret, "msg_1", now, body), `{"event":"refunded"}`},
		"signed other id":   {"msg_2", now, sign(tn.WebhookSecret, "msg_1", now, body), string(body)},
		"missing id":        {"", now, sign(tn.WebhookSecret, "", now, body), string(body)},
		"missing timestamp": {"msg_1", "", sign(tn.WebhookSecret, "msg_1", "", body), string(body)},
		"missing signature": {"msg_1", now, "", string(body)},
		"not v1":            {"msg_1", now, strings.Replace(sign(tn.WebhookSecret, "msg_1", now, body), "v1,", "v2,", 1), string(body)},
		"bad base64":        {"msg_1", now, "v1,!!!", string(body)},
	} {
		if status, b := hook(c[0], c[1], c[2], []byte(c[3])); status != 401 || errorCode(t, b) != "unauthorized" {
			t.Errorf("%s: %d %s", name, status, b)
		}
	}
	tok := mint(t, base, "hooks", `{"subscribe":["*"]}`)
	_, b := do(t, base, call{method: "GET", path: "/v1/tenants/hooks/topics/pay/events", header: map[string]string{"Authorization": "Bearer " + tok}})
	if !strings.Contains(string(b), `"head":0`) {
		t.Fatalf("refused webhooks stored events: %s", b)
	}
	good := sign(tn.WebhookSecret, "msg_1", now, body)
	if status, b := hook("msg_1", now, "v1,bm9wZQ== "+good, body); status != 201 || string(b) != `{"seq":1,"duplicate":false}`+"\n" {
		t.Fatalf("good signature (second of two): %d %s", status, b)
	}
	if status, b := hook("msg_1", now, good, body); status != 200 || string(b) != `{"seq":1,"duplicate":true}`+"\n" {
		t.Fatalf("redelivery of msg_1: %d %s", status, b)
	}
}

// syncBuffer is a log sink the server writes to from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A token, in a header or in the URL, never reaches a log line, whatever
// happens to the request.
func TestTokensAreNeverLogged(t *testing.T) {
	var logs syncBuffer
	_, base := startServerLogged(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), server.Hooks{},
		func(c *server.Config) { c.Dev, c.AdminKey = false, adminKey })
	createTenant(t, base, "quiet")
	tok := mint(t, base, "quiet", `{"publish":["*"],"subscribe":["*"]}`)
	bad := tok[:len(tok)-4] + "AAAA"
	for _, tk := range []string{tok, bad} {
		do(t, base, call{method: "POST", path: "/v1/tenants/quiet/topics/x/notify", body: "1", header: map[string]string{"Authorization": "Bearer " + tk}})
		do(t, base, call{method: "GET", path: "/v1/tenants/quiet/topics/x/events?after=zz&access_token=" + tk})
		resp, err := http.Get(base + "/v1/tenants/quiet/topics/x/watch?after=0&access_token=" + tk)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 10))
			resp.Body.Close()
		}
		do(t, base, call{method: "GET", path: "/v1/tenants/quiet/topics/.bad/watch?access_token=" + tk})
	}
	out := logs.String()
	if out == "" {
		t.Fatal("nothing was logged: the test proves nothing")
	}
	for _, secret := range []string{tok, bad, adminKey, strings.Split(tok, ".")[2]} {
		if strings.Contains(out, secret) {
			t.Fatalf("a secret reached the log:\n%s", out)
		}
	}
}

// The limits answer 429 with Retry-After, and a freed stream slot is
// usable again.
func TestLimitsAnswer429AndRecover(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) {
		c.MaxTenantStreams, c.MaxStreams, c.PublishRate, c.PublishBurst = 2, 3, 1, 2
	})
	open := func(tenant string) *http.Response {
		resp, err := http.Get(base + "/v1/tenants/" + tenant + "/topics/x/watch")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r1, r2 := open("t1"), open("t1")
	r3 := open("t1")
	b, _ := io.ReadAll(r3.Body)
	r3.Body.Close()
	if r3.StatusCode != 429 || r3.Header.Get("Retry-After") == "" || errorCode(t, b) != "too_many_streams" {
		t.Fatalf("third stream of a tenant: %d %s", r3.StatusCode, b)
	}
	r4 := open("t2")
	r5 := open("t3")
	b, _ = io.ReadAll(r5.Body)
	r5.Body.Close()
	if r4.StatusCode != 200 || r5.StatusCode != 429 || errorCode(t, b) != "too_many_streams" {
		t.Fatalf("global cap: %d then %d %s", r4.StatusCode, r5.StatusCode, b)
	}
	r1.Body.Close()
	deadline := time.Now().Add(wait)
	for {
		r := open("t1")
		ok := r.StatusCode == 200
		r.Body.Close()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's slot was never freed")
		}
		time.Sleep(10 * time.Millisecond) // polling until the server sees the client gone
	}
	r2.Body.Close()
	r4.Body.Close()

	statuses := []int{}
	var last []byte
	var retry string
	for i := 0; i < 3; i++ {
		resp, err := http.Post(base+"/v1/tenants/t1/topics/x/notify", "application/json", strings.NewReader(`1`))
		if err != nil {
			t.Fatal(err)
		}
		last, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		retry = resp.Header.Get("Retry-After")
	}
	if fmt.Sprint(statuses) != "[201 201 429]" || retry != "1" || errorCode(t, last) != "rate_limited" {
		t.Fatalf("publish rate: %v, Retry-After %q, %s", statuses, retry, last)
	}
}

// A page on another origin may watch with a long Last-Event-ID: the
// preflight it triggers is answered, and answers carry the origin.
func TestCORS(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.CORSOrigins = []string{"http://app.example"} })
	pre := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, base+"/v1/tenants/t/topics/x/watch", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "GET")
		req.Header.Set("Access-Control-Request-Headers", "last-event-id")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := pre("http://app.example")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Last-Event-ID") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := pre("http://evil.example"); resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin allowed: %v", resp.Header)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/tenants/t/topics/x/events", nil)
	req.Header.Set("Origin", "http://app.example")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.Header.Get("Access-Control-Allow-Origin") != "http://app.example" {
		t.Fatalf("GET from the origin: %v", r.Header)
	}
}

// A snapshot stream authorized before its tenant is deleted, and
// registered after, is refused rather than left open on a new hub that a
// re-created tenant would then feed.
func TestWatchRegisteredAfterTenantDeletionIsRefused(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	base := startServer(t, server.Hooks{Hub: hub.Hooks{AfterSnapshot: func(string, string) {
		close(inside)
		<-release
	}}}, func(c *server.Config) { c.Dev, c.AdminKey = false, adminKey })
	createTenant(t, base, "doomed")
	tok := mint(t, base, "doomed", `{"subscribe":["*"]}`)
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(base + "/v1/tenants/doomed/topics/x/watch?snapshot=1&access_token=" + tok)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-inside
	if status, _ := admin(t, base, "DELETE", "doomed", ""); status != 204 {
		t.Fatalf("delete: %d", status)
	}
	close(release)
	if status := <-got; status != 401 {
		t.Fatalf("watch registered after the deletion: %d, want 401", status)
	}
}

// In dev mode every tenant exists, but a GET never creates one (404 for a
// tenant no PUT made); deleting one, made or not, removes its data.
func TestDevModeAdminAPI(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.AdminKey = adminKey })
	do(t, base, call{method: "POST", path: "/v1/tenants/devt/topics/x/notify", body: "1"})
	if status, b := admin(t, base, "GET", "devt", ""); status != 404 || errorCode(t, b) != "unknown_tenant" {
		t.Fatalf("get in dev mode of a tenant no PUT made: %d %s", status, b)
	}
	if status, _ := admin(t, base, "DELETE", "devt", ""); status != 204 {
		t.Fatalf("delete in dev mode of a tenant no PUT made: %d", status)
	}
	if _, b := do(t, base, call{method: "GET", path: "/v1/tenants/devt/topics/x/events"}); !strings.Contains(string(b), `"head":0`) {
		t.Fatalf("data after delete: %s", b)
	}
	do(t, base, call{method: "POST", path: "/v1/tenants/devt/topics/x/notify", body: "1"})
	createTenant(t, base, "devt")
	if status, b := admin(t, base, "GET", "devt", ""); status != 200 || !strings.Contains(string(b), `"tenant":"devt"`) {
		t.Fatalf("get in dev mode: %d %s", status, b)
	}
	if status, _ := admin(t, base, "POST", "devt/tokens", `{}`); status != 201 {
		t.Fatalf("token in dev mode: %d", status)
	}
	if status, _ := admin(t, base, "DELETE", "devt", ""); status != 204 {
		t.Fatalf("delete in dev mode: %d", status)
	}
	if _, b := do(t, base, call{method: "GET", path: "/v1/tenants/devt/topics/x/events"}); !strings.Contains(string(b), `"head":0`) {
		t.Fatalf("data after delete: %s", b)
	}
}

// The Bearer scheme is case-insensitive, and another scheme in the header
// (a proxy's Basic) does not hide a stream's ?access_token=.
func TestBearerForms(t *testing.T) {
	base := authServer(t, nil)
	createTenant(t, base, "forms")
	tok := mint(t, base, "forms", `{"subscribe":["*"]}`)
	if status, b := do(t, base, call{method: "GET", path: "/v1/tenants/forms/topics/x/events", header: map[string]string{"Authorization": "bearer " + tok}}); status != 200 {
		t.Errorf("bearer in lower case: %d %s", status, b)
	}
	c := call{method: "GET", path: "/v1/tenants/forms/topics/x/watch?access_token=" + tok, header: map[string]string{"Authorization": "Basic dXNlcjpwdw=="}}
	if status := watchStatus(t, base, c); status != 200 {
		t.Errorf("a stream's access_token beside Basic: %d", status)
	}
}

// ?access_token= is a credential only on the stream's route, which
// EventSource opens and which cannot send a header: on notify, events and
// state it is ignored, as if absent (401 without another credential),
// and a token there does not hide a webhook signature.
func TestAccessTokenOnlyOnTheStream(t *testing.T) {
	base := authServer(t, nil)
	tn := createTenant(t, base, "q")
	tok := mint(t, base, "q", `{"publish":["*"],"subscribe":["*"]}`)
	for _, c := range []call{
		{method: "POST", path: "/v1/tenants/q/topics/x/notify?access_token=" + tok, body: "1"},
		{method: "GET", path: "/v1/tenants/q/topics/x/events?access_token=" + tok},
		{method: "GET", path: "/v1/tenants/q/topics/x/state?access_token=" + tok},
	} {
		if status, b := do(t, base, c); status != 401 || errorCode(t, b) != "unauthorized" {
			t.Errorf("%s %s: %d %s, want 401 unauthorized", c.method, c.path, status, b)
		}
	}
	if status := watchStatus(t, base, call{method: "GET", path: "/v1/tenants/q/topics/x/watch?access_token=" + tok}); status != 200 {
		t.Errorf("watch with access_token: %d, want 200", status)
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	hook := map[string]string{"webhook-id": "msg_q", "webhook-timestamp": now, "webhook-signature": sign(tn.WebhookSecret, "msg_q", now, []byte("2"))}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/q/topics/x/notify?access_token=" + tok, body: "2", header: hook}); status != 201 {
		t.Errorf("a signed webhook with an access_token in its URL: %d %s, want 201", status, b)
	}
}
