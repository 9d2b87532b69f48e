package mercure

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/edgehub/edgehub/match"
	"github.com/edgehub/edgehub/refusal"
)

// The contract's bounds on a subscription's selectors.
const (
	maxSelectors     = 100
	maxSelectorBytes = 1024
)

// selection is a subscription's selectors (plan 052): the exact topics,
// which the tenant hub indexes, and the rest (URL patterns, URI
// templates, the wildcard), which it tests once per topic. Mercure
// selects an update by any of its topics; what the subscriber may see is
// the frames' to say. The hub's own announcements are tried only against
// the selectors aimed at them, and never for an anonymous subscriber.
// parseSelection reads and counts it; its stream takes what it costs,
// then compiles it (Compile).
type selection struct {
	// given is each distinct selector as the subscriber wrote it, named
	// as the protocol names its matcher, for its subscription events.
	given     []selector
	kinds     []match.Kind // given's
	anonymous bool
	// base is the hub URL the subscriber came to, which relative URL
	// patterns and topics resolve against; hubPath is its path.
	base, hubPath string
	heap, work    int64

	exact    map[string]bool
	patterns []match.Matcher
	// announced is the selectors an announcement is tried against (the
	// wildcard, and those aimed at the subscriptions' namespace); none
	// for an anonymous subscriber, who may see none.
	announced []match.Matcher
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
// The bounds (at most 100 selectors of at most 1024 bytes) are checked
// first, then what each selector and all of them would cost once
// compiled (match.Estimate), all before anything is compiled.
func parseSelection(r *http.Request, anonymous bool) (*selection, *refusal.Error) {
	type param struct {
		kind   match.Kind
		values []string
	}
	var params []param
	n := 0
	q := r.URL.Query()
	for _, name := range slices.Sorted(maps.Keys(q)) { // the same order every time
		values := q[name]
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
			if v == "" || len(v) > maxSelectorBytes {
				return nil, refusal.New(refusal.InvalidSelector, "a selector is 1 to %d bytes", maxSelectorBytes)
			}
		}
		if n += len(values); n > maxSelectors {
			return nil, refusal.New(refusal.InvalidSelector, "at most %d selectors", maxSelectors)
		}
		params = append(params, param{kind, values})
	}
	if n == 0 {
		return nil, refusal.New(refusal.InvalidSelector, "a subscription names at least one match, match_urlpattern or topic")
	}
	s := &selection{anonymous: anonymous, base: hubBase(r), hubPath: r.URL.EscapedPath()}
	var work int64
	for _, p := range params {
		for _, v := range p.values {
			c, err := match.Estimate(p.kind, v, s.base)
			if err != nil {
				return nil, refusal.New(refusal.InvalidSelector, "%v", err)
			}
			if work += c.Work; work > match.MaxSelectionWork {
				return nil, refusal.New(refusal.InvalidSelector, "the selectors together are too costly to match (about %d steps per byte of a topic; at most %d)", work, match.MaxSelectionWork)
			}
			s.heap += c.Heap
			s.work = work
			if g := (selector{matchTypes[p.kind], v}); !slices.Contains(s.given, g) {
				s.given = append(s.given, g)
				s.kinds = append(s.kinds, p.kind)
			}
		}
	}
	return s, nil
}

// Compile compiles the selectors, once the stream holds what they cost:
// a malformed URL pattern is 400 invalid_selector.
func (s *selection) Compile() *refusal.Error {
	s.exact = map[string]bool{}
	for i, g := range s.given {
		kind, v := s.kinds[i], g.match
		m, err := match.CompileAt(kind, v, s.base)
		if err != nil {
			return refusal.New(refusal.InvalidSelector, "%v", err)
		}
		if v == "*" {
			m = match.All() // the wildcard of every kind
		}
		if v != "*" && (kind == match.Exact || kind == match.Template && m.Exact()) {
			s.exact[v] = true
		} else {
			s.patterns = append(s.patterns, m)
		}
		if !s.anonymous && aimsAtAnnouncements(v, s.hubPath) {
			s.announced = append(s.announced, m)
		}
	}
	return nil
}

// hubBase is the hub URL as the request reached the server: its scheme,
// its Host and the hub's path, which the protocol resolves relative URL
// patterns and topics against.
func hubBase(r *http.Request) string {
	if r.Host == "" {
		return match.Base // HTTP/1.0 with no Host: there is no origin to take
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.EscapedPath()
}

// aimsAtAnnouncements says whether the selector v may select the hub's
// announcements, whose topics lie below the subscriptions' path: the
// wildcard, or a selector whose path (after any scheme and host) starts
// with that path, the well-known one or the one below the hub's own
// path. Any other is never tried against them, however it would match.
func aimsAtAnnouncements(v, hubPath string) bool {
	if v == "*" {
		return true
	}
	path := v
	if i := strings.Index(v, "://"); i >= 0 {
		j := strings.IndexByte(v[i+3:], '/')
		if j < 0 {
			return false
		}
		path = v[i+3+j:]
	}
	return strings.HasPrefix(path, subscriptionsPath) || strings.HasPrefix(path, hubPath+"/subscriptions")
}

// Match says whether topic is selected.
func (s *selection) Match(topic string) bool { return s.exact[topic] || s.MatchPattern(topic) }

// ByOthers is true: Mercure selects an update by any of its topics.
func (s *selection) ByOthers() bool { return true }

// MatchAnnouncement says whether one of the selectors aimed at the hub's
// announcements selects topic, an announcement's own or its id.
func (s *selection) MatchAnnouncement(topic string) bool {
	return slices.ContainsFunc(s.announced, func(m match.Matcher) bool { return m.Match(topic) })
}

// AnnouncementKey is the same for two selections whose selectors aimed
// at announcements are the same, at the same hub URL, so that the tenant
// hub tries one announcement once for both; empty when no announcement
// reaches the subscriber.
func (s *selection) AnnouncementKey() string {
	if len(s.announced) == 0 {
		return ""
	}
	return s.base + "|" + matchersKey(s.announced)
}

// Heap is what the selection's compiled selectors hold, at least (their
// match.Estimate): its stream is charged for it before it compiles them.
func (s *selection) Heap() int64 { return s.heap }

// Work is the matching work of the selectors per byte of a tested topic
// (match.Cost.Work), at most.
func (s *selection) Work() int64 { return s.work }

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
// same, in any order, at the same hub URL (which relative ones resolve
// against), so that the tenant hub tests them as one: a thousand
// subscribers of one URL pattern cost one test a topic. Its prefix keeps
// it apart from a native selection's, which its grants filter.
func (s *selection) PatternKey() string {
	return "mercure|" + strconv.Itoa(len(s.base)) + ":" + s.base + "|" + matchersKey(s.patterns)
}

// matchersKey is the same string for the same matchers in any order.
func matchersKey(ms []match.Matcher) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, strconv.Itoa(int(m.Kind))+"p"+strconv.Itoa(len(m.Pattern))+":"+m.Pattern)
	}
	slices.Sort(parts)
	return strings.Join(parts, "|")
}
