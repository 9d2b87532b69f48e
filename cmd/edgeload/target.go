package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Target is one hub the benchmark measures: a server it starts on
// loopback, publishes to and watches over HTTP. A new peer is one more
// implementation (see plans/017-benchmark.md).
type Target interface {
	// Name is the target's name on the command line and in the output.
	Name() string
	// Supports says whether the target takes part in a scenario.
	Supports(scenario string) bool
	// Start runs a fresh server whose state lives under dir and returns
	// once it answers. Stop ends it and waits for it to exit.
	Start(ctx context.Context, dir string) error
	Stop() error
	// PID is the running server's process, whose resident memory the
	// idle and topics scenarios read.
	PID() int
	// Publish sends one event whose data is payload (a JSON object) and
	// returns the position the hub answered with, 0 if it gives none.
	Publish(ctx context.Context, topic string, payload []byte) (int64, error)
	// PublishBatch sends payloads in one request, to be stored in order,
	// and returns the position of each (nil if the hub gives none); it
	// returns errNoBatch if the hub has no batch API.
	PublishBatch(ctx context.Context, topic string, payloads [][]byte) ([]int64, error)
	// Watch opens one stream on topic, from the start of its history or
	// live from now, calls ready once the stream is subscribed (a publish
	// after that reaches it) and deliver for each event in the order the
	// stream holds them. It returns when deliver returns an error (errDone
	// to stop cleanly), ctx ends or the stream fails.
	Watch(ctx context.Context, topic string, fromStart bool, ready func(), deliver func(Delivery) error) error
}

// hubCounter is a target that says how many topics it holds in memory
// (Edgehub: its running hub actors), for the topics scenario.
type hubCounter interface {
	HubsActive(ctx context.Context) (float64, error)
}

// Delivery is one event as a watcher received it.
type Delivery struct {
	Pos  int64 // the hub's position of the event (Edgehub's seq), 0 if none
	N    int64 // the benchmark's own counter in the payload, from 1
	Sent int64 // the publisher's clock (Unix ns) just before it sent the event
	At   int64 // the watcher's clock (Unix ns) when it read the event
}

var (
	errNoBatch = errors.New("no batch API")
	// errDone ends a watch that has what it wanted.
	errDone = errors.New("done")
)

// payload is the data of the event numbered n: {"n":N,"sent":T} with
// optional padding, the shape every parser here expects.
func payload(n int64, pad string) []byte {
	b := make([]byte, 0, 48+len(pad))
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `,"sent":`...)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	if pad != "" {
		b = append(b, `,"pad":"`...)
		b = append(b, pad...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// parsePayload finds the payload in b (an envelope or a push around it)
// and reads its counter and send time.
func parsePayload(b []byte) (n, sent int64, ok bool) {
	i := bytes.Index(b, []byte(`{"n":`))
	if i < 0 {
		return 0, 0, false
	}
	n, rest, ok := readInt(b[i+len(`{"n":`):])
	if !ok || !bytes.HasPrefix(rest, []byte(`,"sent":`)) {
		return 0, 0, false
	}
	sent, _, ok = readInt(rest[len(`,"sent":`):])
	return n, sent, ok
}

// intField reads the integer after key (such as `"seq":`) in b.
func intField(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	v, _, ok := readInt(b[i+len(key):])
	return v, ok
}

// readInt reads a non-negative decimal integer at the start of b.
func readInt(b []byte) (int64, []byte, bool) {
	var v int64
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		v = v*10 + int64(b[i]-'0')
		i++
	}
	return v, b[i:], i > 0
}

// process is a server binary the benchmark runs; its standard error is
// kept (the last 64 KiB) for the report when it fails.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	mu     sync.Mutex
	log    []byte
}

// startProcess runs bin with args in dir. If listen is set, it waits for a
// stderr line it matches and returns the address in its first group.
func startProcess(ctx context.Context, dir, bin string, listen *regexp.Regexp, args ...string) (*process, string, error) {
	return startProcessEnv(ctx, dir, nil, bin, listen, args...)
}

// startProcessEnv is startProcess with env added to this process's
// environment (later entries win).
func startProcessEnv(ctx context.Context, dir string, env []string, bin string, listen *regexp.Regexp, args ...string,
) (*process, string, error) {
	p := &process{exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = io.Discard
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, "", err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.log = append(p.log, line...)
			p.log = append(p.log, '\n')
			if len(p.log) > 64<<10 {
				p.log = p.log[len(p.log)-32<<10:]
			}
			p.mu.Unlock()
			if listen != nil {
				if m := listen.FindSubmatch(line); m != nil {
					select {
					case addr <- string(m[1]):
					default:
					}
				}
			}
		}
		io.Copy(io.Discard, stderr) //nolint:errcheck // only drains a pipe whose lines were too long
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if listen == nil {
		return p, "", nil
	}
	select {
	case a := <-addr:
		return p, a, nil
	case <-p.exited:
		return nil, "", fmt.Errorf("%s exited: %v\n%s", bin, p.err, p.stderr())
	case <-ctx.Done():
	case <-time.After(time.Minute):
	}
	p.stop() //nolint:errcheck // it failed to start; its log says why
	return nil, "", fmt.Errorf("%s did not start:\n%s", bin, p.stderr())
}

func (p *process) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.log)
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM, then SIGKILL after 10 s, and waits for the exit.
// It returns an error if the server had exited before.
func (p *process) stop() error {
	if err := p.alive(); err != nil {
		return err
	}
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited meanwhile; the wait below tells
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill() //nolint:errcheck // as above
		<-p.exited
		return fmt.Errorf("server did not stop within 10 s of SIGTERM:\n%s", p.stderr())
	}
	if p.err != nil { // a race-enabled build that found a race exits 66
		return fmt.Errorf("server stopped with %v:\n%s", p.err, p.stderr())
	}
	return nil
}

// alive returns an error holding the server's log if it has exited.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("server exited: %v\n%s", p.err, p.stderr())
	default:
		return nil
	}
}

// freePort returns a loopback port that was free a moment ago, for a
// server that cannot listen on port 0 and say which port it got.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close() //nolint:errcheck // a listener that never accepted
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, p *process, url string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := p.alive(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close() //nolint:errcheck // only the status matters
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within a minute:\n%s", url, p.stderr())
}

// rssBytes is the resident memory of process pid (VmRSS in /proc).
func rssBytes(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}

// poster sends publish requests over kept-alive connections.
var poster = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute},
	Timeout:   time.Minute,
}

// post sends body to url and returns the answer, or an error for any
// status but 200 and 201.
func post(ctx context.Context, url, contentType string, header http.Header, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := poster.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}
