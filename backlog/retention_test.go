package backlog

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
)

func keyed(key, op, data string) event.Event {
	return event.Event{Type: "message", Key: key, Op: op, Data: json.RawMessage(data)}
}

// State is folded in the commit's transaction: the latest data of each key
// not deleted since, at the head it was read with.
func TestStateFoldsKeyedEvents(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	if _, err := l.CommitBatch(ctx, []*Publish{
		{Tenant: "a", Topic: "x", Events: []event.Event{keyed("k1", event.OpUpsert, `1`), keyed("k2", event.OpUpsert, `{"v":2}`)}},
		{Tenant: "a", Topic: "x", Events: []event.Event{keyed("k1", event.OpUpsert, `"one"`), {Type: "message", Data: json.RawMessage(`"plain"`)}}},
		{Tenant: "a", Topic: "x", Events: []event.Event{keyed("k2", event.OpDelete, `null`), keyed("k3", event.OpUpsert, `[3]`)}},
	}); err != nil {
		t.Fatal(err)
	}
	if got := readState(t, l, "a", "x"); got != `{"seq":6,"state":{"k1":"one","k3":[3]}}` {
		t.Fatalf("state %s", got)
	}
	if got := readState(t, l, "a", "none"); got != `{"seq":0,"state":{}}` {
		t.Fatalf("empty state %s", got)
	}
}

// Count trimming leaves exactly the newest n visible at once; the read
// reports the trim point so readers can name what they lost; purge then
// removes the rows in chunks. (Segments: TestRetentionTrimsInsideASegment.)
func TestTrimByCountThenPurge(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	commitApart(t, l, singles("a", "x", events(12345)))
	if n, err := l.TrimByCount(ctx, 100); err != nil || n != 1 {
		t.Fatalf("trim: %d %v", n, err)
	}
	p, err := l.Read(ctx, "a", "x", 10, 1000, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if p.Trimmed != 12245 || len(p.Events) != 100 || p.Events[0].Seq != 12246 {
		t.Fatalf("after trim: trimmed %d, %d events from %d", p.Trimmed, len(p.Events), p.Events[0].Seq)
	}
	deleted, err := l.Purge(ctx)
	if err != nil || deleted != 12245 {
		t.Fatalf("purge deleted %d: %v", deleted, err)
	}
	var rows int
	l.testQueryRow(`SELECT count(*) FROM events`).Scan(&rows)
	if rows != 100 {
		t.Fatalf("%d rows left, want 100", rows)
	}
	if again, _ := l.Purge(ctx); again != 0 {
		t.Fatalf("second purge deleted %d", again)
	}
}

// Age trimming removes what was committed before now-age, and nothing else.
func TestTrimByAge(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "old", Events: events(5)}, {Tenant: "a", Topic: "mixed", Events: events(3)}})
	now = now.Add(time.Hour)
	l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "mixed", Events: events(2)}})
	now = now.Add(30 * time.Minute)
	if n, err := l.TrimByAge(ctx, time.Hour); err != nil || n != 2 {
		t.Fatalf("trimmed %d topics: %v", n, err)
	}
	for topic, want := range map[string][2]int64{"old": {5, 0}, "mixed": {3, 2}} {
		p, _ := l.Read(ctx, "a", topic, 0, 100, 1<<20)
		if p.Trimmed != want[0] || int64(len(p.Events)) != want[1] {
			t.Errorf("%s: trimmed %d, %d events; want %v", topic, p.Trimmed, len(p.Events), want)
		}
	}
	checkOldest(t, l)
}

// An idempotency key is remembered until its TTL, then a request with it
// appends anew.
func TestIdempotencyKeysExpire(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	req := func() []*Publish {
		return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "k", IdemHash: []byte("h")}}
	}
	l.CommitBatch(ctx, req())
	now = now.Add(23 * time.Hour)
	if n, _ := l.ExpireKeys(ctx, 24*time.Hour); n != 0 {
		t.Fatalf("expired %d keys before their time", n)
	}
	if res, _ := l.CommitBatch(ctx, req()); !res[0].Duplicate {
		t.Fatal("key forgotten before 24 hours")
	}
	now = now.Add(2 * time.Hour)
	if n, _ := l.ExpireKeys(ctx, 24*time.Hour); n != 1 {
		t.Fatalf("expired %d keys", n)
	}
	if res, _ := l.CommitBatch(ctx, req()); res[0].Duplicate || res[0].First != 2 {
		t.Fatalf("after expiry: %+v", res[0])
	}
}
