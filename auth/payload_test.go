package auth

import (
	"testing"
)

// A subscription's payload is that of the first subscribe detail whose
// matchers match its selector; a detail that matches with no payload,
// or none matching, gives mercure.payload; publish details give none.
func TestPayloadsOfSubscriptions(t *testing.T) {
	_, _, p, err := grants([]byte(`{
		"mercure": {"payload": {"p": "fallback"}},
		"authorization_details": [
			{"type": "https://mercure.rocks/authorization-detail", "actions": ["publish"], "topics": [{"match": "*"}], "payload": {"p": "publish"}},
			{"type": "https://mercure.rocks/authorization-detail", "actions": ["subscribe"], "topics": [{"match": "https://example.com/books/1"}], "payload": {"p": "book 1"}},
			{"type": "https://mercure.rocks/authorization-detail", "actions": ["subscribe"], "topics": [{"match": "https://example.com/books/:id", "match_type": "urlpattern"}], "payload": {"p": "books"}},
			{"type": "https://mercure.rocks/authorization-detail", "actions": ["subscribe"], "topics": [{"match": "https://example.com/authors/1"}]},
			{"type": "https://mercure.rocks/authorization-detail", "actions": ["subscribe"], "topics": [{"match": "https://example.com/authors/:id", "match_type": "urlpattern"}], "payload": {"p": "authors"}}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	for sel, want := range map[string]string{
		"https://example.com/books/1":   `{"p": "book 1"}`,
		"https://example.com/books/2":   `{"p": "books"}`,
		"https://example.com/authors/1": `{"p": "fallback"}`, // its detail has none: mercure.payload
		"https://example.com/authors/2": `{"p": "authors"}`,
		"orders":                        `{"p": "fallback"}`,
	} {
		if got := string(p.For(sel)); got != want {
			t.Errorf("payload of %s: %s, want %s", sel, got, want)
		}
	}
	if _, _, none, _ := grants([]byte(`{"subscribe": ["*"]}`)); none.For("orders") != nil {
		t.Errorf("a token without payloads gives %s", none.For("orders"))
	}
}
