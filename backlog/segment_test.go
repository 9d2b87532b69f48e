package backlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
)

// Every field of every event comes back out of a segment as it went in,
// and a segment cut short, or holding fewer events than its row says, is
// an error, never a short read.
func TestSegmentKeepsEveryField(t *testing.T) {
	in := []event.Event{
		{Type: "message", Data: json.RawMessage(`{"a":1}`)},
		{Type: "t:1", Key: "k", Op: event.OpUpsert, Data: json.RawMessage(`"v"`)},
		{Type: "x", Key: "k", Op: event.OpDelete, Data: json.RawMessage(`null`)},
		{Type: "raw", Data: []byte{0, 1, 2, 0xff}, Raw: true},
		{Type: "empty", Data: []byte{}, Raw: true},
	}
	data := encodeSegment(nil, in)
	row := eventRow{seq: 14, n: int64(len(in)), nanos: 42, data: data}
	var out []event.Event
	if err := row.each(0, func(e event.Event) bool { out = append(out, e); return true }); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d events out of %d", len(out), len(in))
	}
	for i, e := range out {
		w := in[i]
		if e.Seq != int64(10+i) || e.Type != w.Type || e.Key != w.Key || e.Op != w.Op || e.Raw != w.Raw ||
			string(e.Data) != string(w.Data) || !e.Time.Equal(time.Unix(0, 42)) {
			t.Fatalf("event %d: %+v, want %+v at seq %d", i, e, w, 10+i)
		}
	}
	for cut := 1; cut < len(data); cut++ {
		short := eventRow{seq: 14, n: int64(len(in)), data: data[:cut]}
		if err := short.each(0, func(event.Event) bool { return true }); !errors.Is(err, errBadSegment) {
			t.Fatalf("a segment cut at %d of %d bytes: %v", cut, len(data), err)
		}
	}
	more := eventRow{seq: 15, n: int64(len(in) + 1), data: data}
	if err := more.each(0, func(event.Event) bool { return true }); !errors.Is(err, errBadSegment) {
		t.Fatalf("a segment with fewer events than its row: %v", err)
	}
}

// A read that starts, or ends, inside a segment gives exactly the events
// after its position, up to its limit or its bytes, with at least one.
func TestReadsStartAndEndInsideASegment(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(50)})
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(1)})
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(30)})
	if n := count(t, l, `SELECT count(*) FROM events`); n != 3 {
		t.Fatalf("%d rows, want 3: two segments and a single event", n)
	}
	const head = 81
	for after := int64(0); after <= head; after++ {
		p, err := l.Read(ctx, "a", "x", after, 7, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		want := min(7, head-after)
		if int64(len(p.Events)) != want {
			t.Fatalf("after %d: %d events, want %d", after, len(p.Events), want)
		}
		for i, e := range p.Events {
			if e.Seq != after+1+int64(i) {
				t.Fatalf("after %d: event %d is seq %d", after, i, e.Seq)
			}
		}
		if p, err := l.Read(ctx, "a", "x", after, 100, 1); err != nil || int64(len(p.Events)) != min(1, head-after) {
			t.Fatalf("after %d with 1 byte: %d events, %v", after, len(p.Events), err)
		}
	}
	all, err := l.Read(ctx, "a", "x", 0, 1000, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range all.Events {
		n := i
		switch {
		case i >= 51:
			n = i - 51
		case i == 50:
			n = 0
		}
		if want := fmt.Sprintf(`{"n":%d}`, n); string(e.Data) != want {
			t.Fatalf("seq %d: %s, want %s", e.Seq, e.Data, want)
		}
	}
}

// Retention trims inside a segment: readers see only the events above the
// trim point at once, the segment stays stored until all its events are
// trimmed, and goes whole then, giving back exactly its events' bytes.
func TestRetentionTrimsInsideASegment(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	usage := func() int64 { return count(t, l, `SELECT bytes FROM usage WHERE tenant = 'a'`) }
	first := events(100)
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: first})
	var firstBytes int64
	for i := range first {
		firstBytes += eventBytes(&first[i])
	}
	if got := usage(); got != firstBytes {
		t.Fatalf("usage %d, want %d: a segment weighs what its events would as rows", got, firstBytes)
	}
	if _, err := l.TrimByCount(ctx, 30); err != nil {
		t.Fatal(err)
	}
	checkOldest(t, l)
	p, err := l.Read(ctx, "a", "x", 0, 1000, 1<<20)
	if err != nil || p.Trimmed != 70 || len(p.Events) != 30 || p.Events[0].Seq != 71 {
		t.Fatalf("after the trim: trimmed %d, %d events, %v", p.Trimmed, len(p.Events), err)
	}
	if n, err := l.Purge(ctx); err != nil || n != 0 {
		t.Fatalf("purge of a segment still partly retained: %d %v", n, err)
	}
	if got := usage(); got != firstBytes {
		t.Fatalf("usage %d after a purge that removed nothing, want %d", got, firstBytes)
	}
	if p, err := l.Read(ctx, "a", "x", 65, 1000, 1<<20); err != nil || len(p.Events) != 30 || p.Events[0].Seq != 71 {
		t.Fatalf("after the purge: %d events, %v", len(p.Events), err)
	}

	second := events(50)
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: second})
	if _, err := l.TrimByCount(ctx, 30); err != nil {
		t.Fatal(err)
	}
	checkOldest(t, l)
	if n, err := l.Purge(ctx); err != nil || n != 100 {
		t.Fatalf("purge once the first segment is all trimmed: %d %v, want its 100 events", n, err)
	}
	var secondBytes int64
	for i := range second {
		secondBytes += eventBytes(&second[i])
	}
	if got := usage(); got != secondBytes {
		t.Fatalf("usage %d after the purge, want %d", got, secondBytes)
	}
	if p, err := l.Read(ctx, "a", "x", 0, 1000, 1<<20); err != nil || p.Trimmed != 120 || len(p.Events) != 30 || p.Events[0].Seq != 121 {
		t.Fatalf("at the end: trimmed %d, %d events, %v", p.Trimmed, len(p.Events), err)
	}
}

// The age pass trims a segment whole (its events share their commit's
// time) and never past the first young event.
func TestAgeTrimTakesSegmentsWhole(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(40)})
	now = now.Add(2 * time.Hour)
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(25)})
	if _, err := l.TrimByCount(ctx, 45); err != nil { // inside the first segment
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	if n, err := l.TrimByAge(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("age trim: %d %v", n, err)
	}
	checkOldest(t, l)
	if p, err := l.Read(ctx, "a", "x", 0, 100, 1<<20); err != nil || p.Trimmed != 40 || len(p.Events) != 25 || p.Events[0].Seq != 41 {
		t.Fatalf("trimmed %d, %d events, %v; want 40 and 25 from 41", p.Trimmed, len(p.Events), err)
	}
}
