package tests

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgehub/edgehub/sse"
)

// mercureStream is an open Mercure subscription.
type mercureStream struct {
	resp *http.Response
	dec  *sse.Decoder
}

// subscribeMercure opens a subscription at hub with the query q and the
// headers given; it fails the test unless the answer is 200.
func subscribeMercure(t *testing.T, hub, q string, header map[string]string) *mercureStream {
	t.Helper()
	resp := get200(t, hub+"?"+q, header)
	t.Cleanup(func() { resp.Body.Close() })
	return &mercureStream{resp: resp, dec: sse.NewDecoder(resp.Body)}
}

// want reads the stream's next frames and fails unless they have these
// ids, in order.
func (s *mercureStream) want(t *testing.T, name string, ids ...string) []sse.Frame {
	t.Helper()
	var got []sse.Frame
	for _, id := range ids {
		f, err := s.dec.Next()
		if err != nil {
			t.Fatalf("%s: the stream ended before %s: %v", name, id, err)
		}
		if f.ID != id {
			t.Fatalf("%s: frame %+v, want id %s (after %+v)", name, f, id, got)
		}
		got = append(got, f)
	}
	return got
}

// A subscription selects by Mercure's selectors (exact, URL pattern, 0.x
// URI template, *) an update by any of its topics, while a native
// stream or read selects it only by its own; it starts after any id the
// hub has given (a publisher's, #<position>, earliest), says where in
// Mercure-Last-Event-ID, starts live for an id the hub does not have,
// and writes Mercure's frames: the id, the type unless message, retry,
// one data line per line. In dev mode, a subscriber with no credentials
// is anonymous: native events (private) do not reach it.
func TestMercureSubscriptionsSelectAndResume(t *testing.T) {
	p := start(t, t.TempDir(), "--mercure-tenant", "acme", "--no-mercure-subscriptions") // no subscription events among the positions
	hub := p.base + "/.well-known/mercure"
	publish := func(form url.Values, want string) {
		t.Helper()
		if st, _, id := mercurePost(t, hub, form, nil); st != 200 || id != want {
			t.Fatalf("publish %v: %d %q, want %s", form, st, id, want)
		}
	}
	book1, book2, author2 := "https://example.com/books/1", "https://example.com/books/2", "https://example.com/authors/2"
	publish(url.Values{"topic": {book1, author2}, "data": {"line one\r\nline two\rthree"}, "id": {"urn:book:1"}, "retry": {"500"}}, "urn:book:1")
	publish(url.Values{"topic": {"orders"}, "data": {"d"}, "type": {"created"}}, "#2")
	p.publish(t, "orders", `{"n":3}`)
	publish(url.Values{"topic": {book2}, "data": {"b2"}}, "#4")

	author := subscribeMercure(t, hub, "match="+url.QueryEscape(author2), map[string]string{"Last-Event-ID": "earliest"})
	if h := author.resp.Header.Get("Mercure-Last-Event-ID"); h != "earliest" {
		t.Errorf("resumed from earliest, Mercure-Last-Event-ID %q", h)
	}
	f := author.want(t, "by the update's other topic", "urn:book:1")[0]
	if f.Event != "message" || f.Data != "line one\nline two\nthree" || author.dec.Retry != 500 {
		t.Errorf("the first update's frame: %+v, retry %d", f, author.dec.Retry)
	}
	all := subscribeMercure(t, hub, "match_urlpattern="+url.QueryEscape("https://example.com/books/:id")+"&topic=orders", map[string]string{"Last-Event-ID": "earliest"})
	frames := all.want(t, "a URL pattern and a topic, anonymous", "urn:book:1", "#2", "#4")
	if frames[1].Event != "created" || frames[1].Data != "d" || frames[2].Data != "b2" {
		t.Errorf("frames %+v", frames)
	}
	granted := subscribeMercure(t, hub, "topic=orders", map[string]string{"Last-Event-ID": "#2", "Authorization": "Bearer any"})
	if f := granted.want(t, "with credentials, after #2", "#3")[0]; f.Data != `{"n":3}` || f.Event != "message" {
		t.Errorf("a native event's frame: %+v", f)
	}
	template := subscribeMercure(t, hub, "topic="+url.QueryEscape("https://example.com/books/{id}")+"&lastEventID=urn:book:1", nil)
	if h := template.resp.Header.Get("Mercure-Last-Event-ID"); h != "urn:book:1" {
		t.Errorf("resumed after urn:book:1, Mercure-Last-Event-ID %q", h)
	}
	unknown := subscribeMercure(t, hub, "match=*&last_event_id=urn:nope", map[string]string{"Authorization": "Bearer any"})
	if h := unknown.resp.Header.Get("Mercure-Last-Event-ID"); h != "#4" {
		t.Errorf("an id the hub does not have: Mercure-Last-Event-ID %q, want the head's #4", h)
	}
	// An anonymous subscriber is not told the head: it would say how many
	// events the tenant holds, private ones included.
	if h := subscribeMercure(t, hub, "match=*&last_event_id=urn:nope", nil).resp.Header.Get("Mercure-Last-Event-ID"); h != "earliest" {
		t.Errorf("an id the hub does not have, anonymous: Mercure-Last-Event-ID %q, want earliest", h)
	}
	native := p.base + "/v1/tenants/acme/watch?after=0&topic=" + url.QueryEscape(author2)
	resp, err := http.Get(native)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	nativeFrames := sse.NewDecoder(resp.Body)

	publish(url.Values{"topic": {author2}, "data": {"a2"}}, "#5")
	author.want(t, "live", "#5")
	publish(url.Values{"topic": {"https://example.com/books/3", author2}, "data": {"b3"}}, "#6")
	author.want(t, "live, by the update's other topic", "#6")
	template.want(t, "a URI template, after urn:book:1", "#4")
	unknown.want(t, "started live", "#5")
	for _, want := range []string{"0", "5"} { // hello, then the update of author2 itself
		if f, err := nativeFrames.Next(); err != nil || f.ID != want {
			t.Fatalf("the native stream of %s: %+v %v, want id %s (an update selected by another of its topics is not its)", author2, f, err, want)
		}
	}
	st, read, b := p.readTenant(t, "", "after=0&topic="+url.QueryEscape(author2))
	if st != 200 || len(read.Events) != 1 || read.Events[0].Pos != 5 {
		t.Errorf("the native read of %s: %d %s, want position 5 alone", author2, st, b)
	}
	for _, q := range []string{"", "match_regexp=x", "lastEventID=earliest", "match_urlpattern=" + url.QueryEscape("https://example.com/(")} {
		if st, _, b := do(t, "GET", hub+"?"+q, "", ""); st != 400 || !strings.Contains(string(b), "invalid_selector") {
			t.Errorf("subscribe ?%s: %d %s, want 400 invalid_selector", q, st, b)
		}
	}
}

// Outside dev mode a public update reaches every subscriber, anonymous
// ones included; a private one, and every native event, only subscribers
// whose token grants one of its topics; a gap is told only to those. A
// subscription ends at its token's exp. A refusal without a token has a
// bare challenge.
func TestMercureSubscribersSeeWhatTheyMay(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	secret := strings.Repeat("m", 40)
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/issuers/app", "k-123", `{"alg":"HS256","key":"`+secret+`"}`); st != 201 {
		t.Fatalf("register the app: %d %s", st, b)
	}
	sign := func(exp time.Time, subscribe ...string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"exp": exp.Unix(),
			"mercure": map[string]any{"publish": []string{"*"}, "subscribe": subscribe}}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	books := sign(time.Now().Add(time.Hour), "https://example.com/books/{id}")
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	auth := map[string]string{"Authorization": "Bearer " + books}
	for _, form := range []url.Values{
		{"topic": {"https://example.com/books/1"}, "data": {"private book"}, "private": {"on"}},
		{"topic": {"https://example.com/authors/1"}, "data": {"public author"}},
		{"topic": {"https://example.com/authors/2"}, "data": {"private author"}, "private": {"on"}},
		{"topic": {"https://example.com/authors/3", "https://example.com/books/3"}, "data": {"private, a granted other topic"}, "private": {"on"}},
	} {
		if st, _, b := mercurePost(t, hub, form, auth); st != 200 {
			t.Fatalf("publish %v: %d %s", form, st, b)
		}
	}
	native := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	if st, _, b := do(t, "POST", p.base+"/v1/tenants/acme/topics/"+url.PathEscape("https://example.com/books/4")+"/notify", native, `{"n":5}`); st != 201 {
		t.Fatalf("a native publish: %d %s", st, b)
	}
	if st, _, b := mercurePost(t, hub, url.Values{"topic": {"https://example.com/authors/9"}, "data": {"sentinel"}}, auth); st != 200 || b != "#6" {
		t.Fatalf("the sentinel: %d %s", st, b)
	}
	earliest := map[string]string{"Last-Event-ID": "earliest"}
	// Anonymous subscribers are off until the tenant turns them on, and
	// refused then exactly as at a tenant that does not exist.
	stOff, hOff, bOff := do(t, "GET", hub+"?match=*", "", "")
	stGhost, hGhost, bGhost := do(t, "GET", p.base+"/v1/tenants/ghost/.well-known/mercure?match=*", "", "")
	if stOff != 401 || stOff != stGhost || string(bOff) != string(bGhost) || hOff.Get("WWW-Authenticate") != hGhost.Get("WWW-Authenticate") {
		t.Errorf("anonymous, off: %d %q %s; at a tenant that does not exist: %d %q %s", stOff, hOff.Get("WWW-Authenticate"), bOff,
			stGhost, hGhost.Get("WWW-Authenticate"), bGhost)
	}
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/mercure", "k-123", `{"anonymous": true}`); st != 200 {
		t.Fatalf("turn anonymous subscribers on: %d %s", st, b)
	}
	anonymous := subscribeMercure(t, hub, "match=*", earliest)
	anonymous.want(t, "anonymous", "#2", "#6")
	granted := subscribeMercure(t, hub, "match=*", map[string]string{"Last-Event-ID": "earliest", "Cookie": "mercureAuthorization=" + books})
	granted.want(t, "granted books", "#1", "#2", "#4", "#5", "#6")

	st, h, _ := do(t, "GET", p.base+"/v1/tenants/ghost/.well-known/mercure?match=*", "", "")
	if st != 401 || challenge(h) != `Bearer realm="mercure"` {
		t.Errorf("no token, a tenant that does not exist: %d %q, want 401 and a bare challenge", st, h.Get("WWW-Authenticate"))
	}
	st, h, _ = do(t, "GET", hub+"?match=*", "x.y.z", "")
	if st != 401 || challenge(h) != `Bearer realm="mercure", error="invalid_token"` {
		t.Errorf("a bad token: %d %q", st, h.Get("WWW-Authenticate"))
	}

	// A token is accepted until its exp plus the 30 s leeway, and its
	// stream lives until then; past it, it is refused, never opened and
	// closed at once.
	if st, _, b := do(t, "GET", hub+"?match=*", sign(time.Now().Add(-31*time.Second), "*"), ""); st != 401 {
		t.Errorf("a token past its exp and the leeway: %d %s, want 401", st, b)
	}
	exp := time.Unix(time.Now().Add(-28*time.Second).Unix(), 0) // a token's exp counts whole seconds
	short := subscribeMercure(t, hub, "match=*", map[string]string{"Authorization": "Bearer " + sign(exp, "*")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		for { // its grant of * lets subscription events reach it
			if _, err := short.dec.Next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("the stream of an expiring token ended with %v, want its end", err)
		}
		if time.Now().Before(exp.Add(30 * time.Second)) {
			t.Errorf("the stream ended before its token's exp plus the leeway")
		}
	case <-ctx.Done():
		t.Fatal("the stream outlived its token's exp by a minute")
	}
}

// Retention removed updates a subscription was owed: a subscriber whose
// token grants the topic gets a gap event (no id, so its last id stays
// that of the frame before) before the topic's next update; one without
// the grant gets only the updates it may see.
func TestMercureGapsReachOnlyGrantedSubscribers(t *testing.T) {
	p := start(t, t.TempDir(), "--mercure-tenant", "acme", "--retention-events", "1")
	hub := p.base + "/.well-known/mercure"
	for _, want := range []string{"#1", "#2"} {
		if st, _, id := mercurePost(t, hub, url.Values{"topic": {"a"}, "data": {want}}, nil); st != 200 || id != want {
			t.Fatalf("publish: %d %q, want %s", st, id, want)
		}
	}
	waitFor(t, "the trim of a", func() bool {
		_, a, _ := p.readTenant(t, "", "after=0")
		return len(a.Gaps) == 1
	})
	granted := subscribeMercure(t, hub, "topic=a", map[string]string{"Last-Event-ID": "earliest", "Authorization": "Bearer any"})
	if f, err := granted.dec.Next(); err != nil || f.Event != "gap" || f.ID != "" || f.Data != `{"topic":"a","to":1}` {
		t.Fatalf("a granted subscriber's first frame: %+v %v, want the gap of a", f, err)
	}
	granted.want(t, "granted, after the gap", "#2")
	anonymous := subscribeMercure(t, hub, "topic=a", map[string]string{"Last-Event-ID": "earliest"})
	anonymous.want(t, "anonymous, no gap", "#2")
}
