package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/server"
)

// loss is what becomes of one answer of the real server on its way to
// the client.
type loss int

const (
	delivered   loss = iota // the answer reaches the client
	unavailable             // a 503 unavailable takes its place: an unclear commit
	cut                     // the connection is cut: a kill -9 between commit and answer
)

// loser stands between the client and a real server. Each request that
// match selects is served whole by the server (a publish is committed),
// and then its answer meets the plan's loss for it (delivered once the
// plan runs out). It records the Idempotency-Key of every request it
// selects.
type loser struct {
	h     http.Handler
	match func(*http.Request) bool
	plan  []loss

	mu   sync.Mutex
	keys []string
}

func (l *loser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !l.match(r) {
		l.h.ServeHTTP(w, r)
		return
	}
	l.mu.Lock()
	n := len(l.keys)
	l.keys = append(l.keys, r.Header.Get("Idempotency-Key"))
	l.mu.Unlock()
	if n >= len(l.plan) || l.plan[n] == delivered {
		l.h.ServeHTTP(w, r)
		return
	}
	l.h.ServeHTTP(httptest.NewRecorder(), r) // the server's answer, lost
	if l.plan[n] == unavailable {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"unavailable","message":"the event could not be committed; retry with the same idempotency key"}}`)
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot cut: "+err.Error(), http.StatusInternalServerError)
		return
	}
	conn.Close()
}

// sent is the Idempotency-Key of each request the loser selected.
func (l *loser) sent() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

// lossy runs a dev-mode server behind a loser of the requests that match
// selects, with plan, and returns the loser and a client of it. The
// client opens a connection per request: net/http replays a request with
// an Idempotency-Key by itself when a reused connection turns out dead,
// which would hide whether the client's own retry works.
func lossy(t *testing.T, match func(*http.Request) bool, plan ...loss) (*loser, *client.Client) {
	t.Helper()
	l := &loser{match: match, plan: plan}
	ts := newWrappedServer(t, func(c *server.Config) { c.AdminKey = strings.Repeat("k", 32) },
		func(h http.Handler) http.Handler { l.h = h; return l })
	return l, &client.Client{Server: ts.URL, AdminKey: strings.Repeat("k", 32), Retries: 3,
		HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
}

func route(suffix string) func(*http.Request) bool {
	return func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, suffix) }
}

// storedEvents is how many events tenant t's topic holds.
func storedEvents(t *testing.T, c *client.Client, topic string) int {
	t.Helper()
	n := 0
	for p, err := range (&client.Client{Server: c.Server}).Pages(context.Background(), "t", topic, 0, 0) {
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Events)
	}
	return n
}

// A publish or a batch sent with no key of the caller's carries one the
// client made, printable and within the server's 256 characters; after a
// 503 or a cut connection (each following the commit) its retry sends the
// same key, so it is answered as a duplicate with the original numbers
// and the topic holds the event once. The next call makes a new key.
func TestPublishRetriesWithTheKeyItMade(t *testing.T) {
	for _, how := range []struct {
		name string
		loss loss
	}{{"503", unavailable}, {"cut", cut}} {
		for _, batch := range []bool{false, true} {
			name := how.name + "/single"
			if batch {
				name = how.name + "/batch"
			}
			t.Run(name, func(t *testing.T) {
				l, c := lossy(t, route("/notify"), how.loss)
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				var first, last int64
				var dup bool
				var key string
				var err error
				if batch {
					var r client.BatchResult
					r, err = c.PublishBatch(ctx, "t", "o", []any{1, 2}, client.PublishOptions{})
					first, last, dup, key = r.First, r.Last, r.Duplicate, r.IdempotencyKey
				} else {
					var r client.PublishResult
					r, err = c.Publish(ctx, "t", "o", 1, client.PublishOptions{})
					first, last, dup, key = r.Seq, r.Seq, r.Duplicate, r.IdempotencyKey
				}
				wantLast := int64(1)
				if batch {
					wantLast = 2
				}
				sent := l.sent()
				if err != nil || !dup || first != 1 || last != wantLast {
					t.Fatalf("publish: %d..%d duplicate %v, %v; want the original's numbers as a duplicate (keys sent %q)", first, last, dup, err, sent)
				}
				if len(sent) != 2 || sent[0] == "" || sent[1] != sent[0] || key != sent[0] {
					t.Fatalf("keys sent %q, result's %q: want one key the client made, twice", sent, key)
				}
				if len(key) > 256 || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
					t.Fatalf("key %q is not at most 256 printable ASCII characters", key)
				}
				if n := storedEvents(t, c, "o"); n != int(last-first+1) {
					t.Fatalf("the topic holds %d events, want %d", n, last-first+1)
				}
				r, err := c.Publish(ctx, "t", "o", 1, client.PublishOptions{})
				if sent := l.sent(); err != nil || r.Duplicate || len(sent) != 3 || sent[2] == key {
					t.Fatalf("the next publish of the same data: %+v %v, keys %q; want a new key and a new event", r, err, sent)
				}
			})
		}
	}
}

// A caller's own key is the one sent, on the retry after a cut too, and
// the one in the result.
func TestPublishKeepsTheCallersKey(t *testing.T) {
	l, c := lossy(t, route("/notify"), cut)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := c.Publish(ctx, "t", "o", 1, client.PublishOptions{IdempotencyKey: "order-17"})
	if sent := l.sent(); err != nil || !r.Duplicate || r.Seq != 1 || r.IdempotencyKey != "order-17" ||
		len(sent) != 2 || sent[0] != "order-17" || sent[1] != "order-17" {
		t.Fatalf("publish: %+v %v, keys sent %q; want order-17 twice and a duplicate of 1", r, err, sent)
	}
}

// A publish refused with a connection (a server restarting) is sent again
// once the server is back, and stores its event.
func TestPublishRetriesARefusedConnection(t *testing.T) {
	cfg := config(t, nil)
	base, stop := serveAt(t, cfg, "127.0.0.1:0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(base, "http://")
	refused := make(chan struct{}, 16)
	var dialer net.Dialer
	c := &client.Client{Server: base, Retries: 8, HTTP: &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
			return conn, err
		},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type answer struct {
		r   client.PublishResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := c.Publish(ctx, "t", "back", 1, client.PublishOptions{})
		done <- answer{r, err}
	}()
	select {
	case <-refused:
	case a := <-done:
		t.Fatalf("the publish ended before a connection was refused: %+v %v", a.r, a.err)
	}
	serveAt(t, cfg, addr) // back on its address and data directory
	if a := <-done; a.err != nil || a.r.Seq != 1 || a.r.Duplicate {
		t.Fatalf("publish across the restart: %+v %v, want seq 1", a.r, a.err)
	}
}

// A context that ends while the client waits to retry a 503 ends the
// call at once, with the context's error and the 503 it met, and the
// result names the key, since the event may be stored.
func TestPublishRetriesEndWithTheContext(t *testing.T) {
	plan := make([]loss, 100)
	for i := range plan {
		plan[i] = unavailable
	}
	l, c := lossy(t, route("/notify"), plan...)
	c.Retries = len(plan)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.HTTP.Transport = cancelAfterAnswer{rt: c.HTTP.Transport, cancel: cancel}
	type answer struct {
		r   client.PublishResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := c.Publish(ctx, "t", "o", 1, client.PublishOptions{})
		done <- answer{r, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(wait):
		t.Fatal("the publish was still retrying after its context ended")
	}
	sent := l.sent()
	var apiErr *client.APIError
	if !errors.Is(a.err, context.Canceled) || !errors.As(a.err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable ||
		len(sent) != 1 || a.r.IdempotencyKey == "" || a.r.IdempotencyKey != sent[0] {
		t.Fatalf("publish: %+v %v, keys sent %q; want the 503 and context.Canceled after one attempt, and its key", a.r, a.err, sent)
	}
}

// cancelAfterAnswer cancels a context once the client has read an answer
// whole and closed it, as a caller that gives up while the client waits
// to retry.
type cancelAfterAnswer struct {
	rt     http.RoundTripper
	cancel context.CancelFunc
}

func (c cancelAfterAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil {
		resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: c.cancel}
	}
	return resp, err
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// A read is safe to repeat, so one whose answer was cut is sent again
// and answers; an admin write is not (a repeat does not do what one
// does), so a cut one comes back as the error it met.
func TestOnlySafeCallsAreSentAgainAfterACut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, k := range []struct {
		name  string
		match func(*http.Request) bool
		call  func(*client.Client) error
		again bool // sent again after the cut
		setup bool // the tenant is created first
	}{
		{"events", route("/events"), func(c *client.Client) error {
			_, err := c.Events(ctx, "t", "o", 0, 0)
			return err
		}, true, false},
		{"state", route("/state"), func(c *client.Client) error {
			_, err := c.State(ctx, "t", "o")
			return err
		}, true, false},
		{"tenant", func(r *http.Request) bool {
			return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/admin/tenants/acme")
		},
			func(c *client.Client) error {
				_, err := c.Tenant(ctx, "acme")
				return err
			}, true, true},
		{"create tenant", func(r *http.Request) bool { return r.Method == http.MethodPut }, func(c *client.Client) error {
			_, _, err := c.CreateTenant(ctx, "acme")
			return err
		}, false, false},
		{"rotate tenant", route("/rotate"), func(c *client.Client) error {
			_, err := c.RotateTenant(ctx, "acme")
			return err
		}, false, true},
	} {
		t.Run(k.name, func(t *testing.T) {
			l, c := lossy(t, k.match, cut)
			if k.setup {
				if _, _, err := (&client.Client{Server: c.Server, AdminKey: c.AdminKey}).CreateTenant(ctx, "acme"); err != nil {
					t.Fatal(err)
				}
			}
			err := k.call(c)
			sent := len(l.sent())
			if k.again && (err != nil || sent != 2) {
				t.Fatalf("%s: %v after %d requests; want an answer to the second", k.name, err, sent)
			}
			if !k.again && (err == nil || sent != 1) {
				t.Fatalf("%s: %v after %d requests; want the cut's error after one", k.name, err, sent)
			}
		})
	}
}
