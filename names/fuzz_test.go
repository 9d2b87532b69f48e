package names

import (
	"regexp"
	"testing"
)

var (
	nameRule = regexp.MustCompile(`^[A-Za-z0-9_:~-][A-Za-z0-9._:~-]{0,127}$`)
	typeRule = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
)

// The hand-written checks agree with the contract's rules written as
// regular expressions, for any input.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"acme", ".x", "a/b", "a b", "é", "", "hello", "a~b", "..", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Valid(s), nameRule.MatchString(s); got != want {
			t.Fatalf("Valid(%q) = %v, the rule says %v", s, got, want)
		}
		if got, want := ValidType(s), typeRule.MatchString(s) && !Reserved(s); got != want {
			t.Fatalf("ValidType(%q) = %v, the rule says %v", s, got, want)
		}
	})
}
