package hub

import "sort"

// The tenant hub's index of its live streams (plan 052): which of them
// an event reaches, without testing every stream's selection, and with
// a bounded amount of matching per event whatever the selections are.

// matchedTopicsMax and matchedGroupsMax bound what a pattern index
// remembers of its tests: the topics, and the pattern groups listed over
// all of them (10 000 groups that all match would otherwise list 10 000
// for each topic remembered). Past either, it forgets topics, any of
// them, until it is within both again.
const (
	matchedTopicsMax = 4096
	matchedGroupsMax = 1 << 20
)

// topicIndex is the live streams of one kind (native or Mercure) by what
// selects them: their exact topics by name, and their pattern groups.
type topicIndex struct {
	byTopic  map[string]map[*tstream]struct{}
	patterns patternIndex
}

func newTopicIndex() topicIndex {
	return topicIndex{byTopic: map[string]map[*tstream]struct{}{},
		patterns: patternIndex{groups: map[string]*patternGroup{}, memo: map[string]*tested{}}}
}

func (x *topicIndex) add(s *tstream) {
	for _, t := range s.sel.Exact() {
		set := x.byTopic[t]
		if set == nil {
			set = map[*tstream]struct{}{}
			x.byTopic[t] = set
		}
		set[s] = struct{}{}
	}
	if s.sel.Patterned() {
		x.patterns.add(s, s.sel.PatternKey())
	}
}

func (x *topicIndex) remove(s *tstream) {
	for _, t := range s.sel.Exact() {
		if set := x.byTopic[t]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(x.byTopic, t)
			}
		}
	}
	if s.sel.Patterned() {
		x.patterns.remove(s, s.sel.PatternKey())
	}
}

// each calls f with every stream that topic selects, exactly or by a
// pattern; a stream both name and pattern select comes twice.
func (x *topicIndex) each(topic string, f func(*tstream)) {
	for s := range x.byTopic[topic] {
		f(s)
	}
	for _, g := range x.patterns.matching(topic) {
		for s := range g.streams {
			f(s)
		}
	}
}

func (x *topicIndex) clear() {
	clear(x.byTopic)
	x.patterns.clear()
}

// patternGroup is the live streams whose selections select alike (by
// PatternKey, or by AnnouncementKey for announcements): one test of a
// topic serves them all, so that a thousand subscribers of one URL
// pattern cost one test, and a stream joining a group changes no test
// remembered.
type patternGroup struct {
	id  uint64    // the order groups are made in
	sel Selection // its first stream's, any would do; nil once it is gone
	// streams are the group's live streams; the group goes with the last.
	streams map[*tstream]struct{}
}

// patternIndex is the pattern groups of one kind of selection, and what
// it remembers of their tests: per topic seen, the groups made before
// `through` that match it. A group joining or leaving forgets nothing: a
// remembered topic is tested against the groups made since, and a group
// that left (its sel nil) is dropped from what lists it as it is met. So
// a topic costs a test per group once while it is remembered, however
// the groups churn.
type patternIndex struct {
	groups map[string]*patternGroup
	order  []*patternGroup // the live groups, by id
	nextID uint64
	memo   map[string]*tested
	// listed is the groups listed over all of memo, left ones included.
	listed int
}

// tested is what a pattern index remembers of one topic.
type tested struct {
	through uint64          // every group made before it has been tested
	groups  []*patternGroup // those of them that match
}

func (x *patternIndex) add(s *tstream, key string) {
	g := x.groups[key]
	if g == nil {
		g = &patternGroup{id: x.nextID, sel: s.sel, streams: map[*tstream]struct{}{}}
		x.nextID++
		x.groups[key] = g
		x.order = append(x.order, g)
	}
	g.streams[s] = struct{}{}
}

func (x *patternIndex) remove(s *tstream, key string) {
	g := x.groups[key]
	if g == nil {
		return
	}
	delete(g.streams, s)
	if len(g.streams) > 0 {
		return
	}
	delete(x.groups, key)
	i := x.at(g.id)
	x.order = append(x.order[:i], x.order[i+1:]...)
	// Let go of its selection (compiled patterns, perhaps megabytes)
	// though a remembered topic still lists it.
	g.sel, g.streams = nil, nil
}

// at is the index in order of the first group whose id is id or more.
func (x *patternIndex) at(id uint64) int {
	return sort.Search(len(x.order), func(i int) bool { return x.order[i].id >= id })
}

// matching is the live groups whose patterns match topic: those
// remembered, and those made since it was, each tested once.
func (x *patternIndex) matching(topic string) []*patternGroup {
	if len(x.order) == 0 {
		return nil
	}
	t := x.memo[topic]
	if t == nil {
		t = &tested{}
		x.memo[topic] = t
	}
	live := t.groups[:0]
	for _, g := range t.groups {
		if g.sel != nil {
			live = append(live, g)
		}
	}
	x.listed -= len(t.groups) - len(live)
	clear(t.groups[len(live):])
	t.groups = live
	for _, g := range x.order[x.at(t.through):] {
		if g.sel.MatchPattern(topic) {
			t.groups = append(t.groups, g)
			x.listed++
		}
	}
	t.through = x.nextID
	groups := t.groups
	if !x.within() {
		x.bound()
	}
	return groups
}

// bound forgets remembered topics, any of them (a map's order is
// random), until the memo is within its bounds.
func (x *patternIndex) bound() {
	for k, t := range x.memo {
		if x.within() {
			return
		}
		delete(x.memo, k)
		x.listed -= len(t.groups)
	}
}

func (x *patternIndex) within() bool {
	return len(x.memo) <= matchedTopicsMax && x.listed <= matchedGroupsMax
}

func (x *patternIndex) clear() {
	for _, g := range x.order {
		g.sel, g.streams = nil, nil
	}
	clear(x.groups)
	clear(x.order)
	x.order = x.order[:0]
	clear(x.memo)
	x.listed = 0
}
