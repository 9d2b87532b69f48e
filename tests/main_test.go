// Package tests holds black-box tests: each starts the real edgehub binary
// on loopback with its own data directory and talks to it over HTTP only.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/pgtest"
	"github.com/edgehub/edgehub/sse"
)

// wait bounds how long a test waits for something that must happen; it is
// a hang guard, not a timing assertion.
const wait = 30 * time.Second

// binary is the server under test, built with -race when the tests run
// with it; plainBinary is built without, for the chaos runs, whose
// throughput (and so whether retention and slow readers come into play)
// the race detector would cut tenfold.
var binary, plainBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edgehub-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, plainBinary = filepath.Join(dir, "edgehub"), filepath.Join(dir, "edgehub")
	if len(raceFlags) > 0 {
		plainBinary = filepath.Join(dir, "edgehub-plain")
		if err := goBuild(plainBinary); err != nil {
			fmt.Fprintln(os.Stderr, "build edgehub:", err)
			os.Exit(1)
		}
	}
	if err := goBuild(binary, raceFlags...); err != nil {
		fmt.Fprintln(os.Stderr, "build edgehub:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goBuild builds cmd/edgehub to out with the given extra build flags.
func goBuild(out string, flags ...string) error {
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, "../cmd/edgehub")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// proc is one running edgehub serve.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	data   string
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error
}

// listening finds the address in the server's first log line, in either
// log format.
var listening = regexp.MustCompile(`msg=listening addr=(\S+)|"msg":"listening","addr":"([^"]+)"`)

// start runs edgehub serve --dev on a free loopback port with data in dir.
func start(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	return startAt(t, binary, nil, dir, "127.0.0.1:0", append([]string{"--dev"}, args...)...)
}

// startAt runs bin (with env added to the environment) on addr.
func startAt(t *testing.T, bin string, env []string, dir, addr string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, data: dir, exited: make(chan struct{})}
	// No publish rate limit unless a test sets one: these tests publish as
	// fast as they can on one tenant. Later flags override earlier ones.
	base := []string{"serve", "--addr", addr, "--data", dir, "--publish-rate", "0"}
	if pgtest.Enabled() && !slices.Contains(args, "--store") {
		base = append(base, "--store", storeFor(t, dir))
	}
	p.cmd = exec.Command(bin, append(base, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				listen <- m[1] + m[2]
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("server log:\n%s", p.logText())
		}
	})
	select {
	case a := <-listen:
		p.base = "http://" + a
	case <-p.exited:
		t.Fatalf("server exited: %v\n%s", p.err, p.logText())
	case <-time.After(wait):
		t.Fatalf("server did not start:\n%s", p.logText())
	}
	return p
}

// stores maps a data directory to the Postgres database that stands for
// it when the suite runs on Postgres: a test that starts a server again on
// its directory finds its data again.
var stores sync.Map

func storeFor(t *testing.T, dir string) string {
	if url, ok := stores.Load(dir); ok {
		return url.(string)
	}
	url := pgtest.Database(t)
	stores.Store(dir, url)
	return url
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *proc) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *proc) client() *client.Client {
	return &client.Client{Server: p.base}
}

// do sends one request with body (none if empty), with bearer as the
// token unless empty, and returns the answer's status, headers and whole
// body: the shape of every plain request a test makes.
func do(t *testing.T, method, url, bearer, body string) (int, http.Header, []byte) {
	t.Helper()
	return doWith(t, http.DefaultClient, method, url, bearer, body)
}

// doWith is do through c.
func doWith(t *testing.T, c *http.Client, method, url, bearer, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// clientFrom is an HTTP client whose connections come from ip, a
// loopback address (Linux routes all of 127/8 to lo): the server sees
// another client address.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (p *proc) topicURL(topic, route string) string {
	return p.base + "/v1/tenants/acme/topics/" + topic + "/" + route
}

// publish posts one JSON body and returns its sequence number.
func (p *proc) publish(t *testing.T, topic, body string) int64 {
	t.Helper()
	seq, err := p.tryPublish(topic, body)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// tryPublish is publish for a goroutine other than the test's, which must
// not call t.Fatal.
func (p *proc) tryPublish(topic, body string) (int64, error) {
	r, err := p.client().Publish(context.Background(), "acme", topic, []byte(body), client.PublishOptions{})
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	return r.Seq, nil
}

// publishBatch posts n events as NDJSON, each {"i": from+k} padded to pad
// bytes.
func (p *proc) publishBatch(t *testing.T, topic string, from, n, pad int) {
	t.Helper()
	if err := p.tryPublishBatch(topic, from, n, pad); err != nil {
		t.Fatal(err)
	}
}

// tryPublishBatch is publishBatch for a goroutine other than the test's.
func (p *proc) tryPublishBatch(topic string, from, n, pad int) error {
	filler := strings.Repeat("x", pad)
	events := make([]any, n)
	for k := range events {
		events[k] = json.RawMessage(fmt.Sprintf("{\"i\":%d,\"pad\":%q}", from+k, filler))
	}
	if _, err := p.client().PublishBatch(context.Background(), "acme", topic, events, client.PublishOptions{}); err != nil {
		return fmt.Errorf("publish batch: %w", err)
	}
	return nil
}

type readAnswer struct {
	Events    []envelope `json:"events"`
	Head      int64      `json:"head"`
	NextAfter int64      `json:"next_after"`
}

type envelope struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	Time string          `json:"time"`
	Key  string          `json:"key"`
	Op   string          `json:"op"`
	Data json.RawMessage `json:"data"`
}

// readAll pages through the read API from after=0.
func (p *proc) readAll(t *testing.T, topic string) ([]envelope, int64) {
	t.Helper()
	var all []envelope
	after, head := int64(0), int64(0)
	for {
		resp, err := http.Get(fmt.Sprintf("%s?after=%d&limit=1000", p.topicURL(topic, "events"), after))
		if err != nil {
			t.Fatal(err)
		}
		var a readAnswer
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		head = a.Head
		if len(a.Events) == 0 {
			return all, head
		}
		all = append(all, a.Events...)
		after = a.NextAfter
	}
}

// stream is an open watch with its frames arriving on a channel.
type stream struct {
	resp   *http.Response
	frames chan sse.Frame
	err    error
}

// watch opens a stream; headers are set on the request as given.
func (p *proc) watch(t *testing.T, topic, query string, header map[string]string) *stream {
	t.Helper()
	return openStream(t, p.topicURL(topic, "watch")+query, header)
}

// openStream opens the stream at url, which must answer 200.
func openStream(t *testing.T, url string, header map[string]string) *stream {
	t.Helper()
	resp := get200(t, url, header)
	s := &stream{resp: resp, frames: make(chan sse.Frame, 4096)}
	go func() {
		defer close(s.frames)
		d := sse.NewDecoder(resp.Body)
		for {
			f, err := d.Next()
			if err != nil {
				s.err = err
				return
			}
			s.frames <- f
		}
	}()
	t.Cleanup(s.close)
	return s
}

// get200 sends a GET to url with the headers given and fails the test
// unless the answer is 200; the caller closes the body.
func get200(t *testing.T, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return resp
}

func (s *stream) close() { s.resp.Body.Close() }

func (s *stream) next(t *testing.T) sse.Frame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			t.Fatalf("stream ended: %v", s.err)
		}
		return f
	case <-time.After(wait):
		t.Fatal("no frame arrived")
		panic("unreachable")
	}
}

// hello reads the hello frame and returns its head and position.
func (s *stream) hello(t *testing.T) (head, position int64) {
	t.Helper()
	f := s.next(t)
	var h struct{ Head, Position int64 }
	if f.Event != "hello" || json.Unmarshal([]byte(f.Data), &h) != nil {
		t.Fatalf("want hello, got %+v", f)
	}
	return h.Head, h.Position
}

// event reads the next frame, which must be an event, and decodes it.
func (s *stream) event(t *testing.T) envelope {
	t.Helper()
	f := s.next(t)
	var e envelope
	if err := json.Unmarshal([]byte(f.Data), &e); err != nil || f.Event == "gap" || f.ID != fmt.Sprint(e.Seq) {
		t.Fatalf("want an event frame, got %+v (%v)", f, err)
	}
	return e
}

// smallBufferDialer sets the socket's receive buffer before connecting, so
// the TCP window stays small: a reader that stops reading then stalls the
// server's writes quickly, as over a real network, instead of the kernel
// taking megabytes off the server's hands (loopback buffers grow to 32 MB).
func smallBufferDialer(size int) *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		})
	}}
}

// rawWatch opens a watch on its own connection and reads only the response
// headers: the caller decides when, if ever, the body is read.
func (p *proc) rawWatch(t *testing.T, topic, query string, rcvbuf int) (net.Conn, *http.Response) {
	t.Helper()
	conn, err := smallBufferDialer(rcvbuf).Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, _ := http.NewRequest(http.MethodGet, p.topicURL(topic, "watch")+query, nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("raw watch: %v %v", resp, err)
	}
	return conn, resp
}
