package backlog

import (
	"slices"

	"github.com/edgehub/edgehub/event"
)

// TenantSelection is what a tenant stream or read selects of its
// tenant's order (plan 052): a native selection (package selector) takes
// an event by its own topic only, announcements included; a Mercure one
// (package mercure) takes an update by any of its topics, and an
// announcement only through the selectors that may receive it.
type TenantSelection interface {
	// Match says whether the topic is selected: an event's own, or for
	// a selection ByOthers, one of a Mercure update's others.
	Match(topic string) bool
	// ByOthers says an update is selected by its other topics too.
	ByOthers() bool
	// MatchAnnouncement says, for a selection ByOthers, whether an
	// announcement of the topic (its own, or its id) is selected: false
	// for every topic when the stream may receive none.
	MatchAnnouncement(topic string) bool
}

// Selects is the one rule of what a tenant selection takes (the tenant
// hub's index is a faster way to the same answer): match is sel.Match,
// perhaps remembered per topic by the caller, which an announcement's id
// is never handed to, since each is new.
func Selects(sel TenantSelection, e *event.OfTenant, match func(topic string) bool) bool {
	switch {
	case !sel.ByOthers():
		return match(e.Topic)
	case e.Announcement():
		return sel.MatchAnnouncement(e.Topic) || slices.ContainsFunc(e.Others(), sel.MatchAnnouncement)
	}
	return match(e.Topic) || slices.ContainsFunc(e.Others(), match)
}

// TopicMatch is a selection of the events of the topics a function
// selects, by any of their topics, announcements too: every event, for
// the tenant hub's own reads.
type TopicMatch func(topic string) bool

// Match calls m.
func (m TopicMatch) Match(topic string) bool { return m(topic) }

// ByOthers is true: any topic of an event selects it.
func (TopicMatch) ByOthers() bool { return true }

// MatchAnnouncement calls m.
func (m TopicMatch) MatchAnnouncement(topic string) bool { return m(topic) }

// memoMax bounds the topic tests one tenant read remembers.
const memoMax = 4096

// remembered is sel.Match, remembered for up to memoMax topics: a page
// of one topic's events tests it once.
func remembered(sel TenantSelection) func(topic string) bool {
	seen := map[string]bool{}
	return func(topic string) bool {
		m, ok := seen[topic]
		if !ok {
			m = sel.Match(topic)
			if len(seen) == memoMax {
				clear(seen)
			}
			seen[topic] = m
		}
		return m
	}
}
