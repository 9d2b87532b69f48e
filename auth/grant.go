package auth

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/edgehub/edgehub/match"
)

// Grant is what a token allows for one action: the topics its selectors
// match, whichever claim they came from (the native lists, Mercure 0.x's
// mercure claim, authorization_details), so that a Mercure selector
// grants on native routes what it grants on Mercure's.
type Grant struct {
	matchers []match.Matcher
}

// Everything is the grant of dev mode: every topic.
func Everything() Grant { return Grant{matchers: []match.Matcher{match.All()}} }

// Globs is the grant of native '*' patterns.
func Globs(patterns []string) Grant {
	g := Grant{matchers: make([]match.Matcher, len(patterns))}
	for i, p := range patterns {
		g.matchers[i] = match.Matcher{Kind: match.Glob, Pattern: p}
	}
	return g
}

// Match says whether the grant covers topic.
func (g Grant) Match(topic string) bool {
	for i := range g.matchers {
		if g.matchers[i].Match(topic) {
			return true
		}
	}
	return false
}

// Key is the same string for two grants of the same selectors, in any
// order, for counting streams by what they may see.
func (g Grant) Key() string {
	parts := make([]string, len(g.matchers))
	for i, m := range g.matchers {
		parts[i] = strconv.Itoa(int(m.Kind)) + ":" + strconv.Itoa(len(m.Pattern)) + ":" + m.Pattern
	}
	slices.Sort(parts)
	return strings.Join(parts, "|")
}

// maxGrantSelectors bounds the selectors one token may carry, summed over
// its claims and actions: each may be a URL pattern to compile.
const maxGrantSelectors = 1000

// mercureDetailType is the authorization_details type of Mercure's
// grants (RFC 9396).
const mercureDetailType = "https://mercure.rocks/authorization-detail"

// grantClaims are the claims that grant, in their three spellings.
type grantClaims struct {
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
	Mercure   *struct {
		Publish   []string        `json:"publish"`
		Subscribe []string        `json:"subscribe"`
		Payload   json.RawMessage `json:"payload"`
	} `json:"mercure"`
	Details []json.RawMessage `json:"authorization_details"`
}

// detail is a Mercure authorization detail: the actions it allows on the
// topics its matchers select.
type detail struct {
	Type    string            `json:"type"`
	Actions []string          `json:"actions"`
	Topics  []json.RawMessage `json:"topics"`
	Payload json.RawMessage   `json:"payload"`
}

// Payloads are what a token says of its subscriptions, for Mercure's
// subscription events: the payload of each subscribe detail, in the
// token's order, and Mercure 0.x's mercure.payload for the rest.
type Payloads struct {
	details  []detailPayload
	fallback json.RawMessage
}

// detailPayload is one subscribe detail's matchers and payload.
type detailPayload struct {
	matchers []match.Matcher
	payload  json.RawMessage
}

// For is the payload of a subscription whose selector is sel: that of
// the first subscribe detail one of whose matchers matches sel read as a
// topic, else mercure.payload; nil when the token has none. (Mercure's
// rule: a matching detail with no payload falls through to the claim.)
func (p Payloads) For(sel string) json.RawMessage {
	for _, d := range p.details {
		if slices.ContainsFunc(d.matchers, func(m match.Matcher) bool { return m.Match(sel) }) {
			if d.payload != nil {
				return d.payload
			}
			break
		}
	}
	return p.fallback
}

// payloadOf is raw unless it is absent or null.
func payloadOf(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	return raw
}

// detailTopic is one matcher of a detail: {"match": ..., "match_type": ...}.
type detailTopic struct {
	Match     *string `json:"match"`
	MatchType string  `json:"match_type"`
}

// grants reads the grants of a verified token's claims, and its
// subscriptions' payloads. A malformed Mercure detail refuses the whole
// token, as the protocol says: no partial acceptance.
func grants(payload []byte) (publish, subscribe Grant, payloads Payloads, err error) {
	var c grantClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return publish, subscribe, payloads, Refuse(Malformed, "the grants are malformed: %v", err)
	}
	n := len(c.Publish) + len(c.Subscribe)
	if c.Mercure != nil {
		n += len(c.Mercure.Publish) + len(c.Mercure.Subscribe)
	}
	publish, subscribe = Globs(c.Publish), Globs(c.Subscribe)
	if c.Mercure != nil {
		payloads.fallback = payloadOf(c.Mercure.Payload)
		for _, sel := range []struct {
			to   *Grant
			from []string
		}{{&publish, c.Mercure.Publish}, {&subscribe, c.Mercure.Subscribe}} {
			for _, p := range sel.from {
				m, _ := match.Compile(match.Template, p) // never fails: a bad template is exact
				sel.to.matchers = append(sel.to.matchers, m)
			}
		}
	}
	for _, raw := range c.Details {
		var d detail
		if err := json.Unmarshal(raw, &d); err != nil {
			return publish, subscribe, payloads, Refuse(Malformed, "an authorization detail is malformed: %v", err)
		}
		if d.Type != mercureDetailType {
			continue // another API's, not ours to judge
		}
		if len(d.Actions) == 0 || len(d.Topics) == 0 {
			return publish, subscribe, payloads, Refuse(Malformed, "a Mercure authorization detail needs actions and topics")
		}
		if n += len(d.Topics); n > maxGrantSelectors {
			break
		}
		var matchers []match.Matcher
		for _, rawTopic := range d.Topics {
			m, err := detailMatcher(rawTopic)
			if err != nil {
				return publish, subscribe, payloads, err
			}
			matchers = append(matchers, m)
		}
		for _, a := range d.Actions {
			switch a {
			case "publish":
				publish.matchers = append(publish.matchers, matchers...)
			case "subscribe":
				subscribe.matchers = append(subscribe.matchers, matchers...)
				payloads.details = append(payloads.details, detailPayload{matchers, payloadOf(d.Payload)})
			}
			// Other actions grant nothing, as the protocol says.
		}
	}
	if n > maxGrantSelectors {
		return Grant{}, Grant{}, Payloads{}, Refuse(Malformed, "the token carries more than %d selectors", maxGrantSelectors)
	}
	return publish, subscribe, payloads, nil
}

// detailMatcher reads one topic matcher of a Mercure detail.
func detailMatcher(raw json.RawMessage) (match.Matcher, error) {
	var t detailTopic
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || json.Unmarshal(raw, &t) != nil || t.Match == nil || *t.Match == "" {
		return match.Matcher{}, Refuse(Malformed, "a Mercure detail's topic is an object with a non-empty match")
	}
	kind := match.Exact
	switch t.MatchType {
	case "", "exact":
	case "urlpattern":
		kind = match.URLPattern
	default:
		return match.Matcher{}, Refuse(Malformed, "match_type %q unknown", t.MatchType)
	}
	m, err := match.Compile(kind, *t.Match)
	if err != nil {
		return m, Refuse(Malformed, "%v", err)
	}
	if kind == match.Exact && *t.Match == "*" {
		m = match.All() // the protocol's wildcard, whatever the kind
	}
	return m, nil
}
