package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// mercurePost publishes form to a Mercure hub URL with the headers
// given, and returns the status, headers and body.
func mercurePost(t *testing.T, hubURL string, form url.Values, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, hubURL, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// A Mercure publish, at the tenant's hub URL and at the well-known one of
// --mercure-tenant, answers 200 text/plain with the update's id (the
// publisher's, else the hub's "#<position>") once it is committed: it is
// an event of its first topic, its data a JSON string, that native reads
// see. An Idempotency-Key makes a repeat answer the first id and append
// nothing. Every malformed form is refused as the protocol says and
// stores nothing.
func TestMercurePublishIsAnEvent(t *testing.T) {
	p := start(t, t.TempDir(), "--mercure-tenant", "acme", "--max-body", "4096")
	wellKnown, tenantHub := p.base+"/.well-known/mercure", p.base+"/v1/tenants/acme/.well-known/mercure"
	st, h, id := mercurePost(t, wellKnown, url.Values{"topic": {"https://example.com/books/1", "https://example.com/authors/2"},
		"data": {"line one\nline two"}, "id": {"urn:book:1"}, "private": {"on"}, "retry": {"500"}}, nil)
	if st != 200 || id != "urn:book:1" || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("publish with an id: %d %q %q", st, h.Get("Content-Type"), id)
	}
	st, _, id = mercurePost(t, tenantHub, url.Values{"topic": {"orders"}, "data": {"d"}, "type": {"created"}}, nil)
	if st != 200 || id != "#2" {
		t.Fatalf("publish without an id: %d %q, want the hub's id #2", st, id)
	}
	keyed := url.Values{"topic": {"orders"}, "data": {"once"}}
	for range 2 {
		if st, _, id = mercurePost(t, tenantHub, keyed, map[string]string{"Idempotency-Key": "k-1"}); st != 200 || id != "#3" {
			t.Fatalf("an idempotent publish: %d %q, want #3 both times", st, id)
		}
	}
	if st, _, b := mercurePost(t, tenantHub, url.Values{"topic": {"orders"}, "data": {"other"}}, map[string]string{"Idempotency-Key": "k-1"}); st != 422 || !strings.Contains(b, "idempotency_key_reused") {
		t.Fatalf("a key reused for another update: %d %s", st, b)
	}

	bad := []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
		code   string
	}{
		{"no topic", url.Values{"data": {"x"}}, nil, 400, "invalid_body"},
		{"the wildcard", url.Values{"topic": {"*"}}, nil, 400, "invalid_name"},
		{"a control character", url.Values{"topic": {"a\u0085b"}}, nil, 400, "invalid_name"},
		{"the subscriptions namespace", url.Values{"topic": {"/.well-known/mercure/subscriptions/a/b"}}, nil, 400, "invalid_name"},
		{"the namespace, relative and escaped", url.Values{"topic": {"/books/../.well-known/%6Dercure/x"}}, nil, 400, "invalid_name"},
		{"the namespace, absolute", url.Values{"topic": {"https://example.com/.well-known/mercure/x"}}, nil, 400, "invalid_name"},
		{"one bad topic of two", url.Values{"topic": {"ok", "*"}}, nil, 400, "invalid_name"},
		{"a hub id", url.Values{"topic": {"t"}, "id": {"#9"}}, nil, 400, "invalid_body"},
		{"earliest as an id", url.Values{"topic": {"t"}, "id": {"earliest"}}, nil, 400, "invalid_body"},
		{"a newline in the id", url.Values{"topic": {"t"}, "id": {"a\nb"}}, nil, 400, "invalid_body"},
		{"type mercure", url.Values{"topic": {"t"}, "type": {"mercure"}}, nil, 400, "invalid_type"},
		{"a tab in the type", url.Values{"topic": {"t"}, "type": {"a\tb"}}, nil, 400, "invalid_type"},
		{"a type of 257 characters", url.Values{"topic": {"t"}, "type": {strings.Repeat("é", 257)}}, nil, 400, "invalid_type"},
		{"a negative retry", url.Values{"topic": {"t"}, "retry": {"-1"}}, nil, 400, "invalid_body"},
		{"not UTF-8", url.Values{"topic": {"t"}, "data": {"\xff"}}, nil, 400, "invalid_body"},
		{"a space in the Idempotency-Key", url.Values{"topic": {"t"}}, map[string]string{"Idempotency-Key": "a b"}, 400, "invalid_idempotency_key"},
		{"JSON, not a form", url.Values{"topic": {"t"}}, map[string]string{"Content-Type": "application/json"}, 400, "invalid_body"},
		{"over --max-body", url.Values{"topic": {"t"}, "data": {strings.Repeat("x", 5000)}}, nil, 413, "too_large"},
	}
	for _, c := range bad {
		if st, _, b := mercurePost(t, tenantHub, c.form, c.header); st != c.status || !strings.Contains(b, `"code":"`+c.code+`"`) {
			t.Errorf("%s: %d %s, want %d %s", c.name, st, b, c.status, c.code)
		}
	}

	st, _, b := do(t, "GET", p.base+"/v1/tenants/acme/events?after=0", "", "")
	var read struct {
		Events []struct {
			Topic, Type string
			Pos         int64
			Data        json.RawMessage
		}
		Head int64
	}
	if st != 200 || json.Unmarshal(b, &read) != nil || read.Head != 3 || len(read.Events) != 3 {
		t.Fatalf("the tenant's events after the refusals: %d %s, want the 3 updates", st, b)
	}
	for i, want := range []struct{ topic, typ, data string }{
		{"https://example.com/books/1", "message", `"line one\nline two"`}, {"orders", "created", `"d"`}, {"orders", "message", `"once"`},
	} {
		if e := read.Events[i]; e.Topic != want.topic || e.Type != want.typ || string(e.Data) != want.data || e.Pos != int64(i+1) {
			t.Errorf("event %d: %+v, want %+v", i+1, e, want)
		}
	}
}

// Outside dev mode a publisher needs a token granting every topic of its
// update, from the Authorization header, the mercureAuthorization cookie
// or 0.x's authorization query parameter; without one it is 401 with a
// bare challenge, with a bad one 401 invalid_token, with too narrow a one
// 403 insufficient_scope (RFC 6750), and nothing is stored.
func TestMercurePublishNeedsItsGrants(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	secret := strings.Repeat("m", 40)
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/issuers/app", "k-123", `{"alg":"HS256","key":"`+secret+`"}`); st != 201 {
		t.Fatalf("register the app: %d %s", st, b)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix(),
		"mercure": map[string]any{"publish": []string{"https://example.com/books/{id}"}}}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	book := url.Values{"topic": {"https://example.com/books/1"}, "data": {"x"}}
	for name, try := range map[string]func() (int, http.Header, string){
		"bearer": func() (int, http.Header, string) {
			return mercurePost(t, hub, book, map[string]string{"Authorization": "Bearer " + tok})
		},
		"cookie": func() (int, http.Header, string) {
			return mercurePost(t, hub, book, map[string]string{"Cookie": "mercureAuthorization=" + tok})
		},
		"the current revision's cookie": func() (int, http.Header, string) {
			return mercurePost(t, hub, book, map[string]string{"Cookie": "__Secure-mercure_access_token=" + tok})
		},
		"query": func() (int, http.Header, string) { return mercurePost(t, hub+"?authorization="+tok, book, nil) },
	} {
		if st, _, b := try(); st != 200 || !strings.HasPrefix(b, "#") {
			t.Errorf("a token by %s: %d %s", name, st, b)
		}
	}
	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
		bearer string
	}{
		{"no token", book, nil, 401, `Bearer realm="mercure"`},
		{"a bad token", book, map[string]string{"Authorization": "Bearer x.y.z"}, 401, `Bearer realm="mercure", error="invalid_token"`},
		{"a topic not granted", url.Values{"topic": {"https://example.com/authors/1"}}, map[string]string{"Authorization": "Bearer " + tok}, 403, `Bearer realm="mercure", error="insufficient_scope"`},
		{"one topic of two not granted", url.Values{"topic": {"https://example.com/books/2", "https://example.com/authors/1"}},
			map[string]string{"Authorization": "Bearer " + tok}, 403, `Bearer realm="mercure", error="insufficient_scope"`},
	} {
		st, h, b := mercurePost(t, hub, c.form, c.header)
		if st != c.status || challenge(h) != c.bearer {
			t.Errorf("%s: %d %q %s, want %d and %s", c.name, st, h.Get("WWW-Authenticate"), b, c.status, c.bearer)
		}
	}
	admin := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	st, _, b := do(t, "GET", p.base+"/v1/tenants/acme/events?after=0", admin, "")
	var read struct{ Head int64 }
	if st != 200 || json.Unmarshal(b, &read) != nil || read.Head != 4 {
		t.Fatalf("the tenant's head after 4 granted publishes and 4 refused: %d %s", st, b)
	}
}
