package mercure

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/edgehub/edgehub/match"
	"github.com/edgehub/edgehub/refusal"
)

// The protocol's bounds on a subscription's selectors.
const (
	maxSelectors     = 100
	maxSelectorBytes = 4096
)

// selection is a subscription's selectors: the exact topics, which the
// tenant hub indexes, and the rest (URL patterns, URI templates, the
// wildcard), which it tests once per topic. Mercure selects an update by
// any of its topics; what the subscriber may see is the frames' to say.
type selection struct {
	exact    map[string]bool
	patterns []match.Matcher
	// given is each distinct selector as the subscriber wrote it, for
	// its subscription events.
	given []selector
}

// selector is one of a subscription's selectors, named by the
// protocol's matcher type: exact or urlpattern, or none for 0.x's topic
// selectors (a topic, a URI template or "*").
type selector struct{ matchType, match string }

// matchTypes name each kind of selector as the protocol does.
var matchTypes = map[match.Kind]string{match.Exact: "exact", match.URLPattern: "urlpattern", match.Template: ""}

// parseSelection reads the current revision's match, match_exact and
// match_urlpattern and 0.x's topic (a URI template, "*", or a topic);
// any other match… parameter is a matcher the hub does not know: 400.
func parseSelection(r *http.Request) (*selection, *refusal.Error) {
	s := &selection{exact: map[string]bool{}}
	n := 0
	for name, values := range r.URL.Query() {
		var kind match.Kind
		switch name {
		case "match", "match_exact":
			kind = match.Exact
		case "match_urlpattern":
			kind = match.URLPattern
		case "topic":
			kind = match.Template
		default:
			if strings.HasPrefix(strings.ToLower(name), "match") {
				return nil, refusal.New(refusal.InvalidSelector, "matcher %q is not one this hub knows: match, match_exact, match_urlpattern, or 0.x's topic", name)
			}
			continue
		}
		for _, v := range values {
			if n++; n > maxSelectors {
				return nil, refusal.New(refusal.InvalidSelector, "at most %d selectors", maxSelectors)
			}
			if v == "" || len(v) > maxSelectorBytes {
				return nil, refusal.New(refusal.InvalidSelector, "a selector is 1 to %d bytes", maxSelectorBytes)
			}
			m, err := match.Compile(kind, v)
			if err != nil {
				return nil, refusal.New(refusal.InvalidSelector, "%v", err)
			}
			if v == "*" {
				m = match.All() // the wildcard of every kind
			}
			if v != "*" && (kind == match.Exact || kind == match.Template && m.Exact()) {
				s.exact[v] = true
			} else {
				s.patterns = append(s.patterns, m)
			}
			if g := (selector{matchTypes[kind], v}); !slices.Contains(s.given, g) {
				s.given = append(s.given, g)
			}
		}
	}
	if n == 0 {
		return nil, refusal.New(refusal.InvalidSelector, "a subscription names at least one match, match_urlpattern or topic")
	}
	return s, nil
}

// Match says whether topic is selected.
func (s *selection) Match(topic string) bool { return s.exact[topic] || s.MatchPattern(topic) }

// Exact is the topics selected by name, which the tenant hub indexes.
func (s *selection) Exact() []string {
	topics := make([]string, 0, len(s.exact))
	for t := range s.exact {
		topics = append(topics, t)
	}
	return topics
}

// Names says whether topic is selected by name.
func (s *selection) Names(topic string) bool { return s.exact[topic] }

// Patterned says whether some topics are selected by a pattern.
func (s *selection) Patterned() bool { return len(s.patterns) > 0 }

// MatchPattern says whether a pattern selects topic.
func (s *selection) MatchPattern(topic string) bool {
	return slices.ContainsFunc(s.patterns, func(m match.Matcher) bool { return m.Match(topic) })
}

// Key is the same for two subscriptions that select alike, so that the
// topic list counts their streams as one group.
func (s *selection) Key() string {
	parts := make([]string, 0, len(s.exact))
	for t := range s.exact {
		parts = append(parts, "e"+strconv.Itoa(len(t))+":"+t)
	}
	slices.Sort(parts)
	return strings.Join(parts, "|") + "|" + s.PatternKey()
}

// PatternKey is the same for two subscriptions whose patterns are the
// same, in any order, so that the tenant hub tests them as one: a
// thousand subscribers of one URL pattern cost one test a topic. Its
// prefix keeps it apart from a native selection's, which its grants
// filter.
func (s *selection) PatternKey() string {
	parts := make([]string, 0, len(s.patterns))
	for _, m := range s.patterns {
		parts = append(parts, strconv.Itoa(int(m.Kind))+"p"+strconv.Itoa(len(m.Pattern))+":"+m.Pattern)
	}
	slices.Sort(parts)
	return "mercure|" + strings.Join(parts, "|")
}
