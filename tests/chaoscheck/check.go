package chaoscheck

import (
	"fmt"
	"slices"
	"strings"
)

// The guarantees the checker holds a history to, one rule each. A
// violation names the one it broke.
const (
	// Accepted: no publish is refused (only 503 while the server is down,
	// which the sender retries), every answer parses and names as many
	// sequence numbers as the request had events.
	Accepted = "accepted"
	// Idempotent: a repeat of an answered request gets the same range.
	Idempotent = "idempotent"
	// CleanShutdown: after SIGTERM the process exits 0.
	CleanShutdown = "clean-shutdown"
	// StreamOpens: a watch is answered 200.
	StreamOpens = "stream-opens"
	// WellFormed: a frame's data parses, and its id is the position it
	// names (a hello's position, a snapshot's seq, a gap's to, an event's
	// seq).
	WellFormed = "well-formed"
	// StartsWhereAsked: a resumed stream's hello position is the
	// Last-Event-ID sent; otherwise an after= stream's is its after.
	StartsWhereAsked = "starts-where-asked"
	// SnapshotAtPosition: a snapshot is at exactly the stream's position,
	// and a resumed stream gets none.
	SnapshotAtPosition = "snapshot-at-position"
	// GapAtPosition: a gap starts at position+1 and is not empty.
	GapAtPosition = "gap-at-position"
	// NoDuplicate: every event is after the stream's position (no event
	// twice, none out of order).
	NoDuplicate = "no-duplicate"
	// NoHole: every event is position+1 (no event skipped without a gap).
	NoHole = "no-hole"
	// OnopenSubscribed: an event published once a stream's headers are in
	// is after the stream's position and is delivered.
	OnopenSubscribed = "onopen-subscribed"
	// LogReadable: the log and the trim point can be read back.
	LogReadable = "log-readable"
	// Contiguous: the retained log runs trimmed+1..head with no hole.
	Contiguous = "contiguous"
	// StoredOnce: no event id is stored at two sequence numbers.
	StoredOnce = "stored-once"
	// Durable: every answered event is stored at its sequence number, with
	// its data, unless retention removed it.
	Durable = "durable"
	// SameEverywhere: a sequence number carries the same event on every
	// stream, in the answers and in the log.
	SameEverywhere = "same-everywhere"
	// CatchesUp: every watcher reads on to the final head.
	CatchesUp = "catches-up"
	// GapsOnlyTrimmed: a gap names only events retention removed.
	GapsOnlyTrimmed = "gaps-only-trimmed"
)

// Violation is one broken guarantee.
type Violation struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
	// Stream is the index in History.Streams of the connection it is
	// about, or -1.
	Stream int `json:"stream"`
}

func (v Violation) String() string { return "broke guarantee: " + v.Rule + " - " + v.Detail }

// Check validates a history and returns every violation found, in the
// order of the rules.
func Check(h *History) []Violation {
	c := &checker{h: h, cut: make([]int, len(h.Streams))}
	accepted(c)
	idempotent(c)
	cleanShutdown(c)
	streamOpens(c)
	c.replayStreams()
	logReadable(c)
	contiguous(c)
	storedOnce(c)
	durable(c)
	sameEverywhere(c)
	catchesUp(c)
	gapsOnlyTrimmed(c)
	return c.vs
}

type checker struct {
	h  *History
	vs []Violation
	// cut[i] is how many of stream i's frames the replay accepted: the
	// frame there (if any) broke a rule, and the check of that stream
	// stopped, so that one bug is reported once per connection.
	cut []int
}

func (c *checker) report(rule string, stream int, format string, args ...any) {
	c.vs = append(c.vs, Violation{Rule: rule, Detail: fmt.Sprintf(format, args...), Stream: stream})
}

// who names stream i in a violation.
func (c *checker) who(i int) string {
	s := &c.h.Streams[i]
	if s.IsProbe() {
		return fmt.Sprintf("probe %d (stream %d)", s.Probe, i)
	}
	return fmt.Sprintf("watcher %d (stream %d)", s.Watcher, i)
}

// accepted: see Accepted.
func accepted(c *checker) {
	for _, p := range c.h.Publishes {
		if p.Error != "" {
			c.report(Accepted, -1, "publish %s: %s", p.Key, p.Error)
		}
		if p.Answered && int64(len(p.IDs)) != p.Last-p.First+1 {
			c.report(Accepted, -1, "publish %s: %d events answered as %d..%d", p.Key, len(p.IDs), p.First, p.Last)
		}
		if p.Repeat != nil && p.Repeat.Error != "" {
			c.report(Accepted, -1, "publish %s, repeated: %s", p.Key, p.Repeat.Error)
		}
	}
}

// idempotent: see Idempotent.
func idempotent(c *checker) {
	for _, p := range c.h.Publishes {
		if r := p.Repeat; p.Answered && r != nil && r.Answered && (r.First != p.First || r.Last != p.Last) {
			c.report(Idempotent, -1, "key %s answered %d..%d, its repeat %d..%d", p.Key, p.First, p.Last, r.First, r.Last)
		}
	}
}

// cleanShutdown: see CleanShutdown.
func cleanShutdown(c *checker) {
	for _, r := range c.h.Restarts {
		if r.Signal == "SIGTERM" && r.Exit != "" {
			c.report(CleanShutdown, -1, "SIGTERM at %d ms: server exited with %s", r.At, r.Exit)
		}
	}
}

// streamOpens: see StreamOpens.
func streamOpens(c *checker) {
	for i, s := range c.h.Streams {
		if !s.IsProbe() && s.Status != 200 {
			c.report(StreamOpens, i, "%s: status %d", c.who(i), s.Status)
		}
	}
}

// conn is a stream being replayed: where it stands before the next frame.
type conn struct {
	s        *Stream
	pos      int64
	resuming bool
}

// A frameRule checks one frame against where its stream stands, and says
// what is wrong, or "".
type frameRule struct {
	name  string
	check func(c *conn, f Frame) string
}

// The rules a frame of a watcher's stream is held to, in order, and those
// of a probe's stream (up to its marker).
var (
	watcherRules = []frameRule{
		{WellFormed, wellFormed},
		{StartsWhereAsked, startsWhereAsked},
		{SnapshotAtPosition, snapshotAtPosition},
		{GapAtPosition, gapAtPosition},
		{NoDuplicate, noDuplicate},
		{NoHole, noHole},
	}
	probeRules = []frameRule{
		{WellFormed, wellFormed},
		{SnapshotAtPosition, snapshotAtPosition},
		{OnopenSubscribed, onopenSubscribed},
	}
)

// replayStreams replays every stream frame by frame from the position it
// asked for, holding each frame to the rules; the first frame that breaks
// one ends that stream's check (cut).
func (c *checker) replayStreams() {
	for i := range c.h.Streams {
		s := &c.h.Streams[i]
		cn, rules := conn{s: s, pos: s.LastEventID, resuming: s.LastEventID >= 0}, watcherRules
		if s.IsProbe() {
			// A probe asks for the live stream; its position comes in hello.
			cn, rules = conn{s: s}, probeRules
		}
		c.cut[i] = len(s.Frames)
	frames:
		for n, f := range s.Frames {
			for _, r := range rules {
				if d := r.check(&cn, f); d != "" {
					c.report(r.name, i, "%s: %s", c.who(i), d)
					c.cut[i] = n
					break frames
				}
			}
			if s.IsProbe() && (f.Kind == Hello || f.Kind == Event) && f.At >= s.Marker {
				c.cut[i] = n + 1
				break // the marker is decided: the recorder read no further
			}
			if f.Kind != Snapshot {
				cn.pos = f.At
			}
		}
	}
}

// delivered returns the frames of stream i the replay accepted.
func (c *checker) delivered(i int) []Frame { return c.h.Streams[i].Frames[:c.cut[i]] }

// wellFormed: see WellFormed.
func wellFormed(_ *conn, f Frame) string {
	switch {
	case f.Bad:
		return fmt.Sprintf("bad %s frame (id %s): %q", f.Kind, f.FrameID(), f.Payload)
	case !f.idIsAt():
		return fmt.Sprintf("%s frame id %q is not its position %d", f.Kind, f.FrameID(), f.At)
	}
	return ""
}

// startsWhereAsked: see StartsWhereAsked.
func startsWhereAsked(c *conn, f Frame) string {
	if f.Kind != Hello {
		return ""
	}
	if c.resuming {
		if f.At != c.pos {
			return fmt.Sprintf("resumed with Last-Event-ID %d, hello says position %d", c.pos, f.At)
		}
		return ""
	}
	if after, ok := strings.CutPrefix(c.s.URL, "/watch?after="); ok && after != fmt.Sprint(f.At) {
		return fmt.Sprintf("asked for after=%s, hello says position %d", after, f.At)
	}
	return ""
}

// snapshotAtPosition: see SnapshotAtPosition.
func snapshotAtPosition(c *conn, f Frame) string {
	if f.Kind == Snapshot && (c.resuming || f.At != c.pos) {
		return fmt.Sprintf("snapshot at %d on a stream at position %d (resuming %v)", f.At, c.pos, c.resuming)
	}
	return ""
}

// gapAtPosition: see GapAtPosition.
func gapAtPosition(c *conn, f Frame) string {
	if f.Kind == Gap && (f.From != c.pos+1 || f.At < f.From) {
		return fmt.Sprintf("gap %d..%d at position %d", f.From, f.At, c.pos)
	}
	return ""
}

// noDuplicate: see NoDuplicate.
func noDuplicate(c *conn, f Frame) string {
	if f.Kind == Event && f.At <= c.pos {
		return fmt.Sprintf("duplicate or out of order: event %d after position %d", f.At, c.pos)
	}
	return ""
}

// noHole: see NoHole.
func noHole(c *conn, f Frame) string {
	if f.Kind == Event && f.At > c.pos+1 {
		return fmt.Sprintf("hole: events %d..%d skipped with no gap frame", c.pos+1, f.At-1)
	}
	return ""
}

// onopenSubscribed: see OnopenSubscribed. A probe's stream that ended
// before its marker proves nothing either way.
func onopenSubscribed(c *conn, f Frame) string {
	m := c.s.Marker
	switch {
	case f.Kind == Hello && f.At >= m:
		return fmt.Sprintf("event %d was published after onopen, but the stream starts after %d", m, f.At)
	case f.Kind == Event && f.At > m:
		return fmt.Sprintf("event %d was published after onopen, but the stream went on to %d", m, f.At)
	}
	return ""
}

// logState is what the log read back says.
type logState struct {
	stored        map[int64]string // id by seq
	head, trimmed int64
}

func (c *checker) log() logState {
	st := logState{stored: map[int64]string{}}
	for _, p := range c.h.Log.Pages {
		st.head = p.Head
		if p.Gap != nil {
			st.trimmed = p.Gap.To
		}
		for _, e := range p.Events {
			st.stored[e.Seq] = e.ID
		}
	}
	return st
}

// logReadable: see LogReadable.
func logReadable(c *checker) {
	if c.h.Log.Err != "" {
		c.report(LogReadable, -1, "read the log: %s", c.h.Log.Err)
	}
	if c.h.FinalTrim.Err != "" {
		c.report(LogReadable, -1, "read the trim point: %s", c.h.FinalTrim.Err)
	}
}

// contiguous: see Contiguous.
func contiguous(c *checker) {
	after, head := int64(0), int64(0)
	for _, p := range c.h.Log.Pages {
		head = p.Head
		if p.Gap != nil {
			after = p.Gap.To
		}
		for _, e := range p.Events {
			if e.Seq != after+1 {
				c.report(Contiguous, -1, "log: hole: seq %d follows %d", e.Seq, after)
			}
			after = e.Seq
		}
	}
	if c.h.Log.Err == "" && after != head {
		c.report(Contiguous, -1, "log: read up to %d, head is %d", after, head)
	}
}

// storedOnce: see StoredOnce.
func storedOnce(c *checker) {
	where := map[string]int64{}
	for _, p := range c.h.Log.Pages {
		for _, e := range p.Events {
			if s, dup := where[e.ID]; dup {
				c.report(StoredOnce, -1, "log: event %s stored twice, at %d and %d", e.ID, s, e.Seq)
			}
			where[e.ID] = e.Seq
		}
	}
}

// answers are the answered publishes with as many sequence numbers as
// events, by key (those with a wrong count are Accepted's).
func (c *checker) answers() []Publish {
	var as []Publish
	for _, p := range c.h.Publishes {
		if p.Answered && int64(len(p.IDs)) == p.Last-p.First+1 {
			as = append(as, p)
		}
	}
	slices.SortFunc(as, func(a, b Publish) int { return strings.Compare(a.Key, b.Key) })
	return as
}

// durable: see Durable. A log that could not be read proves nothing.
func durable(c *checker) {
	if c.h.Log.Err != "" {
		return
	}
	st := c.log()
	for _, a := range c.answers() {
		for i, id := range a.IDs {
			seq := a.First + int64(i)
			switch got, ok := st.stored[seq]; {
			case seq > st.head:
				c.report(Durable, -1, "answered event %s (seq %d) is not stored: head is %d", id, seq, st.head)
			case seq > st.trimmed && got != id:
				c.report(Durable, -1, "answered event %s (seq %d): the log holds %q there", id, seq, got)
			case !ok && seq > st.trimmed:
				c.report(Durable, -1, "answered event %s (seq %d) is missing", id, seq)
			}
		}
	}
}

// sameEverywhere: see SameEverywhere. Deliveries are the events the
// watchers' streams were sent up to their first broken rule.
func sameEverywhere(c *checker) {
	seen := map[int64]string{}
	for i, s := range c.h.Streams {
		if s.IsProbe() {
			continue
		}
		for _, f := range c.delivered(i) {
			if f.Kind != Event {
				continue
			}
			if prev, ok := seen[f.At]; !ok {
				seen[f.At] = f.Payload
			} else if prev != f.Payload {
				c.report(SameEverywhere, i, "seq %d delivered as %s and as %s (%s)", f.At, prev, f.Payload, c.who(i))
			}
		}
	}
	for _, a := range c.answers() {
		for i, id := range a.IDs {
			if got, ok := seen[a.First+int64(i)]; ok && got != id {
				c.report(SameEverywhere, -1, "answered event %s (seq %d) was delivered as %s", id, a.First+int64(i), got)
			}
		}
	}
	if c.h.Log.Err != "" {
		return
	}
	stored := c.log().stored
	seqs := make([]int64, 0, len(seen))
	for seq := range seen {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		if got, ok := stored[seq]; ok && got != seen[seq] {
			c.report(SameEverywhere, -1, "seq %d delivered as %s, stored as %s", seq, seen[seq], got)
		}
	}
}

// catchesUp: see CatchesUp.
func catchesUp(c *checker) {
	for _, w := range c.h.Watchers {
		if w.Pos < w.Head {
			c.report(CatchesUp, -1, "watcher %d: stuck at %d, head is %d", w.N, w.Pos, w.Head)
		}
	}
}

// gapsOnlyTrimmed: see GapsOnlyTrimmed. The trim point only grows, so the
// one read after every stream ended bounds every gap any stream was sent.
func gapsOnlyTrimmed(c *checker) {
	if c.h.FinalTrim.Err != "" {
		return
	}
	for i, s := range c.h.Streams {
		if s.IsProbe() {
			continue
		}
		for _, f := range c.delivered(i) {
			if f.Kind == Gap && f.At > c.h.FinalTrim.Through {
				c.report(GapsOnlyTrimmed, i, "%s: gap %d..%d names events retention never removed (trimmed through %d)",
					c.who(i), f.From, f.At, c.h.FinalTrim.Through)
			}
		}
	}
}
