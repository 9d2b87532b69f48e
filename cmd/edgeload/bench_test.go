package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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

// fakeHub answers each publish, after 0.1 ms, with the next position of
// its topic (or, as a tenantHub, of its tenant's topic on its process)
// and records where each went; skip names a destination whose third
// answer repeats its second.
type fakeHub struct {
	procs int
	skip  string
	mu    sync.Mutex
	seq   map[string]int64
	calls map[string]int
}

func (f *fakeHub) answer(dest string) int64 {
	time.Sleep(100 * time.Microsecond) // so that every publisher gets its share of the events
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seq == nil {
		f.seq, f.calls = map[string]int64{}, map[string]int{}
	}
	f.calls[dest]++
	if dest == f.skip && f.calls[dest] == 3 {
		return f.seq[dest]
	}
	f.seq[dest]++
	return f.seq[dest]
}

func (f *fakeHub) Name() string                        { return "fake" }
func (f *fakeHub) Supports(string) bool                { return true }
func (f *fakeHub) Start(context.Context, string) error { return nil }
func (f *fakeHub) Stop() error                         { return nil }
func (f *fakeHub) PID() int                            { return 0 }
func (f *fakeHub) Publish(_ context.Context, topic string, _ []byte) (int64, error) {
	return f.answer(topic), nil
}

func (f *fakeHub) PublishBatch(context.Context, string, [][]byte) ([]int64, error) {
	return nil, errNoBatch
}

func (f *fakeHub) Watch(context.Context, string, bool, func(), func(Delivery) error) error {
	return errors.New("no watch")
}

type fakeTenantHub struct{ fakeHub }

func (f *fakeTenantHub) Procs() int { return f.procs }
func (f *fakeTenantHub) PublishTenant(_ context.Context, proc int, tenant, topic string, _ []byte) (int64, error) {
	return f.answer(fmt.Sprintf("%d %s/%s", proc, tenant, topic)), nil
}

// topics16 sends event i to topic (i-1) mod 1000 and holds each topic's
// answers to 1..k; a repeated answer on one topic is one violation.
func TestBenchTopicsSpread(t *testing.T) {
	f := &fakeHub{skip: "spread-7"}
	r, err := topicsSpread(context.Background(), f, 16, 3500, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r.violations.String() != "answer_duplicate 1, answer_missing 1" {
		t.Fatalf("violations %v", r.violations)
	}
	for topic, want := range map[string]int{"spread-0": 4, "spread-499": 4, "spread-500": 3, "spread-999": 3} {
		if f.calls[topic] != want {
			t.Errorf("%s got %d events, want %d", topic, f.calls[topic], want)
		}
	}
	if len(f.calls) != 1001 || r.metrics["events_per_s"] <= 0 { // 1000 topics and the warm-up's
		t.Fatalf("%d destinations, metrics %v", len(f.calls), r.metrics)
	}
}

// tenants16 puts publisher w on tenant bench-w on process w mod the
// processes (after one untimed event each), and a target without tenants
// on a topic per publisher; each destination's answers are 1..k, rising.
func TestBenchTenantsSpread(t *testing.T) {
	f := &fakeTenantHub{fakeHub{procs: 3}}
	r, err := tenantsSpread(context.Background(), f, 16, 800)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.violations) != 0 {
		t.Fatalf("violations %v", r.violations)
	}
	events := 0
	for w := range 16 {
		if f.calls[fmt.Sprintf("%d bench-%d/warmup", w%3, w)] != 1 {
			t.Errorf("publisher %d: no warm-up event on process %d", w, w%3)
		}
		events += f.calls[fmt.Sprintf("%d bench-%d/tenants16", w%3, w)]
	}
	if events != 800 || len(f.calls) != 33 { // 16 tenants' two topics, and bench's warm-up
		t.Fatalf("%d events on the tenants' topics; destinations %v", events, f.calls)
	}

	p := &fakeHub{skip: "tenants16-5"}
	r, err = tenantsSpread(context.Background(), p, 16, 800)
	if err != nil {
		t.Fatal(err)
	}
	if r.violations.String() != "answer_duplicate 1, answer_missing 1" {
		t.Fatalf("violations %v", r.violations)
	}
	if p.calls["warmup-5"] != 1 || p.calls["tenants16-5"] == 0 {
		t.Fatalf("destinations %v", p.calls)
	}
}

// The Mercure publisher's token is an RFC 9068 access token for the hub,
// signed with the key of the hub's Caddyfile, granting publish on every
// topic.
func TestBenchMercureToken(t *testing.T) {
	key := "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	cfg := mercureCaddyfile(4321, "/tmp/x/mercure.db", key)
	for _, want := range []string{"transport bolt {", `path "/tmp/x/mercure.db"`, "jwt " + key + " HS256",
		"issuer " + mercureIssuer + " {", "resource_identifier http://127.0.0.1:4321/.well-known/mercure", "anonymous",
		"http://127.0.0.1:4321 {"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("Caddyfile without %q:\n%s", want, cfg)
		}
	}
	s, err := mercureToken("http://127.0.0.1:4321/.well-known/mercure", []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Parse(s, func(*jwt.Token) (any, error) { return []byte(key), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(mercureIssuer),
		jwt.WithAudience("http://127.0.0.1:4321/.well-known/mercure"), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatal(err)
	}
	if tok.Header["typ"] != "at+jwt" {
		t.Errorf("typ %v", tok.Header["typ"])
	}
	details, _ := json.Marshal(tok.Claims.(jwt.MapClaims)["authorization_details"])
	if string(details) != `[{"actions":["publish"],"topics":[{"match":"*"}],"type":"https://mercure.rocks/authorization-detail"}]` {
		t.Errorf("authorization_details %s", details)
	}
}

// runBenchMain runs `edgeload bench` in this process at the tiny scale
// (building edgehub from this module when it is a target) and returns its
// exit code and its measurements.
func runBenchMain(t *testing.T, args ...string) (int, []measurement) {
	t.Helper()
	jsonFile := filepath.Join(t.TempDir(), "bench.jsonl")
	code := benchMain(append([]string{"--scale", "tiny", "--rounds", "1", "--json", jsonFile}, args...))
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var ms []measurement
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Summary bool `json:"summary"`
			measurement
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		if !m.Summary {
			ms = append(ms, m.measurement)
		}
	}
	return code, ms
}

// topics16 and tenants16 run against Edgehub, at the tiny scale with
// more events than topics16 has topics (so that topics see more than one
// event), every answer checked.
func TestBenchSpreadScenariosOnEdgehub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs edgehub")
	}
	code, ms := runBenchMain(t, "--targets", "edgehub", "--scenarios", "topics16,tenants16", "--topics16", "2500")
	if code != 0 {
		t.Fatalf("edgeload bench exited %d", code)
	}
	var ran []string
	for _, m := range ms {
		ran = append(ran, m.Scenario)
		if m.Error != "" || len(m.Violations) > 0 || m.Metrics["events_per_s"] <= 0 {
			t.Errorf("%s: error %q, violations %v, metrics %v", m.Scenario, m.Error, m.Violations, m.Metrics)
		}
	}
	if fmt.Sprint(ran) != "[topics16 tenants16]" {
		t.Fatalf("measured %v", ran)
	}
}

// The Mercure-protocol scenarios run against Edgehub in that protocol
// and come out clean: every update of mercure-fanout once to every
// subscriber although two of its three selectors match, and mercure-resume
// complete, each topic in order.
func TestBenchMercureScenariosOnEdgehub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs edgehub")
	}
	code, ms := runBenchMain(t, "--targets", "edgehub-mercure", "--scenarios", "publish16,mercure-fanout,mercure-resume")
	if code != 0 {
		t.Fatalf("edgeload bench exited %d", code)
	}
	var ran []string
	for _, m := range ms {
		ran = append(ran, m.Scenario)
		if m.Error != "" || len(m.Violations) > 0 {
			t.Errorf("%s: error %q, violations %v", m.Scenario, m.Error, m.Violations)
		}
	}
	if fmt.Sprint(ran) != "[publish16 mercure-fanout mercure-resume]" || ms[2].Metrics["complete"] != 1 {
		t.Fatalf("measured %v, the resume %v", ran, ms[len(ms)-1].Metrics)
	}
}

// A resuming subscriber's updates are checked topic by topic: each
// topic's in its own order, every update once.
func TestBenchMercureResumeChecks(t *testing.T) {
	for _, c := range []struct {
		name  string
		order func([]int64) []int64
		want  string
	}{
		{"in order", func(n []int64) []int64 { return n }, ""},
		{"topic by topic", func(n []int64) []int64 {
			n = slices.Clone(n) // topic 9's updates first, then 8's, ...
			slices.SortStableFunc(n, func(a, b int64) int { return int((b-1)%10 - (a-1)%10) })
			return n
		}, ""},
		{"a duplicate", func(n []int64) []int64 { return append(slices.Clone(n[:len(n)-1]), n[0]) }, "duplicate 1, missing 1"},
		{"one topic out of order", func(n []int64) []int64 {
			n = slices.Clone(n)
			n[0], n[10] = n[10], n[0] // updates 1 and 11, both topic 0's
			return n
		}, "out_of_order 1"},
	} {
		f := &fakeMercure{order: c.order}
		r, err := mercureResume(context.Background(), f, 100)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.violations.String() != c.want {
			t.Errorf("%s: violations %q, want %q", c.name, r.violations, c.want)
		}
	}
}

// fakeMercure keeps what is published and replays it to a resuming
// subscriber in the order order makes of the counters.
type fakeMercure struct {
	fakeHub
	mu    sync.Mutex
	n     []int64
	order func([]int64) []int64
}

func (f *fakeMercure) Publish(_ context.Context, _ string, data []byte) (int64, error) {
	n, _, _ := parsePayload(data)
	f.mu.Lock()
	f.n = append(f.n, n)
	f.mu.Unlock()
	return 0, nil
}

func (f *fakeMercure) WatchQuery(_ context.Context, _ string, _ bool, ready func(), deliver func(Delivery) error) error {
	ready()
	slices.Sort(f.n)
	for _, n := range f.order(f.n) {
		if err := deliver(Delivery{N: n}); err != nil {
			return nil
		}
	}
	return nil
}

// mercureBinary is a Mercure hub to run the mercure target with:
// $EDGELOAD_MERCURE, a mercure on PATH, or /tmp/peers/mercure.
func mercureBinary() string {
	if bin := os.Getenv("EDGELOAD_MERCURE"); bin != "" {
		return bin
	}
	if bin, err := exec.LookPath("mercure"); err == nil {
		return bin
	}
	if _, err := os.Stat("/tmp/peers/mercure"); err == nil {
		return "/tmp/peers/mercure"
	}
	return ""
}

// With a Mercure binary at hand, every scenario it supports runs through
// it at the tiny scale and works, and batch leaves it out. A peer's
// violations are its own and only logged.
func TestBenchMercure(t *testing.T) {
	bin := mercureBinary()
	if bin == "" {
		t.Skip("no Mercure binary: set EDGELOAD_MERCURE, or put one on PATH or at /tmp/peers/mercure " +
			"(git clone https://github.com/dunglas/mercure; cd mercure/caddy; go build -o /tmp/peers/mercure ./mercure)")
	}
	code, ms := runBenchMain(t, "--targets", "mercure", "--mercure", bin,
		"--scenarios", strings.Join(defaultScenarios, ","))
	if code != 0 {
		t.Fatalf("edgeload bench exited %d", code)
	}
	var ran []string
	for _, m := range ms {
		ran = append(ran, m.Scenario)
		if m.Error != "" {
			t.Errorf("%s: %s", m.Scenario, m.Error)
		}
		if len(m.Violations) > 0 {
			t.Logf("%s: violations %v", m.Scenario, m.Violations)
		}
	}
	want := slices.DeleteFunc(slices.Clone(defaultScenarios), func(s string) bool { return s == "batch" || s == "tenant-idle" })
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Fatalf("measured %v, want %v", ran, want)
	}
}
