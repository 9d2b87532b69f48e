package sse_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/sse"
)

// Frames written by the encoder read back, through a parser that follows
// the WHATWG rules, as exactly the events that went in.
func TestFramesRoundTripThroughAStrictParser(t *testing.T) {
	ev := event.Event{Seq: 42, Type: "order.created", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Key: "k", Op: event.OpUpsert, Data: json.RawMessage(`{"text":"line\nbreak \u2028 \"quoted\""}`)}
	var b []byte
	b = append(b, sse.Open(2*time.Second, 41, 40)...)
	b = sse.AppendEvent(b, &ev, nil)
	b = sse.AppendPing(b)
	b = sse.AppendGap(b, 43, 50)
	d := sse.NewDecoder(bytes.NewReader(b))
	want := []sse.Frame{
		{ID: "40", IDSet: true, Event: "hello", Data: `{"head":41,"position":40}`},
		{ID: "42", IDSet: true, Event: "order.created",
			Data: `{"seq":42,"type":"order.created","time":"2026-01-02T03:04:05.000000006Z","key":"k","op":"upsert","data":{"text":"line\nbreak \u2028 \"quoted\""}}`},
		{ID: "50", IDSet: true, Event: "gap", Data: `{"from":43,"to":50}`},
	}
	for i, w := range want {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f != w {
			t.Errorf("frame %d:\n got %+v\nwant %+v", i, f, w)
		}
	}
	if d.Retry != 2000 {
		t.Errorf("retry %d", d.Retry)
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(want[1].Data), &env); err != nil {
		t.Fatalf("envelope is not JSON: %v", err)
	}
}

// A live event's frame, built from its envelope encoded once for every
// stream, is byte for byte the frame a catch-up builds from the event.
func TestEventFrameFromEnvelopeIsTheSame(t *testing.T) {
	widest := time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", 0))
	for _, ev := range []event.Event{
		{Seq: 1<<63 - 1, Type: "t", Time: widest, Data: json.RawMessage(`1`)},
		{Seq: 7, Type: "order.created", Time: widest, Key: "a-rather-long-key-name", Op: event.OpDelete, Data: json.RawMessage(`null`)},
	} {
		if live, caught := sse.AppendEvent(nil, &ev, ev.AppendEnvelope(nil)), sse.AppendEvent(nil, &ev, nil); !bytes.Equal(live, caught) {
			t.Errorf("live frame %q, catch-up frame %q", live, caught)
		}
	}
}

// A snapshot frame written in its three parts reads back as one frame.
func TestSnapshotFrameInParts(t *testing.T) {
	state := []byte(`{"seq":7,"state":{"k":1}}`)
	b := append(append(sse.AppendSnapshotStart(nil, 7), state...), sse.FrameEnd...)
	f, err := sse.NewDecoder(bytes.NewReader(b)).Next()
	if err != nil || f.ID != "7" || f.Event != "snapshot" || f.Data != string(state) {
		t.Fatalf("got %+v %v", f, err)
	}
}
