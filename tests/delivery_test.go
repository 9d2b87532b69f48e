package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/sse"
)

// Each of 200 fresh streams publishes the moment it has the response
// headers and must get that event first: onopen means subscribed.
func TestEventPublishedWhenHeadersArriveAlwaysArrives(t *testing.T) {
	p := start(t, t.TempDir())
	for i := 0; i < 200; i++ {
		s := p.watch(t, "fresh", "", nil) // returns once the headers are in
		seq := p.publish(t, "fresh", fmt.Sprintf(`{"i":%d}`, i))
		head, pos := s.hello(t)
		if head != pos || head != seq-1 {
			t.Fatalf("stream %d: hello head %d position %d, published %d", i, head, pos, seq)
		}
		if e := s.event(t); e.Seq != seq || string(e.Data) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("stream %d: got %+v, want seq %d", i, e, seq)
		}
		s.close()
	}
}

// Watchers open at random positions while four publishers run; each must
// get exactly the events after its position, in order, once.
func TestReplayMeetsLiveWithoutHoleOrDuplicate(t *testing.T) {
	p := start(t, t.TempDir())
	const publishers, perPublisher, watchers = 4, 250, 24
	var published atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < publishers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perPublisher; i++ {
				if i%50 == 0 {
					if err := p.tryPublishBatch("replay", i, 5, 10); err != nil {
						t.Errorf("publisher %d: %v", w, err)
						return
					}
					published.Add(5)
					continue
				}
				if _, err := p.tryPublish("replay", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)); err != nil {
					t.Errorf("publisher %d: %v", w, err)
					return
				}
				published.Add(1)
			}
		}()
	}
	total := int64(publishers * (perPublisher - perPublisher/50 + 5*perPublisher/50))
	type watcher struct {
		s     *stream
		after int64
	}
	ws := make([]watcher, 0, watchers)
	rnd := newRand(testSeed(t), 0)
	for i := 0; i < watchers; i++ {
		after := rnd.Int64N(published.Load() + 1)
		q := fmt.Sprintf("?after=%d", after)
		if i%6 == 5 {
			after, q = -1, "" // live from now: its position comes in hello
		}
		ws = append(ws, watcher{p.watch(t, "replay", q, nil), after})
	}
	wg.Wait()
	if t.Failed() {
		return // a publisher failed: the watchers would wait for events that never came
	}
	for i, w := range ws {
		_, pos := w.s.hello(t)
		if w.after >= 0 && pos != w.after {
			t.Fatalf("watcher %d: position %d, asked for %d", i, pos, w.after)
		}
		for want := pos + 1; want <= total; want++ {
			if e := w.s.event(t); e.Seq != want {
				t.Fatalf("watcher %d from %d: got seq %d, want %d", i, pos, e.Seq, want)
			}
		}
	}
}

// A backlog of several pages is delivered whole, then the stream joins
// live and gets the next event.
func TestBacklogOfSeveralPagesIsDeliveredWholeAndJoinsLive(t *testing.T) {
	p := start(t, t.TempDir())
	const n = 3500 // three and a half 1000-event pages
	for i := 0; i < n; i += 500 {
		p.publishBatch(t, "long", i, 500, 20)
	}
	s := p.watch(t, "long", "?after=0", nil)
	if head, pos := s.hello(t); head != n || pos != 0 {
		t.Fatalf("hello head %d position %d", head, pos)
	}
	for want := int64(1); want <= n; want++ {
		e := s.event(t)
		var d struct{ I int64 }
		json.Unmarshal(e.Data, &d)
		if e.Seq != want || d.I != want-1 {
			t.Fatalf("got seq %d (i %d), want %d", e.Seq, d.I, want)
		}
	}
	seq := p.publish(t, "long", `"live"`)
	if e := s.event(t); e.Seq != seq || string(e.Data) != `"live"` {
		t.Fatalf("live event: %+v", e)
	}
}

// Last-Event-ID wins over after=: it is what a browser's reconnect sends
// with the original URL.
func TestLastEventIDBeatsAfter(t *testing.T) {
	p := start(t, t.TempDir())
	p.publishBatch(t, "resume", 0, 10, 0)
	s := p.watch(t, "resume", "?after=2", map[string]string{"Last-Event-ID": "7"})
	if head, pos := s.hello(t); head != 10 || pos != 7 {
		t.Fatalf("hello head %d position %d", head, pos)
	}
	for want := int64(8); want <= 10; want++ {
		if e := s.event(t); e.Seq != want {
			t.Fatalf("got %d, want %d", e.Seq, want)
		}
	}
	for _, bad := range []struct{ query, lastID string }{
		{"?after=-1", ""}, {"?after=x", ""}, {"?after=1", "abc"}, {"", "1.5"}, {"?after=99999999999999999999", ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, p.topicURL("resume", "watch")+bad.query, nil)
		if bad.lastID != "" {
			req.Header.Set("Last-Event-ID", bad.lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error struct{ Code string } }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error.Code != "invalid_position" {
			t.Errorf("%q / %q: %d %q", bad.query, bad.lastID, resp.StatusCode, e.Error.Code)
		}
	}
}

// Ten publishes with one idempotency key, released together, make one
// event: one answer 201, nine 200 duplicates of it.
func TestConcurrentPublishesWithOneKeyMakeOneEvent(t *testing.T) {
	p := start(t, t.TempDir())
	for _, header := range []string{"Idempotency-Key", "webhook-id"} {
		topic := "idem-" + strings.ToLower(header)
		gate := make(chan struct{})
		type answer struct {
			status int
			seq    int64
			dup    bool
		}
		answers := make(chan answer, 10)
		for i := 0; i < 10; i++ {
			go func() {
				req, _ := http.NewRequest(http.MethodPost, p.topicURL(topic, "notify"), strings.NewReader(`{"order":1}`))
				req.Header.Set(header, "key-1")
				<-gate
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answers <- answer{}
					return
				}
				defer resp.Body.Close()
				var a struct {
					Seq       int64
					Duplicate bool
				}
				json.NewDecoder(resp.Body).Decode(&a)
				answers <- answer{resp.StatusCode, a.Seq, a.Duplicate}
			}()
		}
		close(gate)
		created, dups := 0, 0
		for i := 0; i < 10; i++ {
			a := <-answers
			switch {
			case a.status == http.StatusCreated && !a.dup && a.seq == 1:
				created++
			case a.status == http.StatusOK && a.dup && a.seq == 1:
				dups++
			default:
				t.Fatalf("%s: unexpected answer %+v", header, a)
			}
		}
		events, head := p.readAll(t, topic)
		if created != 1 || dups != 9 || head != 1 || len(events) != 1 {
			t.Fatalf("%s: %d created, %d duplicates, head %d, %d events", header, created, dups, head, len(events))
		}
		_, err := p.client().Publish(context.Background(), "acme", topic, []byte(`{"order":2}`), client.PublishOptions{IdempotencyKey: "key-1"})
		if header == "Idempotency-Key" {
			if ae, ok := err.(*client.APIError); !ok || ae.Status != 422 || ae.Code != "idempotency_key_reused" {
				t.Fatalf("reuse: %v", err)
			}
		}
	}
}

// A position beyond the head is allowed: delivery starts when the topic
// gets there.
func TestPositionBeyondHeadWaitsForTheTopic(t *testing.T) {
	p := start(t, t.TempDir())
	p.publishBatch(t, "ahead", 0, 2, 0)
	s := p.watch(t, "ahead", "?after=5", nil)
	if head, pos := s.hello(t); head != 2 || pos != 5 {
		t.Fatalf("hello head %d position %d", head, pos)
	}
	p.publishBatch(t, "ahead", 2, 4, 0)
	if e := s.event(t); e.Seq != 6 {
		t.Fatalf("first event %d, want 6", e.Seq)
	}
}

// A silent stream gets heartbeat comments, and a stream whose client goes
// away is unregistered: the open-streams gauge goes back to zero.
func TestHeartbeatsAndCleanupWhenClientLeaves(t *testing.T) {
	p := start(t, t.TempDir(), "--heartbeat", "50ms")
	resp, err := http.Get(p.topicURL("quiet", "watch"))
	if err != nil {
		t.Fatal(err)
	}
	pings := make(chan string, 16)
	d := sse.NewDecoder(resp.Body)
	d.Comment = func(c string) {
		select {
		case pings <- c:
		default:
		}
	}
	go func() {
		for {
			if _, err := d.Next(); err != nil {
				return // the body was closed
			}
		}
	}()
	select {
	case c := <-pings:
		if c != "ping" {
			t.Fatalf("comment %q", c)
		}
	case <-time.After(wait):
		t.Fatal("no heartbeat")
	}
	others := make([]*stream, 4)
	for i := range others {
		others[i] = p.watch(t, "quiet", "", nil)
		others[i].hello(t)
	}
	if n := metric(t, p, "edgehub_streams_open"); n != 5 {
		t.Fatalf("%v streams open, want 5", n)
	}
	resp.Body.Close()
	for _, s := range others {
		s.close()
	}
	deadline := time.Now().Add(wait)
	for metric(t, p, "edgehub_streams_open") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("streams were not cleaned up after their clients left")
		}
		time.Sleep(10 * time.Millisecond) // polling the gauge until the server notices
	}
}

// An SSE client sends nothing after its request, and a stream's answer
// says Connection: close, so there is no next request to wait for: a byte
// from the client ends its stream as its leaving does, with the body's
// clean end (the last chunk) and the connection closed, and the stream's
// place under the limits is free again.
func TestAByteFromAWatcherEndsItsStream(t *testing.T) {
	p := start(t, t.TempDir(), "--max-tenant-streams", "1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /v1/tenants/acme/topics/chatty/watch HTTP/1.1\r\nHost: edgehub\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !resp.Close || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("answer %d, close %v, transfer-encoding %v; want 200, chunked, Connection: close",
			resp.StatusCode, resp.Close, resp.TransferEncoding)
	}
	d := sse.NewDecoder(resp.Body)
	if f, err := d.Next(); err != nil || f.Event != "hello" {
		t.Fatalf("first frame %+v, %v; want hello", f, err)
	}
	// The tenant's one stream is taken: a second is refused.
	second, err := http.Get(p.topicURL("other", "watch"))
	if err != nil {
		t.Fatal(err)
	}
	second.Body.Close()
	if second.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second stream of the tenant answered %d, want 429", second.StatusCode)
	}
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client's byte the stream gave %v; want the body's clean end", err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last chunk the connection gave %v; want it closed", err)
	}
	deadline := time.Now().Add(wait)
	for metric(t, p, "edgehub_streams_open") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream was not cleaned up after its client's byte")
		}
		time.Sleep(10 * time.Millisecond) // polling the gauge until the server has let go
	}
	s := p.watch(t, "other", "", nil) // its place under the limit is free again
	s.hello(t)
}
