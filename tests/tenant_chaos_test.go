package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/pgtest"
	"github.com/edgehub/edgehub/selector"
	"github.com/edgehub/edgehub/sse"
)

// TestTenantChaos publishes to several topics through one server (on
// the suite's store), while tenant streams with exact and pattern selectors stall,
// leave and resume with Last-Event-ID on any process, and the processes
// are killed with SIGKILL and restarted one at a time. Then every
// connection's events are held to the tenant's order as the log has it:
// each is an event of the log, of a selected topic, with its data; each
// connection's events are the log's selected events after its
// Last-Event-ID, in position order, none missing and none repeated; each
// watcher reaches the end; and every answered publish is in the log once.
func TestTenantChaos(t *testing.T) { tenantChaos(t, 1) }

// TestTenantChaosCluster is TestTenantChaos through three processes
// sharing one PostgreSQL log, each request and reconnect going to any of
// them, their hubs hearing one another by hints alone.
func TestTenantChaosCluster(t *testing.T) { tenantChaos(t, 3) }

func tenantChaos(t *testing.T, procs int) {
	args := []string{"--dev", "--stream-buffer", "16384", "--retry", "100ms", "--heartbeat", "1s"}
	if procs > 1 {
		args = append(args, "--store", pgtest.Database(t), "--head-check", "0")
	}
	seed := runSeed()
	t.Logf("tenant chaos seed %d, %d processes", seed, procs)
	ps, dirs, addrs := make([]*proc, procs), make([]string, procs), make([]string, procs)
	for i := range ps {
		dirs[i], addrs[i] = t.TempDir(), freeAddr(t)
		ps[i] = startAt(t, plainBinary, nil, dirs[i], addrs[i], args...)
	}
	bases := make([]string, procs)
	for i := range ps {
		bases[i] = ps[i].base
	}
	dialer := smallBufferDialer(32 << 10)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: dialer.DialContext}}
	pick := func(rnd *rand.Rand) string { return bases[rnd.IntN(len(bases))] }

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	answered := map[string]bool{} // the ids of every answered event
	var pubs sync.WaitGroup
	for p := range 3 {
		rnd := newRand(seed, randPublisher+uint64(p))
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for n := 0; ctx.Err() == nil; n++ {
				topic := fmt.Sprintf("t%d", rnd.IntN(5))
				if rnd.IntN(6) == 0 {
					topic = "other/" + topic
				}
				id := fmt.Sprintf("p%d-%d", p, n)
				if tenantChaosPublish(ctx, hc, pick(rnd), topic, id) {
					mu.Lock()
					answered[id] = true
					mu.Unlock()
				}
			}
		}()
	}
	selections := []string{"pattern=t*", "topic=t1&topic=t3", "pattern=other/*&topic=t0", "", "pattern=*4&pattern=t2"}
	watchers := make([]*tenantChaosWatcher, 8)
	var ws sync.WaitGroup
	final := make(chan struct{})
	for i := range watchers {
		w := &tenantChaosWatcher{query: selections[i%len(selections)], rnd: newRand(seed, randWatcher+uint64(i)), hc: hc, bases: bases, pos: -1}
		if i%2 == 0 {
			w.pos = 0 // from the start; the others from now
		}
		watchers[i] = w
		ws.Add(1)
		go func() { defer ws.Done(); w.run(ctx, final) }()
	}

	monkey := newRand(seed, randMonkey)
	kills := 0
	for deadline := time.Now().Add(*chaosDuration); time.Now().Before(deadline); {
		time.Sleep(time.Duration(1500+monkey.IntN(2500)) * time.Millisecond)
		i := monkey.IntN(len(ps))
		if monkey.IntN(2) == 0 {
			ps[i].kill9()
			kills++
		} else {
			ps[i].cmd.Process.Signal(syscall.SIGTERM)
			<-ps[i].exited
		}
		ps[i] = startAt(t, plainBinary, nil, dirs[i], addrs[i], args...)
	}
	stop()
	pubs.Wait()

	order := readTenantOrder(t, hc, bases[0])
	ids := map[string]int{}
	for _, e := range order {
		ids[e.id]++
	}
	lost, doubled := 0, 0
	for id := range answered {
		if ids[id] == 0 {
			lost++
		}
	}
	for id, n := range ids {
		if n > 1 {
			doubled++
			t.Errorf("event %s is in the log %d times", id, n)
		}
	}
	if lost > 0 {
		t.Errorf("%d answered events are not in the log", lost)
	}
	// Each watcher reads on until the last event it selects.
	selected := make([][]tenantChaosEvent, len(watchers))
	for i, w := range watchers {
		sel, err := selectorOf(w.query)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range order {
			if sel.Match(e.topic) {
				selected[i] = append(selected[i], e)
			}
		}
		if n := len(selected[i]); n > 0 {
			w.head = selected[i][n-1].pos
		}
	}
	close(final)
	ws.Wait()
	var conns, events, violations int
	for i, w := range watchers {
		selected := selected[i]
		for _, c := range w.conns {
			conns++
			events += len(c.got)
			// The log's selected events after the connection's start.
			k := 0
			for k < len(selected) && selected[k].pos <= c.after {
				k++
			}
			for j, e := range c.got {
				if k+j >= len(selected) || selected[k+j] != e {
					violations++
					if violations <= 20 {
						t.Errorf("watcher %d (%q) after %d: event %d is %+v, the log's is %+v", i, w.query, c.after, j, e, at(selected, k+j))
					}
					break
				}
			}
		}
		if w.pos < w.head {
			t.Errorf("watcher %d (%q) ended at %d, before its last selected event %d", i, w.query, w.pos, w.head)
		}
	}
	t.Logf("tenant chaos: %d answered events in the log (%d lost, %d twice), %d positions, %d stream connections carrying %d events, %d violations, %d SIGKILL restarts of %d processes",
		len(answered), lost, doubled, len(order), conns, events, violations, kills, procs)
}

func at(es []tenantChaosEvent, i int) any {
	if i < len(es) {
		return es[i]
	}
	return "none"
}

// selectorOf is the selection a watcher's query makes, with every topic
// granted, as the server's.
func selectorOf(query string) (*selector.Set, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	s, rerr := selector.Parse(q["topic"], q["pattern"], auth.Everything())
	if rerr != nil {
		return nil, rerr
	}
	return s, nil
}

type tenantChaosEvent struct {
	pos   int64
	topic string
	id    string
}

// tenantChaosPublish publishes one event until it is answered, retrying
// with its idempotency key after connection errors and 503s; it gives up
// once the run is over.
func tenantChaosPublish(ctx context.Context, hc *http.Client, base, topic, id string) bool {
	c := &client.Client{Server: base, HTTP: hc}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		_, err := c.Publish(context.Background(), "chaos", topic, map[string]string{"id": id}, client.PublishOptions{IdempotencyKey: id})
		var apiErr *client.APIError
		switch {
		case err == nil:
			return true
		case errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable:
			return false
		case ctx.Err() != nil && attempt > 20:
			return false
		}
	}
}

// readTenantOrder reads the tenant's whole order from the log.
func readTenantOrder(t *testing.T, hc *http.Client, base string) []tenantChaosEvent {
	t.Helper()
	var order []tenantChaosEvent
	after := int64(0)
	for {
		resp, err := hc.Get(fmt.Sprintf("%s/v1/tenants/chaos/events?after=%d&limit=1000", base, after))
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Events []struct {
				Pos   int64
				Topic string
				Data  struct{ ID string }
			}
			Head      int64
			NextAfter int64 `json:"next_after"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			order = append(order, tenantChaosEvent{pos: e.Pos, topic: e.Topic, id: e.Data.ID})
		}
		if len(page.Events) == 0 || page.NextAfter >= page.Head {
			return order
		}
		after = page.NextAfter
	}
}

// tenantChaosWatcher is one logical tenant stream across its reconnects:
// pos is the last position it was given (-1: it starts from now).
type tenantChaosWatcher struct {
	query string
	rnd   *rand.Rand
	hc    *http.Client
	bases []string
	pos   int64
	head  int64 // set once the run is over: read on until it
	conns []tenantChaosConn
}

type tenantChaosConn struct {
	after int64 // the position the connection started after
	got   []tenantChaosEvent
}

func (w *tenantChaosWatcher) run(ctx context.Context, final <-chan struct{}) {
	for ctx.Err() == nil {
		w.connect(ctx, false)
		time.Sleep(time.Duration(20+w.rnd.IntN(100)) * time.Millisecond)
	}
	<-final
	for end := time.Now().Add(60 * time.Second); w.pos < w.head && time.Now().Before(end); {
		w.connect(context.Background(), true)
	}
}

// connect makes one connection from the watcher's position and records
// its events, until it leaves (or, in the final phase, reaches the head
// or goes quiet).
func (w *tenantChaosWatcher) connect(ctx context.Context, final bool) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if final {
		var quiet context.CancelFunc
		cctx, quiet = context.WithTimeout(cctx, 5*time.Second)
		defer quiet()
	}
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, w.bases[w.rnd.IntN(len(w.bases))]+"/v1/tenants/chaos/watch?"+w.query, nil)
	if w.pos >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(w.pos, 10))
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	d := sse.NewDecoder(resp.Body)
	f, err := d.Next()
	if err != nil || f.Event != "hello" {
		return
	}
	var hello struct{ Position int64 }
	json.Unmarshal([]byte(f.Data), &hello)
	w.pos = hello.Position
	w.conns = append(w.conns, tenantChaosConn{after: w.pos})
	c := &w.conns[len(w.conns)-1]
	leaveAfter, stallAt := 50+w.rnd.IntN(2000), -1
	if !final && w.rnd.IntN(4) == 0 {
		stallAt = w.rnd.IntN(300)
	}
	for frames := 0; ; frames++ {
		f, err := d.Next()
		if err != nil {
			return
		}
		if f.Event == "gap" {
			continue // no retention in this run: the checker sees a missing event
		}
		var e struct {
			Pos   int64
			Topic string
			Data  struct{ ID string }
		}
		if json.Unmarshal([]byte(f.Data), &e) != nil {
			continue
		}
		c.got = append(c.got, tenantChaosEvent{pos: e.Pos, topic: e.Topic, id: e.Data.ID})
		w.pos = e.Pos
		switch {
		case final && w.pos >= w.head:
			return
		case !final && frames == leaveAfter:
			return
		case frames == stallAt:
			time.Sleep(time.Duration(500+w.rnd.IntN(2000)) * time.Millisecond)
		}
	}
}
