// Package chaoscheck validates what a chaos run recorded against the hub's
// delivery promise. The run (tests/chaos_test.go) only records: what each
// publish request was answered, every frame every stream was sent, the log
// read back at the end and the restarts. Check then validates that history
// afterwards, one function per guarantee, the way etcd's robustness tests
// record a history first and check it after. The package needs no server,
// so its own tests run over made-up histories.
package chaoscheck

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// History is everything one chaos run recorded. It is plain data, so that
// a failing run can save it as JSON.
type History struct {
	Seed      uint64    `json:"seed"`
	Publishes []Publish `json:"publishes"`
	// Streams holds every stream connection, the watchers' and the
	// probes', in the order they ended.
	Streams  []Stream  `json:"streams"`
	Watchers []Watcher `json:"watchers"`
	// Log is the retained log, read page by page after the publishers
	// stopped; FinalTrim is the trim point read after every stream ended.
	Log       Log       `json:"log"`
	FinalTrim Trim      `json:"final_trim"`
	Restarts  []Restart `json:"restarts"`
}

// Outcome is how one publish request ended for its sender, which retries
// it with the same idempotency key through connection errors and 503s.
type Outcome struct {
	// Answered: the hub answered sequence numbers First..Last.
	Answered bool  `json:"answered,omitempty"`
	First    int64 `json:"first,omitempty"`
	Last     int64 `json:"last,omitempty"`
	// Error says why the request failed for good: refused with a status
	// other than 503, or answered with something that does not parse.
	// Neither Answered nor Error: the sender gave up when the run ended.
	Error string `json:"error,omitempty"`
}

// Publish is one request: its idempotency key, the ids of the events it
// carried, in order, and its outcome.
type Publish struct {
	Key string   `json:"key"`
	IDs []string `json:"ids"`
	Outcome
	// Repeat is the outcome of a deliberate repeat of the request, with the
	// same key and body, sent after its answer.
	Repeat *Outcome `json:"repeat,omitempty"`
}

// Stream is one stream connection, with the frames it was sent.
type Stream struct {
	// Watcher is the logical watcher (a browser tab across its reconnects)
	// the connection belongs to, or -1 for a probe.
	Watcher int `json:"watcher"`
	// A probe's number, and its marker: the sequence number its publish was
	// answered with, sent once the stream's headers were in (onopen). A
	// probe's stream is recorded up to the frame that decides the marker.
	Probe  int   `json:"probe,omitempty"`
	Marker int64 `json:"marker,omitempty"`
	// URL is the route asked for ("/watch", "/watch?after=N",
	// "/watch?snapshot=1"), LastEventID the Last-Event-ID header sent
	// (negative: none).
	URL         string `json:"url"`
	LastEventID int64  `json:"last_event_id"`
	Status      int    `json:"status"`
	// Opened is when the connection was made, in ms since the run began.
	Opened int64   `json:"opened_ms"`
	Frames []Frame `json:"frames,omitempty"`
	// Dropped counts frames left out of a saved excerpt (see Excerpt).
	Dropped int `json:"frames_dropped,omitempty"`
}

// IsProbe reports whether the stream is a probe's.
func (s *Stream) IsProbe() bool { return s.Watcher < 0 }

// Kind is what a frame is: the SSE event name, with every name other than
// hello, snapshot and gap counted as an event.
type Kind uint8

// The kinds of frame.
const (
	Event Kind = iota
	Hello
	Snapshot
	Gap
)

var kindNames = [...]string{Event: "event", Hello: "hello", Snapshot: "snapshot", Gap: "gap"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind" + strconv.Itoa(int(k))
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("chaoscheck: unknown frame kind %q", b)
}

// Frame is one frame a stream was sent, as the values it names. A stream
// can be sent hundreds of thousands of frames in a run, so a frame keeps
// only what the rules read: no padding, and the id line only when it says
// something other than At.
type Frame struct {
	Kind Kind `json:"kind"`
	// Bad: the data did not parse as the kind's JSON; Payload then holds
	// its first 200 bytes and the values are zero.
	Bad bool `json:"bad,omitempty"`
	// At is the position the frame names: a hello's position, a
	// snapshot's sequence number, a gap's last (to), an event's seq.
	At int64 `json:"at"`
	// From is a gap's first sequence number, Head a hello's head.
	From int64 `json:"from,omitempty"`
	Head int64 `json:"head,omitempty"`
	// Payload is an event's id (its data's "id" field).
	Payload string `json:"payload,omitempty"`
	// ID is the frame's SSE id when it is not At in decimal; nil when it
	// is.
	ID *string `json:"id,omitempty"`
}

// FrameID is the frame's SSE id.
func (f Frame) FrameID() string {
	if f.ID != nil {
		return *f.ID
	}
	return strconv.FormatInt(f.At, 10)
}

// idIsAt reports whether the frame's SSE id is At in decimal.
func (f Frame) idIsAt() bool { return f.ID == nil }

// ParseFrame records one SSE frame: its event name, the id in force and its
// data, as the hub's wire defines them.
func ParseFrame(event, id, data string) Frame {
	var f Frame
	var err error
	switch event {
	case "hello":
		f.Kind = Hello
		var h struct{ Head, Position int64 }
		err = json.Unmarshal([]byte(data), &h)
		f.Head, f.At = h.Head, h.Position
	case "snapshot":
		f.Kind = Snapshot
		var s struct{ Seq int64 }
		err = json.Unmarshal([]byte(data), &s)
		f.At = s.Seq
	case "gap":
		f.Kind = Gap
		var g struct{ From, To int64 }
		err = json.Unmarshal([]byte(data), &g)
		f.From, f.At = g.From, g.To
	default:
		var e struct {
			Seq  int64
			Data struct{ ID string }
		}
		err = json.Unmarshal([]byte(data), &e)
		f.At, f.Payload = e.Seq, e.Data.ID
	}
	if err != nil {
		f = Frame{Kind: f.Kind, Bad: true, Payload: data[:min(len(data), 200)]}
	}
	if id != strconv.FormatInt(f.At, 10) {
		f.ID = &id
	}
	return f
}

// Watcher is one logical watcher at the end of the run.
type Watcher struct {
	N    int    `json:"n"`
	URL  string `json:"url"`
	Slow bool   `json:"slow,omitempty"`
	// Pos is the position it had reached when it stopped; Head is the head
	// of the log read back, which it was to read on to.
	Pos  int64 `json:"pos"`
	Head int64 `json:"head"`
}

// Log is the retained log as read back, page by page from after=0, each
// page asking for the events after the last one the previous page gave
// (or after its gap). Err says why the reading stopped short.
type Log struct {
	Pages []Page `json:"pages"`
	Err   string `json:"err,omitempty"`
}

// Page is one answer of the read API.
type Page struct {
	Events []Stored `json:"events"`
	Head   int64    `json:"head"`
	// Gap: the events asked for were removed by retention through To.
	Gap *Range `json:"gap,omitempty"`
}

// Stored is one event in the log: its sequence number and id.
type Stored struct {
	Seq int64  `json:"seq"`
	ID  string `json:"id"`
}

// Range is From..To, inclusive.
type Range struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Trim is the trim point read after every stream ended: retention has
// removed the events through Through. Err says why it could not be read.
type Trim struct {
	Through int64  `json:"through"`
	Err     string `json:"err,omitempty"`
}

// Restart is one kill of the server, which was then started again on the
// same data and port.
type Restart struct {
	At     int64  `json:"at_ms"`  // since the run began
	Signal string `json:"signal"` // "SIGKILL" or "SIGTERM"
	// Exit is how the process ended ("" for status 0).
	Exit string `json:"exit,omitempty"`
}

// Excerpt is the history with only the frames worth saving next to vs: those
// of the streams the violations name, at most maxFrames in all. Every other
// stream keeps its record but not its frames (their count is in Dropped).
// h is not changed.
func (h *History) Excerpt(vs []Violation, maxFrames int) *History {
	keep := map[int]bool{}
	for _, v := range vs {
		if v.Stream >= 0 {
			keep[v.Stream] = true
		}
	}
	ex := *h
	ex.Streams = make([]Stream, len(h.Streams))
	budget := maxFrames
	for i, s := range h.Streams {
		if keep[i] && len(s.Frames) <= budget {
			budget -= len(s.Frames)
		} else {
			s.Dropped, s.Frames = len(s.Frames), nil
		}
		ex.Streams[i] = s
	}
	return &ex
}
