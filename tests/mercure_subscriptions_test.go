package tests

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// subscriptionDoc is a Mercure subscription, as its events and the
// subscriptions API describe it.
type subscriptionDoc struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	MatchType  string `json:"match_type"`
	Match      string `json:"match"`
	Topic      string `json:"topic"`
	Subscriber string `json:"subscriber"`
	Active     bool   `json:"active"`
}

// nextSubscriptionEvent reads the stream's next frame, which must be a
// subscription event.
func nextSubscriptionEvent(t *testing.T, s *mercureStream, name string) subscriptionDoc {
	t.Helper()
	f, err := s.dec.Next()
	if err != nil {
		t.Fatalf("%s: the stream ended: %v", name, err)
	}
	var d subscriptionDoc
	if f.Event != "mercure" || json.Unmarshal([]byte(f.Data), &d) != nil || d.Type != "subscription" {
		t.Fatalf("%s: frame %+v, want a subscription event", name, f)
	}
	return d
}

// subscriptionsOf reads n subscription events of one subscriber, keyed by
// their selectors.
func subscriptionsOf(t *testing.T, s *mercureStream, name string, n int) map[string]subscriptionDoc {
	t.Helper()
	docs := map[string]subscriptionDoc{}
	for range n {
		d := nextSubscriptionEvent(t, s, name)
		if d.Topic != "" {
			docs["topic "+d.Topic] = d
		} else {
			docs[d.MatchType+" "+d.Match] = d
		}
	}
	return docs
}

// getSubscriptions asks the subscriptions API at path with token and
// returns the status, the cursor of its Link header and the body.
func getSubscriptions(t *testing.T, path, token string) (int, http.Header, []byte) {
	t.Helper()
	return do(t, "GET", path, token, "")
}

var cursorOf = regexp.MustCompile(`^<([^>]+)>; rel="mercure"; last-event-id="([^"]+)"; type="mercure"; content-type="application/json"$`)

// Mercure's active subscriptions, once the tenant turns them on: every
// selector of a subscriber with a token is a subscription, announced
// when it starts and when it ends by a private event of type mercure
// under its own topic (a 0.x topic selector's named by its topic); the
// API lists what is active, in the current revision's forms and 0.x's,
// with a cursor after which the events tell every change the list
// misses. Anonymous subscribers are never announced and never see them,
// the API needs a grant on its URL, a native event cannot pass for one,
// and each carries its token's payload for its selector. Off, the API is
// 404 and nothing is announced.
func TestMercureActiveSubscriptions(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0", "--mercure-tenant", "acme")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	secret := strings.Repeat("s", 40)
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/issuers/app", "k-123", `{"alg":"HS256","key":"`+secret+`"}`); st != 201 {
		t.Fatalf("register the app: %d %s", st, b)
	}
	sign := func(subscribe ...string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix(),
			"mercure": map[string]any{"publish": []string{"*"}, "subscribe": subscribe}}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	all, books, reads := sign("*"), sign("https://example.com/books/{id}"), sign("urn:nothing")
	hub := p.base + "/.well-known/mercure"
	api := hub + "/subscriptions"
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	events := "match_urlpattern=" + url.QueryEscape("/.well-known/mercure/subscriptions/*")

	// Off, as by default: the API is 404, nothing is announced (the
	// sentinel is the first thing a watcher from the start sees).
	if st, _, b := getSubscriptions(t, api, all); st != 404 {
		t.Fatalf("the API while off: %d %s, want 404", st, b)
	}
	quiet := subscribeMercure(t, hub, "match=urn:quiet", bearer(reads))
	if st, _, id := mercurePost(t, hub, url.Values{"topic": {"urn:first"}, "data": {"first"}}, bearer(all)); st != 200 || id != "#1" {
		t.Fatalf("the first update: %d %s, want #1: nothing announced before it", st, id)
	}
	quiet.resp.Body.Close()
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/mercure", "k-123", `{"subscriptions": true, "anonymous": true}`); st != 200 ||
		string(b) != `{"anonymous":true,"subscriptions":true,"publish_origins":[]}`+"\n" {
		t.Fatalf("turn them on: %d %s", st, b)
	}

	watcher := subscribeMercure(t, hub, events+"&match=urn:sentinel", bearer(all))
	own := subscriptionsOf(t, watcher, "the watcher's own", 2)
	if d := own["urlpattern /.well-known/mercure/subscriptions/*"]; !d.Active || own["exact urn:sentinel"].Subscriber != d.Subscriber ||
		!strings.HasPrefix(d.Subscriber, "urn:uuid:") {
		t.Fatalf("the watcher's own subscriptions: %+v", own)
	}
	hidden := subscribeMercure(t, hub, events+"&match=urn:sentinel", nil) // anonymous: never announced

	book1 := "https://example.com/books/1"
	template := "https://example.com/books/{id}"
	reader := subscribeMercure(t, p.base+"/v1/tenants/acme/.well-known/mercure",
		"match="+url.QueryEscape(book1)+"&match_urlpattern="+url.QueryEscape("https://example.com/authors/:id")+"&match="+url.QueryEscape(book1)+
			"&topic="+url.QueryEscape(template), bearer(reads))
	opened := subscriptionsOf(t, watcher, "the reader's", 3)
	exact := opened["exact "+book1]
	subscriber := exact.Subscriber
	escaped := strings.ReplaceAll(subscriber, ":", "%3A")
	wantID := "/.well-known/mercure/subscriptions/exact/https%3A%2F%2Fexample.com%2Fbooks%2F1/" + escaped
	old := opened["topic "+template]
	wantOld := "/.well-known/mercure/subscriptions/https%3A%2F%2Fexample.com%2Fbooks%2F%7Bid%7D/" + escaped
	if exact.ID != wantID || !exact.Active || opened["urlpattern https://example.com/authors/:id"].Subscriber != subscriber ||
		old.ID != wantOld || old.MatchType != "" || old.Match != "" || old.Subscriber != subscriber {
		t.Fatalf("the reader's subscriptions: %+v, want the ids %s and %s", opened, wantID, wantOld)
	}

	st, h, b := getSubscriptions(t, api, all)
	var list struct {
		ID            string            `json:"id"`
		Type          string            `json:"type"`
		Subscriptions []subscriptionDoc `json:"subscriptions"`
	}
	m := cursorOf.FindStringSubmatch(h.Get("Link"))
	if st != 200 || h.Get("Content-Type") != "application/json" || m == nil || m[1] != "/.well-known/mercure" ||
		json.Unmarshal(b, &list) != nil || list.ID != "/.well-known/mercure/subscriptions" || list.Type != "subscriptions" || len(list.Subscriptions) != 5 {
		t.Fatalf("the list: %d %v %s", st, h, b)
	}
	cursor := m[2]
	st, h, b = getSubscriptions(t, p.base+"/v1/tenants/acme/.well-known/mercure/subscriptions/exact/"+url.PathEscape(book1), all)
	if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Subscriptions) != 1 || list.Subscriptions[0] != exact ||
		!strings.HasPrefix(h.Get("Link"), "</v1/tenants/acme/.well-known/mercure>;") {
		t.Fatalf("the list of one selector: %d %v %s", st, h, b)
	}
	var one subscriptionDoc
	if st, _, b := getSubscriptions(t, p.base+exact.ID, all); st != 200 || json.Unmarshal(b, &one) != nil || one != exact {
		t.Fatalf("one subscription: %d %s, want %+v", st, b, exact)
	}
	// 0.x's forms: a topic's subscriptions, and one of them.
	st, _, b = getSubscriptions(t, api+"/"+url.PathEscape(template), all)
	list.Subscriptions = nil
	if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Subscriptions) != 1 || list.Subscriptions[0] != old {
		t.Fatalf("0.x: the list of a topic: %d %s", st, b)
	}
	one = subscriptionDoc{}
	if st, _, b := getSubscriptions(t, p.base+old.ID, all); st != 200 || json.Unmarshal(b, &one) != nil || one != old {
		t.Fatalf("0.x: one subscription: %d %s, want %+v", st, b, old)
	}

	// Every change after the cursor comes as an event: a subscription
	// opened after the list was read is the first a stream from it sees.
	later := subscribeMercure(t, hub, "match=urn:later", bearer(reads))
	laterDoc := nextSubscriptionEvent(t, watcher, "the later one")
	fromCursor := subscribeMercure(t, hub, events+"&last_event_id="+url.QueryEscape(cursor), bearer(all))
	if d := nextSubscriptionEvent(t, fromCursor, "from the cursor"); d != laterDoc {
		t.Fatalf("from the cursor, first %+v, want %+v", d, laterDoc)
	}
	nextSubscriptionEvent(t, watcher, "the cursor's stream")

	reader.resp.Body.Close()
	closed := subscriptionsOf(t, watcher, "the reader's end", 3)
	if d := closed["exact "+book1]; d.Active || d.ID != exact.ID || closed["topic "+template].Active {
		t.Fatalf("the reader's end: %+v", closed)
	}
	if st, _, b := getSubscriptions(t, p.base+exact.ID, all); st != 404 {
		t.Fatalf("an ended subscription: %d %s, want 404", st, b)
	}
	later.resp.Body.Close()
	nextSubscriptionEvent(t, watcher, "the later one's end")

	// A native event of the hub's type is no subscription event: a
	// subscriber granted it gets it as a plain message; the anonymous
	// watcher sees none of them, only the public sentinel.
	native := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	forged := "/v1/tenants/acme/topics/" + url.PathEscape("/.well-known/mercure/subscriptions/exact/x/y") + "/notify?type=mercure"
	if st, _, b := do(t, "POST", p.base+forged, native, `{"type":"subscription","active":true}`); st != 201 {
		t.Fatalf("a native event of type mercure: %d %s", st, b)
	}
	if f, err := watcher.dec.Next(); err != nil || f.Event != "message" || f.Data != `{"type":"subscription","active":true}` {
		t.Fatalf("the forged event: %+v %v, want it as a plain message", f, err)
	}
	if st, _, id := mercurePost(t, hub, url.Values{"topic": {"urn:sentinel"}, "data": {"s"}}, bearer(all)); st != 200 {
		t.Fatalf("the sentinel: %d %s", st, id)
	}
	for name, s := range map[string]*mercureStream{"the watcher": watcher, "the anonymous watcher": hidden} {
		if f, err := s.dec.Next(); err != nil || f.Data != "s" {
			t.Fatalf("%s: %+v %v, want only the sentinel", name, f, err)
		}
	}

	// A token's payloads: the first subscribe detail whose matchers match
	// the selector, else Mercure 0.x's mercure.payload.
	paidToken, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix(),
		"mercure": map[string]any{"payload": map[string]string{"plan": "fallback"}},
		"authorization_details": []any{map[string]any{"type": "https://mercure.rocks/authorization-detail",
			"actions": []string{"subscribe"}, "topics": []any{map[string]string{"match": book1}},
			"payload": map[string]string{"plan": "books"}}}}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	subscribeMercure(t, hub, "match="+url.QueryEscape(book1)+"&match=orders", bearer(paidToken))
	payloads := map[string]string{}
	for range 2 {
		f, err := watcher.dec.Next()
		var d struct {
			Match   string
			Payload json.RawMessage
		}
		if err != nil || json.Unmarshal([]byte(f.Data), &d) != nil {
			t.Fatalf("the paid subscriber's events: %+v %v", f, err)
		}
		payloads[d.Match] = string(d.Payload)
	}
	if payloads[book1] != `{"plan":"books"}` || payloads["orders"] != `{"plan":"fallback"}` {
		t.Fatalf("the payloads: %v", payloads)
	}

	for _, c := range []struct {
		name, path, token, challenge string
		status                       int
	}{
		{"no token", api, "", `Bearer realm="mercure"`, 401},
		{"a token without the grant", api, books, `Bearer realm="mercure", error="insufficient_scope"`, 403},
		{"a grant on another selector's list", api + "/exact/" + url.PathEscape(book1), books, `Bearer realm="mercure", error="insufficient_scope"`, 403},
		{"an unknown matcher type", api + "/regex/x/y", all, "", 400},
	} {
		st, h, b := getSubscriptions(t, c.path, c.token)
		if st != c.status || challenge(h) != c.challenge {
			t.Errorf("%s: %d %q %s, want %d %q", c.name, st, h.Get("WWW-Authenticate"), b, c.status, c.challenge)
		}
	}
}
