package event

import (
	"encoding/json"
	"testing"
	"time"
)

// The envelope of a plain event has no key or op; a keyed one has both,
// and MarshalJSON gives the same bytes.
func TestEnvelope(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 5, time.UTC)
	plain := Event{Seq: 7, Type: "order.created", Time: at, Data: json.RawMessage(`{"n":1}`)}
	if got, want := string(plain.AppendEnvelope(nil)), `{"seq":7,"type":"order.created","time":"2024-05-01T12:00:00.000000005Z","data":{"n":1}}`; got != want {
		t.Fatalf("plain envelope %s, want %s", got, want)
	}
	keyed := Event{Seq: 8, Type: "m", Time: at, Key: "k1", Op: OpDelete, Data: json.RawMessage(`null`)}
	if got, want := string(keyed.AppendEnvelope(nil)), `{"seq":8,"type":"m","time":"2024-05-01T12:00:00.000000005Z","key":"k1","op":"delete","data":null}`; got != want {
		t.Fatalf("keyed envelope %s, want %s", got, want)
	}
	b, err := json.Marshal(&keyed)
	if err != nil || string(b) != string(keyed.AppendEnvelope(nil)) {
		t.Fatalf("MarshalJSON %s, %v", b, err)
	}
}

// The state encoders build {"seq":S,"state":{...}}, valid JSON with or
// without keys.
func TestStateJSON(t *testing.T) {
	if got, want := string(AppendStateEnd(AppendStateStart(nil, 0))), `{"seq":0,"state":{}}`; got != want {
		t.Fatalf("empty state %s, want %s", got, want)
	}
	b := AppendStateStart(nil, 42)
	b = AppendStateKey(b, true, "a", []byte(`1`))
	b = AppendStateKey(b, false, "b", []byte(`{"v":[2]}`))
	b = AppendStateEnd(b)
	if got, want := string(b), `{"seq":42,"state":{"a":1,"b":{"v":[2]}}}`; got != want || !json.Valid(b) {
		t.Fatalf("state %s, want %s", got, want)
	}
}
