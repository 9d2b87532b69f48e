package match

import "testing"

func TestKinds(t *testing.T) {
	for _, c := range []struct {
		kind    Kind
		pattern string
		yes, no []string
	}{
		{Glob, "a*c", []string{"ac", "abc", "a/b/c"}, []string{"ab", "bc"}},
		{Glob, "*", []string{"x", "https://example.com/books/1"}, nil},
		{Exact, "a*c", []string{"a*c"}, []string{"abc"}},
		{Template, "https://example.com/books/{id}", []string{"https://example.com/books/1"},
			[]string{"https://example.com/books/1/2", "https://example.com/authors/1"}},
		{Template, "*", []string{"anything"}, nil},
		{Template, "not {a template", []string{"not {a template"}, []string{"not a"}},
		{URLPattern, "https://example.com/books/:id", []string{"https://example.com/books/1"},
			[]string{"https://example.com/books/1/2", "https://example.org/books/1"}},
		{URLPattern, "/books/*", []string{"/books/1", "https://edgehub.invalid/books/1/2"}, []string{"/authors/1"}},
		{URLPattern, "*", []string{"anything"}, nil},
	} {
		m, err := Compile(c.kind, c.pattern)
		if err != nil {
			t.Fatalf("compile %d %q: %v", c.kind, c.pattern, err)
		}
		for _, topic := range c.yes {
			if !m.Match(topic) {
				t.Errorf("%d %q does not match %q", c.kind, c.pattern, topic)
			}
		}
		for _, topic := range c.no {
			if m.Match(topic) {
				t.Errorf("%d %q matches %q", c.kind, c.pattern, topic)
			}
		}
	}
}

func TestMalformedURLPatternsAreRefused(t *testing.T) {
	for _, p := range []string{"https://example.com/(", "https://example.com/:id(["} {
		if _, err := Compile(URLPattern, p); err == nil {
			t.Errorf("%q compiled", p)
		}
	}
}

// A subscriber's relative URL patterns, and relative topics, resolve
// against the hub URL it subscribed at, as Mercure's spec says: the
// pattern matches the absolute topic on the hub's origin and the
// relative one alike, not another origin's; a relative path resolves
// below the hub's path. A token's grants keep Base.
func TestSelectorsResolveAgainstTheHubURL(t *testing.T) {
	const hub = "http://127.0.0.1:8080/v1/tenants/acme/.well-known/mercure"
	for _, c := range []struct {
		pattern string
		yes, no []string
	}{
		{"/books/:id", []string{"http://127.0.0.1:8080/books/9", "/books/9"},
			[]string{"https://example.com/books/9", "http://127.0.0.1:8081/books/9", "https://127.0.0.1:8080/books/9"}},
		{"books/:id", []string{"http://127.0.0.1:8080/v1/tenants/acme/.well-known/books/9"}, []string{"http://127.0.0.1:8080/books/9"}},
		{"https://example.com/books/:id", []string{"https://example.com/books/9"}, []string{"/books/9"}},
	} {
		m, err := CompileAt(URLPattern, c.pattern, hub)
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range c.yes {
			if !m.Match(topic) {
				t.Errorf("%q at %s does not match %q", c.pattern, hub, topic)
			}
		}
		for _, topic := range c.no {
			if m.Match(topic) {
				t.Errorf("%q at %s matches %q", c.pattern, hub, topic)
			}
		}
	}
	grant, _ := Compile(URLPattern, "/books/:id")
	if !grant.Match("/books/9") || !grant.Match(Base+"/books/9") || grant.Match("http://127.0.0.1:8080/books/9") {
		t.Error("a grant's relative pattern does not resolve against Base")
	}
}
