package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/server"
)

// wait bounds how long a test waits for something that must happen; it
// is a hang guard, not a timing assertion.
const wait = 30 * time.Second

// config is a dev-mode server's config with a data directory of the
// test's and a short reconnect hint.
func config(t *testing.T, edit func(*server.Config)) server.Config {
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.Retry = true, t.TempDir(), 10*time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// newServer runs a dev-mode server in process for the client's tests.
func newServer(t *testing.T, edit func(*server.Config)) *httptest.Server {
	t.Helper()
	return newWrappedServer(t, edit, nil)
}

// newWrappedServer is newServer with its handler passed through wrap
// (when not nil), which stands between the client and the real server.
func newWrappedServer(t *testing.T, edit func(*server.Config), wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	srv, err := server.New(context.Background(), config(t, edit), slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background())
	})
	return ts
}

// serveAt runs a server with cfg on addr ("127.0.0.1:0" for any port)
// the way edgehub serve does, so that stopping it ends its streams from
// the server's side; it returns its base URL and the stop, which the
// test's cleanup calls too.
func serveAt(t *testing.T, cfg server.Config, addr string) (string, func() error) {
	t.Helper()
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Shutdown(context.Background())
		t.Fatal(err)
	}
	go srv.Serve(ln)
	stop := sync.OnceValue(func() error { return srv.Shutdown(context.Background()) })
	t.Cleanup(func() { stop() })
	return "http://" + ln.Addr().String(), stop
}

// dropper is an HTTP client whose connections can be cut from the
// client's side, as a network would cut them.
type dropper struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (d *dropper) client() *http.Client {
	var dialer net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				d.mu.Lock()
				d.conns = append(d.conns, conn)
				d.mu.Unlock()
			}
			return conn, err
		},
	}}
}

func (d *dropper) drop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, conn := range d.conns {
		conn.Close()
	}
	d.conns = nil
}

// A live watch that has seen no event yet and loses its connection resumes
// from the position its hello gave, so an event published while it was
// away is not lost.
func TestWatchResumesFromHelloPositionBeforeAnyEvent(t *testing.T) {
	ts := newServer(t, nil)
	d := &dropper{}
	c := &client.Client{Server: ts.URL, HTTP: d.client()}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	hellos := 0
	var got []int64
	for e, err := range c.Watch(ctx, "t", "x", client.WatchOptions{
		OnHello: func(client.Hello) {
			if hellos++; hellos == 1 {
				d.drop() // the first stream's connection, the only one yet
			}
		},
		// Runs after the drop and before the reconnect: the event is
		// committed while the watcher is away.
		OnRetry: func(client.Retry) {
			if _, err := c.Publish(ctx, "t", "x", "while away", client.PublishOptions{}); err != nil {
				t.Error(err)
			}
		},
	}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Seq)
		break
	}
	if !slices.Equal(got, []int64{1}) {
		t.Fatalf("got %v, want event 1", got)
	}
}

// recorder is a transport that records each watch request's Last-Event-ID
// and, on the first one, cuts the body a few bytes past the hello frame:
// the connection drops in the middle of the snapshot frame.
type recorder struct {
	mu      sync.Mutex
	lastIDs []string
	cut     bool
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	first := len(r.lastIDs) == 0
	if strings.HasSuffix(req.URL.Path, "/watch") {
		r.lastIDs = append(r.lastIDs, req.Header.Get("Last-Event-ID"))
	}
	r.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && first && r.cut && strings.HasSuffix(req.URL.Path, "/watch") {
		resp.Body = &cutAfterHello{rc: resp.Body}
	}
	return resp, err
}

func (r *recorder) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lastIDs)
}

type cutAfterHello struct {
	rc   io.ReadCloser
	seen []byte
}

func (c *cutAfterHello) Read(p []byte) (int, error) {
	if i := bytes.Index(c.seen, []byte("\n\n")); i >= 0 && len(c.seen) > i+12 {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.rc.Read(p[:min(len(p), 8)])
	c.seen = append(c.seen, p[:n]...)
	return n, err
}

func (c *cutAfterHello) Close() error { return c.rc.Close() }

// A snapshot watch whose connection drops after hello and inside the
// snapshot frame resumes without a position, so it gets the snapshot on
// the next connection instead of losing it for good.
func TestSnapshotWatchResumesForTheSnapshotWhenCutBeforeIt(t *testing.T) {
	ts := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	pub := &client.Client{Server: ts.URL}
	if _, err := pub.Publish(ctx, "t", "s", map[string]string{"big": "state"}, client.PublishOptions{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{cut: true}
	c := &client.Client{Server: ts.URL, HTTP: &http.Client{Transport: rec}}
	var frames []string
	for _, err := range c.Watch(ctx, "t", "s", client.WatchOptions{Snapshot: true,
		OnHello: func(client.Hello) { frames = append(frames, "hello") },
		OnSnapshot: func(s client.Snapshot) {
			frames = append(frames, "snapshot")
			if s.Seq != 1 || string(s.State["k"]) != `{"big":"state"}` {
				t.Errorf("snapshot %+v", s)
			}
			cancel()
		},
	}) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("watch: %v (frames %v)", err, frames)
		}
	}
	if want := []string{"hello", "hello", "snapshot"}; !slices.Equal(frames, want) {
		t.Errorf("frames %v, want %v", frames, want)
	}
	if want := []string{"", ""}; !slices.Equal(rec.sent(), want) {
		t.Errorf("Last-Event-IDs sent %q, want %q: a resume before the snapshot must not carry a position", rec.sent(), want)
	}
}

// A watch whose stream the server ends (here by shutting down) resumes
// on the server that comes back on the same data directory with
// Last-Event-ID, and gets every event once: those before the restart and
// those published while it was away.
func TestWatchResumesAcrossAServerRestart(t *testing.T) {
	cfg := config(t, nil)
	base, stopFirst := serveAt(t, cfg, "127.0.0.1:0")
	rec := &recorder{}
	c := &client.Client{Server: base, HTTP: &http.Client{Transport: rec}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if _, err := c.Publish(ctx, "t", "r", i, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	shut := make(chan error, 1)
	restarts := 0
	after := int64(0)
	var got []int64
	for e, err := range c.Watch(ctx, "t", "r", client.WatchOptions{After: &after,
		OnRetry: func(r client.Retry) {
			if restarts++; restarts > 1 {
				return
			}
			if err := <-shut; err != nil {
				t.Error(err)
			}
			serveAt(t, cfg, strings.TrimPrefix(base, "http://"))
			for i := 4; i <= 5; i++ {
				if _, err := c.Publish(ctx, "t", "r", i, client.PublishOptions{}); err != nil {
					t.Error(err)
				}
			}
		},
	}) {
		if err != nil {
			t.Fatalf("watch: %v after %v", err, got)
		}
		got = append(got, e.Seq)
		if e.Seq == 3 {
			go func() { shut <- stopFirst() }()
		}
		if len(got) == 5 {
			break
		}
	}
	if want := []int64{1, 2, 3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if sent := rec.sent(); len(sent) < 2 || sent[1] != "3" {
		t.Fatalf("Last-Event-IDs sent %q; the first reconnect must resume after 3", sent)
	}
}

// A publish refused by a limit (429 with Retry-After) is retried after the
// server's delay and then succeeds: one retry is enough, because it waits
// for the rate's next token instead of backing off blindly.
func TestPublishRetriesALimitAfterRetryAfter(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.PublishRate, c.PublishBurst = 1, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := &client.Client{Server: ts.URL}
	if _, err := c.Publish(ctx, "t", "r", 1, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	var apiErr *client.APIError
	if _, err := c.Publish(ctx, "t", "r", 2, client.PublishOptions{}); !errors.As(err, &apiErr) ||
		apiErr.Code != refusal.RateLimited || apiErr.RetryAfter < time.Second {
		t.Fatalf("without retries: %v, want 429 rate_limited with Retry-After", err)
	}
	c.Retries = 1
	r, err := c.Publish(ctx, "t", "r", 3, client.PublishOptions{})
	if err != nil || r.Seq != 2 {
		t.Fatalf("with one retry: %+v %v, want seq 2", r, err)
	}
}

// timeline is a transport that records when each request went out and
// when its answer came, with its status.
type timeline struct {
	mu    sync.Mutex
	times []exchange
}

type exchange struct {
	path     string
	sent     time.Time
	answered time.Time
	status   int
	retry    string
}

func (tl *timeline) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := time.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	tl.mu.Lock()
	tl.times = append(tl.times, exchange{req.URL.Path, sent, time.Now(), resp.StatusCode, resp.Header.Get("Retry-After")})
	tl.mu.Unlock()
	return resp, nil
}

// checkWaited fails the test when a request followed a refusal on its
// path before the refusal's Retry-After had passed, and reports how many
// refusals there were. A timer never fires early, so this lower bound
// holds however slow the machine is.
func (tl *timeline) checkWaited(t *testing.T, path string) int {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var last *exchange
	refused := 0
	for i := range tl.times {
		x := &tl.times[i]
		if !strings.HasSuffix(x.path, path) {
			continue
		}
		if last != nil && last.status/100 != 2 {
			after, _ := time.ParseDuration(last.retry + "s")
			if gap := x.sent.Sub(last.answered); gap < after {
				t.Errorf("%s: retried after %v, before the %v Retry-After", path, gap, after)
			}
		}
		if x.status/100 != 2 {
			refused++
		}
		last = x
	}
	return refused
}

// A reconnecting watch refused by the stream cap (429 too_many_streams
// with Retry-After) waits as long as the server says, then tries again
// rather than giving up.
func TestWatchRetriesAStreamCapRefusal(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxTenantStreams = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	holder := &client.Client{Server: ts.URL}
	holderCtx, release := context.WithCancel(ctx)
	holding, held := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(held)
		for range holder.Watch(holderCtx, "t", "w", client.WatchOptions{OnHello: func(client.Hello) { close(holding) }}) {
		}
	}()
	<-holding
	tl := &timeline{}
	c := &client.Client{Server: ts.URL, HTTP: &http.Client{Transport: tl}}
	var causes []error
	for e, err := range c.Watch(ctx, "t", "w", client.WatchOptions{
		OnRetry: func(r client.Retry) {
			causes = append(causes, r.Err)
			release() // the slot frees up while the watcher waits
			<-held
		},
		OnHello: func(client.Hello) {
			if _, err := c.Publish(ctx, "t", "w", "in", client.PublishOptions{}); err != nil {
				t.Error(err)
			}
		},
	}) {
		if err != nil || e.Seq != 1 {
			t.Fatalf("watch: %+v %v", e, err)
		}
		break
	}
	var apiErr *client.APIError
	if len(causes) == 0 || !errors.As(causes[0], &apiErr) || apiErr.Code != refusal.TooManyStreams {
		t.Fatalf("retries for %v, want too_many_streams first", causes)
	}
	if refused := tl.checkWaited(t, "/watch"); refused == 0 {
		t.Fatal("the watch was never refused")
	}
}

// A 503 with Retry-After, which the hub itself answers without one but a
// proxy in front of it does while the hub restarts, is waited out by a
// publish and by a watch. The server here is a stand-in for that proxy:
// the first request on each route is refused.
func TestUnavailableIsWaitedOut(t *testing.T) {
	var mu sync.Mutex
	refused := map[string]bool{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := !refused[r.URL.Path]
		refused[r.URL.Path] = true
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"restarting"}}`)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/notify") {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"seq":1,"duplicate":false}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 1\n\nid: 0\nevent: hello\ndata: {\"head\":1,\"position\":0}\n\n"+
			"id: 1\nevent: message\ndata: {\"seq\":1,\"type\":\"message\",\"time\":\"2026-01-02T03:04:05Z\",\"data\":7}\n\n")
	}))
	defer ts.Close()
	tl := &timeline{}
	c := &client.Client{Server: ts.URL, HTTP: &http.Client{Transport: tl}, Retries: 1}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if r, err := c.Publish(ctx, "t", "u", 7, client.PublishOptions{}); err != nil || r.Seq != 1 {
		t.Fatalf("publish: %+v %v", r, err)
	}
	for e, err := range c.Watch(ctx, "t", "u", client.WatchOptions{}) {
		if err != nil || string(e.Data) != "7" {
			t.Fatalf("watch: %+v %v", e, err)
		}
		break
	}
	for _, path := range []string{"/notify", "/watch"} {
		if refused := tl.checkWaited(t, path); refused != 1 {
			t.Errorf("%s refused %d times, want once", path, refused)
		}
	}
}

// A quota refusal is not retried: room comes back only when retention or
// the tenant frees it, so the caller hears of it at once.
func TestPublishDoesNotRetryAQuota(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxTenantTopics = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tl := &timeline{}
	c := &client.Client{Server: ts.URL, Retries: 8, HTTP: &http.Client{Transport: tl}}
	if _, err := c.Publish(ctx, "t", "one", 1, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	var apiErr *client.APIError
	if _, err := c.Publish(ctx, "t", "two", 1, client.PublishOptions{}); !errors.As(err, &apiErr) || apiErr.Code != refusal.QuotaExceeded {
		t.Fatalf("publish past the topic quota: %v, want quota_exceeded", err)
	}
	if refused := tl.checkWaited(t, "/two/notify"); refused != 1 {
		t.Fatalf("the quota was sent %d times, want once", refused)
	}
}

// A watch ends as soon as its context does: while it reads a quiet
// stream, and while it waits to reconnect. Both waits here are an hour
// long (the reconnect's from the server's retry field), so a watch that
// missed its context would outlast the test.
func TestWatchEndsWithItsContext(t *testing.T) {
	for _, waiting := range []bool{false, true} {
		t.Run(fmt.Sprintf("waiting=%v", waiting), func(t *testing.T) {
			ts := newServer(t, func(c *server.Config) { c.Heartbeat, c.Retry = time.Hour, time.Hour })
			d := &dropper{}
			c := &client.Client{Server: ts.URL, HTTP: d.client()}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opened, retrying := make(chan struct{}), make(chan struct{})
			ended := make(chan error, 1)
			go func() {
				for _, err := range c.Watch(ctx, "t", "q", client.WatchOptions{
					OnHello: func(client.Hello) { close(opened) },
					OnRetry: func(r client.Retry) {
						if r.Delay < time.Hour {
							t.Errorf("reconnect in %v, before the server's retry of an hour", r.Delay)
						}
						close(retrying)
					},
				}) {
					ended <- err
					return
				}
				ended <- nil
			}()
			<-opened
			if waiting {
				d.drop()
				<-retrying
			}
			cancel()
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("watch ended with %v, want context.Canceled", err)
				}
			case <-time.After(wait):
				t.Fatal("the watch was still running after the context ended")
			}
		})
	}
}

// A snapshot watch gets the topic's state as a typed value before the
// events after it; a watch from before the oldest retained event gets
// the gap before the first event it can have.
func TestWatchDeliversSnapshotAndGap(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.RetentionEvents = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := &client.Client{Server: ts.URL}
	for _, p := range []struct {
		key, op string
		data    any
	}{{"a", "", 1}, {"b", "", 2}, {"a", client.OpDelete, nil}} {
		if _, err := c.Publish(ctx, "t", "kv", p.data, client.PublishOptions{Key: p.key, Op: p.op}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	for e, err := range c.Watch(ctx, "t", "kv", client.WatchOptions{Snapshot: true,
		OnSnapshot: func(s client.Snapshot) {
			seen = append(seen, fmt.Sprintf("snapshot %d %d %s", s.Seq, len(s.State), s.State["b"]))
			if _, err := c.Publish(ctx, "t", "kv", 3, client.PublishOptions{Key: "c"}); err != nil {
				t.Error(err)
			}
		},
	}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, fmt.Sprintf("event %d %s %s", e.Seq, e.Key, e.Data))
		break
	}
	if want := []string{"snapshot 3 1 2", "event 4 c 3"}; !slices.Equal(seen, want) {
		t.Fatalf("snapshot watch saw %q, want %q", seen, want)
	}

	for i := range 5 {
		if _, err := c.Publish(ctx, "t", "g", i, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for p, err := c.Events(ctx, "t", "g", 0, 0); p.Gap == nil; p, err = c.Events(ctx, "t", "g", 0, 0) {
		if err != nil || ctx.Err() != nil {
			t.Fatalf("retention never removed events 1..3: %v %v", err, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond) // a poll for retention's pass
	}
	seen = nil
	after := int64(0)
	for e, err := range c.Watch(ctx, "t", "g", client.WatchOptions{After: &after,
		OnGap: func(g client.Gap) { seen = append(seen, fmt.Sprintf("gap %d..%d", g.From, g.To)) },
	}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, fmt.Sprintf("event %d", e.Seq))
		if e.Seq == 5 {
			break
		}
	}
	if want := []string{"gap 1..3", "event 4", "event 5"}; !slices.Equal(seen, want) {
		t.Fatalf("a watch from 0 saw %q, want %q", seen, want)
	}
}

// Pages goes on past an answer that is short because the server bounds
// an answer's bytes, to the head.
func TestPagesFollowShortAnswers(t *testing.T) {
	ts := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := &client.Client{Server: ts.URL}
	big := strings.Repeat("x", 700<<10) // two do not fit in one answer
	for range 3 {
		if _, err := c.Publish(ctx, "t", "big", big, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []int64
	pages := 0
	for p, err := range c.Pages(ctx, "t", "big", 0, 0) {
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range p.Events {
			seqs = append(seqs, e.Seq)
		}
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) || pages < 2 {
		t.Fatalf("got %d of 3 events (%v) in %d pages", len(seqs), seqs, pages)
	}
}

// The admin calls create, read, rotate and delete a tenant and mint its
// tokens; a token works until its tenant is rotated, and a deleted tenant
// is unknown_tenant.
func TestAdminCalls(t *testing.T) {
	key := strings.Repeat("k", 32)
	ts := newServer(t, func(c *server.Config) { c.Dev, c.AdminKey = false, key })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	admin := &client.Client{Server: ts.URL, AdminKey: key}
	created, isNew, err := admin.CreateTenant(ctx, "acme")
	if err != nil || !isNew || created.Name != "acme" || !strings.HasPrefix(created.WebhookSecret, "whsec_") || created.SigningSecret == "" {
		t.Fatalf("create: %+v %v %v", created, isNew, err)
	}
	again, isNew, err := admin.CreateTenant(ctx, "acme")
	if err != nil || isNew || again != created {
		t.Fatalf("create again: %+v %v %v, want the same tenant, not new", again, isNew, err)
	}
	if got, err := admin.Tenant(ctx, "acme"); err != nil || got != created {
		t.Fatalf("get: %+v %v", got, err)
	}
	token, err := admin.MintToken(ctx, "acme", client.TokenRequest{Publish: []string{"orders"}, Subscribe: []string{"ord*"}, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Server: ts.URL, Token: token}
	if r, err := c.Publish(ctx, "acme", "orders", map[string]int{"n": 1}, client.PublishOptions{}); err != nil || r.Seq != 1 {
		t.Fatalf("publish with the token: %+v %v", r, err)
	}
	if _, err := c.Publish(ctx, "acme", "refunds", 1, client.PublishOptions{}); !isAPIError(err, http.StatusForbidden, refusal.Forbidden) {
		t.Fatalf("publish outside the token: %v", err)
	}
	if p, err := c.Events(ctx, "acme", "orders", 0, 0); err != nil || len(p.Events) != 1 || string(p.Events[0].Data) != `{"n":1}` {
		t.Fatalf("events with the token: %+v %v", p, err)
	}
	rotated, err := admin.RotateTenant(ctx, "acme")
	if err != nil || rotated.SigningSecret == created.SigningSecret || rotated.WebhookSecret == created.WebhookSecret {
		t.Fatalf("rotate: %+v %v", rotated, err)
	}
	if _, err := c.State(ctx, "acme", "orders"); !isAPIError(err, http.StatusUnauthorized, refusal.Unauthorized) {
		t.Fatalf("a token of the old secret: %v, want unauthorized", err)
	}
	if err := admin.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Tenant(ctx, "acme"); !isAPIError(err, http.StatusNotFound, refusal.UnknownTenant) {
		t.Fatalf("get a deleted tenant: %v", err)
	}
	wrong := &client.Client{Server: ts.URL, AdminKey: "wrong"}
	if _, _, err := wrong.CreateTenant(ctx, "acme"); !isAPIError(err, http.StatusUnauthorized, refusal.Unauthorized) {
		t.Fatalf("a wrong admin key: %v", err)
	}
}

func isAPIError(err error, status int, code refusal.Code) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status && ae.Code == code
}

// An event read back and encoded again is the envelope the server sent,
// byte for byte, so the command line can print what it decoded.
func TestEventEncodesAsItsEnvelope(t *testing.T) {
	ts := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := &client.Client{Server: ts.URL}
	if _, err := c.Publish(ctx, "t", "e", json.RawMessage(`{"a": [1, 2]}`), client.PublishOptions{Type: "t.x", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(ts.URL + "/v1/tenants/t/topics/e/events?after=0")
	if err != nil {
		t.Fatal(err)
	}
	var raw struct{ Events []json.RawMessage }
	json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	p, err := c.Events(ctx, "t", "e", 0, 0)
	if err != nil || len(p.Events) != 1 || len(raw.Events) != 1 {
		t.Fatalf("events: %+v %v", p, err)
	}
	if b, _ := json.Marshal(p.Events[0]); string(b) != string(raw.Events[0]) {
		t.Fatalf("encoded again:\n%s\nthe server's:\n%s", b, raw.Events[0])
	}
}
