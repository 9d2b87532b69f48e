package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/match"
	"github.com/edgehub/edgehub/metrics"
)

// mercureSel is a selection as package mercure makes one (ByOthers):
// exact topics, '*' patterns, and the patterns announcements are tried
// against (none for an anonymous subscriber), with the tests its
// patterns are put to: "p:<topic>" for a pattern test, "a:<topic>" for
// an announcement's.
type mercureSel struct {
	exact, patterns, announced []string
	asked                      *[]string
}

func newMercureSel(exact, patterns, announced []string) mercureSel {
	return mercureSel{exact: exact, patterns: patterns, announced: announced, asked: new([]string)}
}

func globs(patterns []string, topic string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { m := match.Matcher{Kind: match.Glob, Pattern: p}; return m.Match(topic) })
}

func (s mercureSel) Match(topic string) bool {
	return slices.Contains(s.exact, topic) || s.MatchPattern(topic)
}
func (s mercureSel) ByOthers() bool     { return true }
func (s mercureSel) Exact() []string    { return s.exact }
func (s mercureSel) Patterned() bool    { return len(s.patterns) > 0 }
func (s mercureSel) PatternKey() string { return "m|" + strings.Join(s.patterns, "|") }
func (s mercureSel) MatchPattern(topic string) bool {
	*s.asked = append(*s.asked, "p:"+topic)
	return globs(s.patterns, topic)
}
func (s mercureSel) MatchAnnouncement(topic string) bool {
	if len(s.announced) > 0 { // a pattern is tried
		*s.asked = append(*s.asked, "a:"+topic)
	}
	return globs(s.announced, topic)
}
func (s mercureSel) AnnouncementKey() string {
	if len(s.announced) == 0 {
		return ""
	}
	return "a|" + strings.Join(s.announced, "|")
}

// nativeSel is a native selection recording its pattern tests.
type nativeSel struct {
	Selection
	asked *[]string
}

func (s nativeSel) MatchPattern(topic string) bool {
	*s.asked = append(*s.asked, "p:"+topic)
	return s.Selection.MatchPattern(topic)
}

func (s nativeSel) Match(topic string) bool {
	return slices.Contains(s.Exact(), topic) || s.MatchPattern(topic)
}

const subsPath = "/.well-known/mercure/subscriptions"

// announce commits, in one commit, an announcement for each id, as the
// Mercure protocol does when a subscriber's subscriptions start, and
// returns the position of the last.
func (h *harness) announce(ids ...string) int64 {
	h.t.Helper()
	events := make([]event.Event, len(ids))
	for i, id := range ids {
		events[i] = event.Event{Type: event.AnnouncementType, Data: json.RawMessage(`{}`),
			Update: &event.Update{Private: true, Topics: []string{subsPath + "/" + id}}}
	}
	res, err := h.hubs.Publish(&backlog.Publish{Tenant: "t", Topic: subsPath, Events: events}).Wait(context.Background())
	if err != nil || res.Err != nil {
		h.t.Fatalf("announce: %v %v", err, res.Err)
	}
	return res.Events[len(res.Events)-1].Pos
}

// An announcement is tried only against the selections that may receive
// it, live and in catch-up alike (backlog.Selects): a native stream
// takes it by its own topic, as any event; a Mercure stream with no
// selector aimed at announcements (an anonymous one, a pattern elsewhere)
// is never asked about it, whatever its patterns would say; one with an
// aimed selector is asked about the announcement's topic and id, once a
// commit, and gets each announcement of the commit it selects, and no
// other.
func TestAnnouncementsAreTriedOnlyWhereTheyMayGo(t *testing.T) {
	h := newHarness(t)
	type watcher struct {
		name  string
		sel   Selection
		asked *[]string
		want  []string
	}
	all := func(from From) []watcher {
		nat := nativeSel{Selection: sel(t, nil, nil), asked: new([]string)}
		anon := newMercureSel(nil, []string{"*"}, nil)
		books := newMercureSel(nil, []string{"/books/*"}, nil)
		aimed := newMercureSel(nil, nil, []string{subsPath + "/x*"})
		return []watcher{
			{"native, every topic", nat, nat.asked, []string{subsPath + ":1", subsPath + ":2", subsPath + ":3", "/books/1:4"}},
			{"Mercure, anonymous, every topic", anon, anon.asked, []string{"/books/1:4"}},
			{"Mercure, a pattern elsewhere", books, books.asked, []string{"/books/1:4"}},
			{"Mercure, aimed at announcements x*", aimed, aimed.asked, []string{subsPath + ":1", subsPath + ":3"}},
		}
	}
	live := all(From{Now: true})
	subs := make([]*TenantSubscription, len(live))
	for i, w := range live {
		subs[i] = h.watchTenant(w.sel, From{Now: true})
	}
	h.announce("x1", "y1", "x2")
	h.publishTopics("/books/1")
	check := func(how string, ws []watcher, subs []*TenantSubscription) {
		t.Helper()
		for i, w := range ws {
			enc := &tenantFrames{}
			var last int64
			fmt.Sscanf(w.want[len(w.want)-1][strings.LastIndexByte(w.want[len(w.want)-1], ':')+1:], "%d", &last)
			drainTenant(t, subs[i], enc, last)
			if !slices.Equal(enc.got, w.want) {
				t.Errorf("%s, %s: got %v, want %v", how, w.name, enc.got, w.want)
			}
			for _, q := range *w.asked {
				if strings.HasPrefix(q, "p:"+subsPath) && w.sel.ByOthers() {
					t.Errorf("%s, %s: a pattern was tried against announcement topic %s", how, w.name, q[2:])
				}
				if strings.HasPrefix(q, "a:") && w.sel.AnnouncementKey() == "" {
					t.Errorf("%s, %s: asked about announcement %s", how, w.name, q[2:])
				}
			}
		}
	}
	check("live", live, subs)
	// The aimed stream was asked about each announcement's topic and id
	// once, live; the native one tested its pattern against the
	// announcements' topic once (remembered) and against /books/1.
	if got := *live[3].asked; len(got) != 6 {
		t.Errorf("the aimed stream was asked %v, want each announcement's topic and id once", got)
	}
	if got := *live[0].asked; !slices.Equal(got, []string{"p:" + subsPath, "p:/books/1"}) {
		t.Errorf("the native stream's pattern was tested on %v", got)
	}
	caught := all(From{After: 0})
	subs = make([]*TenantSubscription, len(caught))
	for i, w := range caught {
		subs[i] = h.watchTenant(w.sel, From{After: 0})
	}
	check("caught up", caught, subs)
}

// A pattern group joining or leaving forgets nothing the tenant hub
// remembers of its tests: a remembered topic is tested against the
// groups made since it was, and only those; a group that left is
// dropped from what is remembered and lets go of its selection; a
// stream joining a group that exists tests nothing.
func TestPatternGroupsChurnWithoutRetesting(t *testing.T) {
	h := newTenantHub("t", &Options{Metrics: metrics.New()})
	x := &h.native.patterns
	tests := map[string]*atomic.Int64{}
	stream := func(pattern string) *tstream {
		if tests[pattern] == nil {
			tests[pattern] = new(atomic.Int64)
		}
		return newTStream(countingSel{Set: sel(t, nil, []string{pattern}), tests: tests[pattern]}, 1<<20)
	}
	count := func() map[string]int64 {
		m := map[string]int64{}
		for p, n := range tests {
			m[p] = n.Load()
		}
		return m
	}
	topics := []string{"a1", "a2", "b1"}
	matchAll := func() (got []string) {
		for _, topic := range topics {
			for _, g := range x.matching(topic) {
				got = append(got, topic+"~"+g.sel.PatternKey()[2:3])
			}
		}
		return got
	}
	a, b := stream("a*"), stream("b*")
	h.addLive(a)
	h.addLive(b)
	matchAll()
	if n := count(); n["a*"] != 3 || n["b*"] != 3 {
		t.Fatalf("first tests: %v, want 3 each", n)
	}
	c := stream("*1")
	h.addLive(c)
	matchAll()
	if n := count(); n["a*"] != 3 || n["b*"] != 3 || n["*1"] != 3 {
		t.Fatalf("after a group joined: %v, want only the new group tested, 3 times", n)
	}
	h.removeLive(b)
	if got := matchAll(); slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "~b") }) {
		t.Fatalf("a group that left still matches: %v", got)
	}
	if n := count(); n["a*"] != 3 || n["*1"] != 3 {
		t.Fatalf("after a group left: %v, want no test", n)
	}
	if listed := x.listed; listed != 4 { // a1~a, a2~a, a1~*1, b1~*1
		t.Fatalf("%d groups listed after one left, want 4", listed)
	}
	h.addLive(stream("a*")) // joins a's group
	matchAll()
	if n := count(); n["a*"] != 3 {
		t.Fatalf("a stream joining a group made tests: %v", n)
	}
	for _, g := range x.order {
		if g.sel == nil {
			t.Fatal("a live group lost its selection")
		}
	}
	if slices.ContainsFunc(x.order, func(g *patternGroup) bool { return g.sel.PatternKey() == b.sel.PatternKey() }) {
		t.Fatal("the group that left is still in order")
	}
}
