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
}

// AppendEnvelope appends the event's envelope, the one JSON shape that both
// watch and read hand to clients, to b. It is built by hand because it sits
// on the fan-out and catch-up paths and its field order is part of the
// contract's examples.
func (e *Event) AppendEnvelope(b []byte) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, e.Type) // types are plain ASCII by the name rules
	b = append(b, `,"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if e.Op != "" {
		b = append(b, `,"key":`...)
		b = strconv.AppendQuote(b, e.Key)
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
	return data + len(e.Type) + len(e.Key) + EnvelopeOverhead
}
