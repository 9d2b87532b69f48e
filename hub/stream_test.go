package hub

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/sse"
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

// A live stream that is pushed an event at a time and hands each out,
// with Next or NextFrames, allocates nothing for it once its two arrays
// have grown: take makes the array of the last take the queue again,
// instead of dropping it, which had every push allocate a new one.
func TestPushAndTakeAllocateNothing(t *testing.T) {
	sub := liveSubscription()
	framing := Framing{Start: sse.AppendEventStart, End: sse.FrameEnd}
	it := &item{Event: event.Event{Type: "message"}}
	it.Frame, it.Envelope = framing.frame(&it.Event)
	batch := []*item{it}
	enc := &discard{}
	b := make([]byte, 0, 64)
	parts := make([][]byte, 0, 4)
	offer := func() {
		it.Event.Seq++
		if !sub.stream.offer(batch) {
			t.Fatal("the stream was demoted")
		}
	}
	for _, c := range []struct {
		name    string
		handOut func()
	}{
		{"Next", func() {
			var err error
			if b, err = sub.Next(context.Background(), enc, b[:0], 64<<10); err != nil {
				t.Fatal(err)
			}
		}},
		{"NextFrames", func() {
			var live bool
			if parts, live = sub.NextFrames(parts[:0], 4, 64<<10); !live || len(parts) != 1 {
				t.Fatalf("NextFrames gave %d frames, live %v", len(parts), live)
			}
		}},
	} {
		push := func() {
			offer()
			c.handOut()
			if sub.Position() != it.Event.Seq {
				t.Fatalf("%s: at %d, want %d", c.name, sub.Position(), it.Event.Seq)
			}
		}
		push()
		push()
		if n := testing.AllocsPerRun(100, push); n != 0 {
			t.Fatalf("a push and its hand-out by %s allocate %.1f times; want none", c.name, n)
		}
	}
}

// Every live stream writes the frame the hub built for an event, the very
// bytes, not a copy of its own; it is the frame the SSE encoder gives.
func TestLiveFramesAreSharedAcrossStreams(t *testing.T) {
	h := newHarnessWith(t, -1, nil, func(o *Options) { o.Framing = Framing{Start: sse.AppendEventStart, End: sse.FrameEnd} })
	var subs []*Subscription
	for range 2 {
		sub, err := h.hubs.Watch(context.Background(), "t", "x", From{Now: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs = append(subs, sub)
	}
	h.publish(`{"shared":true}`)
	var got [][]byte
	for _, sub := range subs {
		var parts [][]byte
		for len(parts) == 0 {
			recv(t, sub.Ready(), "the pushed event")
			var live bool
			if parts, live = sub.NextFrames(parts, 8, 64<<10); !live {
				t.Fatal("a live stream's NextFrames says it is not live")
			}
		}
		got = append(got, parts[0])
	}
	if &got[0][0] != &got[1][0] {
		t.Fatal("the two streams were given copies of the frame, not the hub's frame")
	}
	page, err := h.log.Read(context.Background(), "t", "x", 0, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := sse.AppendEvent(nil, &page.Events[0], nil); string(got[0]) != string(want) {
		t.Fatalf("the shared frame is %q, want the SSE frame %q", got[0], want)
	}
}

// NextFrames never waits: where Next would wait for read budget, or copy
// an event that has no shared frame, it hands out what it can, says the
// stream needs Next, and signals Ready; Next then hands out the rest, and
// nothing is lost or handed out twice.
func TestNextFramesLeavesToNextWhatWouldWait(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(sub *Subscription, framing Framing) (items []*item, release func())
	}{
		{"no frame", func(sub *Subscription, framing Framing) ([]*item, func()) {
			a := &item{Event: event.Event{Seq: 1, Type: "message"}}
			a.Frame, a.Envelope = framing.frame(&a.Event)
			b := &item{Event: event.Event{Seq: 2, Type: "message"}}
			b.Envelope = b.Event.AppendEnvelope(nil)
			return []*item{a, b}, func() {}
		}},
		{"no budget", func(sub *Subscription, framing Framing) ([]*item, func()) {
			budget := limits.NewBudget(8<<10, 0, "read answers")
			sub.router.opts.ReadBudget = budget
			sub.frames = budget.Hold("t")
			var items []*item
			for i := range 2 {
				it := &item{Event: event.Event{Seq: int64(i + 1), Type: "message", Data: []byte(`"` + strings.Repeat("x", 3<<10) + `"`)}}
				it.Frame, it.Envelope = framing.frame(&it.Event)
				items = append(items, it)
			}
			full, _ := budget.TryTake("other", 8<<10)
			return items, full
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub := liveSubscription()
			framing := Framing{Start: sse.AppendEventStart, End: sse.FrameEnd}
			items, release := c.setup(sub, framing)
			if !sub.stream.offer(items) {
				t.Fatal("demoted")
			}
			<-sub.Ready()
			parts, live := sub.NextFrames(nil, 8, 64<<10)
			if live || len(parts) != 1 || sub.Position() != 1 {
				t.Fatalf("NextFrames gave %d frames to %d, live %v; want the first, and Next for the second", len(parts), sub.Position(), live)
			}
			select {
			case <-sub.Ready():
			default:
				t.Fatal("NextFrames left the second event to Next without signalling Ready")
			}
			release()
			enc := &seqs{}
			if _, err := sub.Next(context.Background(), enc, nil, 64<<10); err != nil {
				t.Fatal(err)
			}
			wantSeqs(t, enc.got, 2, 2)
		})
	}
}
