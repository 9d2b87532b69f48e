package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// watchTenant opens a tenant stream of acme with query (without '?').
func (p *proc) watchTenant(t *testing.T, query string, header map[string]string) *stream {
	t.Helper()
	return openStream(t, p.base+"/v1/tenants/acme/watch?"+query, header)
}

// tenantEvent reads the next frame, which must be a tenant stream's
// event whose id is its position.
func (s *stream) tenantEvent(t *testing.T) tenantEnvelope {
	t.Helper()
	f := s.next(t)
	var e tenantEnvelope
	if err := json.Unmarshal([]byte(f.Data), &e); err != nil || f.Event == "gap" || f.ID != strconv.FormatInt(e.Pos, 10) || e.Topic == "" || e.Seq == 0 {
		t.Fatalf("want a tenant event frame, got %+v (%v)", f, err)
	}
	return e
}

// tenantEvents reads n tenant events as "topic#seq@pos".
func (s *stream) tenantEvents(t *testing.T, n int) string {
	t.Helper()
	var got []string
	for range n {
		e := s.tenantEvent(t)
		got = append(got, fmt.Sprintf("%s#%d@%d", e.Topic, e.Seq, e.Pos))
	}
	return strings.Join(got, " ")
}

// One tenant stream carries the selected topics, exact and by pattern,
// in position order: the backlog first, then live, with the topic
// envelope plus topic and pos, and id the position. A reconnect with
// Last-Event-ID resumes after it, exactly.
func TestTenantWatchAcrossTopics(t *testing.T) {
	p := start(t, t.TempDir())
	for _, topic := range []string{"a", "b", "orders/1", "c", "a"} {
		p.publish(t, topic, `{"n":1}`)
	}
	q := "topic=a&pattern=" + url.QueryEscape("orders/*")
	s := p.watchTenant(t, q+"&after=0", nil)
	if head, pos := s.hello(t); head != 5 || pos != 0 {
		t.Fatalf("hello head %d position %d, want 5 0", head, pos)
	}
	if got := s.tenantEvents(t, 3); got != "a#1@1 orders/1#1@3 a#2@5" {
		t.Fatalf("catch-up: %s", got)
	}
	for _, topic := range []string{"b", "orders/2", "a", "ordersX"} {
		p.publish(t, topic, `{"n":2}`)
	}
	if got := s.tenantEvents(t, 2); got != "orders/2#1@7 a#3@8" {
		t.Fatalf("live: %s", got)
	}
	s.close()
	p.publish(t, "a", `{"n":3}`)
	r := p.watchTenant(t, q, map[string]string{"Last-Event-ID": "7"})
	if _, pos := r.hello(t); pos != 7 {
		t.Fatalf("resumed at %d, want 7", pos)
	}
	if got := r.tenantEvents(t, 2); got != "a#3@8 a#4@10" {
		t.Fatalf("resumed: %s", got)
	}
	// With no position, the stream starts live from now; with no selector
	// it carries every topic.
	n := p.watchTenant(t, "", nil)
	if head, pos := n.hello(t); head != 10 || pos != 10 {
		t.Fatalf("from now: hello %d %d", head, pos)
	}
	p.publish(t, "zzz", `1`)
	if got := n.tenantEvents(t, 1); got != "zzz#1@11" {
		t.Fatalf("every topic: %s", got)
	}
}

// Bad selectors and positions are refused before anything is opened, and
// the token narrows what a stream may see.
func TestTenantWatchRefusals(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	mint := func(publish, subscribe string) string { return p.mintAcme(t, "k-123", publish, subscribe) }
	pub, sub := mint(`"*"`, ""), mint("", `"ord*"`)
	many := strings.Repeat("topic=a&", 101)
	for _, c := range []struct {
		name, query, token string
		status             int
		code               string
	}{
		{"101 selectors", many, sub, 400, "invalid_selector"},
		{"a pattern of 1025 bytes", "pattern=" + strings.Repeat("x", 1025), sub, 400, "invalid_selector"},
		{"a topic of 1025 bytes", "topic=" + strings.Repeat("x", 1025), sub, 400, "invalid_selector"},
		{"a topic that is no name", "topic=.hidden", sub, 400, "invalid_name"},
		{"a negative after", "after=-1", sub, 400, "invalid_position"},
		{"an exact topic the token does not cover", "topic=orders&topic=refunds", sub, 403, "forbidden"},
		{"no token", "", "", 401, "unauthorized"},
	} {
		st, _, b := do(t, "GET", p.base+"/v1/tenants/acme/watch?"+c.query, c.token, "")
		if st != c.status || !strings.Contains(string(b), `"code":"`+c.code+`"`) {
			t.Errorf("%s: %d %s, want %d %s", c.name, st, b, c.status, c.code)
		}
	}
	for _, topic := range []string{"orders", "refunds", "ord-2"} {
		if st, _, b := do(t, "POST", p.topicURL(topic, "notify"), pub, `1`); st != 201 {
			t.Fatalf("publish: %d %s", st, b)
		}
	}
	s := p.watchTenant(t, "after=0", map[string]string{"Authorization": "Bearer " + sub})
	s.hello(t)
	if got := s.tenantEvents(t, 2); got != "orders#1@1 ord-2#1@3" {
		t.Fatalf("every topic with a token for ord*: %s", got)
	}
	do(t, "POST", p.topicURL("refunds", "notify"), pub, `2`)
	do(t, "POST", p.topicURL("orders", "notify"), pub, `2`)
	if got := s.tenantEvents(t, 1); got != "orders#2@5" {
		t.Fatalf("live with a token for ord*: %s", got)
	}
}

// A tenant stream resumes across a kill -9 of its server: every event
// after its Last-Event-ID, once, in position order.
func TestTenantWatchResumesAcrossKill9(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	for i := range 6 {
		p.publish(t, []string{"a", "b", "c"}[i%3], fmt.Sprint(i))
	}
	s := p.watchTenant(t, "pattern=a&pattern=c&after=0", nil)
	s.hello(t)
	if got := s.tenantEvents(t, 2); got != "a#1@1 c#1@3" {
		t.Fatalf("before the kill: %s", got)
	}
	p.kill9()
	q := start(t, dir)
	for i := range 3 {
		q.publish(t, []string{"a", "b", "c"}[i%3], fmt.Sprint(i))
	}
	r := q.watchTenant(t, "pattern=a&pattern=c", map[string]string{"Last-Event-ID": "3"})
	r.hello(t)
	if got := r.tenantEvents(t, 3); got != "a#2@4 c#2@6 a#3@7" {
		t.Fatalf("after the kill: %s", got)
	}
	q.publish(t, "c", `"live"`)
	if got := r.tenantEvents(t, 2); got != "c#3@9 c#4@10" {
		t.Fatalf("live after the kill: %s", got)
	}
}

// Retention removed events a tenant stream was owed: it gets a gap frame
// for their topic (id the position of the frame before it) before the
// topic's next event, and every retained event once.
func TestTenantWatchGetsGapsPerTopic(t *testing.T) {
	p := start(t, t.TempDir(), "--retention-events", "2")
	for _, topic := range []string{"a", "b", "a", "a", "a"} {
		p.publish(t, topic, `1`)
	}
	waitFor(t, "the trim of a", func() bool {
		_, a, _ := p.readTenant(t, "", "after=0")
		return len(a.Gaps) == 1
	})
	s := p.watchTenant(t, "after=0", nil)
	s.hello(t)
	f := s.next(t)
	if f.Event != "gap" || f.ID != "0" || f.Data != `{"topic":"a","to":2}` {
		t.Fatalf("want the gap of a first, got %+v", f)
	}
	if got := s.tenantEvents(t, 3); got != "b#1@2 a#3@4 a#4@5" {
		t.Fatalf("after the gap: %s", got)
	}
}

// A tenant stream is one stream under the limits.
func TestATenantStreamCountsAsOneStream(t *testing.T) {
	p := start(t, t.TempDir(), "--max-streams", "1")
	s := p.watchTenant(t, "pattern=a&pattern=b&topic=c", nil)
	s.hello(t)
	if st, _, b := do(t, "GET", p.topicURL("a", "watch"), "", ""); st != http.StatusTooManyRequests {
		t.Fatalf("a second stream: %d %s", st, b)
	}
}

// waitFor polls cond until it holds, failing after wait: for what the
// server does on its own clock (retention's trim), not a race window.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Three processes on one PostgreSQL database: a tenant stream on each
// carries what two of them commit, concurrently, to several topics, in
// position order, each event once; a stream opened after it all reads
// the same order.
func TestTenantWatchAcrossProcesses(t *testing.T) {
	ps, _ := cluster(t, 3)
	streams := make([]*stream, len(ps))
	for i, p := range ps {
		streams[i] = p.watchTenant(t, "pattern=t*&topic=other", nil)
		streams[i].hello(t)
	}
	// The first process publishes nothing: what its stream carries, it
	// learned from hints alone.
	const perProcess = 60
	var wg sync.WaitGroup
	for i, p := range ps[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perProcess {
				topic := fmt.Sprintf("t%d", (i+j)%4)
				if j%5 == 0 {
					topic = "other"
				}
				p.publish(t, topic, fmt.Sprintf(`"%d-%d"`, i, j))
			}
		}()
	}
	wg.Wait()
	total := (len(ps) - 1) * perProcess
	orders := make([]string, len(ps))
	for i, s := range streams {
		var got []string
		seqs := map[string]int64{}
		for n := range total {
			e := s.tenantEvent(t)
			if e.Pos != int64(n+1) || e.Seq != seqs[e.Topic]+1 {
				t.Fatalf("process %d's stream: event %d is %s#%d@%d", i, n, e.Topic, e.Seq, e.Pos)
			}
			seqs[e.Topic] = e.Seq
			got = append(got, fmt.Sprintf("%s#%d", e.Topic, e.Seq))
		}
		orders[i] = strings.Join(got, " ")
	}
	late := ps[2].watchTenant(t, "after=0", nil)
	late.hello(t)
	var got []string
	for range total {
		e := late.tenantEvent(t)
		got = append(got, fmt.Sprintf("%s#%d", e.Topic, e.Seq))
	}
	orders = append(orders, strings.Join(got, " "))
	for i := range orders {
		if orders[i] != orders[0] {
			t.Fatalf("stream %d saw another order:\n%s\nthan\n%s", i, orders[i], orders[0])
		}
	}
}

// Rotating a tenant's secrets ends its tenant streams, as it ends its
// topic streams: their tokens are no longer good.
func TestRotationEndsTenantStreams(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	s := p.watchTenant(t, "pattern=*", map[string]string{"Authorization": "Bearer " + p.mintAcme(t, "k-123", "", `"*"`)})
	s.hello(t)
	if st, _, b := do(t, "POST", p.base+"/v1/admin/tenants/acme/rotate", "k-123", ""); st != 200 {
		t.Fatalf("rotate: %d %s", st, b)
	}
	select {
	case f, ok := <-s.frames:
		if ok {
			t.Fatalf("after the rotation the stream sent %+v", f)
		}
	case <-time.After(wait):
		t.Fatal("the tenant stream outlived the rotation")
	}
}

// The topic list counts the tenant streams open on a topic beside its
// topic streams: those that name it, once, and those whose patterns
// select it; a topic a tenant stream names exactly is watched, so it is
// listed (head 0) before anything is published to it.
func TestTopicListingCountsTenantStreams(t *testing.T) {
	p := start(t, t.TempDir())
	p.publish(t, "orders", `1`)
	p.publish(t, "refunds", `1`)
	for _, q := range []string{"topic=ghost&pattern=ord*", "pattern=*", "topic=orders&pattern=ord*"} {
		p.watchTenant(t, q, nil).hello(t)
	}
	p.watch(t, "orders", "", nil).hello(t)
	// orders: the topic stream, the two ord* streams (the second names it
	// too, counted once) and the * stream; refunds and ghost: the *
	// stream, and ghost the stream that names it.
	if _, got, _ := p.listTopics(t, "", ""); got != "ghost:0/0/2 orders:1/1/4 refunds:1/1/1 next=refunds" {
		t.Fatalf("the topic list: %s", got)
	}
}

// A topic list tests each listed topic against each distinct selection
// of the tenant streams open here: with many of them, its pages are
// shortened (100 000 tests at most), and paging still reaches every
// topic once.
func TestTopicListingBoundsItsPatternTests(t *testing.T) {
	p := start(t, t.TempDir())
	const topics, selections = 900, 120
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < topics; i += 8 {
				p.publish(t, fmt.Sprintf("t%03d", i), `1`)
			}
		})
	}
	wg.Wait()
	for i := range selections {
		p.watchTenant(t, fmt.Sprintf("pattern=t%03d", i), nil).hello(t)
	}
	_, _, page := p.listTopics(t, "", "limit=1000")
	if want := 100_000 / selections; len(page.Topics) != want {
		t.Fatalf("a page of %d topics with %d selections open, want %d", len(page.Topics), selections, want)
	}
	seen := len(page.Topics)
	for after := page.NextAfter; ; {
		_, _, next := p.listTopics(t, "", "limit=1000&after="+after)
		if len(next.Topics) == 0 {
			break
		}
		seen += len(next.Topics)
		after = next.NextAfter
	}
	if seen != topics {
		t.Fatalf("paging listed %d topics, want %d", seen, topics)
	}
}
