package backlog

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/event"
)

// testSelection is a selection of the topics named, native or Mercure,
// with the selectors an announcement is tried against (announced), and
// a record of every topic either test was asked about.
type testSelection struct {
	topics, announced []string
	byOthers          bool
	asked             *[]string
}

func (s testSelection) Match(topic string) bool {
	*s.asked = append(*s.asked, topic)
	return slices.Contains(s.topics, topic)
}

func (s testSelection) ByOthers() bool { return s.byOthers }

func (s testSelection) MatchAnnouncement(topic string) bool {
	*s.asked = append(*s.asked, "announcement "+topic)
	return slices.Contains(s.announced, topic)
}

// A tenant read takes what Selects says: a native selection every event
// of the topics it names, by their own topic only, announcements
// included; a Mercure one an update by any of its topics, and an
// announcement only through the selectors that may receive it. An
// announcement's id is never tried as a topic, and a topic's test is
// remembered within a read.
func TestTenantReadSelectsAsSelectsSays(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	const subs = "/.well-known/mercure/subscriptions"
	announce := func(id string) event.Event {
		return event.Event{Type: event.AnnouncementType, Data: []byte(`{}`), Update: &event.Update{Private: true, Topics: []string{subs + "/" + id}}}
	}
	mustPublish(t, l,
		&Publish{Tenant: "acme", Topic: "books", Events: []event.Event{{Type: "message", Data: []byte(`"a"`), Update: &event.Update{Topics: []string{"authors"}}}}}, // 1
		&Publish{Tenant: "acme", Topic: subs, Events: []event.Event{announce("one"), announce("two")}},                                                              // 2, 3
		&Publish{Tenant: "acme", Topic: "authors", Events: events(1)},                                                                                               // 4
		&Publish{Tenant: "acme", Topic: "books", Events: []event.Event{{Type: event.AnnouncementType, Data: []byte(`"native"`)}}},                                   // 5
		&Publish{Tenant: "acme", Topic: subs, Events: []event.Event{announce("three")}},                                                                             // 6
	)
	for _, c := range []struct {
		name string
		sel  testSelection
		want []int64
		// asked is every question the read put, in order.
		asked []string
	}{
		{"native, by own topic", testSelection{topics: []string{"authors", subs}}, []int64{2, 3, 4, 6},
			[]string{"books", subs, "authors"}},
		{"Mercure, announced nothing", testSelection{topics: []string{"authors", subs}, byOthers: true}, []int64{1, 4},
			[]string{"books", "authors", "announcement " + subs, "announcement " + subs + "/one", "announcement " + subs,
				"announcement " + subs + "/two", "announcement " + subs, "announcement " + subs + "/three"}},
		{"Mercure, announced one id", testSelection{topics: []string{"books"}, announced: []string{subs + "/two"}, byOthers: true}, []int64{1, 3, 5},
			[]string{"books", "announcement " + subs, "announcement " + subs + "/one", "announcement " + subs,
				"announcement " + subs + "/two", "authors", "announcement " + subs, "announcement " + subs + "/three"}},
	} {
		var asked []string
		c.sel.asked = &asked
		p, err := l.ReadTenant(ctx, "acme", 0, c.sel, 100, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, e := range p.Events {
			got = append(got, e.Pos)
		}
		if !slices.Equal(got, c.want) || !slices.Equal(asked, c.asked) {
			t.Errorf("%s: positions %v, want %v; asked\n%s\nwant\n%s", c.name, got, c.want, strings.Join(asked, "\n"), strings.Join(c.asked, "\n"))
		}
	}
}
