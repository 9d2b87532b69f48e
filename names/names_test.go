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
		"message": true, "order.created": true, "a:b-c_d": true, strings.Repeat("t", 64): true,
		"hello": false, "gap": false, "snapshot": false, "a~b": false, "": false, strings.Repeat("t", 65): false,
	} {
		if ValidType(s) != want {
			t.Errorf("ValidType(%q) = %v, want %v", s, !want, want)
		}
	}
}
