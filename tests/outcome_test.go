package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
)

// cutProxy is a TCP proxy between clients and a server, at base. It
// forwards each connection to its upstream, bytes as they come. Armed, at
// the first byte of an answer from the server (which answers a publish
// only once its commit is durable) it runs its action, forwards nothing
// more of that answer and cuts the client's connection. While it has no
// upstream (down), a new connection waits for the next one (point).
type cutProxy struct {
	base   string
	ln     net.Listener
	closed chan struct{}
	held   chan struct{} // a token for each connection that waits for an upstream

	mu       sync.Mutex
	upstream string        // host:port; "" while down
	ready    chan struct{} // closed once there is an upstream
	action   func()        // the armed cut's; nil when not armed
	accepted int
	conns    []net.Conn
}

func newCutProxy(t *testing.T, p *proc) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &cutProxy{base: "http://" + ln.Addr().String(), ln: ln, closed: make(chan struct{}),
		held: make(chan struct{}, 64), ready: make(chan struct{})}
	x.point(p)
	go x.accept()
	t.Cleanup(func() {
		close(x.closed)
		ln.Close()
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, c := range x.conns {
			c.Close()
		}
	})
	return x
}

// point makes p the upstream of new connections.
func (x *cutProxy) point(p *proc) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.upstream = strings.TrimPrefix(p.base, "http://")
	close(x.ready)
}

// down leaves new connections waiting for the next upstream.
func (x *cutProxy) down() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.upstream, x.ready = "", make(chan struct{})
}

// arm makes the next answer's first byte run action and cut its client.
func (x *cutProxy) arm(action func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.action = action
}

// connections is how many connections clients have opened to the proxy.
func (x *cutProxy) connections() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.accepted
}

func (x *cutProxy) accept() {
	for {
		c, err := x.ln.Accept()
		if err != nil {
			return
		}
		x.mu.Lock()
		x.accepted++
		x.conns = append(x.conns, c)
		x.mu.Unlock()
		go x.serve(c)
	}
}

func (x *cutProxy) serve(c net.Conn) {
	defer c.Close()
	x.mu.Lock()
	ready := x.ready
	x.mu.Unlock()
	select {
	case <-ready:
	default:
		x.held <- struct{}{}
		select {
		case <-ready:
		case <-x.closed:
			return
		}
	}
	x.mu.Lock()
	addr := x.upstream
	x.mu.Unlock()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	x.mu.Lock()
	x.conns = append(x.conns, up)
	x.mu.Unlock()
	defer up.Close()
	go io.Copy(up, c)
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			x.mu.Lock()
			action := x.action
			x.action = nil
			x.mu.Unlock()
			if action != nil {
				action()
				return // the answer goes no further, and the client's connection is cut
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A publish whose server is killed with -9 between its commit and its
// answer (the proxy kills it at the answer's first byte and cuts the
// client) is sent again by the client itself, with the key it made, to
// the server started again on the same data: the retry is answered 200
// duplicate with the original numbers, and the topic holds the event
// once. The same for an NDJSON batch.
func TestPublishKilledBetweenCommitAndAnswerIsStoredOnce(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("events=%d", n), func(t *testing.T) {
			dir := t.TempDir()
			p := start(t, dir)
			x := newCutProxy(t, p)
			killed := make(chan struct{})
			x.arm(func() {
				p.kill9()
				x.down()
				close(killed)
			})
			c := &client.Client{Server: x.base, Retries: 8}
			type answer struct {
				r   client.BatchResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				if n == 1 {
					r, err := c.Publish(context.Background(), "acme", "once", json.RawMessage(`{"i":0}`), client.PublishOptions{})
					done <- answer{client.BatchResult{First: r.Seq, Last: r.Seq, Count: 1, Duplicate: r.Duplicate}, err}
					return
				}
				events := make([]any, n)
				for i := range events {
					events[i] = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
				}
				r, err := c.PublishBatch(context.Background(), "acme", "once", events, client.PublishOptions{})
				done <- answer{r, err}
			}()
			select {
			case <-killed:
			case a := <-done:
				t.Fatalf("the publish ended before the kill: %+v %v", a.r, a.err)
			case <-time.After(wait):
				t.Fatal("no answer to kill")
			}
			q := start(t, dir)
			x.point(q)
			var a answer
			select {
			case a = <-done:
			case <-time.After(wait):
				t.Fatal("the publish was not answered after the restart")
			}
			if events, head := q.readAll(t, "once"); len(events) != n || head != int64(n) {
				t.Fatalf("the topic holds %d events, head %d; want %d (the client's retry: %+v %v)", len(events), head, n, a.r, a.err)
			}
			if a.err != nil || !a.r.Duplicate || a.r.First != 1 || a.r.Last != int64(n) || a.r.Count != int64(n) {
				t.Fatalf("the client's retry: %+v %v; want 1..%d as a duplicate", a.r, a.err, n)
			}
			if got := x.connections(); got != 2 {
				t.Fatalf("%d connections reached the proxy, want 2: the cut one and the retry", got)
			}
		})
	}
}

// edgehub publish sends an idempotency key of its own: cut after its
// commit, its retry is answered as a duplicate and the topic holds the
// event once, while a second command with the same body appends (a key
// per command, not per body). Interrupted while its retry waits, it
// exits 1 naming its key, and a publish with that key is the duplicate;
// a refused one (invalid_json) stored nothing and says nothing of a key.
func TestCLIPublishRetriesWithItsOwnKey(t *testing.T) {
	p := start(t, t.TempDir())
	x := newCutProxy(t, p)
	x.arm(func() {})
	body := `{"n":1}`
	if out, errOut, code := cli(t, "", "publish", "acme/cli", body, "--server", x.base); code != 0 || out != `{"seq":1,"duplicate":true}`+"\n" {
		t.Fatalf("publish cut after its commit: exit %d, stdout %q, stderr %q; want seq 1 as a duplicate", code, out, errOut)
	}
	if out, errOut, code := cli(t, "", "publish", "acme/cli", body, "--server", x.base); code != 0 || out != `{"seq":2,"duplicate":false}`+"\n" {
		t.Fatalf("the same body again: exit %d, stdout %q, stderr %q; want seq 2", code, out, errOut)
	}

	x.arm(x.down)
	cmd, out := startCLI(t, "publish", "acme/cli", body, "--server", x.base)
	select {
	case <-x.held: // the retry, waiting for a server
	case <-time.After(wait):
		t.Fatalf("the publish did not retry; stderr:\n%s", out.stderr)
	}
	cmd.Process.Signal(syscall.SIGINT)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if cmd.ProcessState.ExitCode() != 1 {
			t.Fatalf("an interrupted publish: %v, want exit 1; stderr:\n%s", err, out.stderr)
		}
	case <-time.After(wait):
		t.Fatalf("the publish went on after SIGINT; stderr:\n%s", out.stderr)
	}
	m := regexp.MustCompile(`may be stored.*--idempotency-key (\S+) `).FindStringSubmatch(out.stderr.String())
	if m == nil {
		t.Fatalf("the interrupted publish names no key:\n%s", out.stderr)
	}
	if got, errOut, code := cli(t, "", "publish", "acme/cli", body, "--idempotency-key", m[1], "--server", p.base); code != 0 || got != `{"seq":3,"duplicate":true}`+"\n" {
		t.Fatalf("publish again with its key: exit %d, stdout %q, stderr %q; want seq 3 as a duplicate", code, got, errOut)
	}
	if events, _ := p.readAll(t, "cli"); len(events) != 3 {
		t.Fatalf("the topic holds %d events, want 3", len(events))
	}
	if _, errOut, code := cli(t, "", "publish", "acme/cli", "not json", "--server", p.base); code != 1 || strings.Contains(errOut, "may be stored") {
		t.Fatalf("a refused publish: exit %d, stderr %q; want exit 1 and no note: a refusal stores nothing", code, errOut)
	}
}
