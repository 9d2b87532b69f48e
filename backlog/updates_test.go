package backlog

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
)

// What a Mercure publish says of its event beyond the data (its other
// topics, private, retry, its id) is stored with it, as a single row and
// inside a segment, and every read gives it back: a topic's read and the
// tenant's, and a tenant read selects an update by any of its topics. A
// subscriber resuming after an id finds the earliest position that had
// it, as the protocol says; an id never given, or one whose events
// retention removed, is not found. The attrs count in the tenant's stored bytes, and the
// measure the purge takes away is the one the commit added.
func TestUpdatesKeepWhatTheirPublisherSaid(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	first := &event.Update{ID: "urn:book:1", Private: true, Topics: []string{"https://example.com/authors/2"}, Retry: 3000}
	again := &event.Update{ID: "urn:book:1"}
	in := []*event.Update{first, nil, again}
	mustPublish(t, l,
		&Publish{Tenant: "acme", Topic: "https://example.com/books/1", Events: []event.Event{{Type: "message", Data: []byte(`"a"`), Update: first}}},
		&Publish{Tenant: "acme", Topic: "native", Events: events(1)},
		// A batch is a segment: its events' attrs are in the segment.
		&Publish{Tenant: "acme", Topic: "https://example.com/books/1", Batch: true, Events: []event.Event{
			{Type: "message", Data: []byte(`"b"`), Update: again}, {Type: "message", Data: []byte(`"c"`), Update: first}}},
		&Publish{Tenant: "acme", Topic: "https://example.com/books/2", Events: []event.Event{{Type: "message", Data: []byte(`"d"`), Update: again}}},
	)
	p, err := l.Read(ctx, "acme", "https://example.com/books/1", 0, 10, 1<<20)
	if err != nil || len(p.Events) != 3 {
		t.Fatalf("topic read: %d events: %v", len(p.Events), err)
	}
	for i, want := range []*event.Update{first, again, first} {
		if !reflect.DeepEqual(p.Events[i].Update, want) {
			t.Errorf("topic read, event %d: update %+v, want %+v", i+1, p.Events[i].Update, want)
		}
	}
	tp, err := l.ReadTenant(ctx, "acme", 0, TopicMatch(func(string) bool { return true }), 10, 1<<20)
	if err != nil || len(tp.Events) != 5 {
		t.Fatalf("tenant read: %d events: %v", len(tp.Events), err)
	}
	for i, want := range append(in[:2:2], again, first) {
		if !reflect.DeepEqual(tp.Events[i].Update, want) {
			t.Errorf("tenant read, position %d: update %+v, want %+v", tp.Events[i].Pos, tp.Events[i].Update, want)
		}
	}
	by, err := l.ReadTenant(ctx, "acme", 0, TopicMatch(func(topic string) bool { return topic == "https://example.com/authors/2" }), 10, 1<<20)
	if err != nil || len(by.Events) != 2 || by.Events[0].Pos != 1 || by.Events[1].Pos != 4 {
		t.Errorf("a tenant read selecting an update's other topic: %+v %v, want positions 1 and 4", by.Events, err)
	}
	if pos, found, err := l.UpdatePosition(ctx, "acme", "urn:book:1"); err != nil || !found || pos != 1 {
		// the segment's events are not indexed by id: only single rows
		t.Errorf("the earliest position of urn:book:1: %d %v %v, want 1 of 1 and 5 (a batch's are not looked up)", pos, found, err)
	}
	for _, tc := range []struct{ tenant, id string }{{"acme", "urn:never"}, {"globex", "urn:book:1"}} {
		if _, found, err := l.UpdatePosition(ctx, tc.tenant, tc.id); err != nil || found {
			t.Errorf("%s's %s: found %v, %v", tc.tenant, tc.id, found, err)
		}
	}
	stored := count(t, l, `SELECT bytes FROM usage WHERE tenant = 'acme'`)
	measured := count(t, l, `SELECT `+eventBytesSQL+` FROM events e JOIN topics t ON t.id = e.topic_id WHERE t.tenant = 'acme'`)
	if stored != measured || stored <= 3*int64(len(`"a"`)+len("message")) {
		t.Errorf("the tenant's stored bytes are %d, the purge's measure of its rows %d", stored, measured)
	}
}

// Once retention removed an update's row, its publisher's id still
// resolves to its position (the subscriber resuming after it is told of
// the gap instead of starting live), until ForgetTrimmedUpdates forgets
// it; a deleted topic's ids go with it.
func TestTrimmedUpdateIdsStillResolve(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	mustPublish(t, l, &Publish{Tenant: "acme", Topic: "a", Events: []event.Event{{Type: "message", Data: []byte(`"x"`), Update: &event.Update{ID: "u1"}}}})
	mustPublish(t, l, &Publish{Tenant: "acme", Topic: "a", Events: events(3)})
	if _, err := l.TrimByCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, l, `SELECT count(*) FROM events WHERE update_id = 'u1'`); n != 0 {
		t.Fatalf("the update's row is still there (%d)", n)
	}
	if pos, found, err := l.UpdatePosition(ctx, "acme", "u1"); err != nil || !found || pos != 1 {
		t.Fatalf("u1 after the purge: %d %v %v, want position 1", pos, found, err)
	}
	if _, found, _ := l.UpdatePosition(ctx, "globex", "u1"); found {
		t.Errorf("another tenant's u1 resolved")
	}
	if n, err := l.ForgetTrimmedUpdates(ctx, time.Hour); err != nil || n != 0 {
		t.Errorf("forgetting what is younger than an hour: %d %v", n, err)
	}
	if n, err := l.ForgetTrimmedUpdates(ctx, -time.Second); err != nil || n != 1 {
		t.Errorf("forgetting everything: %d %v", n, err)
	}
	if _, found, _ := l.UpdatePosition(ctx, "acme", "u1"); found {
		t.Errorf("u1 resolved once forgotten")
	}
}
