package client_test

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/edgehub/edgehub/server"
	"github.com/edgehub/edgehub/sse"
)

// A live watch that has seen no event yet and loses its connection resumes
// from the position its hello gave, so an event published while it was
// away is not lost.
func TestWatchResumesFromHelloPositionBeforeAnyEvent(t *testing.T) {
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.Retry = true, t.TempDir(), 10*time.Millisecond
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background())
	}()
	// The client's connections are recorded so that the test can drop the
	// first stream's, as a network would: the server's end is no longer
	// net/http's, so httptest cannot close it.
	var mu sync.Mutex
	var conns []net.Conn
	var dialer net.Dialer
	c := &client.Client{Server: ts.URL, HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
			}
			return conn, err
		},
	}}}
	drop := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			conn.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hellos := 0
	var got []string
	err = c.Watch(ctx, "t", "x", client.WatchOptions{
		Reconnect: true,
		// Runs after the drop and before the reconnect: the event is
		// committed while the watcher is away.
		Notice: func(string) {
			if _, err := c.Publish(ctx, "t", "x", []byte(`"while away"`), client.PublishOptions{}); err != nil {
				t.Error(err)
			}
		},
	}, func(f sse.Frame) error {
		switch f.Event {
		case "hello":
			if hellos++; hellos == 1 {
				drop() // the first stream's connection, the only one yet
			}
		case "message":
			got = append(got, f.ID)
			return io.EOF
		}
		return nil
	})
	if len(got) != 1 || got[0] != "1" {
		t.Fatalf("got %v (%v), want event 1", got, err)
	}
}

// newServer runs a dev-mode server in process for the client's tests.
func newServer(t *testing.T, edit func(*server.Config)) *httptest.Server {
	t.Helper()
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.Retry = true, t.TempDir(), 10*time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background())
	})
	return ts
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub := &client.Client{Server: ts.URL}
	if _, err := pub.Publish(ctx, "t", "s", []byte(`{"big":"state"}`), client.PublishOptions{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{cut: true}
	c := &client.Client{Server: ts.URL, HTTP: &http.Client{Transport: rec}}
	var events []string
	err := c.Watch(ctx, "t", "s", client.WatchOptions{Snapshot: true, Reconnect: true}, func(f sse.Frame) error {
		events = append(events, f.Event)
		if f.Event == "snapshot" {
			if f.Data != `{"seq":1,"state":{"k":{"big":"state"}}}` {
				t.Errorf("snapshot %s", f.Data)
			}
			return io.EOF
		}
		return nil
	})
	if !errors.Is(err, io.EOF) {
		t.Fatalf("watch: %v (frames %v)", err, events)
	}
	if want := []string{"hello", "hello", "snapshot"}; !slices.Equal(events, want) {
		t.Errorf("frames %v, want %v", events, want)
	}
	if want := []string{"", ""}; !slices.Equal(rec.lastIDs, want) {
		t.Errorf("Last-Event-IDs sent %q, want %q: a resume before the snapshot must not carry a position", rec.lastIDs, want)
	}
}

// A publish refused by a limit (429 with Retry-After) is retried after the
// server's delay and then succeeds, instead of failing the command.
func TestPublishRetriesALimitAfterRetryAfter(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.PublishRate, c.PublishBurst = 1, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &client.Client{Server: ts.URL}
	if _, err := c.Publish(ctx, "t", "r", []byte(`1`), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	var apiErr *client.APIError
	if _, err := c.Publish(ctx, "t", "r", []byte(`2`), client.PublishOptions{}); !errors.As(err, &apiErr) ||
		apiErr.Status != http.StatusTooManyRequests || apiErr.RetryAfter < time.Second {
		t.Fatalf("without retries: %v, want 429 with Retry-After", err)
	}
	c.Retries = 3
	ans, err := c.Publish(ctx, "t", "r", []byte(`3`), client.PublishOptions{})
	if err != nil || !strings.Contains(string(ans), `"seq":2`) {
		t.Fatalf("with retries: %s %v, want seq 2", ans, err)
	}
}

// A reconnecting watch refused by the stream cap (429 with Retry-After)
// waits and tries again rather than giving up.
func TestWatchRetriesAStreamCapRefusal(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxTenantStreams = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &client.Client{Server: ts.URL}
	holderCtx, release := context.WithCancel(ctx)
	holding := make(chan struct{})
	go c.Watch(holderCtx, "t", "w", client.WatchOptions{}, func(f sse.Frame) error {
		close(holding)
		<-holderCtx.Done()
		return nil
	})
	<-holding
	refused := 0
	err := c.Watch(ctx, "t", "w", client.WatchOptions{Reconnect: true, Notice: func(s string) {
		if strings.Contains(s, "too_many_streams") {
			refused++
			release() // the slot frees up while the watcher waits
		}
	}}, func(f sse.Frame) error {
		if f.Event == "hello" {
			return io.EOF
		}
		return nil
	})
	if !errors.Is(err, io.EOF) || refused != 1 {
		t.Fatalf("watch: %v after %d refusals; want a hello after one refusal", err, refused)
	}
}

// A quota refusal is not retried: room comes back only when retention or
// the tenant frees it, so the caller hears of it at once.
func TestPublishDoesNotRetryAQuota(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxTenantTopics = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &client.Client{Server: ts.URL, Retries: 8}
	if _, err := c.Publish(ctx, "t", "one", []byte(`1`), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	var apiErr *client.APIError
	if _, err := c.Publish(ctx, "t", "two", []byte(`1`), client.PublishOptions{}); !errors.As(err, &apiErr) || apiErr.Code != "quota_exceeded" {
		t.Fatalf("publish past the topic quota: %v, want quota_exceeded at once", err)
	}
}
