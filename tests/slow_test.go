package tests

import (
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/sse"
)

// A watcher that stops reading while more than 20 MB is published gets all
// of it afterwards, in order, with no gap frame; meanwhile every publish is
// answered and a second watcher gets every event, while the first is still
// stalled. The hub sends the stalled stream back to the backlog rather than
// waiting for it or dropping its events.
func TestStalledReaderCatchesUpWithoutGapAndBlocksNoOne(t *testing.T) {
	p := start(t, t.TempDir())
	const publishers, batches, perBatch, pad = 4, 100, 50, 1000
	const total = publishers * batches * perBatch // 20000 events of over 1 KB

	conn, resp := p.rawWatch(t, "slow", "?after=0", 1<<20)
	// From here the stalled watcher reads nothing until publishing is over.

	began := time.Now()
	fast := p.watch(t, "slow", "?after=0", nil)
	fast.hello(t)
	var wg sync.WaitGroup
	for w := 0; w < publishers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < batches; b++ {
				if err := p.tryPublishBatch("slow", (w*batches+b)*perBatch, perBatch, pad); err != nil {
					t.Errorf("publisher %d: %v", w, err)
					return
				}
			}
		}()
	}
	for want := int64(1); want <= total; want++ {
		if e := fast.event(t); e.Seq != want {
			t.Fatalf("second watcher: got %d, want %d", e.Seq, want)
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("published %d events while one watcher was stalled, in %v", total, time.Since(began))

	conn.SetReadDeadline(time.Now().Add(wait))
	d := sse.NewDecoder(resp.Body)
	bytesRead := 0
	for want := int64(0); want <= total; want++ {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("stalled watcher after %d: %v", want, err)
		}
		bytesRead += len(f.Data)
		if want == 0 {
			if f.Event != "hello" {
				t.Fatalf("want hello, got %+v", f)
			}
			continue
		}
		if f.Event != "message" || f.ID != strconv.FormatInt(want, 10) {
			t.Fatalf("stalled watcher: got %s %s, want event %d", f.Event, f.ID, want)
		}
	}
	if bytesRead < 20<<20 {
		t.Fatalf("only %d bytes were published", bytesRead)
	}
	if n := metric(t, p, "edgehub_stream_demotions_total"); n < 1 {
		t.Fatalf("the stalled stream was never demoted (%v): the test did not exercise catch-up", n)
	}
}

// metric reads one unlabelled series from /metrics.
func metric(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(p.metricsText(t))
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
