package sse_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/sse"
)

// Encoding one event's frame: done once per event on fan-out and once per
// event per stream on catch-up.
func BenchmarkAppendEvent(b *testing.B) {
	ev := event.Event{Seq: 123456, Type: "order.created", Time: time.Now(), Data: json.RawMessage(`{"id":1,"text":"a typical small payload of an event"}`)}
	buf := make([]byte, 0, 512)
	for i := 0; i < b.N; i++ {
		buf = sse.AppendEvent(buf[:0], &ev, nil)
	}
	b.SetBytes(int64(len(buf)))
}
