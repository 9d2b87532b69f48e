package names

import (
	"strings"
	"testing"
)

func TestNameRules(t *testing.T) {
	for s, want := range map[string]bool{
		"acme": true, "a.b_c:d~e-f": true, "A9": true, strings.Repeat("a", 128): true,
		"": false, ".hidden": false, "a/b": false, "a b": false, "é": false, strings.Repeat("a", 129): false,
	} {
		if Valid(s) != want {
			t.Errorf("Valid(%q) = %v, want %v", s, !want, want)
		}
	}
	for s, want := range map[string]bool{
		"acme": true, "https://example.com/books/1": true, "a b?c#d%e": true, "книги/1": true, "*a": true,
		strings.Repeat("é", 512): true, "\u00a0": true,
		"": false, ".hidden": false, "*": false, "a\x00b": false, "a\nb": false, "a\x7fb": false, "a\u0085b": false,
		"a\u200bb": false, "\ufeff": false, "a\u202eb": false, "\xff": false, strings.Repeat("é", 512) + "a": false,
	} {
		if ValidTopic(s) != want {
			t.Errorf("ValidTopic(%q) = %v, want %v", s, !want, want)
		}
	}
	for s, want := range map[string]bool{
		"message": true, "order.created": true, "a:b-c_d": true, strings.Repeat("t", 64): true,
		"hello": false, "gap": false, "snapshot": false, "a~b": false, "": false, strings.Repeat("t", 65): false,
	} {
		if ValidType(s) != want {
			t.Errorf("ValidType(%q) = %v, want %v", s, !want, want)
		}
	}
}
