package backlog

import (
	"context"
	"testing"

	"github.com/edgehub/edgehub/event"
)

func streamCreate(topic, contentType string) *Publish {
	return &Publish{Tenant: "s", Topic: topic, Stream: &StreamOp{Create: &StreamConfig{ContentType: contentType, TTL: -1, ForkOffset: -1}}}
}

func streamAppend(topic string, op StreamOp, data ...string) *Publish {
	p := &Publish{Tenant: "s", Topic: topic, Stream: &op}
	for _, d := range data {
		p.Events = append(p.Events, event.Event{Type: "message", Data: []byte(d), Raw: true})
	}
	return p
}

func outcomes(t *testing.T, l *Store, reqs ...*Publish) []StreamOutcome {
	t.Helper()
	res, err := l.CommitBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]StreamOutcome, len(res))
	for i, r := range res {
		out[i] = r.Stream.Outcome
	}
	return out
}

// The protocol's checks see what the requests before them in the same
// commit did: a producer's retry queued beside its original is a
// duplicate, not a second append; an append queued behind the close is
// refused; a Stream-Seq queued twice is taken once. Each check and its
// append are one step of one transaction.
func TestStreamChecksSeeTheCommitsOwnEarlierRequests(t *testing.T) {
	l := openTest(t)
	commitOne(t, l, streamCreate("x", "text/plain"))
	p := &Producer{ID: "p", Epoch: 0, Seq: 0}
	got := outcomes(t, l,
		streamAppend("x", StreamOp{ContentType: "text/plain", Producer: p}, "a"),
		streamAppend("x", StreamOp{ContentType: "text/plain", Producer: p}, "a"),
		streamAppend("x", StreamOp{ContentType: "text/plain", WriterSeq: "001"}, "b"),
		streamAppend("x", StreamOp{ContentType: "text/plain", WriterSeq: "001"}, "b"),
		streamAppend("x", StreamOp{ContentType: "text/plain", Close: true}, "c"),
		streamAppend("x", StreamOp{ContentType: "text/plain"}, "d"),
	)
	want := []StreamOutcome{StreamDone, ProducerDuplicate, StreamDone, StreamSeqRegress, StreamDone, StreamClosed}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("request %d: outcome %d, want %d (all: %v)", i, got[i], want[i], got)
		}
	}
	page, err := l.Read(context.Background(), "s", "x", 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var data string
	for _, e := range page.Events {
		data += string(e.Data)
	}
	if data != "abc" || page.Head != 3 {
		t.Fatalf("stored %q up to %d, want abc up to 3", data, page.Head)
	}
}

// Fencing: an epoch below the producer's is refused, a new epoch must
// start at 0, a seq past the next one is a gap; none of them stores
// anything.
func TestStreamProducerFencing(t *testing.T) {
	l := openTest(t)
	commitOne(t, l, streamCreate("x", "text/plain"))
	app := func(epoch, seq int64) StreamOutcome {
		return outcomes(t, l, streamAppend("x", StreamOp{ContentType: "text/plain", Producer: &Producer{ID: "p", Epoch: epoch, Seq: seq}}, "m"))[0]
	}
	for i, c := range []struct {
		epoch, seq int64
		want       StreamOutcome
	}{
		{1, 0, StreamDone}, {1, 1, StreamDone}, {0, 2, ProducerStale}, {2, 1, ProducerBadStart},
		{1, 3, ProducerGap}, {1, 1, ProducerDuplicate}, {2, 0, StreamDone},
	} {
		if got := app(c.epoch, c.seq); got != c.want {
			t.Fatalf("step %d (epoch %d, seq %d): outcome %d, want %d", i, c.epoch, c.seq, got, c.want)
		}
	}
	if head, _ := l.Head(context.Background(), "s", "x"); head != 3 {
		t.Fatalf("head %d, want 3: only the three taken appends stored", head)
	}
}

// A fork holds its source's events under the source's numbers, then its
// own after them; the source, deleted while the fork reads it, is gone
// (soft) until the fork goes, and then its name may be used again,
// numbering after its old events.
func TestStreamForkKeepsNumbersAndSoftDeletesItsSource(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	src := streamCreate("src", "text/plain")
	src.Events = []event.Event{{Type: "message", Data: []byte("ab"), Raw: true}, {Type: "message", Data: []byte("cd"), Raw: true}}
	commitOne(t, l, src)
	fork := streamCreate("fork", "")
	fork.Stream.Create.ForkOf, fork.Stream.Create.ForkOffset, fork.Stream.Create.ForkSub = "src", 1, 1
	if o := outcomes(t, l, fork)[0]; o != StreamDone {
		t.Fatalf("fork: outcome %d", o)
	}
	commitOne(t, l, streamAppend("fork", StreamOp{ContentType: "text/plain"}, "X"))
	page, err := l.Read(ctx, "s", "fork", 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 3 || string(page.Events[0].Data) != "ab" || string(page.Events[1].Data) != "c" ||
		page.Events[1].Seq != 2 || string(page.Events[2].Data) != "X" || page.Events[2].Seq != 3 {
		t.Fatalf("fork holds %+v", page.Events)
	}
	del := func(topic string) StreamOutcome {
		return outcomes(t, l, &Publish{Tenant: "s", Topic: topic, Stream: &StreamOp{Delete: true}})[0]
	}
	if o := del("src"); o != StreamDone {
		t.Fatalf("delete source: %d", o)
	}
	if o := outcomes(t, l, streamAppend("src", StreamOp{ContentType: "text/plain"}, "e"))[0]; o != StreamGone {
		t.Fatalf("append to a source deleted while forked: %d, want gone", o)
	}
	if o := del("fork"); o != StreamDone {
		t.Fatalf("delete fork: %d", o)
	}
	if _, ok, _ := l.Stream(ctx, "s", "src"); ok {
		t.Fatal("the source outlived its last fork's deletion")
	}
	again := streamCreate("src", "text/plain")
	again.Events = []event.Event{{Type: "message", Data: []byte("new"), Raw: true}}
	r := commitOne(t, l, again)
	if r.First != 3 || r.Stream.Info.Start != 2 {
		t.Fatalf("re-created at %d with start %d, want 3 and 2", r.First, r.Stream.Info.Start)
	}
}

// A stream operation sees the events that requests before it in the same
// commit group appended, though a group holds those events until its end
// (plan 054): a fork queued behind a publish to its source takes that
// publish's event.
func TestAForkSeesItsSourcesEventsOfTheSameGroup(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	src := streamCreate("src", "text/plain")
	src.Events = []event.Event{{Type: "message", Data: []byte("ab"), Raw: true}}
	commitOne(t, l, src)
	fork := streamCreate("fork", "")
	fork.Stream.Create.ForkOf = "src"
	plain := &Publish{Tenant: "s", Topic: "src", Events: []event.Event{{Type: "message", Data: []byte("cd"), Raw: true}}}
	mustPublish(t, l, plain, fork)
	page, err := l.Read(ctx, "s", "fork", 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || string(page.Events[0].Data) != "ab" || string(page.Events[1].Data) != "cd" {
		t.Fatalf("the fork holds %+v, want ab and cd", page.Events)
	}
}
