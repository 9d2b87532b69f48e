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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"edgehub/client"
	"edgehub/sse"
)

var chaosDuration = flag.Duration("chaos.duration", 20*time.Second, "how long TestChaos publishes, watches and kills")

// chaosRetention is the server's --retention-events in chaos runs: small,
// so that stalled and late watchers meet retention and get gap frames.
const chaosRetention = 3000

// TestChaos runs publishers (single and batch, with idempotency keys and
// deliberate retries), watchers at random positions and speeds that stall,
// disconnect and resume with Last-Event-ID (some with snapshots), and
// probes that publish the moment their stream opens, while the server is
// killed with SIGKILL and SIGTERM and restarted on the same data. Then a
// checker proves the promise; see plans/006-chaos.md.
func TestChaos(t *testing.T) {
	r := runChaos(t, chaosOptions{bin: plainBinary, duration: *chaosDuration})
	t.Log(r.summary())
	for _, v := range r.violations {
		t.Error(v)
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
}

type chaosAnswer struct {
	first, last int64
	ids         []string
}

// chaosRun holds what a run did and saw, and what the checker found.
type chaosRun struct {
	t    *testing.T
	opts chaosOptions
	base string
	hc   *http.Client

	mu          sync.Mutex
	answers     map[string]chaosAnswer // by idempotency key
	seen        map[int64]string       // payload id each seq carried on any stream
	gaps        [][2]int64
	violations  []string
	violated    int
	maxAnswered atomic.Int64

	requests, events, retries, repeats, streams, reconnects, probes, gapFrames, snapshots atomic.Int64
	kills, terms                                                                          int
}

func (r *chaosRun) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violateLocked(format, args...)
}

// violateLocked records a violation; past the first 200 it only counts.
func (r *chaosRun) violateLocked(format string, args ...any) {
	r.violated++
	if len(r.violations) < 200 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

func (r *chaosRun) summary() string {
	return fmt.Sprintf("chaos: %d publish requests (%d events answered, %d retried after errors, %d deliberate repeats), "+
		"%d stream connections (%d reconnects, %d probes, %d snapshots), %d gap frames, %d SIGKILL + %d SIGTERM restarts, %d violations",
		r.requests.Load(), r.events.Load(), r.retries.Load(), r.repeats.Load(), r.streams.Load(), r.reconnects.Load(),
		r.probes.Load(), r.snapshots.Load(), r.gapFrames.Load(), r.kills, r.terms, r.violated)
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

func runChaos(t *testing.T, opts chaosOptions) *chaosRun {
	dir, addr := t.TempDir(), freeAddr(t)
	args := []string{"--dev", "--retention-events", strconv.Itoa(chaosRetention), "--stream-buffer", "16384", "--retry", "100ms", "--heartbeat", "1s"}
	p := startAt(t, opts.bin, opts.env, dir, addr, args...)
	// Small receive buffers: a watcher that stops reading must stall the
	// server's writes, so that the hub has to demote it.
	dialer := smallBufferDialer(32 << 10)
	r := &chaosRun{t: t, opts: opts, base: p.base, answers: map[string]chaosAnswer{}, seen: map[int64]string{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: dialer.DialContext}}}
	ctx, stop := context.WithCancel(context.Background())
	var pubs, watchers sync.WaitGroup
	for i := 0; i < 4; i++ {
		pubs.Add(1)
		go func() { defer pubs.Done(); r.publisher(ctx, i) }()
	}
	pubs.Add(1)
	go func() { defer pubs.Done(); r.prober(ctx) }()
	final := make(chan int64)
	ws := make([]*chaosWatcher, 12)
	for i := range ws {
		ws[i] = &chaosWatcher{r: r, n: i, pos: -1}
		watchers.Add(1)
		go func() { defer watchers.Done(); ws[i].run(ctx, final) }()
	}

	// The monkey: kill and restart the server on the same port and data.
	deadline := time.Now().Add(opts.duration)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(1500+rand.IntN(2500)) * time.Millisecond) // a random uptime between faults
		if opts.kill9Only || rand.IntN(2) == 0 {
			p.kill9()
			r.kills++
		} else {
			p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // checked by its exit
			<-p.exited
			if p.err != nil {
				r.violate("SIGTERM: server exited with %v", p.err)
			}
			r.terms++
		}
		p = startAt(t, opts.bin, opts.env, dir, addr, args...)
	}
	stop()
	pubs.Wait()

	head, _ := r.checkLog()
	for range ws {
		final <- head
	}
	watchers.Wait()
	r.checkGaps()
	return r
}

// publish sends one request until it is answered, retrying with the same
// idempotency key after connection errors, as a webhook sender does.
func (r *chaosRun) publish(ctx context.Context, key string, body []byte, batch bool) (chaosAnswer, bool) {
	c := &client.Client{Server: r.base, HTTP: r.hc}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			r.retries.Add(1)
			time.Sleep(50 * time.Millisecond) // back off while the server restarts
		}
		r.requests.Add(1)
		raw, err := c.Publish(context.Background(), "chaos", "main", body, client.PublishOptions{IdempotencyKey: key, Batch: batch})
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable {
			r.violate("publish %s refused: %v", key, err)
			return chaosAnswer{}, false
		}
		if err != nil {
			if ctx.Err() != nil && attempt > 20 {
				return chaosAnswer{}, false // given up: this request stays unanswered
			}
			continue
		}
		var a struct{ Seq, First, Last int64 }
		if err := json.Unmarshal(raw, &a); err != nil {
			r.violate("publish %s: answer %s: %v", key, raw, err)
			return chaosAnswer{}, false
		}
		if !batch {
			a.First, a.Last = a.Seq, a.Seq
		}
		return chaosAnswer{first: a.First, last: a.Last}, true
	}
}

func (r *chaosRun) publisher(ctx context.Context, p int) {
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("p%d-%d", p, n)
		size, batch := 1, rand.IntN(4) == 0
		if batch {
			size = 2 + rand.IntN(19)
		}
		ids := make([]string, size)
		var body strings.Builder
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", key, i)
			fmt.Fprintf(&body, "{\"id\":%q,\"pad\":%q}\n", ids[i], chaosPad)
		}
		a, ok := r.publish(ctx, key, []byte(body.String()), batch)
		if !ok {
			continue
		}
		a.ids = ids
		r.record(key, a)
		if rand.IntN(10) == 0 { // a deliberate retry of an answered request
			r.repeats.Add(1)
			if again, ok := r.publish(ctx, key, []byte(body.String()), batch); ok && (again.first != a.first || again.last != a.last) {
				r.violate("idempotency: key %s answered %d..%d, its repeat %d..%d", key, a.first, a.last, again.first, again.last)
			}
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // a publisher's own pace
	}
}

func (r *chaosRun) record(key string, a chaosAnswer) {
	if int64(len(a.ids)) != a.last-a.first+1 {
		r.violate("publish %s: %d events answered as %d..%d", key, len(a.ids), a.first, a.last)
		return
	}
	r.mu.Lock()
	r.answers[key] = a
	r.mu.Unlock()
	r.events.Add(int64(len(a.ids)))
	for r.maxAnswered.Load() < a.last {
		cur := r.maxAnswered.Load()
		if r.maxAnswered.CompareAndSwap(cur, a.last) {
			break
		}
	}
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
	query := ""
	if n%2 == 1 {
		query = "?snapshot=1" // every other probe also checks the snapshot's position
	}
	req, _ := http.NewRequestWithContext(pctx, http.MethodGet, r.base+"/v1/tenants/chaos/topics/main/watch"+query, nil)
	resp, err := r.hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return // the server is down; the next probe tries again
	}
	defer resp.Body.Close()
	r.probes.Add(1)
	key := fmt.Sprintf("probe-%d", n)
	a, ok := r.publish(ctx, key, []byte(fmt.Sprintf("{\"id\":%q}\n", key+"-0")), false)
	if !ok {
		return
	}
	a.ids = []string{key + "-0"}
	r.record(key, a)
	d := sse.NewDecoder(resp.Body)
	var position int64
	for {
		f, err := d.Next()
		if err != nil {
			return // a restart ended the stream before the marker: nothing proven either way
		}
		switch f.Event {
		case "hello":
			var h struct{ Position int64 }
			json.Unmarshal([]byte(f.Data), &h) //nolint:errcheck // zero fails below
			if h.Position >= a.first {
				r.violate("probe: event %d was published after onopen, but the stream starts after %d", a.first, h.Position)
				return
			}
			position = h.Position
		case "snapshot":
			r.snapshots.Add(1)
			var s struct{ Seq int64 }
			json.Unmarshal([]byte(f.Data), &s) //nolint:errcheck // checked by value
			if s.Seq != position || f.ID != strconv.FormatInt(s.Seq, 10) {
				r.violate("probe: snapshot at %d (id %s) on a stream at position %d", s.Seq, f.ID, position)
				return
			}
		case "gap":
		default:
			if seq, _ := strconv.ParseInt(f.ID, 10, 64); seq >= a.first {
				if seq != a.first {
					r.violate("probe: event %d was published after onopen, but the stream went on to %d", a.first, seq)
				}
				return
			}
		}
	}
}

// chaosWatcher is one logical watcher: a browser tab, say, across all its
// reconnects. pos is the last position it has been given.
type chaosWatcher struct {
	r   *chaosRun
	n   int
	pos int64
	url string
}

func (w *chaosWatcher) run(ctx context.Context, final <-chan int64) {
	r := w.r
	switch mode := rand.IntN(3); {
	case mode == 0:
		w.url = "/watch" // live from now
	case mode == 1 && w.n%2 == 0:
		w.url = "/watch?snapshot=1"
	default:
		w.url = fmt.Sprintf("/watch?after=%d", rand.Int64N(r.maxAnswered.Load()+1))
	}
	slow := rand.IntN(3) == 0
	for ctx.Err() == nil {
		w.connect(ctx, slow, -1)
		time.Sleep(time.Duration(20+rand.IntN(100)) * time.Millisecond) // a browser's retry delay
	}
	// Final phase: read on, without stalls, until the last answered event.
	head := <-final
	end := time.Now().Add(60 * time.Second)
	for w.pos < head && time.Now().Before(end) {
		w.connect(context.Background(), false, head)
	}
	if w.pos < head {
		r.violate("watcher %d: stuck at %d, head is %d", w.n, w.pos, head)
	}
}

// connect makes one connection, resuming with Last-Event-ID, and reads until
// it decides to leave, the server goes, or (until >= 0) it reaches until.
func (w *chaosWatcher) connect(ctx context.Context, slow bool, until int64) {
	r := w.r
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, r.base+"/v1/tenants/chaos/topics/main"+w.url, nil)
	resuming := w.pos >= 0
	if resuming {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(w.pos, 10))
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.violate("watcher %d: status %d", w.n, resp.StatusCode)
		return
	}
	r.streams.Add(1)
	if resuming {
		r.reconnects.Add(1)
	}
	leaveAfter := 50 + rand.IntN(3000)
	stallAt := -1
	if until < 0 && rand.IntN(4) == 0 {
		stallAt = rand.IntN(500)
	}
	d := sse.NewDecoder(resp.Body)
	for frames := 0; ; frames++ {
		f, err := d.Next()
		if err != nil {
			return
		}
		if !w.check(f, resuming) {
			return
		}
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
			time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond) // stop reading for a while
		}
		if slow {
			time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond)
		}
	}
}

// check applies the delivery rules to one frame; false ends the connection
// after a violation, so one bug is not reported a thousand times.
func (w *chaosWatcher) check(f sse.Frame, resuming bool) bool {
	r := w.r
	switch f.Event {
	case "hello":
		var h struct{ Head, Position int64 }
		if err := json.Unmarshal([]byte(f.Data), &h); err != nil {
			r.violate("watcher %d: bad hello %q", w.n, f.Data)
			return false
		}
		if f.ID != strconv.FormatInt(h.Position, 10) {
			r.violate("watcher %d: hello id %q is not its position %d", w.n, f.ID, h.Position)
			return false
		}
		if resuming && h.Position != w.pos {
			r.violate("watcher %d: resumed with Last-Event-ID %d, hello says position %d", w.n, w.pos, h.Position)
			return false
		}
		if after, ok := strings.CutPrefix(w.url, "/watch?after="); ok && !resuming && after != strconv.FormatInt(h.Position, 10) {
			r.violate("watcher %d: asked for after=%s, hello says position %d", w.n, after, h.Position)
			return false
		}
		w.pos = h.Position
	case "snapshot":
		r.snapshots.Add(1)
		var s struct{ Seq int64 }
		json.Unmarshal([]byte(f.Data), &s) //nolint:errcheck // checked by value
		if resuming || s.Seq != w.pos || f.ID != strconv.FormatInt(s.Seq, 10) {
			r.violate("watcher %d: snapshot at %d (id %s) on a stream at position %d (resuming %v)", w.n, s.Seq, f.ID, w.pos, resuming)
			return false
		}
	case "gap":
		r.gapFrames.Add(1)
		var g struct{ From, To int64 }
		json.Unmarshal([]byte(f.Data), &g) //nolint:errcheck // checked by value
		if g.From != w.pos+1 || g.To < g.From || f.ID != strconv.FormatInt(g.To, 10) {
			r.violate("watcher %d: gap %d..%d (id %s) at position %d", w.n, g.From, g.To, f.ID, w.pos)
			return false
		}
		r.mu.Lock()
		r.gaps = append(r.gaps, [2]int64{g.From, g.To})
		r.mu.Unlock()
		w.pos = g.To
	default:
		var e struct {
			Seq  int64
			Data struct{ ID string }
		}
		if err := json.Unmarshal([]byte(f.Data), &e); err != nil || f.ID != strconv.FormatInt(e.Seq, 10) {
			r.violate("watcher %d: bad event frame id %s data %q", w.n, f.ID, f.Data)
			return false
		}
		switch {
		case e.Seq <= w.pos:
			r.violate("watcher %d: duplicate or out of order: event %d after position %d", w.n, e.Seq, w.pos)
			return false
		case e.Seq > w.pos+1:
			r.violate("watcher %d: hole: events %d..%d skipped with no gap frame", w.n, w.pos+1, e.Seq-1)
			return false
		}
		r.mu.Lock()
		if prev, ok := r.seen[e.Seq]; ok && prev != e.Data.ID {
			r.violateLocked("seq %d delivered as %s and as %s", e.Seq, prev, e.Data.ID)
		}
		r.seen[e.Seq] = e.Data.ID
		r.mu.Unlock()
		w.pos = e.Seq
	}
	return true
}

// checkLog reads the retained log from the last server and checks it
// against every answer and every delivery: contiguous sequence numbers,
// every answered event stored once with its data. It returns the head and
// the trim point.
func (r *chaosRun) checkLog() (head, trimmed int64) {
	after := int64(0)
	stored := map[int64]string{}
	where := map[string]int64{}
	for {
		resp, err := r.hc.Get(fmt.Sprintf("%s/v1/tenants/chaos/topics/main/events?after=%d&limit=1000", r.base, after))
		if err != nil {
			r.violate("read the log: %v", err)
			return 0, 0
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
			r.violate("read the log: %v", err)
			return 0, 0
		}
		head = page.Head
		if page.Gap != nil {
			trimmed = page.Gap.To
			after = trimmed
		}
		if len(page.Events) == 0 {
			break
		}
		for _, e := range page.Events {
			if e.Seq != after+1 {
				r.violate("log: hole: seq %d follows %d", e.Seq, after)
			}
			if s, dup := where[e.Data.ID]; dup {
				r.violate("log: event %s stored twice, at %d and %d", e.Data.ID, s, e.Seq)
			}
			where[e.Data.ID] = e.Seq
			stored[e.Seq] = e.Data.ID
			after = e.Seq
		}
	}
	if after != head {
		r.violate("log: read up to %d, head is %d", after, head)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.answers))
	for k := range r.answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a := r.answers[k]
		for i, id := range a.ids {
			seq := a.first + int64(i)
			switch got, ok := stored[seq]; {
			case seq > head:
				r.violateLocked("answered event %s (seq %d) is not stored: head is %d", id, seq, head)
			case seq > trimmed && got != id:
				r.violateLocked("answered event %s (seq %d): the log holds %q there", id, seq, got)
			case !ok && seq > trimmed:
				r.violateLocked("answered event %s (seq %d) is missing", id, seq)
			}
			if seen, ok := r.seen[seq]; ok && seen != id {
				r.violateLocked("answered event %s (seq %d) was delivered as %s", id, seq, seen)
			}
		}
	}
	for seq, id := range r.seen {
		if got, ok := stored[seq]; ok && got != id {
			r.violateLocked("seq %d delivered as %s, stored as %s", seq, id, got)
		}
	}
	return head, trimmed
}

// checkGaps: a gap frame may only name events that retention removed. The
// trim point only grows, so the one read after every stream is done bounds
// every gap any stream was sent.
func (r *chaosRun) checkGaps() {
	resp, err := r.hc.Get(r.base + "/v1/tenants/chaos/topics/main/events?after=0&limit=1")
	if err != nil {
		r.violate("read the trim point: %v", err)
		return
	}
	var page struct{ Gap struct{ To int64 } }
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil {
		r.violate("read the trim point: %v", err)
		return
	}
	trimmed := page.Gap.To
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gaps {
		if g[1] > trimmed {
			r.violateLocked("gap %d..%d names events retention never removed (trimmed through %d)", g[0], g[1], trimmed)
		}
	}
}
