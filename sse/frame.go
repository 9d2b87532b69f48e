// Package sse encodes the frames of an Edgehub stream and decodes them. Each
// encoding function returns one whole frame, ending in the blank line that
// dispatches it, so a writer that flushes whole frames never leaves a
// browser holding half of one. Decoder reads frames as the WHATWG rules
// say EventSource does.
package sse

import (
	"strconv"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/names"
)

// ping is the heartbeat: a comment, which EventSource ignores but which
// keeps proxies and the client's own idle timers from closing the stream.
const ping = ": ping\n\n"

// AppendPing appends the heartbeat.
func AppendPing(b []byte) []byte { return append(b, ping...) }

// Ping is the heartbeat, for a writer that writes frames by reference;
// read-only.
var Ping = []byte(ping)

// Open is the first frame of every stream: the reconnect hint and the hello
// event with the topic's head at registration and the stream's position.
// Its id is the position, so a browser whose stream drops before the first
// event reconnects with Last-Event-ID and misses nothing published while
// it was away (without it, a live-from-now stream would reconnect live
// from a later now).
func Open(retry time.Duration, head, position int64) []byte {
	b := make([]byte, 0, 112)
	b = append(b, "retry: "...)
	b = strconv.AppendInt(b, retry.Milliseconds(), 10)
	b = append(b, "\nid: "...)
	b = strconv.AppendInt(b, position, 10)
	b = append(b, "\nevent: hello\ndata: {\"head\":"...)
	b = strconv.AppendInt(b, head, 10)
	b = append(b, `,"position":`...)
	b = strconv.AppendInt(b, position, 10)
	return append(b, "}\n\n"...)
}

// AppendEvent appends the frame of one committed event. Its id is the
// sequence number, which is what a browser sends back as Last-Event-ID.
// envelope, unless nil, is the event's envelope already encoded (a live
// event's is encoded once for all its streams); nil encodes it here.
func AppendEvent(b []byte, e *event.Event, envelope []byte) []byte {
	b = AppendEventStart(b, e)
	if envelope != nil {
		b = append(b, envelope...)
	} else {
		b = e.AppendEnvelope(b)
	}
	return append(b, FrameEnd...)
}

// AppendEventStart appends the frame of e up to its envelope: with the
// envelope and FrameEnd after it, it is AppendEvent's frame. The hub
// builds each live event's frame so, once for all its streams
// (hub.Framing).
func AppendEventStart(b []byte, e *event.Event) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, "\nevent: "...)
	b = append(b, eventName(e.Type)...)
	return append(b, "\ndata: "...)
}

// eventName is the SSE event name of an event of type t: t itself when
// it keeps the native type rules, else message (a Mercure update's type
// may be any text, even one of the hub's own frames' names), so that a
// native stream's event name never passes for hello, gap or snapshot
// and a browser's addEventListener sees only names it could ask for; the
// envelope's type is always the true one.
func eventName(t string) string {
	if names.ValidType(t) {
		return t
	}
	return "message"
}

// AppendGap appends the frame that tells a stream that events from..to were
// removed by retention before it could read them. Its id is to, so a
// reconnect resumes after the hole rather than asking for it again.
func AppendGap(b []byte, from, to int64) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, to, 10)
	b = append(b, "\nevent: gap\ndata: {\"from\":"...)
	b = strconv.AppendInt(b, from, 10)
	b = append(b, `,"to":`...)
	b = strconv.AppendInt(b, to, 10)
	return append(b, "}\n\n"...)
}

// AppendSnapshotStart appends the start of the frame that gives a stream
// the topic's state as of seq, up to its data; its id is that sequence, so
// a reconnect resumes after it. The state's JSON and FrameEnd complete it:
// a writer writes the three in one flush, so that a large state is sent
// from the buffer it was read into rather than copied into another.
func AppendSnapshotStart(b []byte, seq int64) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, "\nevent: snapshot\ndata: "...)
}

// FrameEnd ends a frame whose data was written on its own: the data line's
// newline and the blank line that dispatches the frame.
var FrameEnd = []byte("\n\n")

// AppendTenantEvent appends the frame of an event of a tenant stream: its
// id is the tenant position, its data the tenant envelope (envelope, if
// not nil, is that already encoded).
func AppendTenantEvent(b []byte, e *event.OfTenant, envelope []byte) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.Pos, 10)
	b = append(b, "\nevent: "...)
	b = append(b, eventName(e.Type)...)
	b = append(b, "\ndata: "...)
	if envelope != nil {
		b = append(b, envelope...)
	} else {
		b = e.AppendEnvelope(b)
	}
	return append(b, FrameEnd...)
}

// AppendTopicGap appends a tenant stream's gap frame: retention removed
// the topic's events up to sequence to, some of which the stream was
// owed. Its id is the position of the frame before it, so that a client
// that resumes from it is owed the same.
func AppendTopicGap(b []byte, id int64, topic string, to int64) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, "\nevent: gap\ndata: {\"topic\":"...)
	b = event.AppendJSONString(b, topic)
	b = append(b, `,"to":`...)
	b = strconv.AppendInt(b, to, 10)
	return append(b, "}\n\n"...)
}
