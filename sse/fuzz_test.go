package sse_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/sse"
)

// Any JSON payload, any valid type and key, written as a frame, reads back
// through the strict WHATWG parser as the same id, type and envelope, and
// the envelope decodes to the payload.
func FuzzFrameRoundTrip(f *testing.F) {
	for _, s := range []string{`{}`, `"line\nbreak"`, `"\r\n\u2028"`, `[1,2,{"a":null}]`, "  {\"sp\" :\t1 }\n", `"é ☃ \u0000"`} {
		f.Add(s, "message", "", int64(1))
	}
	f.Add(`{"k":1}`, "order.created", "key-1", int64(9007199254740993))
	f.Fuzz(func(t *testing.T, payload, typ, key string, seq int64) {
		if !json.Valid([]byte(payload)) || !names.ValidType(typ) || (key != "" && !names.Valid(key)) || seq < 1 {
			t.Skip()
		}
		var data bytes.Buffer
		if err := json.Compact(&data, []byte(payload)); err != nil {
			t.Skip()
		}
		ev := event.Event{Seq: seq, Type: typ, Time: time.Unix(0, seq).UTC(), Data: data.Bytes()}
		if key != "" {
			ev.Key, ev.Op = key, event.OpUpsert
		}
		frame := sse.AppendEvent(nil, &ev, nil)
		f, err := sse.NewDecoder(bytes.NewReader(frame)).Next()
		if err != nil {
			t.Fatalf("frame %q does not parse: %v", frame, err)
		}
		if f.ID != strconv.FormatInt(seq, 10) || f.Event != typ || f.Data != string(ev.AppendEnvelope(nil)) {
			t.Fatalf("round trip of %q: got %+v", frame, f)
		}
		var env struct {
			Seq  int64
			Type string
			Key  string
			Data json.RawMessage
		}
		if err := json.Unmarshal([]byte(f.Data), &env); err != nil {
			t.Fatalf("envelope %q is not JSON: %v", f.Data, err)
		}
		if env.Seq != seq || env.Type != typ || env.Key != key || !bytes.Equal(env.Data, data.Bytes()) {
			t.Fatalf("envelope %q does not carry the event", f.Data)
		}
	})
}
