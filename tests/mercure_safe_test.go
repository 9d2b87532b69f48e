package tests

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// mercureTenant starts a production server (admin key k-123) with acme
// created, an HS256 issuer of the tenant registered under app, and
// returns it with a signer of the issuer's tokens.
func mercureTenant(t *testing.T, args ...string) (*proc, func(claims jwt.MapClaims) string) {
	t.Helper()
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0", args...)
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	secret := strings.Repeat("q", 40)
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/issuers/app", "k-123", `{"alg":"HS256","key":"`+secret+`"}`); st != 201 {
		t.Fatalf("register the app: %d %s", st, b)
	}
	return p, func(claims jwt.MapClaims) string {
		if _, ok := claims["exp"]; !ok {
			claims["exp"] = time.Now().Add(time.Hour).Unix()
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
}

// mercureGrants are a token's claims granting publish and subscribe.
func mercureGrants(publish, subscribe []string) jwt.MapClaims {
	return jwt.MapClaims{"mercure": map[string]any{"publish": publish, "subscribe": subscribe}}
}

// storedBytes is what the tenant stores, as its usage says.
func storedBytes(t *testing.T, p *proc) int64 {
	t.Helper()
	st, _, b := do(t, "GET", p.base+"/v1/admin/tenants/acme/usage", "k-123", "")
	var u struct {
		StoredBytes struct{ Used int64 } `json:"stored_bytes"`
	}
	if st != 200 || json.Unmarshal(b, &u) != nil {
		t.Fatalf("usage: %d %s", st, b)
	}
	return u.StoredBytes.Used
}

// A tenant's Mercure settings: all off at first; a PUT changes the
// fields it names and answers them all; a bad body (9 kinds) is 400
// invalid_settings and changes nothing; an unknown tenant is 404, no
// admin key 401; the CLI reads and changes them too.
func TestMercureSettings(t *testing.T) {
	p, _ := mercureTenant(t)
	path := p.base + "/v1/admin/tenants/acme/mercure"
	settings := func(st int, _ http.Header, b []byte) string {
		t.Helper()
		if st != 200 {
			t.Fatalf("settings: %d %s", st, b)
		}
		return strings.TrimSpace(string(b))
	}
	if got := settings(do(t, "GET", path, "k-123", "")); got != `{"anonymous":false,"subscriptions":false,"publish_origins":[]}` {
		t.Fatalf("the defaults: %s", got)
	}
	want := `{"anonymous":true,"subscriptions":false,"publish_origins":["https://app.example.com","http://localhost:3000"]}`
	if got := settings(do(t, "PUT", path, "k-123", `{"anonymous":true,"publish_origins":["https://app.example.com","http://localhost:3000"]}`)); got != want {
		t.Fatalf("after a PUT: %s", got)
	}
	if got := settings(do(t, "PUT", path, "k-123", `{"subscriptions":true}`)); got != strings.Replace(want, `"subscriptions":false`, `"subscriptions":true`, 1) {
		t.Fatalf("a PUT of one field: %s", got)
	}
	for _, bad := range []string{`[]`, `{"anonymous":"yes"}`, `{"anonymous":true,"other":1}`, `{"publish_origins":["*.example.com"]}`,
		`{"publish_origins":["https://app.example.com/path"]}`, `{"publish_origins":["ftp://x"]}`, `{"anonymous":false} {}`, `nope`, `null`} {
		if st, _, b := do(t, "PUT", path, "k-123", bad); st != 400 || !strings.Contains(string(b), `"code":"invalid_settings"`) {
			t.Errorf("PUT %s: %d %s, want 400 invalid_settings", bad, st, b)
		}
	}
	if got := settings(do(t, "GET", path, "k-123", "")); !strings.Contains(got, `"anonymous":true,"subscriptions":true`) {
		t.Fatalf("bad bodies changed the settings: %s", got)
	}
	if st, _, b := do(t, "GET", p.base+"/v1/admin/tenants/ghost/mercure", "k-123", ""); st != 404 || !strings.Contains(string(b), "unknown_tenant") {
		t.Errorf("an unknown tenant: %d %s", st, b)
	}
	if st, _, _ := do(t, "PUT", path, "", `{"anonymous":false}`); st != 401 {
		t.Errorf("no admin key: %d", st)
	}

	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"tenant", "mercure", "acme", "--server", p.base}, args...)...)
		cmd.Env = append(cmd.Environ(), "EDGEHUB_ADMIN_KEY=k-123")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("edgehub tenant mercure %v: %v", args, err)
		}
		return strings.Join(strings.Fields(string(out)), "")
	}
	if got := cli("--no-anonymous", "--no-publish-origins"); got != `{"anonymous":false,"subscriptions":true,"publish_origins":[]}` {
		t.Errorf("the CLI's change: %s", got)
	}
	if got := cli(); got != `{"anonymous":false,"subscriptions":true,"publish_origins":[]}` {
		t.Errorf("the CLI's read: %s", got)
	}
}

// H1: with no credential, subscribing stores nothing, whatever the
// tenant's settings; a token's subscriber is announced (subscriptions
// on) within a bound of bytes, paid for with the tenant's publishes and
// stored bytes. Announcing anonymous subscribers, or not bounding what
// one announcement stores, fails it.
func TestAnonymousSubscribersStoreNothing(t *testing.T) {
	p, sign := mercureTenant(t, "--publish-rate", "1", "--publish-burst", "4")
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	// 50 URL patterns of 1 KB: what a request's headers (64 KiB by
	// default) hold.
	long := url.Values{}
	for i := range 50 {
		long.Add("match_urlpattern", "https://example.com/"+strings.Repeat("x", 980)+"/"+string(rune('a'+i%26))+strings.Repeat("z", i/26))
	}
	subscribeOnce := func(q string, header map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, hub+"?"+q, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	before := storedBytes(t, p)
	for _, settings := range []string{`{"anonymous": true, "subscriptions": false}`, `{"anonymous": true, "subscriptions": true}`} {
		if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/mercure", "k-123", settings); st != 200 {
			t.Fatalf("settings: %d %s", st, b)
		}
		for range 20 {
			if st := subscribeOnce(long.Encode(), nil); st != 200 {
				t.Fatalf("an anonymous subscriber (%s): %d", settings, st)
			}
		}
	}
	if after := storedBytes(t, p); after != before {
		t.Fatalf("40 anonymous subscribers at the bounds stored %d bytes, want none", after-before)
	}
	token := sign(mercureGrants(nil, []string{"*"}))
	bearer := map[string]string{"Authorization": "Bearer " + token}
	if st := subscribeOnce(long.Encode(), bearer); st != 400 {
		t.Fatalf("a token's subscriber whose announcement is over its bound: %d, want 400", st)
	}
	if after := storedBytes(t, p); after != before {
		t.Fatalf("a refused announcement stored %d bytes", after-before)
	}
	// Each announced subscriber pays two publishes (its start and its
	// end) of the tenant's burst of 4.
	for i := range 2 {
		if st := subscribeOnce("match=orders", bearer); st != 200 {
			t.Fatalf("announced subscriber %d: %d", i, st)
		}
	}
	if st := subscribeOnce("match=orders", bearer); st != 429 {
		t.Fatalf("a third announced subscriber past the tenant's publish rate: %d, want 429", st)
	}
	grew := storedBytes(t, p) - before
	if grew <= 0 || grew > 4*1024 {
		t.Fatalf("two announced subscribers (start and end) stored %d bytes", grew)
	}
}

// L1: a publish whose token comes from a cookie is taken from the hub's
// own pages and the tenant's publish_origins only (by Origin, else
// Referer), and from a client that sends neither (no browser); the same
// token in the Authorization header publishes from anywhere.
func TestCookiePublishesComeFromListedOrigins(t *testing.T) {
	p, sign := mercureTenant(t)
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/mercure", "k-123", `{"publish_origins":["https://app.example.com"]}`); st != 200 {
		t.Fatalf("settings: %d %s", st, b)
	}
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	token := sign(mercureGrants([]string{"*"}, []string{"*"}))
	cookie := "mercureAuthorization=" + token
	own := strings.Replace(p.base, "http://", "https://", 1) // a proxy in front may end TLS
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"no Origin nor Referer", map[string]string{"Cookie": cookie}, 200},
		{"the hub's own origin", map[string]string{"Cookie": cookie, "Origin": p.base}, 200},
		{"the hub's own host behind TLS", map[string]string{"Cookie": cookie, "Origin": own}, 200},
		{"a listed origin", map[string]string{"Cookie": cookie, "Origin": "https://app.example.com"}, 200},
		{"a listed origin's page, by Referer", map[string]string{"Cookie": cookie, "Referer": "https://app.example.com/page"}, 200},
		{"another origin", map[string]string{"Cookie": cookie, "Origin": "https://evil.example"}, 403},
		{"another origin's page, by Referer", map[string]string{"Cookie": cookie, "Referer": "https://evil.example/x"}, 403},
		{"the null origin", map[string]string{"Cookie": cookie, "Origin": "null"}, 403},
		{"the header's token, another origin", map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}, 200},
	} {
		st, h, b := mercurePost(t, hub, url.Values{"topic": {"orders"}, "data": {c.name}}, c.header)
		if st != c.status || (st == 403 && (!strings.Contains(b, `"code":"forbidden"`) || !strings.Contains(h.Get("WWW-Authenticate"), "insufficient_scope"))) {
			t.Errorf("%s: %d %s, want %d", c.name, st, b, c.status)
		}
	}
	_, read, _ := p.readTenant(t, p.mintAcme(t, "k-123", `"*"`, `"*"`), "after=0")
	if len(read.Events) != 6 {
		t.Errorf("%d events stored, want the 6 allowed", len(read.Events))
	}
}

// A listed --cors-origins origin gets Access-Control-Allow-Credentials on
// the Mercure routes (their answers and their preflights), so that a
// page's EventSource with withCredentials sends its cookie; the native
// routes and "*" never allow credentials.
func TestMercureAllowsCredentialsToListedOrigins(t *testing.T) {
	p := start(t, t.TempDir(), "--cors-origins", "https://app.example.com,*", "--mercure-tenant", "acme")
	ask := func(method, path, origin string) http.Header {
		t.Helper()
		req, _ := http.NewRequest(method, p.base+path, nil)
		req.Header.Set("Origin", origin)
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "GET")
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header
	}
	for _, c := range []struct {
		method, path, origin, allow, credentials string
	}{
		{"GET", "/.well-known/mercure/subscriptions", "https://app.example.com", "https://app.example.com", "true"},
		{"OPTIONS", "/v1/tenants/acme/.well-known/mercure", "https://app.example.com", "https://app.example.com", "true"},
		{"GET", "/.well-known/mercure/subscriptions", "https://other.example", "*", ""},
		{"GET", "/v1/tenants/acme/topics/orders/events", "https://app.example.com", "https://app.example.com", ""},
		{"GET", "/v1/tenants/acme/topics/a%2F.well-known%2Fmercure%2Fx/events", "https://app.example.com", "https://app.example.com", ""},
	} {
		h := ask(c.method, c.path, c.origin)
		if h.Get("Access-Control-Allow-Origin") != c.allow || h.Get("Access-Control-Allow-Credentials") != c.credentials {
			t.Errorf("%s %s from %s: allow %q, credentials %q, want %q and %q", c.method, c.path, c.origin,
				h.Get("Access-Control-Allow-Origin"), h.Get("Access-Control-Allow-Credentials"), c.allow, c.credentials)
		}
	}
}

// Types as Mercure allows them (any text without control characters but
// "mercure") are kept: a Mercure subscriber gets them as the event's
// name; native streams send them as message, with the true type in the
// envelope, so that no name of the hub's own frames passes. A native
// event of type mercure reaches a granted Mercure subscriber as a plain
// message (F5).
func TestMercureTypesAsMercureAllows(t *testing.T) {
	p := start(t, t.TempDir(), "--mercure-tenant", "acme")
	hub := p.base + "/.well-known/mercure"
	topic := p.watch(t, "t", "?after=0", nil)
	topic.hello(t)
	tenant := openStream(t, p.base+"/v1/tenants/acme/watch?after=0", nil)
	tenant.hello(t)
	types := []string{"book/updated", "hello", "Book Updated", "livre.mis_à_jour", `say "<hi>"`, "created"}
	for _, typ := range types {
		if st, _, b := mercurePost(t, hub, url.Values{"topic": {"t"}, "data": {"x"}, "type": {typ}}, nil); st != 200 {
			t.Fatalf("type %q: %d %s", typ, st, b)
		}
	}
	if st, _, b := do(t, "POST", p.topicURL("t", "notify")+"?type=mercure", "", `{"n":1}`); st != 201 {
		t.Fatalf("a native event of type mercure: %d %s", st, b)
	}
	for _, typ := range types {
		for name, s := range map[string]*stream{"topic": topic, "tenant": tenant} {
			f := s.next(t)
			var env struct{ Type string }
			if err := json.Unmarshal([]byte(f.Data), &env); err != nil || env.Type != typ {
				t.Fatalf("%s stream: %+v (%v), want the envelope's type %q", name, f, err, typ)
			}
			if want := map[bool]string{true: typ, false: "message"}[typ == "created"]; f.Event != want {
				t.Errorf("%s stream: event %q for type %q, want %q", name, f.Event, typ, want)
			}
		}
	}
	m := subscribeMercure(t, hub, "topic=t", map[string]string{"Last-Event-ID": "earliest", "Authorization": "Bearer any"})
	for i, f := range m.want(t, "the types", "#1", "#2", "#3", "#4", "#5", "#6", "#7") {
		switch {
		case i < len(types) && f.Event != types[i]:
			t.Errorf("Mercure: event %q, want %q", f.Event, types[i])
		case i == len(types) && (f.Event != "message" || f.Data != `{"n":1}`):
			t.Errorf("Mercure: a native event of type mercure: %+v, want a plain message", f)
		}
	}
}

// F1 and F3: retention removed an update a publisher gave an id: a
// subscriber resuming after that id resumes where it was, told of the gap
// and given every update kept since; a publish retried with its
// Idempotency-Key is answered with the original's id.
func TestMercureResumesAfterATrimmedUpdate(t *testing.T) {
	p := start(t, t.TempDir(), "--mercure-tenant", "acme", "--retention-events", "2", "--admin-key", "k-123")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	hub := p.base + "/.well-known/mercure"
	post := func(form url.Values, header map[string]string, want string) {
		t.Helper()
		if st, _, id := mercurePost(t, hub, form, header); st != 200 || id != want {
			t.Fatalf("publish %v: %d %q, want %s", form, st, id, want)
		}
	}
	key := map[string]string{"Idempotency-Key": "k-1"}
	post(url.Values{"topic": {"a"}, "data": {"first"}, "id": {"u1"}}, nil, "u1")
	post(url.Values{"topic": {"b"}, "data": {"keyed"}}, key, "#2")
	before := storedBytes(t, p)
	post(url.Values{"topic": {"c"}, "data": {"kept"}}, nil, "#3")
	kept := storedBytes(t, p) - before // c's update, which retention keeps
	for range 3 {
		p.publish(t, "a", `{"n":1}`)
		p.publish(t, "b", `{"n":2}`)
	}
	// Once the rows are gone (not only trimmed), the store holds c's
	// update and the newest two of a and b, 14 bytes each.
	waitFor(t, "the purge of a's and b's first events", func() bool { return storedBytes(t, p) == kept+4*14 })
	post(url.Values{"topic": {"b"}, "data": {"keyed"}}, key, "#2")
	s := subscribeMercure(t, hub, "match=a&match=b&match=c", map[string]string{"Last-Event-ID": "u1", "Authorization": "Bearer any"})
	if h := s.resp.Header.Get("Mercure-Last-Event-ID"); h != "u1" {
		t.Errorf("Mercure-Last-Event-ID %q, want u1", h)
	}
	var gaps, ids []string
	for len(ids) < 5 {
		f, err := s.dec.Next()
		if err != nil {
			t.Fatalf("after %v: %v", ids, err)
		}
		if f.Event == "gap" {
			gaps = append(gaps, f.Data)
			continue
		}
		ids = append(ids, f.ID)
	}
	if strings.Join(ids, " ") != "#3 #6 #7 #8 #9" || len(gaps) != 2 {
		t.Fatalf("after u1: updates %v and gaps %v, want #3 #6..#9 and the gaps of a and b", ids, gaps)
	}
}

// Without --mercure-tenant, the well-known path, where Mercure's clients
// look by default, says where the hubs are.
func TestWellKnownMercureSaysWhereTheHubsAre(t *testing.T) {
	p := start(t, t.TempDir())
	for _, path := range []string{"/.well-known/mercure?topic=x", "/.well-known/mercure/subscriptions"} {
		st, _, b := do(t, "GET", p.base+path, "", "")
		if st != 404 || !strings.Contains(string(b), `"code":"not_found"`) || !strings.Contains(string(b), "--mercure-tenant") ||
			!strings.Contains(string(b), "/v1/tenants/{tenant}/.well-known/mercure") {
			t.Errorf("GET %s: %d %s", path, st, b)
		}
	}
}

// The end of a subscription is paid for at its start: a tenant whose
// stored bytes are full meanwhile still has its subscriber's end
// announced and unlisted. Refusing the end for the quota fails it.
func TestSubscriptionEndsDespiteAFullQuota(t *testing.T) {
	p, sign := mercureTenant(t, "--max-tenant-bytes", "4000")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/mercure", "k-123", `{"subscriptions": true}`); st != 200 {
		t.Fatalf("settings: %d %s", st, b)
	}
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	token := sign(mercureGrants([]string{"*"}, []string{"*"}))
	s := subscribeMercure(t, hub, "match=orders", map[string]string{"Authorization": "Bearer " + token})
	for i := 0; ; i++ {
		st, _, b := mercurePost(t, hub, url.Values{"topic": {"fill"}, "data": {strings.Repeat("x", 200)}}, map[string]string{"Authorization": "Bearer " + token})
		if st == 429 && strings.Contains(b, "quota_exceeded") {
			break
		}
		if st != 200 || i > 100 {
			t.Fatalf("filling the quota: %d %s", st, b)
		}
	}
	s.resp.Body.Close()
	waitFor(t, "the end of the subscriber", func() bool {
		st, _, b := do(t, "GET", hub+"/subscriptions/exact/orders", token, "")
		return st == 200 && strings.Contains(string(b), `"subscriptions":[]`)
	})
}
