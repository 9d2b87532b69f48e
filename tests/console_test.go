package tests

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/refusal"
)

// consoleAnswer is one answer of a console route.
type consoleAnswer struct {
	status int
	header http.Header
	body   []byte
}

// code is the error code of a refusal's body, "" for any other body.
func (a consoleAnswer) code() refusal.Code {
	var e struct{ Error struct{ Code refusal.Code } }
	json.Unmarshal(a.body, &e)
	return e.Error.Code
}

// consoleGet GETs path from p, with key as the bearer token unless empty.
func consoleGet(t *testing.T, p *proc, path, key string) consoleAnswer {
	t.Helper()
	status, header, body := do(t, http.MethodGet, p.base+path, key, "")
	return consoleAnswer{status: status, header: header, body: body}
}

// consoleTopic is the console API's answer, field for field.
type consoleTopic struct {
	Tenant  string `json:"tenant"`
	Topic   string `json:"topic"`
	Head    int64  `json:"head"`
	Streams struct {
		Topic  int `json:"topic"`
		Tenant int `json:"tenant"`
		All    int `json:"all"`
	} `json:"streams"`
}

// decodeTopic decodes the API's answer, refusing any field it does not
// know: the answer has a fixed set of fields, so its size is bounded.
func decodeTopic(t *testing.T, a consoleAnswer) consoleTopic {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("console API: %d %s", a.status, a.body)
	}
	var got consoleTopic
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("console API answer %s: %v", a.body, err)
	}
	return got
}

// With an admin key and without dev mode, the page is served (it holds no
// data), and the API answers only the admin key: 401 unauthorized without
// it or with a wrong one. An unknown tenant is 404 unknown_tenant, as in
// the admin API.
func TestConsoleAPINeedsTheAdminKey(t *testing.T) {
	const key = "console-admin-key-0123456789abcdefghij"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, http.MethodPut, p.base+"/v1/admin/tenants/acme", key, ""); st != http.StatusCreated {
		t.Fatalf("create tenant: %d %s", st, b)
	}

	if a := consoleGet(t, p, "/console", ""); a.status != http.StatusOK {
		t.Fatalf("the page without the key: %d %s", a.status, a.body)
	}
	for _, path := range []string{"/console/api/mode", "/console/api/topics/acme/orders"} {
		for _, k := range []string{"", "wrong-" + key, key + "x"} {
			if a := consoleGet(t, p, path, k); a.status != http.StatusUnauthorized || a.code() != refusal.Unauthorized {
				t.Errorf("GET %s with key %q: %d %s, want 401 unauthorized", path, k, a.status, a.body)
			}
		}
	}
	if a := consoleGet(t, p, "/console/api/mode", key); a.status != http.StatusOK || string(a.body) != `{"mode":"admin"}`+"\n" {
		t.Errorf("mode with the key: %d %s", a.status, a.body)
	}
	if got := decodeTopic(t, consoleGet(t, p, "/console/api/topics/acme/orders", key)); got.Tenant != "acme" || got.Topic != "orders" || got.Head != 0 {
		t.Errorf("topic with the key: %+v", got)
	}
	if a := consoleGet(t, p, "/console/api/topics/nobody/orders", key); a.status != http.StatusNotFound || a.code() != refusal.UnknownTenant {
		t.Errorf("an unknown tenant: %d %s, want 404 unknown_tenant", a.status, a.body)
	}
}

// In dev mode the API needs no credentials; for a topic after N publishes
// it answers head N and the streams open on the topic, on its tenant and
// in all, and it is never cached.
func TestConsoleAPIAnswersHeadAndStreams(t *testing.T) {
	p := start(t, t.TempDir())
	if a := consoleGet(t, p, "/console/api/mode", ""); a.status != http.StatusOK || string(a.body) != `{"mode":"dev"}`+"\n" {
		t.Fatalf("mode: %d %s", a.status, a.body)
	}
	const n = 5
	for i := range n {
		p.publish(t, "orders", `{"n":`+strconv.Itoa(i)+`}`)
	}
	// A stream's answer begins only once it is registered, and counted.
	onTopic := p.watch(t, "orders", "", nil)
	p.watch(t, "refunds", "", nil)
	elsewhere, err := http.Get(p.base + "/v1/tenants/other/topics/orders/watch")
	if err != nil || elsewhere.StatusCode != http.StatusOK {
		t.Fatalf("watch of another tenant: %v %v", elsewhere, err)
	}
	defer elsewhere.Body.Close()
	a := consoleGet(t, p, "/console/api/topics/acme/orders", "")
	if cc := a.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	got := decodeTopic(t, a)
	if got.Tenant != "acme" || got.Topic != "orders" || got.Head != n {
		t.Errorf("answer %+v, want acme/orders at head %d", got, n)
	}
	if s := got.Streams; s.Topic != 1 || s.Tenant != 2 || s.All != 3 {
		t.Errorf("streams %+v, want 1 on the topic, 2 on the tenant, 3 in all", s)
	}
	// A stream that ends is no longer counted (its server notices the
	// closed connection on its own time: poll).
	onTopic.close()
	deadline := time.Now().Add(wait)
	for decodeTopic(t, consoleGet(t, p, "/console/api/topics/acme/orders", "")).Streams.Topic != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a closed stream is still counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Names are checked before credentials, with the same rules as the
// tenant routes: 400 invalid_name, in dev mode and with no key outside it.
func TestConsoleChecksNames(t *testing.T) {
	dev := start(t, t.TempDir())
	keyed := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=console-admin-key-0123456789abcdefghij"}, t.TempDir(), "127.0.0.1:0")
	bad := []string{"/console/api/topics/acme/.hidden", "/console/api/topics/ac!me/orders",
		"/console/api/topics/acme/" + strings.Repeat("x", 1025), "/console/api/topics/acme/a%09b", "/console/api/topics/acme/%2A"}
	for _, p := range []*proc{dev, keyed} {
		for _, path := range bad {
			a := consoleGet(t, p, path, "")
			if a.status != http.StatusBadRequest || a.code() != refusal.InvalidName {
				t.Errorf("GET %s: %d %s, want 400 invalid_name", path, a.status, a.body)
			}
			if a.header.Get("Cache-Control") != "no-store" || a.header.Get("X-Content-Type-Options") != "nosniff" || a.header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("GET %s: a refusal without the console's headers: %v", path, a.header)
			}
		}
	}
}

// The page, its script and its style carry a Content-Security-Policy that
// allows only the hub's own origin, no inline script and no framing (and
// X-Frame-Options: DENY, for browsers older than frame-ancestors), and
// nosniff; the page has no inline script and no inline event handler.
func TestConsolePageHeaders(t *testing.T) {
	p := start(t, t.TempDir())
	const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
		"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	for path, contentType := range map[string]string{
		"/console":             "text/html; charset=utf-8",
		"/console/console.js":  "text/javascript; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
		"/console/favicon.svg": "image/svg+xml",
	} {
		a := consoleGet(t, p, path, "")
		if a.status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, a.status)
		}
		for h, want := range map[string]string{
			"Content-Type":            contentType,
			"Content-Security-Policy": csp,
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "no-referrer",
			"X-Frame-Options":         "DENY",
		} {
			if got := a.header.Get(h); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, h, got, want)
			}
		}
	}
	page := consoleGet(t, p, "/console", "").body
	scripts := regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`).FindAllSubmatch(page, -1)
	if len(scripts) == 0 {
		t.Fatal("the page has no script")
	}
	for _, s := range scripts {
		if !bytes.Contains(s[1], []byte(`src="console/`)) || len(bytes.TrimSpace(s[2])) > 0 {
			t.Errorf("an inline script in the page: %s", s[0])
		}
	}
	if h := regexp.MustCompile(`(?i)\son[a-z]+\s*=`).Find(page); h != nil {
		t.Errorf("an inline event handler in the page: %s", h)
	}
}
