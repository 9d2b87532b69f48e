// Package selector is what a stream or a read of several topics asks for
// (plan 038): exact topics and '*' patterns, as the query parameters
// topic= and pattern= give them, each bounded, and the one test of
// whether a topic is selected, which the token's grants narrow.
package selector

import (
	"slices"
	"strconv"
	"strings"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
)

// The contract's bounds on a request's selectors.
const (
	MaxSelectors = 100
	MaxBytes     = 1024
)

// Set is a request's selectors and its token's grants.
type Set struct {
	exact    map[string]bool
	patterns []string
	grants   auth.Grant
}

// Parse reads the topic and pattern selectors; none at all selects every
// topic. grants are the token's patterns for the action; an exact topic
// they do not cover is refused (403 forbidden), while a pattern simply
// selects only the covered topics.
func Parse(topics, patterns []string, grants auth.Grant) (*Set, *refusal.Error) {
	if n := len(topics) + len(patterns); n > MaxSelectors {
		return nil, refusal.New(refusal.InvalidSelector, "%d selectors: at most %d", n, MaxSelectors)
	}
	for _, v := range append(topics[:len(topics):len(topics)], patterns...) {
		if len(v) == 0 || len(v) > MaxBytes {
			return nil, refusal.New(refusal.InvalidSelector, "a selector is 1 to %d bytes", MaxBytes)
		}
	}
	s := &Set{exact: make(map[string]bool, len(topics)), patterns: patterns, grants: grants}
	for _, t := range topics {
		if !names.ValidTopic(t) {
			return nil, refusal.New(refusal.InvalidName, "topic selector %q is not a topic name", t)
		}
		if !grants.Match(t) {
			return nil, refusal.New(refusal.Forbidden, "the credentials do not cover topic %q", t)
		}
		s.exact[t] = true
	}
	if len(topics) == 0 && len(patterns) == 0 {
		s.patterns = []string{"*"}
	}
	return s, nil
}

// Match says whether topic is selected: named exactly, or matched by a
// pattern and covered by the grants.
func (s *Set) Match(topic string) bool {
	return s.exact[topic] || s.MatchPattern(topic)
}

// Exact is the topics named exactly, which a tenant hub indexes: an event
// of one of them reaches the stream without a pattern test.
func (s *Set) Exact() []string {
	topics := make([]string, 0, len(s.exact))
	for t := range s.exact {
		topics = append(topics, t)
	}
	return topics
}

// ByOthers is false: the native API selects an event by its own topic
// only, a Mercure update's included.
func (s *Set) ByOthers() bool { return false }

// MatchAnnouncement is false: a native stream takes the hub's Mercure
// announcements by their own topic, as any event (ByOthers).
func (s *Set) MatchAnnouncement(string) bool { return false }

// AnnouncementKey is empty: no announcement is tried against a native
// selection but by its own topic.
func (s *Set) AnnouncementKey() string { return "" }

// Heap is what the set holds: its selectors' text and entries, which
// its stream is charged for while it is open (nothing is compiled).
func (s *Set) Heap() int64 {
	var n int64
	for t := range s.exact {
		n += int64(len(t)) + 64
	}
	for _, p := range s.patterns {
		n += int64(len(p)) + 32
	}
	return n
}

// Compile is nil: a native selection compiles nothing (Parse made it).
func (s *Set) Compile() *refusal.Error { return nil }

// Work is the patterns' matching work per byte of a tested topic, at
// most: a '*' glob backs up over its pattern's bytes.
func (s *Set) Work() int64 {
	var n int64
	for _, p := range s.patterns {
		n += int64(len(p))
	}
	return n
}

// Names says whether topic is one of the exact topics.
func (s *Set) Names(topic string) bool { return s.exact[topic] }

// Patterned says whether some topics are selected by pattern, which a
// tenant hub tests once per topic (MatchPattern).
func (s *Set) Patterned() bool { return len(s.patterns) > 0 }

// MatchPattern says whether a pattern selects topic, covered by the
// grants; Match is this or an exact name.
func (s *Set) MatchPattern(topic string) bool {
	return auth.MatchAny(s.patterns, topic) && s.grants.Match(topic)
}

// PatternKey is the same string for two sets whose patterns and grants
// are the same, in any order, so that a tenant hub tests them as one.
func (s *Set) PatternKey() string {
	var b strings.Builder
	for _, p := range slices.Sorted(slices.Values(s.patterns)) {
		b.WriteString(strconv.Itoa(len(p)) + ":" + p + "|")
	}
	b.WriteString(s.grants.Key())
	return b.String()
}

// Key is the same string for two sets that select the same way (the same
// exact topics, patterns and grants, in any order), for counting streams
// by selection.
func (s *Set) Key() string {
	var b strings.Builder
	for _, part := range [][]string{s.Exact(), s.patterns, {s.grants.Key()}} {
		sorted := slices.Sorted(slices.Values(part))
		b.WriteString(strconv.Itoa(len(sorted)))
		for _, v := range sorted {
			b.WriteString("|" + strconv.Itoa(len(v)) + ":" + v)
		}
		b.WriteByte(';')
	}
	return b.String()
}
