package tests

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/pgtest"
	"github.com/edgehub/edgehub/sse"
	"github.com/edgehub/edgehub/tests/chaoscheck"
)

var chaosDuration = flag.Duration("chaos.duration", 20*time.Second, "how long TestChaos publishes, watches and kills")

// chaosRetention is the server's --retention-events in chaos runs: small,
// so that stalled and late watchers meet retention and get gap frames.
const chaosRetention = 3000

// TestChaos runs publishers (single and batch, with idempotency keys and
// deliberate retries), watchers at random positions and speeds that stall,
// disconnect and resume with Last-Event-ID (some with snapshots), and
// probes that publish the moment their stream opens, while the server is
// killed with SIGKILL and SIGTERM and restarted on the same data. The run
// only records what it did and saw; then the checker (package chaoscheck)
// validates that history against the promise; see
// plans/006-chaos-and-real-clients.md.
func TestChaos(t *testing.T) {
	chaos(t, chaosOptions{bin: plainBinary, duration: *chaosDuration})
}

// TestChaosCluster is TestChaos against three processes sharing one
// Postgres log, each request (and each reconnect) going to any of them,
// while one at a time is killed and restarted.
func TestChaosCluster(t *testing.T) {
	chaos(t, chaosOptions{bin: plainBinary, duration: *chaosDuration, procs: 3})
}

func chaos(t *testing.T, opts chaosOptions) {
	r := runChaos(t, opts)
	t.Log(r.summary())
	const shown = 200
	for i, v := range r.violations {
		if i == shown {
			t.Errorf("and %d more violations", len(r.violations)-shown)
			break
		}
		t.Error(v)
	}
	if len(r.violations) > 0 {
		r.save(t)
	}
}

// TestChaosCatchesInjectedFaults shows that the checker finds each bug it
// exists to find, when a binary built with -tags faults injects it.
func TestChaosCatchesInjectedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary and runs four chaos rounds")
	}
	bin := filepath.Join(filepath.Dir(binary), "edgehub-faults")
	if err := goBuild(bin, "-tags", "faults"); err != nil {
		t.Fatalf("build with faults: %v", err)
	}
	for _, fault := range []string{"register-late", "drop-slow", "replay-after-live", "answer-before-commit"} {
		t.Run(fault, func(t *testing.T) {
			// A fault shows only when its window is hit (replay-after-live
			// needs a commit while a stream catches up), which a loaded
			// machine makes rarer: up to three rounds to show it.
			var r *chaosRun
			for round := 0; round < 3 && (r == nil || len(r.violations) == 0); round++ {
				r = runChaos(t, chaosOptions{bin: bin, env: []string{"EDGEHUB_FAULT=" + fault}, duration: 8 * time.Second,
					kill9Only: fault == "answer-before-commit"})
				t.Log(r.summary())
			}
			if len(r.violations) == 0 {
				t.Fatalf("the checker found nothing with %s injected", fault)
			}
			t.Logf("first of %d violations: %s", len(r.violations), r.violations[0])
		})
	}
}

// chaosPad makes events big enough that a watcher which stops reading for
// a second or two outgrows the kernel's socket buffers and stalls the
// server's writes, so the hub has to send it back to the backlog.
var chaosPad = strings.Repeat("p", 700)

type chaosOptions struct {
	bin       string
	env       []string
	duration  time.Duration
	kill9Only bool
	// procs is how many processes share one Postgres log (0: one server,
	// on the suite's store).
	procs int
}

// The random sources of a run's goroutines, by number (see newRand).
const (
	randMonkey    = 0
	randPublisher = 1   // + the publisher's number
	randWatcher   = 100 // + the watcher's number
)

// chaosRun is the recorder: it drives one run and records what it did and
// saw in h, which the checker then validates.
type chaosRun struct {
	bases []string // every process's, one for a single server
	hc    *http.Client
	began time.Time

	mu sync.Mutex
	h  chaoscheck.History // Publishes and Streams are appended under mu

	idsMu sync.Mutex
	ids   map[string]string // every event id seen on a stream, so that the streams share one copy

	maxAnswered               atomic.Int64
	requests, retries, probes atomic.Int64
	kills, terms              int
	violations                []chaoscheck.Violation
}

// pick is a process to send a request to, as a load balancer would.
func (r *chaosRun) pick() string { return r.bases[rand.IntN(len(r.bases))] }

// since is the time since the run began, in ms.
func (r *chaosRun) since() int64 { return time.Since(r.began).Milliseconds() }

func (r *chaosRun) summary() string {
	var events, repeats, streams, reconnects, snapshots, gaps int
	for _, p := range r.h.Publishes {
		if p.Answered {
			events += len(p.IDs)
		}
		if p.Repeat != nil {
			repeats++
		}
	}
	for _, s := range r.h.Streams {
		if !s.IsProbe() && s.Status == http.StatusOK {
			streams++
			if s.LastEventID >= 0 {
				reconnects++
			}
		}
		for _, f := range s.Frames {
			switch {
			case f.Kind == chaoscheck.Snapshot:
				snapshots++
			case f.Kind == chaoscheck.Gap && !s.IsProbe():
				gaps++
			}
		}
	}
	return fmt.Sprintf("chaos: %d publish requests (%d events answered, %d retried after errors, %d deliberate repeats), "+
		"%d stream connections (%d reconnects, %d probes, %d snapshots), %d gap frames, %d SIGKILL + %d SIGTERM restarts, %d violations",
		r.requests.Load(), events, r.retries.Load(), repeats, streams, reconnects,
		r.probes.Load(), snapshots, gaps, r.kills, r.terms, len(r.violations))
}

// save writes the history of a failed run, with the frames of the streams
// the violations name (at most 100 000), to a file that outlives the test.
func (r *chaosRun) save(t *testing.T) {
	f, err := os.CreateTemp("", "edgehub-chaos-history-*.json")
	if err != nil {
		t.Logf("save the history: %v", err)
		return
	}
	defer f.Close()
	err = json.NewEncoder(f).Encode(struct {
		Violations []chaoscheck.Violation `json:"violations"`
		History    *chaoscheck.History    `json:"history"`
	}{r.violations, r.h.Excerpt(r.violations, 100_000)})
	if err != nil {
		t.Logf("save the history: %v", err)
		return
	}
	t.Logf("the recorded history is in %s", f.Name())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// runChaos records one run, then checks it.
func runChaos(t *testing.T, opts chaosOptions) *chaosRun {
	seed := runSeed()
	t.Logf("chaos seed %d", seed)
	args := []string{"--dev", "--retention-events", strconv.Itoa(chaosRetention), "--stream-buffer", "16384", "--retry", "100ms", "--heartbeat", "1s"}
	if opts.procs > 1 {
		args = append(args, "--store", pgtest.Database(t))
	}
	ps, dirs, addrs := make([]*proc, max(1, opts.procs)), make([]string, max(1, opts.procs)), make([]string, max(1, opts.procs))
	bases := make([]string, len(ps))
	for i := range ps {
		dirs[i], addrs[i] = t.TempDir(), freeAddr(t)
		ps[i] = startAt(t, opts.bin, opts.env, dirs[i], addrs[i], args...)
		bases[i] = ps[i].base
	}
	// Small receive buffers: a watcher that stops reading must stall the
	// server's writes, so that the hub has to demote it.
	dialer := smallBufferDialer(32 << 10)
	r := &chaosRun{bases: bases, began: time.Now(), ids: map[string]string{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: dialer.DialContext}}}
	r.h.Seed = seed
	ctx, stop := context.WithCancel(context.Background())
	var pubs, watchers sync.WaitGroup
	for i := 0; i < 4; i++ {
		rnd := newRand(seed, randPublisher+uint64(i))
		pubs.Add(1)
		go func() { defer pubs.Done(); r.publisher(ctx, i, rnd) }()
	}
	pubs.Add(1)
	go func() { defer pubs.Done(); r.prober(ctx) }()
	final := make(chan int64)
	ws := make([]*chaosWatcher, 12)
	for i := range ws {
		ws[i] = &chaosWatcher{r: r, n: i, pos: -1, rnd: newRand(seed, randWatcher+uint64(i))}
		watchers.Add(1)
		go func() { defer watchers.Done(); ws[i].run(ctx, final) }()
	}

	// The monkey: kill and restart a server on the same port and data.
	// Only this goroutine touches h.Restarts.
	monkey := newRand(seed, randMonkey)
	deadline := time.Now().Add(opts.duration)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(1500+monkey.IntN(2500)) * time.Millisecond) // a random uptime between faults
		restart := chaoscheck.Restart{At: r.since(), Signal: "SIGKILL"}
		i := monkey.IntN(len(ps))
		p := ps[i]
		if opts.kill9Only || monkey.IntN(2) == 0 {
			p.kill9()
			r.kills++
		} else {
			restart.Signal = "SIGTERM"
			p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.exited
			r.terms++
		}
		if p.err != nil {
			restart.Exit = p.err.Error()
		}
		r.h.Restarts = append(r.h.Restarts, restart)
		ps[i] = startAt(t, opts.bin, opts.env, dirs[i], addrs[i], args...)
	}
	stop()
	pubs.Wait()

	head := r.readLog()
	for range ws {
		final <- head
	}
	watchers.Wait()
	for _, w := range ws {
		r.h.Watchers = append(r.h.Watchers, chaoscheck.Watcher{N: w.n, URL: w.url, Slow: w.slow, Pos: w.pos, Head: head})
	}
	r.readTrim()
	r.violations = chaoscheck.Check(&r.h)
	return r
}

// publish sends one request until it is answered, retrying with the same
// idempotency key after connection errors, as a webhook sender does.
func (r *chaosRun) publish(ctx context.Context, key string, events []any, batch bool) chaoscheck.Outcome {
	c := &client.Client{Server: r.pick(), HTTP: r.hc}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			r.retries.Add(1)
			time.Sleep(50 * time.Millisecond) // back off while the server restarts
		}
		r.requests.Add(1)
		var a client.BatchResult
		var err error
		if batch {
			a, err = c.PublishBatch(context.Background(), "chaos", "main", events, client.PublishOptions{IdempotencyKey: key})
		} else {
			var one client.PublishResult
			one, err = c.Publish(context.Background(), "chaos", "main", events[0], client.PublishOptions{IdempotencyKey: key})
			a.First, a.Last = one.Seq, one.Seq
		}
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable {
			return chaoscheck.Outcome{Error: "refused: " + err.Error()}
		}
		if err != nil {
			if ctx.Err() != nil && attempt > 20 {
				return chaoscheck.Outcome{} // given up: this request stays unanswered
			}
			continue
		}
		return chaoscheck.Outcome{Answered: true, First: a.First, Last: a.Last}
	}
}

func (r *chaosRun) publisher(ctx context.Context, p int, rnd *rand.Rand) {
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("p%d-%d", p, n)
		size, batch := 1, rnd.IntN(4) == 0
		if batch {
			size = 2 + rnd.IntN(19)
		}
		ids := make([]string, size)
		events := make([]any, size)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", key, i)
			events[i] = json.RawMessage(fmt.Sprintf("{\"id\":%q,\"pad\":%q}", ids[i], chaosPad))
		}
		pub := chaoscheck.Publish{Key: key, IDs: ids, Outcome: r.publish(ctx, key, events, batch)}
		if !pub.Answered {
			r.record(pub)
			continue
		}
		if rnd.IntN(10) == 0 { // a deliberate retry of an answered request
			again := r.publish(ctx, key, events, batch)
			pub.Repeat = &again
		}
		r.record(pub)
		time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond) // a publisher's own pace
	}
}

func (r *chaosRun) record(p chaoscheck.Publish) {
	r.mu.Lock()
	r.h.Publishes = append(r.h.Publishes, p)
	r.mu.Unlock()
	for p.Answered && r.maxAnswered.Load() < p.Last {
		cur := r.maxAnswered.Load()
		if r.maxAnswered.CompareAndSwap(cur, p.Last) {
			break
		}
	}
}

func (r *chaosRun) recordStream(s *chaoscheck.Stream) {
	r.mu.Lock()
	r.h.Streams = append(r.h.Streams, *s)
	r.mu.Unlock()
}

// frame records one frame; an event's id is kept once for all streams.
func (r *chaosRun) frame(f sse.Frame) chaoscheck.Frame {
	fr := chaoscheck.ParseFrame(f.Event, f.ID, f.Data)
	if fr.Kind == chaoscheck.Event && !fr.Bad {
		r.idsMu.Lock()
		if id, ok := r.ids[fr.Payload]; ok {
			fr.Payload = id
		} else {
			r.ids[fr.Payload] = fr.Payload
		}
		r.idsMu.Unlock()
	}
	return fr
}

// prober opens live streams and, the moment the headers are in, publishes
// a marker that the stream must deliver: onopen means subscribed.
func (r *chaosRun) prober(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		r.probe(ctx, n)
		time.Sleep(50 * time.Millisecond) // probes are spaced out, not a load
	}
}

func (r *chaosRun) probe(ctx context.Context, n int) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "/watch"
	if n%2 == 1 {
		url += "?snapshot=1" // every other probe also checks the snapshot's position
	}
	opened := r.since()
	req, _ := http.NewRequestWithContext(pctx, http.MethodGet, r.pick()+"/v1/tenants/chaos/topics/main"+url, nil)
	resp, err := r.hc.Do(req)
	if err != nil {
		return // the server is down; the next probe tries again
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	r.probes.Add(1)
	key := fmt.Sprintf("probe-%d", n)
	pub := chaoscheck.Publish{Key: key, IDs: []string{key + "-0"}}
	pub.Outcome = r.publish(ctx, key, []any{map[string]string{"id": pub.IDs[0]}}, false)
	r.record(pub)
	if !pub.Answered {
		return
	}
	s := &chaoscheck.Stream{Watcher: -1, Probe: n, Marker: pub.First, URL: url, LastEventID: -1, Status: resp.StatusCode, Opened: opened}
	defer r.recordStream(s)
	d := sse.NewDecoder(resp.Body)
	for {
		f, err := d.Next()
		if err != nil {
			return // a restart ended the stream before the marker: nothing proven either way
		}
		fr := r.frame(f)
		s.Frames = append(s.Frames, fr)
		if (fr.Kind == chaoscheck.Hello || fr.Kind == chaoscheck.Event) && fr.At >= s.Marker {
			return // the marker came, or can no longer come
		}
	}
}

// chaosWatcher is one logical watcher: a browser tab, say, across all its
// reconnects. pos is the last position it has been given.
type chaosWatcher struct {
	r    *chaosRun
	n    int
	rnd  *rand.Rand
	pos  int64
	url  string
	slow bool
}

func (w *chaosWatcher) run(ctx context.Context, final <-chan int64) {
	switch mode := w.rnd.IntN(3); {
	case mode == 0:
		w.url = "/watch" // live from now
	case mode == 1 && w.n%2 == 0:
		w.url = "/watch?snapshot=1"
	default:
		w.url = fmt.Sprintf("/watch?after=%d", w.rnd.Int64N(w.r.maxAnswered.Load()+1))
	}
	w.slow = w.rnd.IntN(3) == 0
	for ctx.Err() == nil {
		w.connect(ctx, w.slow, -1)
		time.Sleep(time.Duration(20+w.rnd.IntN(100)) * time.Millisecond) // a browser's retry delay
	}
	// Final phase: read on, without stalls, until the last answered event.
	head := <-final
	end := time.Now().Add(60 * time.Second)
	for w.pos < head && time.Now().Before(end) {
		w.connect(context.Background(), false, head)
	}
}

// connect makes one connection, resuming with Last-Event-ID, and records
// what it is sent until it decides to leave, the server goes, or (until >=
// 0) it reaches until.
func (w *chaosWatcher) connect(ctx context.Context, slow bool, until int64) {
	r := w.r
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, r.pick()+"/v1/tenants/chaos/topics/main"+w.url, nil)
	s := &chaoscheck.Stream{Watcher: w.n, URL: w.url, LastEventID: -1, Opened: r.since()}
	if w.pos >= 0 {
		s.LastEventID = w.pos
		req.Header.Set("Last-Event-ID", strconv.FormatInt(w.pos, 10))
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	defer r.recordStream(s)
	if resp.StatusCode != http.StatusOK {
		return
	}
	leaveAfter := 50 + w.rnd.IntN(3000)
	stallAt := -1
	if until < 0 && w.rnd.IntN(4) == 0 {
		stallAt = w.rnd.IntN(500)
	}
	d := sse.NewDecoder(resp.Body)
	for frames := 0; ; frames++ {
		f, err := d.Next()
		if err != nil {
			return
		}
		fr := r.frame(f)
		s.Frames = append(s.Frames, fr)
		w.follow(fr)
		if until >= 0 {
			if w.pos >= until {
				return
			}
			continue
		}
		if frames == leaveAfter {
			return
		}
		if frames == stallAt {
			time.Sleep(time.Duration(500+w.rnd.IntN(2500)) * time.Millisecond) // stop reading for a while
		}
		if slow {
			time.Sleep(time.Duration(w.rnd.IntN(2)) * time.Millisecond)
		}
	}
}

// follow moves the watcher to the position a frame gives it (a hello's
// position, a gap's end, an event's seq), which it sends as Last-Event-ID
// when it reconnects. Whether the frame should have come is the checker's
// business, not the watcher's: it reads on as a client would.
func (w *chaosWatcher) follow(f chaoscheck.Frame) {
	if !f.Bad && f.Kind != chaoscheck.Snapshot {
		w.pos = f.At
	}
}

// readLog records the retained log from the last server, page by page, and
// returns its head.
func (r *chaosRun) readLog() (head int64) {
	after := int64(0)
	for {
		resp, err := r.hc.Get(fmt.Sprintf("%s/v1/tenants/chaos/topics/main/events?after=%d&limit=1000", r.bases[0], after))
		if err != nil {
			r.h.Log.Err = err.Error()
			return 0
		}
		var page struct {
			Events []struct {
				Seq  int64
				Data struct{ ID string }
			}
			Head int64
			Gap  *struct{ From, To int64 }
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			r.h.Log.Err = err.Error()
			return 0
		}
		pg := chaoscheck.Page{Head: page.Head}
		if page.Gap != nil {
			pg.Gap = &chaoscheck.Range{From: page.Gap.From, To: page.Gap.To}
			after = page.Gap.To
		}
		for _, e := range page.Events {
			pg.Events = append(pg.Events, chaoscheck.Stored{Seq: e.Seq, ID: e.Data.ID})
			after = e.Seq
		}
		r.h.Log.Pages = append(r.h.Log.Pages, pg)
		head = page.Head
		if len(page.Events) == 0 {
			return head
		}
	}
}

// readTrim records the trim point once every stream has ended.
func (r *chaosRun) readTrim() {
	resp, err := r.hc.Get(r.bases[0] + "/v1/tenants/chaos/topics/main/events?after=0&limit=1")
	if err != nil {
		r.h.FinalTrim.Err = err.Error()
		return
	}
	var page struct{ Gap struct{ To int64 } }
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil {
		r.h.FinalTrim.Err = err.Error()
		return
	}
	r.h.FinalTrim.Through = page.Gap.To
}
