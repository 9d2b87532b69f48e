// Package names checks the contract's name rules, which every entry point
// (HTTP routes, the command line) applies before anything else.
package names

import (
	"unicode"
	"unicode/utf8"
)

// MaxName, MaxTopic and MaxType are the contract's length limits; a
// topic's is in bytes.
const (
	MaxName  = 128
	MaxTopic = 1024
	MaxType  = 64
)

// Valid reports whether s may name a tenant, topic or key: 1 to 128 of
// A-Z a-z 0-9 . _ : ~ -, not starting with '.', so a name can never be a
// path segment like "." or "..".
func Valid(s string) bool {
	if len(s) == 0 || len(s) > MaxName || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

// ValidTopic reports whether s may name a topic: 1 to 1024 bytes of
// UTF-8, so that IRIs are topics, but not starting with '.' (no path
// segment like "." or ".."), not exactly "*" (which reads as every
// topic), and with no control character (C0, DEL, C1) or format
// character (Unicode Cf), which would hide in logs, SSE frames and
// consoles.
func ValidTopic(s string) bool {
	if len(s) == 0 || len(s) > MaxTopic || s[0] == '.' || s == "*" {
		return false
	}
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r <= 0x9f || unicode.Is(unicode.Cf, r) {
			return false
		}
		i += size
	}
	return true
}

// ValidType reports whether s may be an event type: 1 to 64 of
// A-Z a-z 0-9 . _ : -, and not one of the hub's own frame types.
func ValidType(s string) bool {
	if len(s) == 0 || len(s) > MaxType || Reserved(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '~' || !nameByte(s[i]) {
			return false
		}
	}
	return true
}

// Reserved reports whether t is a frame type that the hub itself sends.
func Reserved(t string) bool {
	return t == "hello" || t == "gap" || t == "snapshot"
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == ':' || c == '~' || c == '-'
}
