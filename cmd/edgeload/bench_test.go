package main

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The tracker counts what a watcher missed, got twice or got late, by the
// payload's counter, and (for Edgehub) a seq that is not the counter.
func TestBenchTracker(t *testing.T) {
	tr := newTracker(6, true)
	for _, d := range []Delivery{{Pos: 1, N: 1}, {Pos: 3, N: 3}, {Pos: 2, N: 2}, {Pos: 3, N: 3}, {Pos: 9, N: 5}, {N: 7}} {
		tr.add(d)
	}
	v := violations{}
	v.addTracker(tr)
	want := violations{"missing": 2, "duplicate": 1, "out_of_order": 1, "unexpected": 1, "wrong_seq": 1}
	if v.String() != want.String() {
		t.Fatalf("violations %v, want %v", v, want)
	}
	clean := newTracker(3, true)
	for n := int64(1); n <= 3; n++ {
		clean.add(Delivery{Pos: n, N: n})
	}
	v = violations{}
	v.addTracker(clean)
	if v.total() != 0 {
		t.Fatalf("a clean stream has violations: %v", v)
	}
}

// Answered positions must be 1..n once each, rising for one publisher; a
// hub that answers none is not held to it.
func TestBenchPositions(t *testing.T) {
	v := violations{}
	checkPositions(v, []int64{1, 2, 2, 5, 4}, 5, true)
	if v.String() != "answer_duplicate 1, answer_missing 1, answer_out_of_order 1" {
		t.Fatalf("got %v", v)
	}
	v = violations{}
	checkPositions(v, []int64{0, 0, 0}, 3, true)
	if len(v) != 0 {
		t.Fatalf("unanswered positions were checked: %v", v)
	}
}

// The payload is found inside each hub's envelope.
func TestBenchParsePayload(t *testing.T) {
	p := string(payload(42, "xx"))
	for _, frame := range []string{
		`{"seq":42,"type":"message","time":"2026-01-01T00:00:00Z","data":` + p + `}`,
		`{"channel":"fanout","pub":{"data":` + p + `,"offset":42}}`,
		p,
	} {
		n, sent, ok := parsePayload([]byte(frame))
		if !ok || n != 42 || sent == 0 {
			t.Fatalf("parsePayload(%s) = %d, %d, %v", frame, n, sent, ok)
		}
	}
	if _, _, ok := parsePayload([]byte(`{"seq":1,"data":{"id":1}}`)); ok {
		t.Fatal("a payload of another shape was read")
	}
}

// The scanner gives each data line with its frame's event name, across
// CRLF line ends and lines longer than its buffer.
func TestBenchSSEScan(t *testing.T) {
	long := strings.Repeat("y", 10000)
	in := "\r\nretry: 2000\n\nid: 0\nevent: hello\ndata: {}\n\n: ping\n\nid: 1\r\ndata: " + long + "\r\n\r\ndata: last\n\n"
	var got []string
	err := sseScan(strings.NewReader(in), func(event, data []byte) error {
		got = append(got, string(event)+"="+string(data))
		return nil
	})
	if err != io.EOF {
		t.Fatalf("err %v", err)
	}
	want := []string{"hello={}", "=" + long, "=last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %.80q", got)
	}
}

// The chart is well-formed XML with a line per target and percentile.
func TestBenchSVG(t *testing.T) {
	b := &bench{rounds: 2}
	for _, w := range []int{100, 1000} {
		c := &benchCase{scenario: "fanout", params: map[string]any{"watchers": w, "rate": 20}}
		cr := caseResult{c: c}
		for _, target := range []string{"edgehub", "ceiling"} {
			for r := 1; r <= 2; r++ {
				cr.ms = append(cr.ms, measurement{Target: target, Round: r,
					Metrics: map[string]float64{"p50_ms": float64(w) / 100 * float64(r), "p99_ms": float64(w) / 10}})
			}
		}
		b.results = append(b.results, cr)
	}
	s := b.svg()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not XML: %v\n%s", err, s)
		}
	}
	if n := strings.Count(s, "<polyline"); n != 4 {
		t.Fatalf("%d lines, want 4", n)
	}
}

// Durable Streams appends: answered offsets distinct and rising per
// appender; the stream read back holds every message once, each
// appender's in its order.
func TestBenchDSChecks(t *testing.T) {
	v := violations{}
	checkOffsets(v, [][]string{{"01", "02", "02"}, {"04", "03"}})
	if v.String() != "answer_duplicate 1, answer_out_of_order 2" {
		t.Fatalf("offsets: %v", v)
	}
	ns := appendCounters(nil, []byte(`[`+string(payload(2, "x"))+`,`+string(payload(1, ""))+`,{"n":9,"sent":1},`+
		string(payload(2, ""))+`]`))
	if fmt.Sprint(ns) != "[2 1 9 2]" {
		t.Fatalf("counters %v", ns)
	}
	v = violations{}
	checkReadBack(v, ns, []int32{0, 0, 0, 1}, 3) // 1 and 2 from appender 0, 3 from appender 1
	if v.String() != "readback_duplicate 1, readback_missing 1, readback_out_of_order 1, readback_unexpected 1" {
		t.Fatalf("read back: %v", v)
	}
	v = violations{}
	checkReadBack(v, []int64{2, 1, 3}, []int32{0, 0, 1, 2}, 3)
	if len(v) != 0 {
		t.Fatalf("interleaved appenders in their own order: %v", v)
	}
}

// A Durable Streams SSE read is ready at its first control event, delivers
// each message of each data event, and resumes from the last control
// event's offset when the server ends it.
func TestBenchDSWatch(t *testing.T) {
	var mu sync.Mutex
	var offsets []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		offsets = append(offsets, r.URL.Query().Get("offset")+"/"+r.URL.Query().Get("live"))
		first := len(offsets) == 1
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if first {
			fmt.Fprintf(w, "event: control\ndata:{\"streamNextOffset\":\"A\",\"upToDate\":true}\n\n")
			fmt.Fprintf(w, "event: data\ndata:[%s,%s]\n\nevent: control\ndata:{\"streamNextOffset\":\"B\"}\n\n",
				payload(1, "p"), payload(2, "p"))
			return // the server ends the read
		}
		fmt.Fprintf(w, "event: data\ndata:[%s]\n\nevent: control\ndata:{\"streamNextOffset\":\"C\",\"upToDate\":true}\n\n",
			payload(3, ""))
	}))
	defer srv.Close()
	dw := &dsWatch{ds: fakeDS(srv.Listener.Addr().String())}
	ready := 0
	var got []int64
	err := dw.Watch(context.Background(), "s", true, func() { ready++ }, func(d Delivery) error {
		got = append(got, d.N)
		if d.N == 3 {
			return errDone
		}
		return nil
	})
	if err != nil || fmt.Sprint(got) != "[1 2 3]" || ready == 0 || dw.reconnects.Load() != 1 {
		t.Fatalf("err %v, got %v, ready %d, reconnects %d", err, got, ready, dw.reconnects.Load())
	}
	if fmt.Sprint(offsets) != "[-1/sse B/sse]" {
		t.Fatalf("reads at %v", offsets)
	}
}

type fakeDS string

func (f fakeDS) DSAddr() string { return string(f) }
