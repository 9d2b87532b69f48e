package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/loopback"
)

// legacyMain measures one running Edgehub at --server: publish throughput
// and latency, NDJSON batches, fan-out latency, catch-up rate, memory per
// idle stream, and the scenarios that need a server of their own (state,
// retention). Every run is bounded in requests and time; it refuses
// targets that are not loopback.
func legacyMain() {
	server := flag.String("server", "http://127.0.0.1:8080", "hub to measure (loopback only)")
	only := flag.String("only", "", "comma-separated scenarios to run (default all but retention): publish,batch,fanout,catchup,memory,state,retention")
	stateKeys := flag.Int("state-keys", 10000, "keys in the state scenario")
	retainEvents := flag.Int("retention-total", 1000000, "events published in the retention scenario")
	retainKeep := flag.Int("retention-keep", 100000, "the server's --retention-events, for the retention scenario")
	watchers := flag.Int("watchers", 1000, "watchers in the fan-out and memory scenarios")
	rate := flag.Int("rate", 100, "events per second in the fan-out scenario")
	fanoutFor := flag.Duration("fanout-for", 10*time.Second, "how long the fan-out scenario publishes")
	catchupEvents := flag.Int("catchup-events", 100000, "events in the catch-up scenario")
	flag.Parse()
	if err := checkLoopback(*server); err != nil {
		fmt.Fprintln(os.Stderr, "edgeload:", err)
		os.Exit(2)
	}
	l := &load{
		base: strings.TrimRight(*server, "/"),
		run:  fmt.Sprint(time.Now().UnixNano()),
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute,
		}},
	}
	want := func(name string) bool {
		if *only == "" {
			return name != "retention" // it needs a server started with matching --retention-events
		}
		return slices.Contains(strings.Split(*only, ","), name)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"publish", func() error {
			if err := l.publish(1, 2000); err != nil {
				return err
			}
			return l.publish(16, 20000)
		}},
		{"batch", func() error { return l.batch(50, 1000) }},
		{"fanout", func() error { return l.fanout(*watchers, *rate, *fanoutFor) }},
		{"catchup", func() error { return l.catchup(*catchupEvents) }},
		{"memory", func() error { return l.memory(*watchers) }},
		{"state", func() error { return l.state(*stateKeys) }},
		{"retention", func() error { return l.retention(*retainEvents, *retainKeep) }},
	}
	for _, s := range steps {
		if !want(s.name) {
			continue
		}
		if err := s.run(); err != nil {
			fmt.Fprintf(os.Stderr, "edgeload: %s: %v\n", s.name, err)
			os.Exit(1)
		}
	}
}

// checkLoopback refuses a --server that is not on this machine.
func checkLoopback(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("bad --server: %w", err)
	}
	if !loopback.Host(u.Hostname()) {
		return fmt.Errorf("--server %s is not a loopback address", server)
	}
	return nil
}

type load struct {
	base string
	run  string // makes topic names unique per run
	http *http.Client
}

func (l *load) topic(name string) string { return l.run + "-" + name }

func (l *load) client() *client.Client {
	return &client.Client{Server: l.base, HTTP: l.http}
}

// watch is a watch that ends at its first reconnect, whose cause it then
// returns: a measurement must not hide a stream that broke.
func (l *load) watch(ctx context.Context, topic string, o client.WatchOptions, each func(client.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var broke error
	o.OnRetry = func(r client.Retry) { broke = r.Err; cancel() }
	for e, err := range l.client().Watch(ctx, "bench", topic, o) {
		if broke != nil {
			return fmt.Errorf("stream of %s broke: %w", topic, broke)
		}
		if err != nil {
			return err
		}
		if err := each(e); err != nil {
			return err
		}
	}
	return nil
}

// ndjson is size copies of one event, for a batch.
func ndjson(event string, size int) []any {
	return slices.Repeat([]any{json.RawMessage(event)}, size)
}

// publish sends n single events from c concurrent publishers.
func (l *load) publish(c, n int) error {
	topic := l.topic(fmt.Sprintf("publish-%d", c))
	lat := make([][]time.Duration, c)
	var next atomic.Int64
	var failed atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if _, err := l.client().Publish(context.Background(), "bench", topic, []byte(`{"n":1}`), client.PublishOptions{}); err != nil {
					failed.Store(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	el := time.Since(start)
	all := slices.Concat(lat...)
	fmt.Printf("publish  %2d publishers: %6d events in %v = %8.0f events/s; answer latency %s\n",
		c, n, el.Round(time.Millisecond), float64(n)/el.Seconds(), percentiles(all))
	return nil
}

// batch sends n NDJSON batches of size events each, one at a time.
func (l *load) batch(n, size int) error {
	topic := l.topic("batch")
	events := ndjson(`{"n":1,"text":"an event of a batch"}`, size)
	var lat []time.Duration
	start := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := l.client().PublishBatch(context.Background(), "bench", topic, events, client.PublishOptions{}); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	fmt.Printf("batch    %d x %d events: %6d events in %v = %8.0f events/s; answer latency %s\n",
		n, size, n*size, el.Round(time.Millisecond), float64(n*size)/el.Seconds(), percentiles(lat))
	return nil
}

// fanout opens watchers live on one topic, publishes at rate for d with
// the send time in each event, and measures publish-to-receive latency at
// every watcher.
func (l *load) fanout(watchers, rate int, d time.Duration) error {
	topic := l.topic("fanout")
	total := int(d.Seconds() * float64(rate))
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	lat := make([][]time.Duration, watchers)
	var ready, done sync.WaitGroup
	errs := make(chan error, watchers)
	for w := 0; w < watchers; w++ {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			got, first := 0, true
			opened := func(client.Hello) {
				if first {
					first = false
					ready.Done()
				}
			}
			err := l.watch(ctx, topic, client.WatchOptions{OnHello: opened}, func(e client.Event) error {
				var d struct{ Sent int64 }
				if err := json.Unmarshal(e.Data, &d); err != nil {
					return err
				}
				lat[w] = append(lat[w], time.Duration(time.Now().UnixNano()-d.Sent))
				if got++; got == total {
					return io.EOF
				}
				return nil
			})
			if first {
				ready.Done()
			}
			if got != total {
				errs <- fmt.Errorf("watcher got %d of %d events: %v", got, total, err)
			}
		}()
	}
	ready.Wait()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < total; i++ {
		<-tick.C
		body := fmt.Sprintf(`{"sent":%d}`, time.Now().UnixNano())
		if _, err := l.client().Publish(ctx, "bench", topic, []byte(body), client.PublishOptions{}); err != nil {
			return err
		}
	}
	done.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	all := slices.Concat(lat...)
	fmt.Printf("fanout   %d watchers, %d events/s for %v: %d deliveries; latency %s\n",
		watchers, rate, d, len(all), percentiles(all))
	return nil
}

// catchup fills a topic with n events, then times one watcher reading all
// of them from after=0.
func (l *load) catchup(n int) error {
	topic := l.topic("catchup")
	const size = 1000
	events := ndjson(`{"n":1,"text":"an event to catch up on, about a hundred bytes of it in all...."}`, size)
	for i := 0; i < n; i += size {
		if _, err := l.client().PublishBatch(context.Background(), "bench", topic, events, client.PublishOptions{}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := 0
	start := time.Now()
	after := int64(0)
	err := l.watch(ctx, topic, client.WatchOptions{After: &after}, func(client.Event) error {
		if got++; got == n {
			return io.EOF
		}
		return nil
	})
	if got != n {
		return fmt.Errorf("caught up %d of %d: %v", got, n, err)
	}
	el := time.Since(start)
	fmt.Printf("catchup  %d events from after=0 in %v = %8.0f events/s\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	return nil
}

// memory opens n idle streams over 100 topics and reports the server's
// resident memory per stream.
func (l *load) memory(n int) error {
	before, err := l.rss()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready sync.WaitGroup
	var open atomic.Int64
	for i := 0; i < n; i++ {
		ready.Add(1)
		go func() {
			first := true
			opened := func(client.Hello) {
				if first {
					first = false
					open.Add(1)
					ready.Done()
				}
			}
			l.watch(ctx, l.topic(fmt.Sprintf("idle-%d", i%100)), client.WatchOptions{OnHello: opened}, //nolint:errcheck // ended by cancel
				func(client.Event) error { return nil })
			if first {
				ready.Done()
			}
		}()
	}
	ready.Wait()
	if k := open.Load(); k < int64(n) {
		// A refused stream (the server's stream limits) holds nothing of
		// a stream: the measure would be of fewer streams than it says.
		return fmt.Errorf("%d of %d streams opened (raise the server's --max-streams and --max-tenant-streams)", k, n)
	}
	time.Sleep(2 * time.Second) // let the server's allocations settle before reading its RSS
	after, err := l.rss()
	if err != nil {
		return err
	}
	fmt.Printf("memory   %d idle streams on 100 topics: server RSS %0.1f MiB -> %0.1f MiB = %0.1f KiB per stream\n",
		n, before/(1<<20), after/(1<<20), (after-before)/float64(n)/1024)
	return nil
}

// state upserts n distinct keys from 16 publishers, then times the state
// read and a snapshot stream's first frames.
func (l *load) state(n int) error {
	topic := l.topic("state")
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				body := fmt.Sprintf(`{"id":%d,"status":"shipped","note":"some state of key %d"}`, i, i)
				if _, err := l.client().Publish(context.Background(), "bench", topic, []byte(body),
					client.PublishOptions{Key: fmt.Sprintf("key-%d", i)}); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	var reads, snaps []time.Duration
	size := 0
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		resp, err := l.http.Get(l.base + "/v1/tenants/bench/topics/" + topic + "/state")
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
		if err != nil {
			return err
		}
		reads = append(reads, time.Since(t0))
		size = len(b)
		t0 = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		snapshot := false
		err = l.watch(ctx, topic, client.WatchOptions{Snapshot: true,
			OnSnapshot: func(client.Snapshot) { snapshot = true; cancel() },
		}, func(client.Event) error { return nil })
		cancel()
		if !snapshot {
			return fmt.Errorf("snapshot stream: %w", err)
		}
		snaps = append(snaps, time.Since(t0))
	}
	fmt.Printf("state    %d keys (%d KiB): GET state %s; snapshot stream to its snapshot frame %s\n",
		n, size/1024, percentiles(reads), percentiles(snaps))
	return nil
}

// retention publishes total events in batches to a topic of a server that
// keeps keep of them, while a probe publishes single events to another
// topic; it reports how long trimming took and the probe's latency, whose
// maximum shows any stall that trimming caused.
func (l *load) retention(total, keep int) error {
	topic := l.topic("retention")
	stop := make(chan struct{})
	var probe []time.Duration
	var probeErr error
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			t0 := time.Now()
			if _, err := l.client().Publish(context.Background(), "bench", l.topic("probe"), []byte(`1`), client.PublishOptions{}); err != nil {
				probeErr = err
				return
			}
			probe = append(probe, time.Since(t0))
		}
	}()
	before, err := l.metric("edgehub_retention_removed_total")
	if err != nil {
		return err
	}
	const size = 1000
	events := ndjson(`{"n":1,"text":"an event that retention will remove, about a hundred bytes."}`, size)
	start := time.Now()
	for i := 0; i < total; i += size {
		if _, err := l.client().PublishBatch(context.Background(), "bench", topic, events, client.PublishOptions{}); err != nil {
			return err
		}
	}
	published := time.Since(start)
	want := float64(total - keep)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		removed, err := l.metric("edgehub_retention_removed_total")
		if err != nil {
			return err
		}
		if removed-before >= want {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("retention removed %.0f of %.0f rows in 5 minutes", removed-before, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	trimmed := time.Since(start)
	close(stop)
	<-probed
	if probeErr != nil {
		return probeErr
	}
	fmt.Printf("retention %d events published in %v, trimmed to %d after %v; probe publish latency meanwhile %s\n",
		total, published.Round(time.Millisecond), keep, trimmed.Round(time.Millisecond), percentiles(probe))
	return nil
}

func (l *load) rss() (float64, error) { return l.metric("process_resident_memory_bytes") }

// metric reads one unlabelled series from the server's /metrics.
func (l *load) metric(name string) (float64, error) {
	resp, err := l.http.Get(l.base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close() //nolint:errcheck // a failed read shows as a missing series
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	slices.Sort(d)
	p := func(q float64) time.Duration { return d[int(q*float64(len(d)-1))].Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v", p(0.50), p(0.90), p(0.99), p(1))
}
