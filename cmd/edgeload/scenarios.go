package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// result is what one scenario measured on one target in one round.
type result struct {
	metrics    map[string]float64
	violations violations
}

func newResult() *result { return &result{metrics: map[string]float64{}, violations: violations{}} }

// latencies adds the p50, p90, p99 and max of d (in ns) in milliseconds.
func (r *result) latencies(prefix string, d []int64) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(d)))) - 1
		return float64(d[max(i, 0)]) / 1e6
	}
	r.metrics[prefix+"p50_ms"] = q(0.50)
	r.metrics[prefix+"p90_ms"] = q(0.90)
	r.metrics[prefix+"p99_ms"] = q(0.99)
	r.metrics[prefix+"max_ms"] = float64(d[len(d)-1]) / 1e6
}

// warm publishes a few events to a topic of their own, so that a
// scenario does not time the first connection and the first topic.
func warm(ctx context.Context, t Target) error {
	for i := range 20 {
		if _, err := t.Publish(ctx, "warmup", payload(int64(i+1), "")); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// publishers publishes n events to one topic from c concurrent
// publishers, each waiting for its answer before it sends the next: events
// per second, answer latency, and the answered positions, which must be
// 1..n once each (rising, with one publisher).
func publishers(ctx context.Context, t Target, c, n int) (*result, error) {
	if err := warm(ctx, t); err != nil {
		return nil, err
	}
	topic := fmt.Sprintf("publish%d", c)
	return publishLoad(ctx, c, n, c == 1, func(ctx context.Context, _ int, i int64) (string, int64, error) {
		p, err := t.Publish(ctx, topic, payload(i, ""))
		return topic, p, err
	})
}

// spreadTopics is how many topics topics16 publishes over.
const spreadTopics = 1000

// topicsSpread publishes n events from c concurrent publishers, event i
// to topic (i-1) mod topics, each publisher waiting for its answer: events
// per second, answer latency, and on each topic answered positions 1..k
// once each for its k events. Two publishers can have events of one
// topic in flight at once, so their order is not checked.
func topicsSpread(ctx context.Context, t Target, c, n, topics int) (*result, error) {
	if err := warm(ctx, t); err != nil {
		return nil, err
	}
	return publishLoad(ctx, c, n, false, func(ctx context.Context, _ int, i int64) (string, int64, error) {
		topic := "spread-" + strconv.FormatInt((i-1)%int64(topics), 10)
		p, err := t.Publish(ctx, topic, payload(i, ""))
		return topic, p, err
	})
}

// tenantHub is a target with tenants, and perhaps several processes
// (Edgehub): tenants16 gives each publisher a tenant of its own, all on
// one process, as a tenant's webhooks would reach the process that its
// load balancer pins it to.
type tenantHub interface {
	Procs() int
	// PublishTenant publishes to a tenant's topic on one process (0 to
	// Procs()-1).
	PublishTenant(ctx context.Context, proc int, tenant, topic string, data []byte) (int64, error)
}

// tenantsSpread publishes n events from c concurrent publishers, each
// waiting for its answer, publisher w on topic "tenants16" of tenant
// bench-w on process w mod the target's processes (a target without
// tenants: on topic tenants16-w). Each publisher first sends one event
// to its tenant, untimed, so that no first request of a tenant is timed.
// Events per second, answer latency, and each publisher's answered
// positions 1..k, rising.
func tenantsSpread(ctx context.Context, t Target, c, n int) (*result, error) {
	if err := warm(ctx, t); err != nil {
		return nil, err
	}
	th, tenants := t.(tenantHub)
	send := func(ctx context.Context, w int, topic string, data []byte) (string, int64, error) {
		if !tenants {
			topic = fmt.Sprintf("%s-%d", topic, w)
			p, err := t.Publish(ctx, topic, data)
			return topic, p, err
		}
		tenant := fmt.Sprintf("bench-%d", w)
		p, err := th.PublishTenant(ctx, w%th.Procs(), tenant, topic, data)
		return tenant + "/" + topic, p, err
	}
	for w := range c {
		if _, _, err := send(ctx, w, "warmup", payload(1, "")); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	return publishLoad(ctx, c, n, true, func(ctx context.Context, w int, i int64) (string, int64, error) {
		return send(ctx, w, "tenants16", payload(i, ""))
	})
}

// publishLoad runs c concurrent publishers over events 1..n (each takes
// the next number when its last publish is answered), timing each
// publish, whose send names where it went (a topic) and answers the
// position. Each destination's answered positions must be 1..k once
// each for its k events, and rising if ordered.
func publishLoad(ctx context.Context, c, n int, ordered bool,
	send func(ctx context.Context, publisher int, i int64) (dest string, pos int64, err error),
) (*result, error) {
	type answer struct {
		dest string
		pos  int64
	}
	lat := make([][]int64, c)
	answers := make([][]answer, c)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && failed.Load() == nil; i = next.Add(1) {
				t0 := time.Now()
				dest, p, err := send(ctx, w, i)
				if err != nil {
					failed.Store(&err)
					return
				}
				lat[w] = append(lat[w], int64(time.Since(t0)))
				answers[w] = append(answers[w], answer{dest, p})
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	el := time.Since(start)
	r := newResult()
	r.metrics["events_per_s"] = float64(n) / el.Seconds()
	r.latencies("", slices.Concat(lat...))
	// Each publisher's answers are in its order; a destination's are
	// checked in the order of its publishers', which is its order when one
	// publisher alone sends to it.
	byDest := map[string][]int64{}
	var dests []string
	for _, as := range answers {
		for _, a := range as {
			if _, ok := byDest[a.dest]; !ok {
				dests = append(dests, a.dest)
			}
			byDest[a.dest] = append(byDest[a.dest], a.pos)
		}
	}
	for _, d := range dests {
		checkPositions(r.violations, byDest[d], int64(len(byDest[d])), ordered)
	}
	return r, nil
}

// batches publishes count NDJSON batches of size events of about 100
// bytes, one at a time: events per second and batch answer latency.
func batches(ctx context.Context, t Target, count, size int) (*result, error) {
	if err := warm(ctx, t); err != nil {
		return nil, err
	}
	pad := strings.Repeat("x", 60)
	var lat, pos []int64
	start := time.Now()
	for b := range count {
		data := make([][]byte, size)
		for i := range data {
			data[i] = payload(int64(b*size+i+1), pad)
		}
		t0 := time.Now()
		p, err := t.PublishBatch(ctx, "batch", data)
		if err != nil {
			return nil, err
		}
		lat = append(lat, int64(time.Since(t0)))
		pos = append(pos, p...)
	}
	el := time.Since(start)
	r := newResult()
	r.metrics["events_per_s"] = float64(count*size) / el.Seconds()
	r.latencies("", lat)
	checkPositions(r.violations, pos, int64(count*size), true)
	return r, nil
}

// watcher is one stream of the fan-out, catch-up or idle scenarios.
type watcher struct {
	track *tracker
	lat   []int64
	last  int64 // Unix ns of its last delivery
	err   error // how its stream ended; read it once the stream is done
	// openErr is err for a stream that ended before it was subscribed,
	// set before it counts as ready.
	openErr error
	ready   atomic.Bool
	ended   atomic.Bool // its stream is over
}

// openWatchers opens n streams, 64 at a time, each on the topic that
// topicOf names, and returns once every stream is subscribed or has
// failed. Each expects events numbered 1..capacity at most.
func openWatchers(ctx context.Context, t Target, n int, topicOf func(int) string, fromStart bool, capacity int64,
	strict bool, done *sync.WaitGroup,
) ([]*watcher, error) {
	ws := make([]*watcher, n)
	var ready sync.WaitGroup
	gate := make(chan struct{}, 64)
	for i := range ws {
		w := &watcher{track: newTracker(capacity, strict), lat: make([]int64, 0, capacity)}
		ws[i] = w
		ready.Add(1)
		select {
		case gate <- struct{}{}:
		case <-ctx.Done():
			ready.Done()
			return ws[:i], ctx.Err()
		}
		done.Go(func() {
			markReady := func() {
				if w.ready.CompareAndSwap(false, true) {
					<-gate
					ready.Done()
				}
			}
			err := t.Watch(ctx, topicOf(i), fromStart, markReady, func(d Delivery) error {
				w.track.add(d)
				w.last = d.At
				if d.Sent > 0 {
					w.lat = append(w.lat, d.At-d.Sent)
				}
				return nil
			})
			if !w.ready.Load() {
				w.openErr = err
			}
			markReady()
			w.err = err
			w.ended.Store(true)
		})
	}
	wait := make(chan struct{})
	go func() {
		ready.Wait()
		close(wait)
	}()
	select {
	case <-wait:
	case <-ctx.Done():
		return ws, ctx.Err()
	}
	failed := 0
	var first error
	for _, w := range ws {
		if w.openErr != nil {
			failed++
			if first == nil {
				first = w.openErr
			}
		}
	}
	if failed > 0 {
		return ws, fmt.Errorf("%d of %d streams failed to open: %w", failed, n, first)
	}
	return ws, nil
}

// drain waits until every watcher has total events or its stream is over
// or, after a quiet period with no new delivery, gives up.
func drain(ctx context.Context, ws []*watcher, total int64, quiet time.Duration) {
	var lastGot int64 = -1
	quietSince := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var got int64
		over := true
		for _, w := range ws {
			g := atomic.LoadInt64(&w.track.got)
			got += g
			over = over && (g >= total || w.ended.Load())
		}
		if over {
			return
		}
		if got != lastGot {
			lastGot, quietSince = got, time.Now()
		} else if time.Since(quietSince) > quiet {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// settle ends the watchers' streams and adds what they saw to r: the
// violations of each stream against events 1..total, and the latencies.
func settle(r *result, ws []*watcher, total int64, cancel func(), done *sync.WaitGroup) {
	cancel()
	done.Wait()
	var all [][]int64
	for _, w := range ws {
		w.track.want = total
		r.violations.addTracker(w.track)
		if w.err != nil && !errors.Is(w.err, context.Canceled) {
			r.violations.add("stream_failed", 1)
		}
		all = append(all, w.lat)
	}
	r.latencies("", slices.Concat(all...))
}

// fanout opens watchers live on one topic, then publishes for d from one
// publisher that sends rate events a second on a fixed schedule, each
// once the previous one is answered (so a slow answer makes the next ones
// go at once, and a saturated machine shows as a lower achieved rate):
// the latency from just before each publish to its receipt at every
// watcher, the publisher's achieved rate, deliveries a second, and the
// correctness of every stream against the events published.
func fanout(ctx context.Context, t Target, watchers, rate int, d time.Duration, strict bool) (*result, error) {
	return fanoutOn(ctx, t, "fanout", func(int) string { return "fanout" }, watchers, rate, d, strict)
}

// fanoutOn is fanout publishing to topic, watcher i watching watchOf(i).
func fanoutOn(ctx context.Context, t Target, topic string, watchOf func(int) string, watchers, rate int, d time.Duration, strict bool) (*result, error) {
	capacity := max(int64(d.Seconds()*float64(rate)), 1)
	var done sync.WaitGroup
	defer done.Wait() // after cancel, which is deferred later and so runs first
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := time.Now()
	ws, err := openWatchers(wctx, t, watchers, watchOf, false, capacity, strict, &done)
	if err != nil {
		return nil, err
	}
	openSeconds := time.Since(opened).Seconds()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var published int64
	for published < capacity && time.Since(start) < d {
		if wait := time.Until(start.Add(time.Duration(published) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := t.Publish(ctx, topic, payload(published+1, "")); err != nil {
			return nil, err
		}
		published++
	}
	publishing := time.Since(start)
	drain(ctx, ws, published, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // a duplicate after the last event still counts
	r := newResult()
	settle(r, ws, published, cancel, &done)
	var last int64
	deliveries := 0
	for _, w := range ws {
		deliveries += int(w.track.got)
		last = max(last, w.last)
	}
	r.metrics["publish_rate"] = float64(published) / publishing.Seconds()
	if last > 0 {
		r.metrics["deliveries_per_s"] = float64(deliveries) / (float64(last-start.UnixNano()) / 1e9)
	}
	r.metrics["open_s"] = openSeconds
	return r, nil
}

// catchup publishes k events (in batches of 1000 if the target has a
// batch API, else one by one), then times one watcher that reads the whole
// history from the start: events a second, and whether it got every event
// once, in order.
func catchup(ctx context.Context, t Target, k int, strict bool) (*result, error) {
	pad := strings.Repeat("x", 60)
	const size = 1000
	for i := 0; i < k; i += size {
		data := make([][]byte, min(size, k-i))
		for j := range data {
			data[j] = payload(int64(i+j+1), pad)
		}
		if _, err := t.PublishBatch(ctx, "catchup", data); errors.Is(err, errNoBatch) {
			for _, p := range data {
				if _, err := t.Publish(ctx, "catchup", p); err != nil {
					return nil, err
				}
			}
		} else if err != nil {
			return nil, err
		}
	}
	var done sync.WaitGroup
	defer done.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	ws, err := openWatchers(wctx, t, 1, func(int) string { return "catchup" }, true, int64(k), strict, &done)
	if err != nil {
		return nil, err
	}
	drain(ctx, ws, int64(k), 10*time.Second)
	r := newResult()
	settle(r, ws, int64(k), cancel, &done)
	for _, m := range []string{"p50_ms", "p90_ms", "p99_ms", "max_ms"} {
		delete(r.metrics, m) // the events were sent before the watcher came: no latency to speak of
	}
	w := ws[0]
	if w.err != nil && !errors.Is(w.err, context.Canceled) {
		return r, w.err
	}
	complete := 0.0
	if w.track.got == int64(k) {
		complete = 1
	}
	r.metrics["complete"] = complete
	if w.last > 0 {
		r.metrics["seconds"] = float64(w.last-start.UnixNano()) / 1e9
		r.metrics["events_per_s"] = float64(w.track.got) / r.metrics["seconds"]
	}
	return r, nil
}

// idle opens n streams spread over 100 topics and reads the server's
// resident memory before they open and once they have sat for settle.
func idle(ctx context.Context, t Target, n int, settle time.Duration) (*result, error) {
	time.Sleep(settle / 4)
	before, err := rssBytes(t.PID())
	if err != nil {
		return nil, err
	}
	var done sync.WaitGroup
	defer done.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := openWatchers(wctx, t, n, func(i int) string { return fmt.Sprintf("idle-%d", i%100) }, false, 0, false,
		&done); err != nil {
		return nil, err
	}
	time.Sleep(settle) // let the server's allocations settle before reading its RSS
	after, err := rssBytes(t.PID())
	if err != nil {
		return nil, err
	}
	r := newResult()
	r.metrics["rss_before_mib"] = before / (1 << 20)
	r.metrics["rss_after_mib"] = after / (1 << 20)
	r.metrics["kib_per_stream"] = (after - before) / float64(n) / 1024
	return r, nil
}

// tenantWatcher is a target with tenant streams (Edgehub), for
// tenant-idle.
type tenantWatcher interface {
	WatchTenant(ctx context.Context, query string, ready func()) error
}

// tenantIdle opens n tenant streams of the publishers' tenant that select
// other topics, half by exact name and half by pattern, and then runs
// publish16: what idle tenant streams cost a publish.
func tenantIdle(ctx context.Context, t Target, n, events int) (*result, error) {
	tw, ok := t.(tenantWatcher)
	if !ok {
		return nil, fmt.Errorf("%s has no tenant streams", t.Name())
	}
	var done sync.WaitGroup
	defer done.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ready sync.WaitGroup
	failed := make(chan error, n)
	gate := make(chan struct{}, 64) // streams opening at once
	for i := range n {
		q := fmt.Sprintf("topic=idle-%d", i)
		if i%2 == 1 {
			q = fmt.Sprintf("pattern=idle-%d-*", i)
		}
		ready.Add(1)
		gate <- struct{}{}
		done.Go(func() {
			var once sync.Once
			mark := func() { once.Do(func() { <-gate; ready.Done() }) }
			err := tw.WatchTenant(wctx, q, mark)
			if wctx.Err() == nil {
				failed <- fmt.Errorf("tenant stream %s: %w", q, err)
			}
			mark()
		})
	}
	ready.Wait()
	select {
	case err := <-failed:
		return nil, err
	default:
	}
	r, err := publishers(ctx, t, 16, events)
	select {
	case ferr := <-failed:
		return nil, ferr
	default:
	}
	return r, err
}

// topics publishes one event to each of n topics from 16 publishers:
// topics a second and the server's resident memory after. For a target
// that counts the topics it holds in memory, it then waits (up to a
// minute) until they are passivated and reads the memory again.
func topics(ctx context.Context, t Target, n int) (*result, error) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && failed.Load() == nil; i = next.Add(1) {
				if _, err := t.Publish(ctx, fmt.Sprintf("topic-%d", i), payload(1, "")); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	el := time.Since(start)
	r := newResult()
	r.metrics["seconds"] = el.Seconds()
	r.metrics["topics_per_s"] = float64(n) / el.Seconds()
	rss, err := rssBytes(t.PID())
	if err != nil {
		return nil, err
	}
	r.metrics["rss_after_mib"] = rss / (1 << 20)
	hc, ok := t.(hubCounter)
	if !ok {
		return r, nil
	}
	touched := time.Now()
	active, err := hc.HubsActive(ctx)
	if err != nil {
		return nil, err
	}
	r.metrics["hubs_active_after"] = active
	for active > 0 && time.Since(touched) < time.Minute {
		time.Sleep(250 * time.Millisecond)
		if active, err = hc.HubsActive(ctx); err != nil {
			return nil, err
		}
	}
	r.metrics["hubs_active_end"] = active
	if active == 0 {
		r.metrics["passivated_s"] = time.Since(touched).Seconds()
	}
	if rss, err = rssBytes(t.PID()); err != nil {
		return nil, err
	}
	r.metrics["rss_passivated_mib"] = rss / (1 << 20)
	return r, nil
}
