package hub

import (
	"context"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
)

// liveSubscription is a subscription at the head with no hub behind it:
// a test pushes to its stream as a hub would (stream.offer) and hands out
// what it queued, with nothing else running that could allocate.
func liveSubscription() *Subscription {
	budget := limits.NewBudget(0, 0, "read answers")
	opts := &Options{ReadBudget: budget, started: time.Now()}
	return &Subscription{
		router: &Router{opts: opts}, tenant: "t", topic: "x", stream: newStream(1 << 20), live: true,
		hold: budget.Hold("t"), disk: budget.Hold("t"), frames: budget.Hold("t"),
	}
}

// A live stream that is pushed an event at a time and hands each out
// allocates nothing for it once its two arrays have grown: take makes the
// array of the last take the queue again, instead of dropping it, which
// had every push allocate a new one.
func TestPushAndTakeAllocateNothing(t *testing.T) {
	sub := liveSubscription()
	it := &item{Event: event.Event{Type: "message"}, Envelope: []byte(`{"seq":1}`)}
	batch := []*item{it}
	enc := &discard{}
	b := make([]byte, 0, 64)
	push := func() {
		it.Event.Seq++
		if !sub.stream.offer(batch) {
			t.Fatal("the stream was demoted")
		}
		var err error
		if b, err = sub.Next(context.Background(), enc, b[:0], 64<<10); err != nil || sub.Position() != it.Event.Seq {
			t.Fatalf("next: %v at %d, want %d", err, sub.Position(), it.Event.Seq)
		}
	}
	push()
	push()
	if n := testing.AllocsPerRun(100, push); n != 0 {
		t.Fatalf("a push and its hand-out allocate %.1f times; want none", n)
	}
}
