package backlog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
)

// announce is the Publish of a subscriber's presence: n rows added (its
// start) or, with add false, n rows removed (its end).
func announce(tenant, subscriber, owner string, n int, add bool) *Publish {
	req := &Publish{Tenant: tenant, Topic: "/.well-known/mercure/subscriptions",
		Presence: &PresenceOp{Subscriber: subscriber, Owner: owner}}
	for i := range n {
		id := "/s/" + subscriber + "/" + string(rune('a'+i))
		req.Events = append(req.Events, event.Event{Type: "mercure", Data: []byte(`"` + id + `"`)})
		if add {
			req.Presence.Add = append(req.Presence.Add, PresenceRow{ID: id, Body: []byte(`{"id":"` + id + `"}`)})
		}
	}
	if !add {
		req.Presence.Remove = n
	}
	return req
}

// Presence rows come and go only with the commit of their announcement:
// a list and its head, read in one snapshot, agree with the log; a
// removal of rows that are gone (ended by another process already) is
// refused and appends nothing, so no end is told twice; a tenant's
// deletion takes its rows.
func TestPresenceMovesWithItsAnnouncements(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	mustPublish(t, l, announce("acme", "s1", "p1", 2, true), announce("acme", "s2", "p1", 1, true))
	page, err := l.Presence(ctx, "acme", "/s/", 100)
	if err != nil || page.Head != 3 || len(page.Bodies) != 3 || string(page.Bodies[0]) != `{"id":"/s/s1/a"}` {
		t.Fatalf("the list after two starts: %+v %v", page, err)
	}
	if page, _ := l.Presence(ctx, "acme", "/s/s1/", 1); len(page.Bodies) != 1 {
		t.Errorf("a list under a prefix, limited to 1: %d rows", len(page.Bodies))
	}
	mustPublish(t, l, announce("acme", "s1", "p1", 2, false))
	res, err := l.CommitBatch(ctx, []*Publish{announce("acme", "s1", "p1", 2, false), announce("acme", "s2", "p2", 1, false)})
	if err != nil || !errors.Is(res[0].Err, ErrPresenceGone) || !errors.Is(res[1].Err, ErrPresenceGone) {
		t.Fatalf("ending again, and ending another owner's: %+v %v, want ErrPresenceGone twice", res, err)
	}
	page, err = l.Presence(ctx, "acme", "/s/", 100)
	if err != nil || page.Head != 5 || len(page.Bodies) != 1 {
		t.Fatalf("after one end and two refused: %+v %v, want head 5 (nothing appended by the refused) and s2's row", page, err)
	}
	if err := l.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, l, `SELECT count(*) FROM presence`); n != 0 {
		t.Errorf("%d presence rows outlived their tenant", n)
	}
}

// The orphans are the whole subscribers of owners without a live lease:
// an expired lease's, and one that never had a lease; a live lease's rows
// are not. A limit that would cut a subscriber leaves it for the next
// round.
func TestOrphansAreWholeSubscribersOfDeadOwners(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	now := time.Now()
	if err := errors.Join(l.RenewLease(ctx, "alive", now.Add(time.Minute)), l.RenewLease(ctx, "dead", now.Add(-time.Second))); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, l, announce("acme", "a1", "alive", 2, true), announce("acme", "d1", "dead", 2, true),
		announce("acme", "d2", "dead", 3, true), announce("acme", "n1", "never", 1, true))
	orphans, err := l.Orphans(ctx, now, 100)
	if err != nil || len(orphans) != 3 {
		t.Fatalf("orphans: %+v %v, want d1, d2 and n1", orphans, err)
	}
	for i, want := range []struct {
		subscriber string
		rows       int
	}{{"d1", 2}, {"d2", 3}, {"n1", 1}} {
		if o := orphans[i]; o.Tenant != "acme" || o.Subscriber != want.subscriber || len(o.Rows) != want.rows {
			t.Errorf("orphan %d: %+v, want %s with %d rows", i, o, want.subscriber, want.rows)
		}
	}
	if cut, err := l.Orphans(ctx, now, 4); err != nil || len(cut) != 1 || cut[0].Subscriber != "d1" {
		t.Errorf("orphans up to 4 rows: %+v %v, want d1 alone (d2 would be cut)", cut, err)
	}
	for _, o := range orphans {
		mustPublish(t, l, announce(o.Tenant, o.Subscriber, o.Owner, len(o.Rows), false))
	}
	if orphans, err := l.Orphans(ctx, now, 100); err != nil || len(orphans) != 0 {
		t.Errorf("orphans once ended: %+v %v", orphans, err)
	}
	if n := count(t, l, `SELECT count(*) FROM leases`); n != 1 {
		t.Errorf("%d leases left, want the live one (the expired one owns nothing)", n)
	}
}
