package mercure

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/auth"
)

// A subscriber's announcement stores at most maxAnnounced bytes: one at
// the selectors' bounds is refused with invalid_selector before anything
// is committed, one of ordinary selectors is not; dropping the check
// fails it.
func TestAnnouncementsAreBounded(t *testing.T) {
	q := url.Values{}
	for i := range maxSelectors {
		q.Add("match", strings.Repeat("t", maxSelectorBytes-4)+string(rune('a'+i%26))+strings.Repeat("x", i/26))
	}
	sel, aerr := parseSelection(httptest.NewRequest("GET", "/?"+q.Encode(), nil), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if _, aerr := announce(sel, auth.Payloads{}); aerr == nil || aerr.Code != "invalid_selector" {
		t.Fatalf("an announcement of %d selectors of %d bytes: %v, want invalid_selector", maxSelectors, maxSelectorBytes, aerr)
	}
	sel, aerr = parseSelection(httptest.NewRequest("GET", "/?match=orders&match_urlpattern=/books/:id&topic=/books/{id}", nil), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	a, aerr := announce(sel, auth.Payloads{})
	if aerr != nil || len(a.events) != 3 || len(a.rows) != 3 {
		t.Fatalf("an ordinary announcement: %+v %v", a, aerr)
	}
}

// A current selector's subscription is named by its matcher type and
// pattern, a 0.x topic selector's by its topic alone, with the topic
// field instead of match and match_type, as Mercure's compatibility mode
// names them.
func TestSubscriptionsAreNamedAsTheProtocolSays(t *testing.T) {
	for _, c := range []struct {
		g                  selector
		id, topic, mt, mat string
	}{
		{selector{"exact", "https://example.com/a b"}, subscriptionsPath + "/exact/https%3A%2F%2Fexample.com%2Fa%20b/urn%3Auuid%3A1", "", "exact", "https://example.com/a b"},
		{selector{"urlpattern", "/books/:id"}, subscriptionsPath + "/urlpattern/%2Fbooks%2F%3Aid/urn%3Auuid%3A1", "", "urlpattern", "/books/:id"},
		{selector{"", "/books/{id}"}, subscriptionsPath + "/%2Fbooks%2F%7Bid%7D/urn%3Auuid%3A1", "/books/{id}", "", ""},
	} {
		s := subscriptionOf(c.g, "urn:uuid:1", nil)
		if s.ID != c.id || s.Topic != c.topic || s.MatchType != c.mt || s.Match != c.mat || s.Type != "subscription" || !s.Active {
			t.Errorf("%+v: %+v", c.g, s)
		}
	}
}
