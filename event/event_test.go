package event

import (
	"bytes"
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

// The state encoder writes {"seq":S,"state":{...}}, valid JSON with or
// without keys.
func TestStateJSON(t *testing.T) {
	var empty bytes.Buffer
	if err := WriteState(&empty, 0, nil); err != nil || empty.String() != `{"seq":0,"state":{}}` {
		t.Fatalf("empty state %s, %v", empty.String(), err)
	}
	var b bytes.Buffer
	err := WriteState(&b, 42, func(key func(name string, data []byte) error) error {
		if err := key("a", []byte(`1`)); err != nil {
			return err
		}
		return key("b", []byte(`{"v":[2]}`))
	})
	if got, want := b.String(), `{"seq":42,"state":{"a":1,"b":{"v":[2]}}}`; err != nil || got != want || !json.Valid(b.Bytes()) {
		t.Fatalf("state %s, want %s (%v)", got, want, err)
	}
}

// An announcement is an update of the hub's own type; a native event of
// that type, or an update of another, is none.
func TestAnnouncement(t *testing.T) {
	for _, c := range []struct {
		e    Event
		want bool
	}{
		{Event{Type: AnnouncementType, Update: &Update{Private: true, Topics: []string{"/id"}}}, true},
		{Event{Type: AnnouncementType}, false},
		{Event{Type: "message", Update: &Update{}}, false},
	} {
		if got := c.e.Announcement(); got != c.want {
			t.Errorf("%+v: announcement %v, want %v", c.e, got, c.want)
		}
	}
}
