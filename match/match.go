// Package match is the one test of whether a topic matches a selector,
// whatever kind of selector it is: the native '*' glob, an exact topic,
// a URI template (RFC 6570, Mercure 0.x's topic selectors) or a URL
// pattern (WHATWG URL Pattern, Mercure's match_urlpattern). Tokens grant
// with them (auth) and streams select with them.
package match

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/dunglas/go-urlpattern"
	"github.com/yosida95/uritemplate/v3"
)

// Kind is how a selector's pattern is read.
type Kind uint8

// The kinds of selector.
const (
	// Glob is the native pattern: '*' matches any run of characters, the
	// empty run included; everything else is itself.
	Glob Kind = iota
	// Exact matches the one topic it spells.
	Exact
	// Template is Mercure 0.x's topic selector: "*" matches every topic,
	// a valid URI template the topics it expands to, and anything else
	// the topic it spells.
	Template
	// URLPattern is a WHATWG URL Pattern, relative ones (and relative
	// topics) resolved against its base URL; "*" matches every topic, as
	// Mercure's wildcard does.
	URLPattern
)

// Base is the URL that relative URL patterns and topics of a token's
// grants are resolved against: a token is read with no hub URL at hand.
// A subscriber's selectors resolve against the hub URL it subscribed at
// (CompileAt).
const Base = "https://edgehub.invalid"

// Matcher is one compiled selector.
type Matcher struct {
	Kind    Kind
	Pattern string
	re      *regexp.Regexp // a URI template's
	url     *urlpattern.URLPattern
	base    string // a URL pattern's
}

// Compile reads pattern as a selector of kind, with relative URL
// patterns resolved against Base: a malformed URL pattern is an error; a
// URI template that does not parse is an exact topic, as Mercure 0.x
// reads it.
func Compile(kind Kind, pattern string) (Matcher, error) {
	return compile(kind, pattern, Base)
}

// CompileAt compiles a subscriber's selector as Compile does, with
// relative URL patterns and topics resolved against base (the hub URL
// it subscribed at). Estimate says first what it will cost.
func CompileAt(kind Kind, pattern, base string) (Matcher, error) {
	return compile(kind, pattern, base)
}

func compile(kind Kind, pattern, base string) (Matcher, error) {
	m := Matcher{Kind: kind, Pattern: pattern}
	switch kind {
	case Template:
		if pattern != "*" && strings.Contains(pattern, "{") {
			if tpl, err := uritemplate.New(pattern); err == nil {
				m.re = tpl.Regexp()
			}
		}
	case URLPattern:
		if pattern != "*" {
			p, err := urlpattern.New(pattern, base, nil)
			if err != nil {
				return m, fmt.Errorf("URL pattern %q: %w", pattern, err)
			}
			m.url, m.base = p, base
		}
	case Glob, Exact:
	default:
		return m, fmt.Errorf("matcher kind %d unknown", kind)
	}
	return m, nil
}

// Match says whether topic is selected.
func (m *Matcher) Match(topic string) bool {
	switch m.Kind {
	case Glob:
		return glob(m.Pattern, topic)
	case Exact:
		return m.Pattern == topic
	case Template:
		switch {
		case m.Pattern == "*":
			return true
		case m.re != nil:
			return m.re.MatchString(topic)
		}
		return m.Pattern == topic
	case URLPattern:
		return m.url == nil || m.url.Test(topic, m.base)
	}
	return false
}

// Exact says whether m selects only the topic its pattern spells, so
// that a hub may find it by that name instead of testing it.
func (m *Matcher) Exact() bool {
	switch m.Kind {
	case Glob:
		return !strings.Contains(m.Pattern, "*")
	case Exact:
		return true
	case Template:
		return m.Pattern != "*" && m.re == nil
	}
	return false
}

// All is a matcher of every topic.
func All() Matcher { return Matcher{Kind: Glob, Pattern: "*"} }

// glob is a '*'-only glob in linear time: on a mismatch it backs up to
// the last star and lets it take one more character.
func glob(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
