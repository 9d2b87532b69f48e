package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/edgehub/edgehub/server"
)

// startTightServer is startServer whose connections have small kernel send
// buffers, as over a real network: a client that stops reading then
// blocks the server's writes after a few kilobytes, instead of loopback's
// autotuned buffers taking megabytes off the server's hands.
func startTightServer(t *testing.T, tweak func(*server.Config)) string {
	t.Helper()
	cfg := server.Defaults()
	cfg.Dev, cfg.Data = true, t.TempDir()
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Listener = tightListener{ts.Listener}
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background())
	})
	return ts.URL
}

type tightListener struct{ net.Listener }

func (l tightListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

const (
	kib = float64(1 << 10)
	mib = float64(1 << 20)
)

// waitUntil polls cond until it holds; the deadline is a hang guard, not a
// timing assertion.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stalled is a client that sends one GET on its own connection, with a
// receive buffer so small that the server's writes block at once, and
// never reads.
type stalled struct{ conn *net.TCPConn }

func openStalled(t *testing.T, base, path string) *stalled {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: edgehub\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return &stalled{conn: c.(*net.TCPConn)}
}

// queued is how many bytes of the answer wait in the client's receive
// queue: more than none means the server has started writing it.
func (s *stalled) queued(t *testing.T) int {
	t.Helper()
	rc, err := s.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		n, ierr = ioctlInt(fd, syscall.TIOCINQ)
	}); err != nil || ierr != nil {
		t.Fatalf("read the receive queue: %v %v", err, ierr)
	}
	return n
}

func ioctlInt(fd uintptr, req uintptr) (int, error) {
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func publishBig(t *testing.T, base, topic, query string, size int) {
	t.Helper()
	body := `"` + strings.Repeat("x", size-2) + `"`
	resp, err := http.Post(base+"/v1/tenants/t/topics/"+topic+"/notify"+query, "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish %d bytes: %v %v", size, resp, err)
	}
	resp.Body.Close()
}

// get reads a whole answer with a client that reads.
func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// R3: one large batch fans out to many live streams. Once it is delivered
// and the streams are idle, what they keep is small: a burst does not leave
// every stream holding a write buffer of --stream-buffer for life.
func TestLiveStreamsDoNotKeepABurstsBuffer(t *testing.T) {
	base := startServer(t, server.Hooks{}, nil)
	const streams, events = 64, 10000
	publish(t, base, "burst", `"first"`)
	done := make(chan error, streams)
	opened := make(chan struct{}, streams)
	for i := 0; i < streams; i++ {
		resp, err := http.Get(base + "/v1/tenants/t/topics/burst/watch")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		go func() {
			r := bufio.NewReader(resp.Body)
			last := fmt.Sprintf("id: %d\n", 1+events)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					done <- err
					return
				}
				if strings.HasPrefix(line, "event: hello") {
					opened <- struct{}{}
				}
				if line == last {
					done <- nil
					return
				}
			}
		}()
	}
	for i := 0; i < streams; i++ {
		<-opened
	}
	before := liveHeap()
	body := strings.Repeat(`{"pad":"`+strings.Repeat("x", 60)+`"}`+"\n", events)
	resp, err := http.Post(base+"/v1/tenants/t/topics/burst/notify", "application/x-ndjson", strings.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish batch: %v %v", resp, err)
	}
	resp.Body.Close()
	for i := 0; i < streams; i++ {
		if err := <-done; err != nil {
			t.Fatalf("a stream ended before the batch's last event: %v", err)
		}
	}
	after := liveHeap()
	per := (float64(after) - float64(before)) / streams / mib
	t.Logf("live heap %.1f MiB before the burst, %.1f MiB after it was delivered (%.3f MiB per stream)",
		float64(before)/mib, float64(after)/mib, per)
	if per > 0.25 {
		t.Fatalf("each idle stream keeps %.2f MiB after one burst; want under 0.25", per)
	}
}

// Streams that caught up from the backlog and then went live keep nothing
// of their catch-up: no page array, no taken queue, no write buffer grown
// to a page. Every reconnect with Last-Event-ID catches up first, so this
// is what most idle streams are. Measured against streams that never
// caught up (live from now), which the same heap holds.
func TestCaughtUpStreamsKeepNoPage(t *testing.T) {
	base := startServer(t, server.Hooks{}, nil)
	const streams, events = 64, 600
	body := strings.Repeat(`{"pad":"`+strings.Repeat("x", 60)+`"}`+"\n", events)
	resp, err := http.Post(base+"/v1/tenants/t/topics/old/notify", "application/x-ndjson", strings.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish batch: %v %v", resp, err)
	}
	resp.Body.Close()
	// open starts streams at query and returns once each has read up to
	// the line want.
	open := func(query, want string) {
		done := make(chan error, streams)
		for i := 0; i < streams; i++ {
			resp, err := http.Get(base + "/v1/tenants/t/topics/old/watch" + query)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			go func() {
				r := bufio.NewReader(resp.Body)
				for {
					line, err := r.ReadString('\n')
					if err != nil || strings.HasPrefix(line, want) {
						done <- err
						return
					}
				}
			}()
		}
		for i := 0; i < streams; i++ {
			if err := <-done; err != nil {
				t.Fatalf("a stream ended before %q: %v", want, err)
			}
		}
	}
	before := liveHeap()
	open("", "event: hello")
	live := liveHeap()
	// A page's array goes with its last event, before that is written.
	open("?after=0", fmt.Sprintf("id: %d\n", events))
	caught := liveHeap()
	perLive := (float64(live) - float64(before)) / streams / kib
	perCaught := (float64(caught) - float64(live)) / streams / kib
	t.Logf("live heap per stream: %.1f KiB live from now, %.1f KiB caught up from %d events", perLive, perCaught, events)
	if perCaught > perLive+8 {
		t.Fatalf("each caught-up stream keeps %.1f KiB, %.1f more than a live one; want at most 8 more", perCaught, perCaught-perLive)
	}
}

// R4: many streams catch up from a backlog of kilobyte events, and their
// clients stop reading. Each holds a catch-up page bounded in bytes (and its
// write buffer), not up to 1000 events of it.
func TestStalledCatchUpStreamsHoldLittle(t *testing.T) {
	base := startTightServer(t, func(c *server.Config) { c.MaxBody = 8 << 20 })
	var b strings.Builder
	for i := 0; i < 1200; i++ {
		fmt.Fprintf(&b, "{\"i\":%d,\"pad\":%q}\n", i, strings.Repeat("x", 4000))
	}
	resp, err := http.Post(base+"/v1/tenants/t/topics/kb/notify", "application/x-ndjson", strings.NewReader(b.String()))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish batch: %v %v", resp, err)
	}
	resp.Body.Close()
	b = strings.Builder{}
	before := liveHeap()
	const streams = 40
	clients := make([]*stalled, streams)
	for i := range clients {
		clients[i] = openStalled(t, base, "/v1/tenants/t/topics/kb/watch?after=0")
	}
	// More than hello in a client's queue: its stream has read a page and
	// is writing it, blocked on a client that does not read.
	for _, c := range clients {
		waitUntil(t, "every stream writes events", func() bool { return c.queued(t) > 1024 })
	}
	after := liveHeap()
	per := (float64(after) - float64(before)) / streams / mib
	t.Logf("live heap %.1f MiB before, %.1f MiB with %d stalled catch-up streams (%.3f MiB per stream)",
		float64(before)/mib, float64(after)/mib, streams, per)
	if per > 1 {
		t.Fatalf("each stalled catch-up stream holds %.2f MiB; want under 1", per)
	}
}

// A read answer holds about 1 MiB of event data however large the topic's
// events are; next_after says where to go on, and paging on gets them all.
func TestReadAnswerIsBoundedInBytes(t *testing.T) {
	base := startServer(t, server.Hooks{}, nil)
	for i := 0; i < 8; i++ {
		publishBig(t, base, "big", "", 512<<10)
	}
	var seqs []int64
	for after := int64(0); ; {
		resp, body := get(t, fmt.Sprintf("%s/v1/tenants/t/topics/big/events?after=%d&limit=1000", base, after))
		var a struct {
			Events []struct {
				Seq  int64
				Data json.RawMessage
			}
			Head      int64
			NextAfter int64 `json:"next_after"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &a) != nil {
			t.Fatalf("read after %d: %d %.200s", after, resp.StatusCode, body)
		}
		if len(a.Events) == 0 {
			break
		}
		data := 0
		for _, e := range a.Events {
			data += len(e.Data)
			seqs = append(seqs, e.Seq)
		}
		if data > 1<<20 || len(body) > 1<<20+4096 {
			t.Fatalf("an answer of %d bytes holds %d events with %d bytes of data; want at most 1 MiB", len(body), len(a.Events), data)
		}
		if a.NextAfter != a.Events[len(a.Events)-1].Seq || a.Head != 8 {
			t.Fatalf("next_after %d, head %d after events up to %d", a.NextAfter, a.Head, a.Events[len(a.Events)-1].Seq)
		}
		after = a.NextAfter
	}
	if len(seqs) != 8 || seqs[7] != 8 {
		t.Fatalf("paging got %v", seqs)
	}
}

// With the spool budget held by an answer whose client does not read, a
// read of events, a read of the state and a snapshot stream, which would
// spool as much, are 429 overloaded with Retry-After, and nothing stored
// changes; once that client goes away its bytes are free again.
func TestSpoolBudgetRefusesWhenHeld(t *testing.T) {
	base := startTightServer(t, func(c *server.Config) { c.MaxSpoolBytes, c.TenantShare = 3<<19, 1 }) // 1.5 MiB
	for i := 0; i < 4; i++ {
		publishBig(t, base, "big", "", 512<<10)
		publishBig(t, base, "kv", fmt.Sprintf("?key=k%d", i), 256<<10)
	}
	_, state := get(t, base+"/v1/tenants/t/topics/kv/state")
	a := openStalled(t, base, "/v1/tenants/t/topics/big/events?after=0")
	waitUntil(t, "the stalled answer is being written", func() bool { return a.queued(t) > 0 })
	for _, path := range []string{"/big/events?after=0", "/kv/state", "/kv/watch?snapshot=1"} {
		resp, body := get(t, base+"/v1/tenants/t/topics"+path)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || errorCode(t, body) != "overloaded" {
			t.Fatalf("%s with the budget held: %d Retry-After %q %.200s", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	a.conn.Close()
	waitUntil(t, "the budget is free again", func() bool {
		resp, _ := get(t, base+"/v1/tenants/t/topics/big/events?after=0")
		return resp.StatusCode == http.StatusOK
	})
	if _, again := get(t, base+"/v1/tenants/t/topics/kv/state"); string(again) != string(state) {
		t.Fatalf("the state changed: %.100s, was %.100s", again, state)
	}
	resp, body := get(t, base+"/v1/tenants/t/topics/big/events?after=8")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"head":4`) {
		t.Fatalf("the head changed: %.200s", body)
	}
}

// With the read budget held in memory by a catching-up stream whose client
// does not read, a read of events, whose page is read into memory, is 429
// overloaded with Retry-After; a read of the state and a snapshot stream,
// which keep only a piece in memory and the rest on disk, are still
// answered. Once the stream's client goes away its bytes are free again.
func TestReadBudgetRefusesWhenHeld(t *testing.T) {
	base := startTightServer(t, func(c *server.Config) { c.MaxReadBytes, c.TenantShare = 3<<19, 1 }) // 1.5 MiB
	for i := 0; i < 4; i++ {
		publishBig(t, base, "big", "", 512<<10)
		publishBig(t, base, "kv", fmt.Sprintf("?key=k%d", i), 256<<10)
	}
	_, state := get(t, base+"/v1/tenants/t/topics/kv/state")
	a := openStalled(t, base, "/v1/tenants/t/topics/big/watch?after=0")
	waitUntil(t, "the stalled stream is being written", func() bool { return a.queued(t) > 0 })
	waitUntil(t, "the stalled stream holds a page", func() bool {
		resp, _ := get(t, base+"/v1/tenants/t/topics/big/events?after=0")
		return resp.StatusCode == http.StatusTooManyRequests
	})
	resp, body := get(t, base+"/v1/tenants/t/topics/big/events?after=0")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || errorCode(t, body) != "overloaded" {
		t.Fatalf("/events with the budget held: %d Retry-After %q %.200s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if _, again := get(t, base+"/v1/tenants/t/topics/kv/state"); string(again) != string(state) {
		t.Fatalf("/state with the memory budget held: %.100s, want %.100s", again, state)
	}
	snap := openFrames(t, base, "/v1/tenants/t/topics/kv/watch?snapshot=1")
	next(t, snap) // hello
	if f := next(t, snap); f.Event != "snapshot" || f.Data != strings.TrimSpace(string(state)) {
		t.Fatalf("the snapshot with the memory budget held: %s %.100s", f.Event, f.Data)
	}
	a.conn.Close()
	waitUntil(t, "the budget is free again", func() bool {
		resp, _ := get(t, base+"/v1/tenants/t/topics/big/events?after=0")
		return resp.StatusCode == http.StatusOK
	})
}

// A read answer whose client never reads is ended by the write deadline:
// its handler returns and its bytes go back to the budget while the client
// is still connected, so a read that needs them is then answered.
func TestWriteDeadlineEndsAStalledReadAnswer(t *testing.T) {
	base := startTightServer(t, func(c *server.Config) {
		c.MaxReadBytes, c.WriteTimeout = 3<<19, 300*time.Millisecond
	})
	for i := 0; i < 4; i++ {
		publishBig(t, base, "big", "", 512<<10)
	}
	a := openStalled(t, base, "/v1/tenants/t/topics/big/events?after=0")
	waitUntil(t, "the stalled answer is being written", func() bool { return a.queued(t) > 0 })
	// An /events answer takes the bytes of the largest answer before it
	// reads, so a read of an empty topic, whose answer is tiny and can
	// never meet the short write timeout, is admitted only once they are
	// free.
	waitUntil(t, "the stalled answer's bytes are free again", func() bool {
		resp, _ := get(t, base+"/v1/tenants/t/topics/empty/events?after=0")
		return resp.StatusCode == http.StatusOK
	})
	// The server gave up on the answer: after what was queued, the
	// connection ends without the rest of it.
	a.conn.SetReadDeadline(time.Now().Add(wait))
	got, _ := io.ReadAll(a.conn)
	if len(got) >= 1<<20 {
		t.Fatalf("the stalled client got %d bytes, the whole answer", len(got))
	}
}

// A read answer must keep being read: after answerGrace, at least
// answerRate bytes a second on average. One whose client stops reading is
// ended then, well within the write timeout (a minute here), and gives
// back its bytes, on disk and in memory, while its client is still
// connected.
func TestAStalledAnswerEndsAtTheMinimumPace(t *testing.T) {
	base := startTightServer(t, func(c *server.Config) { c.WriteTimeout = time.Minute })
	for i := 0; i < 4; i++ {
		publishBig(t, base, "big", "", 512<<10)
	}
	a := openStalled(t, base, "/v1/tenants/t/topics/big/events?after=0")
	waitUntil(t, "the stalled answer is being written", func() bool { return a.queued(t) > 0 })
	if heldBytes(t, base, "spooled_answers") == 0 {
		t.Fatal("a 1 MiB answer holds nothing on disk")
	}
	// The hang guard is longer than answerGrace, and shorter than the
	// write timeout.
	for deadline := time.Now().Add(answerGraceForTests + wait); heldBytes(t, base, "spooled_answers") != 0 || heldBytes(t, base, "read_answers") != 0; {
		if time.Now().After(deadline) {
			t.Fatal("a stalled answer still holds its bytes past the minimum pace")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answerGraceForTests is httpapi's answerGrace.
const answerGraceForTests = 10 * time.Second
