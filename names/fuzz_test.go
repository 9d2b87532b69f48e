package names

import (
	"regexp"
	"testing"
	"unicode/utf8"
)

var (
	nameRule = regexp.MustCompile(`^[A-Za-z0-9_:~-][A-Za-z0-9._:~-]{0,127}$`)
	typeRule = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
	// topicRule is the contract's topic rule but for its length in bytes
	// and its UTF-8, which regexp does not see.
	topicRule = regexp.MustCompile(`^[^.\p{Cc}\p{Cf}][^\p{Cc}\p{Cf}]*$`)
)

func topicByRule(s string) bool {
	return len(s) <= MaxTopic && utf8.ValidString(s) && s != "*" && topicRule.MatchString(s)
}

// The hand-written checks agree with the contract's rules written as
// regular expressions, for any input.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"acme", ".x", "a/b", "a b", "é", "", "hello", "a~b", "..", "x\x00", "*", "a\u200bb", "\u0085", "https://example.com/books/1", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Valid(s), nameRule.MatchString(s); got != want {
			t.Fatalf("Valid(%q) = %v, the rule says %v", s, got, want)
		}
		if got, want := ValidTopic(s), topicByRule(s); got != want {
			t.Fatalf("ValidTopic(%q) = %v, the rule says %v", s, got, want)
		}
		if got, want := ValidType(s), typeRule.MatchString(s) && !Reserved(s); got != want {
			t.Fatalf("ValidType(%q) = %v, the rule says %v", s, got, want)
		}
	})
}
