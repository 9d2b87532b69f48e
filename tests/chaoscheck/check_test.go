package chaoscheck

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func hello(pos, head int64) Frame { return Frame{Kind: Hello, At: pos, Head: head} }
func snap(seq int64) Frame        { return Frame{Kind: Snapshot, At: seq} }
func gap(from, to int64) Frame    { return Frame{Kind: Gap, From: from, At: to} }
func ev(seq int64, id string) Frame {
	return Frame{Kind: Event, At: seq, Payload: id}
}
func answered(first, last int64) Outcome { return Outcome{Answered: true, First: first, Last: last} }

// clean is a history that keeps every promise: six events, retention
// through 2, a watcher that meets the gap and resumes, one that opens with
// a snapshot, one live, a probe, a SIGKILL and a SIGTERM.
func clean() *History {
	repeat := answered(2, 4)
	return &History{
		Publishes: []Publish{
			{Key: "p0-0", IDs: []string{"a1"}, Outcome: answered(1, 1)},
			{Key: "p0-1", IDs: []string{"a2", "a3", "a4"}, Outcome: answered(2, 4), Repeat: &repeat},
			{Key: "probe-0", IDs: []string{"probe-0-0"}, Outcome: answered(5, 5)},
			{Key: "p1-0", IDs: []string{"a6"}, Outcome: answered(6, 6)},
			{Key: "p1-1", IDs: []string{"given-up"}}, // the run ended first
		},
		Streams: []Stream{
			{Watcher: 0, URL: "/watch?after=0", LastEventID: -1, Status: 200,
				Frames: []Frame{hello(0, 4), gap(1, 2), ev(3, "a3"), ev(4, "a4")}},
			{Watcher: 0, URL: "/watch?after=0", LastEventID: 4, Status: 200,
				Frames: []Frame{hello(4, 4), ev(5, "probe-0-0"), ev(6, "a6")}},
			{Watcher: 1, URL: "/watch?snapshot=1", LastEventID: -1, Status: 200,
				Frames: []Frame{hello(3, 3), snap(3), ev(4, "a4"), ev(5, "probe-0-0"), ev(6, "a6")}},
			{Watcher: 2, URL: "/watch", LastEventID: -1, Status: 200, Frames: []Frame{hello(6, 6)}},
			{Watcher: -1, Probe: 0, Marker: 5, URL: "/watch?snapshot=1", LastEventID: -1, Status: 200,
				Frames: []Frame{hello(4, 4), snap(4), ev(5, "probe-0-0")}},
		},
		Watchers: []Watcher{{N: 0, Pos: 6, Head: 6}, {N: 1, Pos: 6, Head: 6}, {N: 2, Pos: 6, Head: 6}},
		Log: Log{Pages: []Page{
			{Gap: &Range{From: 1, To: 2}, Head: 6,
				Events: []Stored{{3, "a3"}, {4, "a4"}, {5, "probe-0-0"}, {6, "a6"}}},
			{Head: 6},
		}},
		FinalTrim: Trim{Through: 2},
		Restarts:  []Restart{{At: 1500, Signal: "SIGKILL", Exit: "signal: killed"}, {At: 4000, Signal: "SIGTERM"}},
	}
}

func ptr(s string) *string { return &s }

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *History)
		want   string // the one rule that fires, "" for none
		count  int    // how many violations, when it matters
	}{
		{"clean", func(*History) {}, "", 0},
		{"a hole", func(h *History) {
			h.Streams[2].Frames = []Frame{hello(3, 3), snap(3), ev(4, "a4"), ev(6, "a6")}
		}, NoHole, 1},
		{"two holes on one connection are reported once", func(h *History) {
			h.Streams[2].Frames = []Frame{hello(3, 3), snap(3), ev(5, "probe-0-0"), ev(7, "a7")}
		}, NoHole, 1},
		{"a duplicate", func(h *History) {
			h.Streams[2].Frames = []Frame{hello(3, 3), snap(3), ev(4, "a4"), ev(4, "a4"), ev(5, "probe-0-0"), ev(6, "a6")}
		}, NoDuplicate, 1},
		{"a replay after live", func(h *History) {
			h.Streams[1].Frames = []Frame{hello(4, 4), ev(5, "probe-0-0"), ev(6, "a6"), ev(5, "probe-0-0")}
		}, NoDuplicate, 1},
		{"an early onopen: the marker is at or below the stream's start", func(h *History) {
			h.Streams[4].Frames = []Frame{hello(5, 5)}
		}, OnopenSubscribed, 1},
		{"an early onopen: the marker never comes", func(h *History) {
			h.Streams[4].Frames = []Frame{hello(4, 4), snap(4), ev(6, "a6")}
		}, OnopenSubscribed, 1},
		{"an answer before its commit: the answered event is not in the log", func(h *History) {
			h.Publishes = append(h.Publishes, Publish{Key: "p1-2", IDs: []string{"a7"}, Outcome: answered(7, 7)})
		}, Durable, 1},
		{"an answer before its commit: the repeat gets other numbers", func(h *History) {
			*h.Publishes[1].Repeat = answered(7, 9)
		}, Idempotent, 1},
		{"an answer before its commit: another event is stored there", func(h *History) {
			h.Log.Pages[0].Events[1].ID = "other"
			h.Streams[0].Frames = h.Streams[0].Frames[:3]
			h.Streams[2].Frames = []Frame{hello(4, 4)}
			h.Streams[2].LastEventID = 4
		}, Durable, 1},
		{"a resume elsewhere", func(h *History) {
			h.Streams[1].Frames = []Frame{hello(5, 5), ev(6, "a6")}
		}, StartsWhereAsked, 1},
		{"after= ignored", func(h *History) {
			h.Streams[0].Frames = []Frame{hello(2, 4), ev(3, "a3"), ev(4, "a4")}
		}, StartsWhereAsked, 1},
		{"a snapshot off the position", func(h *History) {
			h.Streams[2].Frames[1] = snap(2)
		}, SnapshotAtPosition, 1},
		{"a snapshot on a resumed stream", func(h *History) {
			h.Streams[1].Frames = []Frame{hello(4, 4), snap(4), ev(5, "probe-0-0"), ev(6, "a6")}
		}, SnapshotAtPosition, 1},
		{"a probe's snapshot off its position", func(h *History) {
			h.Streams[4].Frames[1] = snap(3)
		}, SnapshotAtPosition, 1},
		{"a gap that does not start at the position", func(h *History) {
			h.Streams[0].Frames[1] = gap(2, 2)
		}, GapAtPosition, 1},
		{"a gap beyond the trim point", func(h *History) {
			h.FinalTrim.Through = 1
		}, GapsOnlyTrimmed, 1},
		{"a frame id that is not its seq", func(h *History) {
			h.Streams[2].Frames[2].ID = ptr("5")
		}, WellFormed, 1},
		{"a hello that does not parse", func(h *History) {
			h.Streams[3].Frames[0] = Frame{Kind: Hello, Bad: true, Payload: "{", ID: ptr("6")}
		}, WellFormed, 1},
		{"one seq, two events", func(h *History) {
			h.Streams[1].Frames[1].Payload = "zz"
		}, SameEverywhere, 0},
		{"a watcher stuck behind the head", func(h *History) {
			h.Watchers[1].Pos = 5
		}, CatchesUp, 1},
		{"SIGTERM exits with an error", func(h *History) {
			h.Restarts[1].Exit = "exit status 1"
		}, CleanShutdown, 1},
		{"a publish refused", func(h *History) {
			h.Publishes[4].Error = "refused: 400 invalid_json"
		}, Accepted, 1},
		{"an answer naming too few events", func(h *History) {
			h.Publishes[1].Outcome, h.Publishes[1].Repeat = answered(2, 3), nil
		}, Accepted, 1},
		{"a watch refused", func(h *History) {
			h.Streams = append(h.Streams, Stream{Watcher: 2, URL: "/watch", LastEventID: 6, Status: 503})
		}, StreamOpens, 1},
		{"a hole in the log", func(h *History) {
			h.Log.Pages[0].Events = append(h.Log.Pages[0].Events, Stored{8, "u8"})
			h.Log.Pages[0].Head, h.Log.Pages[1].Head = 8, 8
		}, Contiguous, 1},
		{"an event stored twice", func(h *History) {
			h.Log.Pages[0].Events = append(h.Log.Pages[0].Events, Stored{7, "a6"})
			h.Log.Pages[0].Head, h.Log.Pages[1].Head = 7, 7
		}, StoredOnce, 1},
		{"a log that cannot be read", func(h *History) {
			h.Log = Log{Err: "connection refused"}
		}, LogReadable, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.change(h)
			vs := Check(h)
			var rules []string
			for _, v := range vs {
				if !slices.Contains(rules, v.Rule) {
					rules = append(rules, v.Rule)
				}
				if want := "broke guarantee: " + v.Rule + " - "; !strings.HasPrefix(v.String(), want) {
					t.Errorf("%q does not start %q", v, want)
				}
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !reflect.DeepEqual(rules, want) {
				t.Fatalf("rules broken: %q, want %q; violations: %v", rules, want, vs)
			}
			if tc.count > 0 && len(vs) != tc.count {
				t.Fatalf("%d violations, want %d: %v", len(vs), tc.count, vs)
			}
		})
	}
}

// Violations about a stream name it, so that a failed run can save the
// streams that matter.
func TestViolationNamesItsStream(t *testing.T) {
	h := clean()
	h.Streams[2].Frames[3] = ev(6, "a6")
	vs := Check(h)
	if len(vs) != 1 || vs[0].Stream != 2 || vs[0].String() != "broke guarantee: no-hole - watcher 1 (stream 2): hole: events 5..5 skipped with no gap frame" {
		t.Fatalf("%+v", vs)
	}
	ex := h.Excerpt(vs, 1000)
	for i, s := range ex.Streams {
		if kept := s.Frames != nil; kept != (i == 2) || s.Dropped+len(s.Frames) != len(h.Streams[i].Frames) {
			t.Errorf("stream %d: %d frames kept, %d dropped", i, len(s.Frames), s.Dropped)
		}
	}
	if len(h.Streams[0].Frames) == 0 {
		t.Fatal("Excerpt changed the history")
	}
	if ex := h.Excerpt(vs, 2); ex.Streams[2].Frames != nil {
		t.Fatal("Excerpt went over its budget")
	}
}

func TestParseFrame(t *testing.T) {
	for _, tc := range []struct {
		event, id, data string
		want            Frame
	}{
		{"hello", "4", `{"head":6,"position":4}`, hello(4, 6)},
		{"snapshot", "3", `{"seq":3,"state":{}}`, snap(3)},
		{"gap", "2", `{"from":1,"to":2}`, gap(1, 2)},
		{"message", "5", `{"seq":5,"type":"t","data":{"id":"a5","pad":"ppp"}}`, ev(5, "a5")},
		{"message", "05", `{"seq":5,"data":{"id":"a5"}}`, Frame{At: 5, Payload: "a5", ID: ptr("05")}},
		{"hello", "1", `{"head":`, Frame{Kind: Hello, Bad: true, Payload: `{"head":`, ID: ptr("1")}},
	} {
		if got := ParseFrame(tc.event, tc.id, tc.data); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s %s: got %+v, want %+v", tc.event, tc.id, tc.data, got, tc.want)
		}
	}
}

// A history survives JSON, as a failed run saves it.
func TestHistoryJSON(t *testing.T) {
	h := clean()
	h.Streams[2].Frames[2].ID = ptr("x")
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back History
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(Check(&back), Check(h)) {
		t.Fatalf("the checker sees another history after JSON:\n%s", b)
	}
}
