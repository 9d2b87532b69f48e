package mercure

import (
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// selectionOf parses and compiles the subscription of a request to the
// hub path at host with the given query.
func selectionOf(t *testing.T, host, path, query string, anonymous bool) (*selection, string) {
	t.Helper()
	r := httptest.NewRequest("GET", "http://"+host+path+"?"+query, nil)
	s, aerr := parseSelection(r, anonymous)
	if aerr == nil {
		aerr = s.Compile()
	}
	if aerr != nil {
		return nil, string(aerr.Code) + ": " + aerr.Message
	}
	return s, ""
}

// named is a URL pattern of n named groups.
func named(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("/:p" + strconv.Itoa(i))
	}
	return b.String()
}

// A subscription holds 1 to 100 selectors of 1 to 1024 bytes (400
// invalid_selector otherwise), each counted before anything is compiled
// and compiled against the hub URL the request came to, and it is
// refused as a whole when its selectors together are too costly to
// match. Two selectors the protocol names alike are one subscription.
func TestSelectionBounds(t *testing.T) {
	const path = "/v1/tenants/acme/.well-known/mercure"
	many := func(n int, value string) string {
		q := url.Values{}
		for range n {
			q.Add("match", value)
		}
		return q.Encode()
	}
	for _, c := range []struct {
		name, query, refused string
	}{
		{"100 selectors of 1024 bytes", many(100, strings.Repeat("a", 1024)), ""},
		{"101 selectors", many(101, "a"), "at most 100"},
		{"a selector of 1025 bytes", many(1, strings.Repeat("a", 1025)), "1 to 1024 bytes"},
		{"an empty selector", "match=", "1 to 1024 bytes"},
		{"no selector", "foo=bar", "at least one"},
		{"an unknown matcher", "match_regexp=x", "not one this hub knows"},
		// Over the count, however costly each would be: refused before a
		// single one is compiled (each would take milliseconds).
		{"101 costly patterns", strings.Repeat("match_urlpattern="+url.QueryEscape("/(a{1,1000})(a{1,1000})")+"&", 101), "at most 100"},
		{"a costly pattern", "match_urlpattern=" + url.QueryEscape(strings.Repeat("/*", 300)), "too costly"},
		{"costly together", strings.Repeat("match_urlpattern="+url.QueryEscape(named(80))+"&", 100), "together are too costly"},
		{"a malformed pattern", "match_urlpattern=" + url.QueryEscape("/(["), "URL pattern"},
	} {
		_, refused := selectionOf(t, "127.0.0.1:8080", path, c.query, false)
		if c.refused == "" && refused != "" || !strings.Contains(refused, c.refused) || c.refused != "" && !strings.HasPrefix(refused, "invalid_selector") {
			t.Errorf("%s: refused %q, want %q", c.name, refused, c.refused)
		}
	}
}

// Relative URL patterns resolve against the hub URL as the request
// reached the server; the hub's announcements are tried only against
// the wildcard and the selectors aimed at the subscriptions' path, and
// never for an anonymous subscriber; pattern groups are keyed with their
// base; a selection's heap is its selectors'.
func TestSelectionAtTheHubURL(t *testing.T) {
	const path = "/v1/tenants/acme/.well-known/mercure"
	q := url.Values{"match_urlpattern": {"/books/:id", subscriptionsPath + "/*"}, "match": {"https://example.com/x"}}
	s, refused := selectionOf(t, "127.0.0.1:8080", path, q.Encode(), false)
	if refused != "" {
		t.Fatal(refused)
	}
	if s.base != "http://127.0.0.1:8080"+path || !s.Match("http://127.0.0.1:8080/books/9") || !s.Match("/books/9") || s.Match("https://example.com/books/9") {
		t.Errorf("base %s: the relative pattern does not resolve against it", s.base)
	}
	if !s.MatchAnnouncement(subscriptionsPath+"/exact/x/urn:uuid:1") || s.MatchAnnouncement("/books/9") || s.AnnouncementKey() == "" {
		t.Error("the selector aimed at the subscriptions is not tried against announcements, or another is")
	}
	other, _ := selectionOf(t, "example.com", path, q.Encode(), false)
	if other.PatternKey() == s.PatternKey() || other.AnnouncementKey() == s.AnnouncementKey() {
		t.Error("selections at two hub URLs share a pattern group")
	}
	if s.Heap() < 3*128 {
		t.Errorf("heap %d", s.Heap())
	}
	anon, _ := selectionOf(t, "127.0.0.1:8080", path, q.Encode()+"&topic=*", true)
	if anon.AnnouncementKey() != "" || anon.MatchAnnouncement(subscriptionsPath+"/exact/x/urn:uuid:1") {
		t.Error("an anonymous subscriber's selectors are tried against announcements")
	}
	for v, aimed := range map[string]bool{
		"*": true, subscriptionsPath: true, subscriptionsPath + "{/topic}": true, "https://hub.example" + subscriptionsPath + "/*": true,
		path + "/subscriptions/*": true, "/:a/:b/:c/:d": false, "{+path}": false, "https://example.com/*": false,
	} {
		if got := aimsAtAnnouncements(v, path); got != aimed {
			t.Errorf("%q aims at announcements: %v, want %v", v, got, aimed)
		}
	}
}

// Parsing compiles nothing: a subscription's selectors are counted, and
// compiled only once its stream holds what they cost (Compile); the
// protocol's names of the selectors (a current selector's matcher type,
// none for a 0.x topic selector) are known from the start, each once.
func TestSelectionCompilesOnlyWhenAsked(t *testing.T) {
	r := httptest.NewRequest("GET", "http://127.0.0.1:8080/.well-known/mercure?match=x&topic=x&topic=https://example.com/{id}&topic=https://example.com/{id}&match_urlpattern=/(", nil)
	s, aerr := parseSelection(r, false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if s.exact != nil || s.patterns != nil || s.heap <= 0 {
		t.Fatalf("parsing compiled: %v %v, heap %d", s.exact, s.patterns, s.heap)
	}
	if aerr := s.Compile(); aerr == nil || aerr.Code != "invalid_selector" {
		t.Fatalf("compiling a malformed URL pattern: %v", aerr)
	}
	r = httptest.NewRequest("GET", "http://127.0.0.1:8080/.well-known/mercure?match=x&topic=x&topic=https://example.com/{id}&topic=https://example.com/{id}", nil)
	s, _ = parseSelection(r, false)
	if aerr := s.Compile(); aerr != nil {
		t.Fatal(aerr)
	}
	if want := []selector{{"exact", "x"}, {"", "x"}, {"", "https://example.com/{id}"}}; !slices.Equal(s.given, want) {
		t.Fatalf("given %v, want %v", s.given, want)
	}
}
