package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
)

// kill -9 while eight publishers run: after a restart on the same data,
// every answered event is there with its data, sequence numbers are
// contiguous, and the next publish continues at head+1.
func TestKill9WhilePublishingLosesNoAnsweredEvent(t *testing.T) {
	kill9WhilePublishing(t)
}

// --sync normal skips the fsync of each commit, which only a power loss
// can tell: kill -9 loses no answered event there either.
func TestSyncNormalSurvivesKill9(t *testing.T) {
	kill9WhilePublishing(t, "--sync", "normal")
}

func kill9WhilePublishing(t *testing.T, args ...string) {
	dir := t.TempDir()
	p := start(t, dir, args...)
	const publishers, killAfter = 8, 1500
	var mu sync.Mutex
	answered := map[int64]string{}
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	c := &client.Client{Server: p.base}
	for w := 0; w < publishers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				body := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				r, err := c.Publish(context.Background(), "acme", "crash", []byte(body), client.PublishOptions{})
				if err != nil {
					select {
					case <-killed:
						return // the server is gone: this publish was never answered
					default:
						t.Errorf("publish before the kill: %v", err)
						return
					}
				}
				mu.Lock()
				answered[r.Seq] = body
				n := len(answered)
				mu.Unlock()
				if n >= killAfter {
					once.Do(func() {
						close(killed)
						p.kill9()
					})
				}
			}
		}()
	}
	wg.Wait()

	p2 := start(t, dir, args...)
	_, head := p2.readAnswered(t, "crash", answered)
	if seq := p2.publish(t, "crash", `"after restart"`); seq != head+1 {
		t.Fatalf("next publish got %d, want %d", seq, head+1)
	}
	t.Logf("%d answered before kill -9, %d stored", len(answered), head)
}

// readAnswered reads a topic whole and checks that it has no hole and
// holds every answered event (data by seq) as it was answered.
func (p *proc) readAnswered(t *testing.T, topic string, answered map[int64]string) ([]envelope, int64) {
	t.Helper()
	events, head := p.readAll(t, topic)
	if int64(len(events)) != head {
		t.Fatalf("%d events stored, head %d", len(events), head)
	}
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("hole: position %d holds seq %d", i, e.Seq)
		}
	}
	for seq, body := range answered {
		if seq < 1 || seq > head {
			t.Fatalf("answered seq %d is not stored (head %d)", seq, head)
		}
		if got := string(events[seq-1].Data); got != body {
			t.Fatalf("seq %d: stored %s, answered %s", seq, got, body)
		}
	}
	return events, head
}

// SIGTERM ends open streams with a whole last frame and a clean end of the
// body, answers what was accepted and exits 0; the events stay.
func TestSigtermEndsStreamsCleanlyAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	s := p.watch(t, "term", "", nil)
	s.hello(t)
	seq := p.publish(t, "term", `"before"`)
	if e := s.event(t); e.Seq != seq {
		t.Fatalf("got %d", e.Seq)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	if p.err != nil {
		t.Fatalf("exit after SIGTERM: %v", p.err)
	}
	for f := range s.frames {
		t.Fatalf("unexpected frame after shutdown: %+v", f)
	}
	if s.err != io.EOF {
		t.Fatalf("stream ended with %v, want a clean end of body", s.err)
	}
	p2 := start(t, dir)
	if events, head := p2.readAll(t, "term"); head != 1 || len(events) != 1 {
		t.Fatalf("after restart: head %d, %d events", head, len(events))
	}
	resp, err := http.Get(p2.base + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A watcher that has stopped reading does not hold up SIGTERM: the server
// still exits 0, promptly, and keeps what it answered.
func TestSigtermWithAStalledWatcherExitsZero(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "--write-timeout", "10m")
	for i := 0; i < 50; i++ {
		p.publishBatch(t, "stall", i*500, 500, 1000) // 25 MB, more than loopback buffers hold
	}
	p.rawWatch(t, "stall", "?after=0", 16<<10)
	// Wait until the stream is stuck in a write: its deliveries stop
	// growing short of the backlog.
	for last, deadline := -1.0, time.Now().Add(wait); ; {
		n := metric(t, p, "edgehub_deliveries_total")
		if n == last && n < 25000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher never stalled (%v deliveries)", n)
		}
		last = n
		time.Sleep(200 * time.Millisecond) // polling the counter until it stands still
	}
	began := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(wait):
		t.Fatal("no exit after SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("exit after SIGTERM with a stalled watcher: %v", p.err)
	}
	t.Logf("exited %v after SIGTERM", time.Since(began).Round(time.Millisecond))
	p2 := start(t, dir)
	if _, head := p2.readAll(t, "stall"); head != 25000 {
		t.Fatalf("after restart: head %d", head)
	}
}
