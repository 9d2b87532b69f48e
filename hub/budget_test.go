package hub

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
)

// frameEncoder writes each event's envelope as its frame, as the SSE
// writer does (in size, at least).
type frameEncoder struct{}

func (frameEncoder) AppendEvent(b []byte, _ *event.Event, envelope []byte) []byte {
	return append(b, envelope...)
}

func (frameEncoder) AppendGap(b []byte, _, _ int64) []byte { return append(b, 'g') }

// awaitHeld polls until budget holds want bytes (a hang guard, not a
// timing): the hub and the subscriptions change it on their goroutines.
func awaitHeld(t *testing.T, budget *limits.Budget, want int64, what string) {
	t.Helper()
	for deadline := time.Now().Add(wait); budget.Held() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the budget holds %d bytes, want %d", what, budget.Held(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// The events that live queues hold come from the tenant's share of the
// read budget once, however many streams hold them, until the last
// stream that holds one has handed it out or closed; when the budget has
// no room for a commit, the live streams are sent back to the backlog
// (they read it, waiting for room) instead of queueing past it; and the
// frames a live stream hands out past freeFrameBytes are taken too, until
// its next Next.
func TestLiveQueuesCountOnceAgainstTheReadBudget(t *testing.T) {
	const total = 1 << 20
	budget := limits.NewBudget(total, 0, "read answers")
	h := newHarnessWith(t, -1, nil, func(o *Options) { o.ReadBudget = budget })
	ctx := context.Background()
	var subs []*Subscription
	for range 50 {
		sub, err := h.hubs.Watch(ctx, "t", "x", From{Now: true})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	data := `"` + strings.Repeat("x", 10<<10) + `"`
	var envelopes int64
	for range 10 {
		h.publish(data)
	}
	// The envelopes as the hub encodes them: one of the streams' queues
	// (a publish may be answered before its hub pushes the commit).
	var items []*item
	for len(items) < 10 {
		recv(t, subs[0].Ready(), "the events pushed")
		more, _, _ := subs[0].stream.take(nil)
		items = append(items, more...)
	}
	for _, it := range items {
		envelopes += int64(len(it.Envelope))
	}
	subs[0].items = items // handed out by Next, or let go of by Close
	awaitHeld(t, budget, envelopes, "ten events queued for 50 live streams")
	for _, sub := range subs[1:] {
		sub.Close()
	}
	awaitHeld(t, budget, envelopes, "49 of the 50 streams closed")
	// The last handed them out: 100 KiB of frames, past freeFrameBytes.
	b, err := subs[0].Next(ctx, frameEncoder{}, nil, 1<<20)
	if err != nil || subs[0].Position() != 10 {
		t.Fatalf("next: %v at %d", err, subs[0].Position())
	}
	if held := budget.Held(); held < int64(len(b))-freeFrameBytes || held > int64(len(b))+64<<10 {
		t.Fatalf("%d bytes of frames handed out hold %d bytes of the budget", len(b), held)
	}
	subs[0].Close()
	awaitHeld(t, budget, 0, "every stream closed")

	// No room: a commit is not queued past the budget; the stream goes
	// back to the backlog.
	sub, err := h.hubs.Watch(ctx, "t", "x", From{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	full, refused := budget.TryTake("other", total)
	if refused != nil {
		t.Fatal(refused)
	}
	h.publish(data)
	recv(t, sub.Ready(), "the stream told of the commit")
	sub.stream.mu.Lock()
	queued, demoted := len(sub.stream.queue), sub.stream.demoted
	sub.stream.mu.Unlock()
	if queued != 0 || !demoted {
		t.Fatalf("with no room in the budget: %d events queued, demoted %v", queued, demoted)
	}
	if budget.Held() != total {
		t.Fatalf("the budget holds %d bytes, want only the other holder's %d", budget.Held(), total)
	}
	full()
	sub.stream.signal() // the signal the test took above
	got := drain(t, sub, 11)
	if got[len(got)-1] != 11 {
		t.Fatalf("the demoted stream read %v from the backlog", got)
	}
}
