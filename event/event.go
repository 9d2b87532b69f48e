// Package event is what a topic holds, as storage keeps it and every
// transport hands it out: a committed Event, whose envelope is
// {"seq":S,"type":T,"time":"RFC 3339","key":K,"op":O,"data":D} (key and op
// only on keyed events), and a State, the fold of a topic's keyed events,
// whose JSON is {"seq":S,"state":{"<key>":<data>,...}}. Both shapes are
// built here and nowhere else, so the storage that encodes them and the
// transports that send them agree byte for byte.
package event

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
)

// Ops of keyed events; a plain event has none.
const (
	OpUpsert = "upsert"
	OpDelete = "delete"
)

// Event is one committed event of a topic. Data is compact JSON, so an
// envelope built from it fits on one SSE data line.
type Event struct {
	Seq  int64
	Type string
	Time time.Time
	Key  string
	Op   string
	Data json.RawMessage
	// Raw says Data holds bytes as a Durable Streams append sent them, not
	// JSON: the envelope carries them in base64, with "encoding":"base64".
	Raw bool
	// Pos is the event's position in its tenant's order (0 where it is
	// not known): tenant streams and reads carry it, a topic's envelope
	// does not.
	Pos int64
	// Update is what a Mercure publish said of the event beyond its data
	// (plan 041); nil for every other event. No envelope shows it.
	Update *Update
}

// AppendEnvelope appends the event's envelope, the one JSON shape that both
// watch and read hand to clients, to b. It is built by hand because it sits
// on the fan-out and catch-up paths and its field order is part of the
// contract's examples.
func (e *Event) AppendEnvelope(b []byte) []byte {
	return e.appendFields(append(b, '{'))
}

// appendFields appends the envelope after its opening brace.
func (e *Event) appendFields(b []byte) []byte {
	b = append(b, `"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"type":`...)
	b = AppendJSONString(b, e.Type) // a Mercure update's type may be any text
	b = append(b, `,"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if e.Op != "" {
		b = append(b, `,"key":`...)
		b = AppendJSONString(b, e.Key)
		b = append(b, `,"op":"`...)
		b = append(b, e.Op...)
		b = append(b, '"')
	}
	if e.Raw {
		b = append(b, `,"encoding":"base64","data":"`...)
		b = base64.StdEncoding.AppendEncode(b, e.Data)
		return append(b, `"}`...)
	}
	b = append(b, `,"data":`...)
	b = append(b, e.Data...)
	return append(b, '}')
}

// MarshalJSON gives the envelope, so that a read answer and a watch frame
// carry the same bytes for the same event.
func (e *Event) MarshalJSON() ([]byte, error) {
	return e.AppendEnvelope(nil), nil
}

// OfTenant is an event as a tenant's order carries it (tenant streams and
// reads): with its topic, and its envelope with "topic" and "pos" besides
// the topic envelope's fields.
type OfTenant struct {
	Topic string
	Event
}

// AppendEnvelope appends the tenant envelope,
// {"topic":T,"pos":P,"seq":S,...}, to b.
func (e *OfTenant) AppendEnvelope(b []byte) []byte {
	b = append(b, `{"topic":`...)
	b = AppendJSONString(b, e.Topic)
	b = append(b, `,"pos":`...)
	b = strconv.AppendInt(b, e.Pos, 10)
	return e.appendFields(append(b, ','))
}

// MarshalJSON gives the tenant envelope.
func (e *OfTenant) MarshalJSON() ([]byte, error) {
	return e.AppendEnvelope(nil), nil
}

// AppendJSONString appends s as a JSON string. Names of printable ASCII
// (all of v2's, most of v3's) take the fast path; any other is encoded as
// encoding/json does, valid JSON whatever its characters.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// EnvelopeOverhead is more than an envelope adds to its event's data, type
// and key (seq, time, field names), and than an answer or a frame adds
// around the envelopes: what a page's answer may take is known before the
// page is read.
const EnvelopeOverhead = 160

// EnvelopesBytes is what the envelopes of events take, at most, once
// encoded, with the answer or frames around them.
func EnvelopesBytes(events []Event) int64 {
	n := int64(EnvelopeOverhead)
	for i := range events {
		n += int64(EnvelopeBytes(&events[i]))
	}
	return n
}

// EnvelopeBytes is what the envelope of e takes, at most, with the frame
// around it: room enough to build it without growing its array.
func EnvelopeBytes(e *Event) int {
	data := len(e.Data)
	if e.Raw {
		data = base64.StdEncoding.EncodedLen(data)
	}
	return data + jsonStringBytes(e.Type) + jsonStringBytes(e.Key) + EnvelopeOverhead
}

// jsonStringBytes is, at most, what s takes as a JSON string without its
// quotes (AppendJSONString): itself for plain ASCII, else up to six bytes
// a byte (\u escapes).
func jsonStringBytes(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			n += 6
		} else {
			n++
		}
	}
	return n
}
