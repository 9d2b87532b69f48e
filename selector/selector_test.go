package selector

import (
	"testing"

	"github.com/edgehub/edgehub/auth"
)

// Two sets that select the same way have one key, whatever the order of
// their selectors; any difference in exact topics, patterns or grants
// makes another, even one that a plain join of the strings would hide.
func TestKeysTellSelectionsApart(t *testing.T) {
	parse := func(topics, patterns, grants []string) *Set {
		t.Helper()
		s, err := Parse(topics, patterns, auth.Globs(grants))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := parse([]string{"x", "y"}, []string{"p*", "q*"}, []string{"*"})
	b := parse([]string{"y", "x"}, []string{"q*", "p*"}, []string{"*"})
	if a.Key() != b.Key() {
		t.Fatalf("the same selection, two keys: %q %q", a.Key(), b.Key())
	}
	for _, other := range []*Set{
		parse([]string{"x"}, []string{"p*", "q*"}, []string{"*"}),
		parse([]string{"x", "y"}, []string{"p*"}, []string{"*"}),
		parse([]string{"x", "y"}, []string{"p*", "q*"}, []string{"*", "z"}),
		parse(nil, []string{"x|1:y"}, []string{"*"}),
		parse([]string{"x", "y"}, []string{"p*|q*"}, []string{"*"}),
	} {
		if other.Key() == a.Key() {
			t.Fatalf("another selection with the same key %q", a.Key())
		}
	}
}
