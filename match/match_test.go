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
