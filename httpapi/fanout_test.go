package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/metrics"
	"github.com/edgehub/edgehub/selector"
	"github.com/edgehub/edgehub/sse"
)

// poolHarness is a hub on SQLite, a server that holds nothing but the
// configuration and metrics the pool's streams read, and a writer whose
// goroutine does not run: each test plays the writer (runQueue, or begin,
// serve and end) and the streams' own goroutines itself, step by step.
type poolHarness struct {
	t      *testing.T
	router *hub.Router
	s      *Server
	w      *writer
	store  *backlog.Store
	logger *slog.Logger
	// handed gets the streams the writer or the parker hands to a
	// goroutine of their own, which the test plays.
	handed chan *sseStream
}

func newPoolHarness(t *testing.T) *poolHarness {
	t.Helper()
	return newPoolHarnessBuffered(t, 4<<20)
}

// newPoolHarnessBuffered has the hub demote a live stream that queues
// more than streamBuffer bytes.
func newPoolHarnessBuffered(t *testing.T, streamBuffer int) *poolHarness {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := backlog.OpenSQLite(context.Background(), t.TempDir(), logger, backlog.SyncNormal)
	if err != nil {
		t.Fatal(err)
	}
	committer := backlog.NewCommitter(store, backlog.CommitterOptions{})
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	router, err := hub.NewRouter(sys, hub.Options{
		Log: store, Committer: committer, Logger: logger, StreamBuffer: streamBuffer, IdleTicks: 1000,
		Framing: hub.Framing{Start: sse.AppendEventStart, End: sse.FrameEnd},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		router.Stop()
		committer.Close()
		sys.Shutdown()
		store.Close()
	})
	s := &Server{cfg: Config{Heartbeat: time.Hour, WriteTimeout: time.Minute}, deps: Deps{Metrics: metrics.New()}}
	p, err := newParker(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h := &poolHarness{t: t, router: router, s: s, w: newWriter(p), store: store, logger: logger, handed: make(chan *sseStream, 16)}
	p.handBack = func(st *sseStream) { h.handed <- st }
	t.Cleanup(func() {
		if h.w.parker == p {
			p.close()
		}
	})
	return h
}

// runParker runs the harness's parker, looking for heartbeats every
// apart.
func (h *poolHarness) runParker(every time.Duration) {
	p := h.w.parker
	h.w.parker = nil // stopped, not closed, at the end
	p.every = every
	go p.loop()
	h.t.Cleanup(p.stop)
	h.w.parker = p
}

// handedBack is the stream the writer or the parker handed to a
// goroutine of its own, within the hang guard.
func (h *poolHarness) handedBack() *sseStream {
	h.t.Helper()
	select {
	case st := <-h.handed:
		return st
	case <-time.After(hangGuard):
		h.t.Fatal("no stream was handed to a goroutine of its own")
		return nil
	}
}

// serve replaces the harness's server with a whole one over its hub, in
// dev mode, on a loopback listener whose connections have 8 KiB send
// buffers, and returns its address: streams are taken over and written
// by its own pool.
func (h *poolHarness) serve() string {
	h.t.Helper()
	return h.serveWith(time.Hour)
}

// serveWith is serve with heartbeats after heartbeat of silence.
func (h *poolHarness) serveWith(heartbeat time.Duration) string {
	h.t.Helper()
	cfg := Config{Dev: true, Heartbeat: heartbeat, Retry: 2 * time.Second, WriteTimeout: time.Minute, MaxBody: 1 << 20}
	h.s = New(cfg, Deps{Log: h.store, Tenants: h.store, Limits: limits.New(limits.Config{}), Hubs: h.router,
		Metrics: metrics.New(), Logger: h.logger}, Hooks{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &http.Server{Handler: h.s.Handler()}
	go srv.Serve(tightListener{ln})
	h.t.Cleanup(func() {
		srv.Close()
		h.s.EndStreams()
	})
	return ln.Addr().String()
}

type tightListener struct{ net.Listener }

func (l tightListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// watch opens a stream of t/x at addr on a connection whose receive
// buffer is 4 KiB, reads its head and hello, and returns the connection
// and its chunks.
func watchRaw(t *testing.T, addr string) (net.Conn, *chunks) {
	t.Helper()
	return getRaw(t, addr, "/v1/tenants/t/topics/x/watch")
}

// getRaw is watchRaw for any stream's path.
func getRaw(t *testing.T, addr, path string) (net.Conn, *chunks) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: edgehub\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	r := readChunks(t, c)
	c.SetReadDeadline(time.Now().Add(hangGuard))
	for {
		line, err := r.r.ReadString('\n')
		if err != nil {
			t.Fatalf("read the answer's head: %v", err)
		}
		if line == "\r\n" {
			break
		}
	}
	if ids, ok := r.next(c); !ok || len(ids) != 1 || !strings.HasPrefix(ids[0], "retry: ") {
		t.Fatalf("the stream began with %v, not its hello", ids)
	}
	return c, r
}

// states is how many of the server's open streams are in each state.
func (h *poolHarness) states() map[int32]int {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	n := map[int32]int{}
	for st := range h.s.streams {
		n[st.state.Load()]++
	}
	return n
}

// stream is a live stream of t/x on the server's end of a loopback
// connection, written by the harness's writer, and the client's end.
func (h *poolHarness) stream(cw *connWire) *sseStream {
	h.t.Helper()
	sub, err := h.router.Watch(context.Background(), "t", "x", hub.From{Now: true})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(sub.Close)
	st := &sseStream{s: h.s, sub: topicSource{sub}, topicSub: sub, wire: cw, cw: cw, w: h.w, parker: h.w.parker}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	h.t.Cleanup(st.cancel)
	sub.OnReady(st.wake)
	return st
}

// publish commits one event to t/x and returns its number. The hub
// answers before it pushes: the push may come a moment later.
func (h *poolHarness) publish(data string) int64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	res, err := h.router.Publish(&backlog.Publish{Tenant: "t", Topic: "x",
		Events: []event.Event{{Type: "message", Data: json.RawMessage(data)}}}).Wait(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return res.First
}

// until polls cond; the deadline is a hang guard, not a timing.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// pop takes the one stream queued, as runQueue does, for a test that
// runs it step by step.
func (h *poolHarness) pop(st *sseStream) {
	h.t.Helper()
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if len(h.w.queue) != 1 || h.w.queue[0] != st {
		h.t.Fatalf("%d streams queued, want the one", len(h.w.queue))
	}
	h.w.queue = h.w.queue[:0]
}

func (h *poolHarness) queued() int {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return len(h.w.queue)
}

// chunks reads the client's end as a chunked body and hands out the SSE
// frames it carries, checking that every chunk is whole and that each
// holds whole frames: the pool writes nothing else.
type chunks struct {
	t *testing.T
	r *bufio.Reader
}

func readChunks(t *testing.T, c net.Conn) *chunks {
	return &chunks{t: t, r: bufio.NewReaderSize(c, 1<<20)}
}

// next reads one chunk under the hang guard and returns its frames' ids
// ("ping" for a heartbeat); ok is false at the last chunk.
func (c *chunks) next(conn net.Conn) (ids []string, ok bool) {
	c.t.Helper()
	ids, ok, err := c.read(conn)
	if err != nil {
		c.t.Fatal(err)
	}
	return ids, ok
}

// read is next for a goroutine other than the test's: it says what is
// wrong instead of failing the test.
func (c *chunks) read(conn net.Conn) (ids []string, ok bool, err error) {
	conn.SetReadDeadline(time.Now().Add(hangGuard))
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, false, fmt.Errorf("read a chunk's size: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(line, "\r\n"), 16, 64)
	if err != nil {
		return nil, false, fmt.Errorf("chunk size %q: %w", line, err)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, false, fmt.Errorf("read a chunk of %d bytes: %w", n, err)
	}
	if !bytes.HasSuffix(body, crlf) {
		return nil, false, errors.New("a chunk does not end with CRLF")
	}
	if n == 0 {
		return nil, false, nil
	}
	for _, f := range strings.SplitAfter(string(body[:n]), "\n\n") {
		switch {
		case f == "":
		case !strings.HasSuffix(f, "\n\n"):
			return nil, false, fmt.Errorf("a chunk ends inside a frame: %q", f[:min(len(f), 80)])
		case f == ": ping\n\n":
			ids = append(ids, "ping")
		default:
			id, _, _ := strings.Cut(strings.TrimPrefix(f, "id: "), "\n")
			ids = append(ids, id)
		}
	}
	return ids, true, nil
}

// inOrder reads frames until events 1 to last have come, each once and in
// order (heartbeats aside), pausing after each chunk if slow, and says
// what went wrong.
func (c *chunks) inOrder(conn net.Conn, last int64, slow bool) error {
	next := int64(1)
	for next <= last {
		ids, ok, err := c.read(conn)
		if err != nil || !ok {
			return fmt.Errorf("the stream ended at %d: %v", next, err)
		}
		for _, id := range ids {
			if id == "ping" {
				continue
			}
			if id != fmt.Sprint(next) {
				return fmt.Errorf("got event %s, want %d", id, next)
			}
			next++
		}
		if slow {
			time.Sleep(2 * time.Millisecond) // a slow reader, not a timing
		}
	}
	return nil
}

// A push signalled just before its stream's own goroutine gives the
// stream to the pool finds the stream its own goroutine's, which is not
// waiting for it, and only wakes that goroutine's wait: enterPool must
// take the signal and schedule the stream, or the event waits for the
// next push or heartbeat.
func TestAPushAsAStreamEntersThePoolIsWritten(t *testing.T) {
	h := newPoolHarness(t)
	cw, client := connPair(t)
	st := h.stream(cw)
	seq := h.publish(`"as it enters"`)
	until(t, "the push is signalled", func() bool { return len(st.sub.Ready()) == 1 })
	if st.state.Load() != byOwn || h.queued() != 0 {
		t.Fatal("a push to a stream that is its own goroutine's went to the pool")
	}
	st.enterPool()
	if h.queued() != 1 || st.state.Load() != queued {
		t.Fatalf("the event pushed as the stream entered the pool was not scheduled (state %d, %d queued)", st.state.Load(), h.queued())
	}
	h.w.runQueue()
	if ids, _ := readChunks(t, client).next(client); len(ids) != 1 || ids[0] != fmt.Sprint(seq) {
		t.Fatalf("the pool wrote %v, want event %d", ids, seq)
	}
}

// A push signalled while the writer runs the stream, after it took the
// stream's queue, is not lost: the stream is queued again when the run
// ends, and the next run writes it.
func TestAPushWhileItsWriterRunsTheStreamIsWritten(t *testing.T) {
	h := newPoolHarness(t)
	cw, client := connPair(t)
	st := h.stream(cw)
	st.enterPool()
	first := h.publish(`"first"`)
	until(t, "the stream is queued", func() bool { return st.state.Load() == queued })
	h.pop(st)
	if !h.w.begin(st) {
		t.Fatal("the writer could not begin a queued stream")
	}
	back := h.w.serve(st)
	second := h.publish(`"while it runs"`)
	until(t, "the push is signalled to the running stream", func() bool { return st.state.Load() == runAgain })
	h.w.end(st, back)
	if st.state.Load() != queued || h.queued() != 1 {
		t.Fatalf("the event pushed while the writer ran the stream was left unwritten (state %d, %d queued)", st.state.Load(), h.queued())
	}
	h.w.runQueue()
	r := readChunks(t, client)
	var got []string
	for len(got) < 2 {
		ids, _ := r.next(client)
		got = append(got, ids...)
	}
	if want := []string{fmt.Sprint(first), fmt.Sprint(second)}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the pool wrote %v, want %v", got, want)
	}
	if st.state.Load() != inPool {
		t.Fatalf("after its runs the stream is in state %d, want inPool", st.state.Load())
	}
}

// A stream taken back from the pool (its client left, the server ends)
// while its writer runs it is handed to a goroutine of its own only when
// the run ends: two goroutines would hand out its subscription at once.
func TestATakeBackWhileItsWriterRunsTheStreamWaitsForTheRun(t *testing.T) {
	h := newPoolHarness(t)
	cw, _ := connPair(t)
	st := h.stream(cw)
	st.enterPool()
	h.publish(`"e"`)
	until(t, "the stream is queued", func() bool { return st.state.Load() == queued })
	h.pop(st)
	if !h.w.begin(st) {
		t.Fatal("the writer could not begin a queued stream")
	}
	if st.takeBack() {
		t.Fatal("takeBack took the stream while its writer ran it")
	}
	if len(h.handed) != 0 {
		t.Fatal("a stream was handed to a goroutine while its writer ran it")
	}
	h.w.end(st, h.w.serve(st))
	if got := h.handedBack(); got != st || st.state.Load() != byOwn {
		t.Fatalf("after its run the taken stream is in state %d, want byOwn and handed back", st.state.Load())
	}
	if st.takeBack() {
		t.Fatal("a stream its own goroutine has was taken back again")
	}
	// Queued again and taken back before its run, it is passed by.
	st.enterPool()
	h.publish(`"f"`)
	until(t, "the stream is queued", func() bool { return st.state.Load() == queued })
	h.pop(st)
	if !st.takeBack() || h.w.begin(st) {
		t.Fatal("a stream taken back on its writer's queue was run")
	}
}

// The parker sees a client leave at the worst moment: after the stream's
// goroutine armed its connection, before it put the stream in the pool,
// so the parker finds the stream still the goroutine's and cannot take
// it. park must see it and keep the stream, not leave it parked with no
// one to end it.
func TestAClientLeavingAsItsStreamParksIsNoticed(t *testing.T) {
	h := newPoolHarness(t)
	h.runParker(time.Hour)
	cw, client := connPair(t)
	st := h.stream(cw)
	cw.parking = func() {
		cw.parking = nil
		client.Close()
		until(t, "the parker sees the client leave", st.gone.Load)
	}
	h.keptAsItParks(st, "whose client left")
}

// EndStreams at the same moment: the server's end, stored before it
// takes the stream back, is seen by park.
func TestEndStreamsAsAStreamParksIsNoticed(t *testing.T) {
	h := newPoolHarness(t)
	cw, _ := connPair(t)
	st := h.stream(cw)
	cw.parking = func() {
		cw.parking = nil
		st.cancel()
		st.ending(time.Now().Add(endGrace))
	}
	h.keptAsItParks(st, "the server ended")
}

// keptAsItParks parks st, whose parking hook makes it (what) at the worst
// moment, and fails unless park keeps the stream for its goroutine alone.
func (h *poolHarness) keptAsItParks(st *sseStream, what string) {
	h.t.Helper()
	parked, err := st.park()
	if parked || err != nil {
		h.t.Fatalf("park gave %v, %v for a stream %s as it parked; want the stream kept", parked, err, what)
	}
	if st.state.Load() != byOwn || len(h.handed) != 0 {
		h.t.Fatalf("the stream is in state %d, %d handed back; want its goroutine's alone", st.state.Load(), len(h.handed))
	}
}

// A client that leaves a parked stream is noticed by the parker, which
// hands the stream to a goroutine that ends it; so does EndStreams.
func TestAParkedStreamIsTakenBackWhenItsClientLeaves(t *testing.T) {
	h := newPoolHarness(t)
	h.runParker(time.Hour)
	cw, client := connPair(t)
	st := h.stream(cw)
	if parked, err := st.park(); !parked || err != nil {
		t.Fatalf("park gave %v, %v; want the stream parked", parked, err)
	}
	client.Close()
	if got := h.handedBack(); got != st || !st.gone.Load() || st.state.Load() != byOwn {
		t.Fatalf("the parker handed back a stream in state %d, gone %v", st.state.Load(), st.gone.Load())
	}
	cw2, _ := connPair(t)
	st2 := h.stream(cw2)
	if parked, err := st2.park(); !parked || err != nil {
		t.Fatalf("park gave %v, %v; want the stream parked", parked, err)
	}
	st2.cancel()
	st2.ending(time.Now().Add(endGrace))
	if got := h.handedBack(); got != st2 || st2.state.Load() != byOwn {
		t.Fatal("EndStreams did not hand a parked stream to a goroutine that ends it")
	}
}

// tightPair is connPair with small kernel buffers (8 KiB to send on the
// server's end, 4 KiB to receive on the client's), as over a real
// network: a client that stops reading fills them with a few kilobytes.
func tightPair(t *testing.T) (*connWire, net.Conn) {
	t.Helper()
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	return pairOf(t, d, 8<<10)
}

// runQueueGuarded runs the writer's queue on a goroutine and fails if it
// has not returned by the hang guard: a writer held by one stream.
func runQueueGuarded(t *testing.T, w *writer, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		w.runQueue()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal(what)
	}
}

// A client that does not read fills its socket; the pool's write to it
// takes what fits and returns, the writer goes on to the next stream at
// once, and the stream goes back to its own goroutine with the rest of
// its chunk, at most that chunk, which it writes whole once the client
// reads again.
func TestAFullSocketHandsItsStreamBackAndHoldsNoWriter(t *testing.T) {
	h := newPoolHarness(t)
	slowWire, slowClient := tightPair(t)
	slow := h.stream(slowWire)
	fastWire, fastClient := connPair(t)
	fast := h.stream(fastWire)
	slow.enterPool()
	fast.enterPool()
	big := `"` + strings.Repeat("x", 256<<10) + `"`
	seq := h.publish(big)
	until(t, "both streams are queued", func() bool { return h.queued() == 2 })
	fastFrames := make(chan []string, 1)
	go func() {
		ids, _, err := readChunks(t, fastClient).read(fastClient)
		if err != nil {
			ids = []string{err.Error()}
		}
		fastFrames <- ids
	}()
	runQueueGuarded(t, h.w, "a full socket held its writer: the writer did not return to its other streams")
	if ids := <-fastFrames; len(ids) != 1 || ids[0] != fmt.Sprint(seq) {
		t.Fatalf("the other stream got %v, want event %d", ids, seq)
	}
	if slow.state.Load() != byOwn || len(slowWire.rest) == 0 {
		t.Fatalf("the stream whose socket is full is in state %d with %d pieces left; want its own goroutine's, with the rest", slow.state.Load(), len(slowWire.rest))
	}
	left := 0
	for _, p := range slowWire.rest {
		left += len(p)
	}
	if chunk := len(big) + 200; left > chunk {
		t.Fatalf("the pool left %d bytes for the stream's own goroutine, more than its one chunk (%d)", left, chunk)
	}
	got := make(chan []string, 1)
	go func() {
		ids, _, err := readChunks(t, slowClient).read(slowClient)
		if err != nil {
			ids = []string{err.Error()}
		}
		got <- ids
	}()
	if err := slow.finish(); err != nil {
		t.Fatal(err)
	}
	if ids := <-got; len(ids) != 1 || ids[0] != fmt.Sprint(seq) {
		t.Fatalf("the slow stream got %v, want event %d whole", ids, seq)
	}
	if slowWire.broken || slowWire.rest != nil {
		t.Fatal("a finished chunk left the stream broken, or something to write")
	}
}

// A chunk the socket took partway is cut until finished: a stream that
// ends then sends no last chunk, which would land inside the cut one and
// make the client take the half frame before it for a whole one.
func TestAfterACutPoolWriteTheStreamEndsWithoutALastChunk(t *testing.T) {
	h := newPoolHarness(t)
	cw, client := tightPair(t)
	st := h.stream(cw)
	st.enterPool()
	h.publish(`"` + strings.Repeat("x", 256<<10) + `"`)
	until(t, "the stream is queued", func() bool { return h.queued() == 1 })
	runQueueGuarded(t, h.w, "a full socket held its writer")
	if len(cw.rest) == 0 {
		t.Fatal("a 256 KiB chunk fit in the socket whole")
	}
	cw.end()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasSuffix(got, lastChunk) {
		t.Fatalf("the stream ended with the last chunk after %d bytes of a cut one", len(got))
	}
}

// A parked stream gets its heartbeats from its writer, which the parker
// asks for when they fall due.
func TestAParkedStreamGetsItsHeartbeats(t *testing.T) {
	h := newPoolHarness(t)
	h.s.cfg.Heartbeat = 20 * time.Millisecond
	h.runParker(5 * time.Millisecond)
	go h.w.loop()
	t.Cleanup(func() { close(h.w.quit) })
	cw, client := connPair(t)
	st := h.stream(cw)
	st.wrote.Store(time.Now().UnixNano())
	if parked, err := st.park(); !parked || err != nil {
		t.Fatalf("park gave %v, %v; want the stream parked", parked, err)
	}
	r := readChunks(t, client)
	for range 3 {
		if ids, _ := r.next(client); len(ids) != 1 || ids[0] != "ping" {
			t.Fatalf("a parked stream got %v, want a heartbeat", ids)
		}
	}
	if len(h.handed) != 0 {
		t.Fatal("a heartbeat handed a parked stream to a goroutine")
	}
	if !st.takeBack() { // the writer runs it: it is handed back after
		h.handedBack()
	}
}

// A pool write allocates nothing: its pieces and its callback are the
// writer's, made once.
func TestAPoolWriteAllocatesNothing(t *testing.T) {
	h := newPoolHarness(t)
	cw, client := connPair(t)
	go io.Copy(io.Discard, client)
	frame := sse.AppendEvent(nil, &event.Event{Seq: 1, Type: "message"}, []byte(`{}`))
	parts := [][]byte{frame, frame}
	write := func() {
		if all, err := cw.tryWrite(h.w, parts); !all || err != nil {
			t.Fatalf("a small write to a reading client: all %v, %v", all, err)
		}
	}
	write()
	if n := testing.AllocsPerRun(100, write); n != 0 {
		t.Fatalf("a pool write allocates %.1f times; want none", n)
	}
}

// A pool write to a socket that is full already takes nothing and
// returns at once, keeping the whole chunk for the stream's own
// goroutine: the kernel's EAGAIN comes back instead of a wait. The test
// writes to a client that does not read until a write takes nothing
// (the last bytes a full socket takes may join its last packet).
func TestAPoolWriteToAFullSocketReturnsAtOnce(t *testing.T) {
	h := newPoolHarness(t)
	cw, _ := tightPair(t)
	frame := bytes.Repeat([]byte("x"), 16<<10)
	chunk := len("4000\r\n") + len(frame) + len(crlf)
	done := make(chan error, 1)
	go func() {
		for range 1000 {
			cw.rest, cw.broken = nil, false
			all, err := cw.tryWrite(h.w, [][]byte{frame})
			if err != nil || all {
				continue
			}
			left := 0
			for _, p := range cw.rest {
				left += len(p)
			}
			if left == chunk {
				done <- nil
				return
			}
		}
		done <- errors.New("no write to a client that does not read ever took nothing")
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		cw.conn.Close()
		t.Fatal("a pool write to a full socket waited for room")
	}
	if cw.broken {
		t.Fatal("a write that took nothing broke the body")
	}
}

// EndStreams ends the streams in the pool, cleanly (the last chunk after
// the last whole one), and a stream whose own goroutine is finishing what
// a pool write left to a client that does not read, within the server's
// end; it waits for them all.
func TestEndStreamsEndsPooledStreams(t *testing.T) {
	h := newPoolHarness(t)
	addr := h.serve()
	type client struct {
		c net.Conn
		r *chunks
	}
	var readers []client
	for range 4 {
		c, r := watchRaw(t, addr)
		readers = append(readers, client{c, r})
	}
	watchRaw(t, addr) // never reads again
	seq := h.publish(`"` + strings.Repeat("x", 256<<10) + `"`)
	for _, c := range readers {
		if ids, _ := c.r.next(c.c); len(ids) != 1 || ids[0] != fmt.Sprint(seq) {
			t.Fatalf("a reader got %v, want event %d", ids, seq)
		}
	}
	until(t, "the readers' streams are in the pool and the stalled one is its own goroutine's", func() bool {
		n := h.states()
		return n[inPool] == 4 && n[byOwn] == 1
	})
	done := make(chan struct{})
	go func() {
		h.s.EndStreams()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("EndStreams did not return: a stream in the pool was not ended")
	}
	for _, c := range readers {
		if ids, ok := c.r.next(c.c); ok {
			t.Fatalf("a pooled stream got %v after EndStreams, want its last chunk", ids)
		}
	}
}

// Every stream gets every event after its position exactly once and in
// order, through the pool, whether its client keeps up, reads slowly
// (its writes hand it back with the rest of a chunk), or falls so far
// behind that the hub demotes it and it catches up from the backlog
// before it joins the pool again.
func TestEveryPooledStreamGetsEveryEventOnceInOrder(t *testing.T) {
	h := newPoolHarnessBuffered(t, 256<<10)
	addr := h.serve()
	const streams, events = 12, 150
	type client struct {
		c    net.Conn
		r    *chunks
		slow bool
	}
	var clients []client
	for i := range streams {
		c, r := watchRaw(t, addr)
		clients = append(clients, client{c, r, i%3 == 0})
	}
	errs := make(chan error, streams)
	for _, c := range clients {
		go func() { errs <- c.r.inOrder(c.c, events, c.slow) }()
	}
	for i := range events {
		size := 200
		if i%5 == 0 {
			size = 40 << 10
		}
		h.publish(`"` + strings.Repeat("x", size) + `"`)
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Idle streams hold no goroutine: a server holding 200 live streams with
// nothing to write runs no more goroutines than before they opened; and
// the parker notices clients that leave parked streams, whose streams
// are released long before a heartbeat (an hour here) would find them.
func TestParkedStreamsHoldNoGoroutineAndAreReleasedWhenTheirClientsLeave(t *testing.T) {
	h := newPoolHarness(t)
	addr := h.serve()
	watchRaw(t, addr) // starts the pool's goroutines
	until(t, "the first stream parks", func() bool { return h.states()[inPool] == 1 })
	before := runtime.NumGoroutine()
	const n = 200
	var clients []net.Conn
	for range n {
		c, _ := watchRaw(t, addr)
		clients = append(clients, c)
	}
	until(t, "every stream parks", func() bool { return h.states()[inPool] == n+1 })
	if grown := runtime.NumGoroutine() - before; grown > n/20 {
		t.Fatalf("%d parked streams hold %d goroutines", n, grown)
	}
	for _, c := range clients[:n/2] {
		c.Close()
	}
	until(t, "the streams whose clients left are released", func() bool {
		n := 0
		for _, k := range h.states() {
			n += k
		}
		return n == len(clients)/2+1
	})
	if p := h.s.fanout.parker.size(); p != len(clients)/2+1 {
		t.Fatalf("the parker holds %d streams after half left, want %d", p, len(clients)/2+1)
	}
}

// Tenant streams park too, with no writer: a push hands a parked one to
// a goroutine that writes it and parks it again. 100 of them hold no
// goroutine, each gets every event once and in order through parks and
// wakes, and those whose clients leave are released.
func TestParkedTenantStreamsHoldNoGoroutineAndGetEveryEvent(t *testing.T) {
	h := newPoolHarness(t)
	addr := h.serve()
	const path = "/v1/tenants/t/watch?topic=x"
	getRaw(t, addr, path)
	until(t, "the first stream parks", func() bool { return h.states()[inPool] == 1 })
	before := runtime.NumGoroutine()
	const n, events = 100, 30
	type client struct {
		c net.Conn
		r *chunks
	}
	var clients []client
	for range n {
		c, r := getRaw(t, addr, path)
		clients = append(clients, client{c, r})
	}
	until(t, "every stream parks", func() bool { return h.states()[inPool] == n+1 })
	if grown := runtime.NumGoroutine() - before; grown > n/20 {
		t.Fatalf("%d parked tenant streams hold %d goroutines", n, grown)
	}
	errs := make(chan error, n)
	for _, c := range clients {
		go func() { errs <- c.r.inOrder(c.c, events, false) }()
	}
	for range events {
		h.publish(`"e"`)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	until(t, "every stream parks again", func() bool { return h.states()[inPool] == n+1 })
	for _, c := range clients[:n/2] {
		c.c.Close()
	}
	until(t, "the streams whose clients left are released", func() bool {
		k := 0
		for _, m := range h.states() {
			k += m
		}
		return k == n/2+1
	})
}

// A tenant stream signalled at the worst moment, after it found nothing
// to do and before it is in the pool, finds its own goroutine, which is
// not waiting: park must see the signal and keep the stream, or the
// event waits for the next push or heartbeat.
func TestASignalAsATenantStreamParksIsNotMissed(t *testing.T) {
	h := newPoolHarness(t)
	cw, _ := connPair(t)
	sel, perr := selector.Parse([]string{"x"}, nil, auth.Everything())
	if perr != nil {
		t.Fatal(perr)
	}
	sub, err := h.router.WatchTenant(context.Background(), "t", sel, hub.From{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	st := &sseStream{s: h.s, sub: tenantSource{sub}, wire: cw, cw: cw, parker: h.w.parker, ctx: context.Background()}
	sub.OnReady(st.wakeParked)
	cw.parking = func() {
		cw.parking = nil
		h.publish(`"as it parks"`)
		until(t, "the push is signalled", func() bool { return len(sub.Ready()) == 1 })
	}
	h.keptAsItParks(st, "signalled")
	// Parked with nothing to do, the next signal hands it to a goroutine.
	<-sub.Ready()
	if parked, err := st.park(); !parked || err != nil {
		t.Fatalf("park gave %v, %v; want the stream parked", parked, err)
	}
	h.publish(`"parked"`)
	if got := h.handedBack(); got != st || st.state.Load() != byOwn {
		t.Fatal("a signal did not hand a parked tenant stream to a goroutine")
	}
}

// Parked streams of both kinds get their heartbeats: the parker asks a
// topic stream's writer for them, and hands a tenant stream to a
// goroutine that writes one and parks it again.
func TestParkedStreamsOfBothKindsGetTheirHeartbeats(t *testing.T) {
	h := newPoolHarness(t)
	addr := h.serveWith(20 * time.Millisecond)
	for _, path := range []string{"/v1/tenants/t/topics/x/watch", "/v1/tenants/t/watch?topic=x"} {
		c, r := getRaw(t, addr, path)
		for range 3 {
			if ids, _ := r.next(c); len(ids) != 1 || ids[0] != "ping" {
				t.Fatalf("%s: a parked stream got %v, want a heartbeat", path, ids)
			}
		}
	}
}

// A topic stream's own goroutine, waiting while the stream is not live,
// waits until its signal or its heartbeat: a topic stream parks only once
// live, and a wait that ended at a tenant stream's park time, past a
// second after its last hand-out, would return at once, again and again.
func TestATopicStreamWaitsForItsHeartbeatNotForAParkTime(t *testing.T) {
	h := newPoolHarness(t)
	cw, _ := connPair(t)
	st := h.stream(cw)
	st.wrote.Store(time.Now().UnixNano())
	st.active = time.Now().Add(-time.Minute).UnixNano()
	if got := st.wakeAt(); !got.Equal(st.pingAt()) {
		t.Fatalf("a topic stream's wait ends at %v, %v before its heartbeat", got, st.pingAt().Sub(got))
	}
	st.w = nil // the same stream as a tenant stream would park a second after its last hand-out
	if got, want := st.wakeAt(), time.Unix(0, st.active).Add(parkAfter); !got.Equal(want) {
		t.Fatalf("a tenant stream's wait ends at %v, want its park time %v", got, want)
	}
}
