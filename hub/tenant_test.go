package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/metrics"
	"github.com/edgehub/edgehub/selector"
)

// tenantFrames is a TenantEncoder that records what it is handed:
// "topic:pos" for events, "gap:topic:to@id" for gaps.
type tenantFrames struct{ got []string }

func (f *tenantFrames) AppendTenantEvent(b []byte, e *event.OfTenant, _ []byte) []byte {
	f.got = append(f.got, fmt.Sprintf("%s:%d", e.Topic, e.Pos))
	return append(b, '.')
}

func (f *tenantFrames) AppendTopicGap(b []byte, id int64, topic string, to int64) []byte {
	f.got = append(f.got, fmt.Sprintf("gap:%s:%d@%d", topic, to, id))
	return append(b, 'g')
}

func sel(t *testing.T, topics, patterns []string) *selector.Set {
	t.Helper()
	s, err := selector.Parse(topics, patterns, auth.Everything())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// drainTenant hands out a tenant subscription's frames until it reaches
// position last.
func drainTenant(t *testing.T, sub *TenantSubscription, enc *tenantFrames, last int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for sub.Position() < last {
		select {
		case <-sub.Ready():
		case <-ctx.Done():
			t.Fatalf("tenant stream stopped at %d, want %d (got %v)", sub.Position(), last, enc.got)
		}
		if _, err := sub.Next(ctx, enc, nil, 64<<10); err != nil {
			t.Fatalf("next: %v", err)
		}
	}
}

// publishTopics publishes one event to each topic in turn, waiting for
// each commit, and returns the tenant's position after the last.
func (h *harness) publishTopics(topics ...string) int64 {
	h.t.Helper()
	var pos int64
	for _, topic := range topics {
		r := recv(h.t, h.sendPublishTo(topic, `"x"`), "publish")
		if r.err != nil || r.result.Err != nil {
			h.t.Fatalf("publish to %s: %v %v", topic, r.err, r.result.Err)
		}
		pos = r.result.Events[len(r.result.Events)-1].Pos
	}
	return pos
}

// want is the "topic:pos" of the selected topics' events, in order, for a
// tenant whose positions went to topics in turn.
func want(order []string, selected ...string) []string {
	var w []string
	for i, topic := range order {
		if slices.Contains(selected, topic) {
			w = append(w, fmt.Sprintf("%s:%d", topic, i+1))
		}
	}
	return w
}

func (h *harness) watchTenant(s Selection, from From) *TenantSubscription {
	h.t.Helper()
	sub, err := h.hubs.WatchTenant(context.Background(), "t", s, from)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(sub.Close)
	return sub
}

// A tenant stream held between two catch-up pages while events of its
// topics, and of others, are committed hands out every selected event
// exactly once, in position order: those of the pages, those committed
// while it read, and those after it went live.
func TestTenantJoinWhileCatchingUp(t *testing.T) {
	hook, entered, release := holdFirst()
	var pages atomic.Int32
	h := newHarnessWith(t, -1, nil, func(o *Options) {
		o.PageSize = 2
		o.Hooks.BetweenTenantPages = func(string) {
			if pages.Add(1) == 2 {
				hook()
			}
		}
	})
	order := []string{"a", "b", "c", "a", "b", "a"}
	h.publishTopics(order...)
	sub := h.watchTenant(sel(t, []string{"a"}, []string{"c*"}), From{After: 0})
	enc := &tenantFrames{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		drainTenant(t, sub, enc, 12)
	}()
	<-entered // the stream has handed out its first page and is about to read the next
	more := []string{"c", "b", "a", "cc", "b", "a"}
	h.publishTopics(more...)
	release()
	<-done
	if w := want(append(order, more...), "a", "c", "cc"); !slices.Equal(enc.got, w) {
		t.Fatalf("got %v, want %v", enc.got, w)
	}
}

// The two windows of going live: events committed after the stream's
// last page was read and before it asks to go live (the hub's head has
// moved past it: it reads again), and events committed after it asked
// and before the answer came (their notices follow its request: it is
// live, and they are pushed). Each comes once, in order.
func TestTenantGoLiveRaces(t *testing.T) {
	var afterRead, afterGoLive atomic.Pointer[func()]
	h := newHarnessWith(t, -1, nil, func(o *Options) {
		o.Hooks.AfterTenantGoLive = func(string) {
			if f := afterGoLive.Load(); f != nil && *f != nil {
				(*f)()
			}
		}
		o.Log = tenantReadHook{Log: o.Log, after: &afterRead}
	})
	order := []string{"a", "b", "a"}
	h.publishTopics(order...)

	// Window one: the page is read, then a commits before goLive.
	inRead, releaseRead := holdIn(&afterRead)
	sub := h.watchTenant(sel(t, nil, []string{"a"}), From{After: 0})
	enc := &tenantFrames{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		drainTenant(t, sub, enc, 5)
	}()
	<-inRead
	order = append(order, "b", "a")
	h.publishTopics("b", "a")
	releaseRead()
	<-done

	// Window two: the stream is demoted by nothing here, so make it read
	// again with a new stream, held after it asked to go live.
	inGoLive, releaseGoLive := holdIn(&afterGoLive)
	sub2 := h.watchTenant(sel(t, nil, []string{"a"}), From{After: 0})
	enc2 := &tenantFrames{}
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		drainTenant(t, sub2, enc2, 6) // its page ends at 5: then it asks to go live
	}()
	<-inGoLive
	order = append(order, "a", "b")
	h.publishTopics("a", "b")
	releaseGoLive()
	<-done2
	h.publishTopics("a")
	order = append(order, "a")
	drainTenant(t, sub, enc, 8)
	drainTenant(t, sub2, enc2, 8)
	w := want(order, "a")
	if !slices.Equal(enc.got, w) || !slices.Equal(enc2.got, w) {
		t.Fatalf("got %v and %v, want %v", enc.got, enc2.got, w)
	}
}

// tenantReadHook runs after, when set, once each tenant read has read.
type tenantReadHook struct {
	backlog.Log
	after *atomic.Pointer[func()]
}

func (r tenantReadHook) ReadTenant(ctx context.Context, tenant string, after int64, sel backlog.TenantSelection, limit, maxBytes int) (backlog.TenantPage, error) {
	p, err := r.Log.ReadTenant(ctx, tenant, after, sel, limit, maxBytes)
	if f := r.after.Load(); f != nil && *f != nil {
		(*f)()
	}
	return p, err
}

// A tenant stream that does not read is sent back to the log when its
// queue is full, and later hands out everything once; another live
// stream goes on being pushed to meanwhile.
func TestSlowTenantStreamIsDemotedAndLosesNothing(t *testing.T) {
	h := newHarnessWith(t, -1, nil, func(o *Options) { o.StreamBuffer = 300 })
	slow := h.watchTenant(sel(t, nil, nil), From{Now: true})
	fast := h.watchTenant(sel(t, []string{"b"}, nil), From{Now: true})
	fastEnc := &tenantFrames{}
	var order []string
	for i := range 20 {
		topic := []string{"a", "b"}[i%2]
		order = append(order, topic)
		h.publishTopics(topic)
		if topic == "b" {
			drainTenant(t, fast, fastEnc, int64(i+1))
		}
	}
	if !slow.stream.isDemotedForTest() {
		t.Fatal("the slow stream was never demoted")
	}
	enc := &tenantFrames{}
	drainTenant(t, slow, enc, 20)
	if w := want(order, "a", "b"); !slices.Equal(enc.got, w) {
		t.Fatalf("slow stream got %v, want %v", enc.got, w)
	}
	if w := want(order, "b"); !slices.Equal(fastEnc.got, w) {
		t.Fatalf("fast stream got %v, want %v", fastEnc.got, w)
	}
}

func (s *tstream) isDemotedForTest() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.demoted
}

// countingSel counts the pattern tests the tenant hub makes.
type countingSel struct {
	*selector.Set
	tests *atomic.Int64
}

func (c countingSel) MatchPattern(topic string) bool {
	c.tests.Add(1)
	return c.Set.MatchPattern(topic)
}

// Patterns are tested once per topic and pattern group, not once per
// event or stream: three live streams of one group and one of another,
// and thirty events of two topics, make four tests. An exact topic also
// matched by a pattern of the same stream is given once.
func TestPatternsAreTestedOncePerTopic(t *testing.T) {
	h := newHarness(t)
	var tests atomic.Int64
	subs := make([]*TenantSubscription, 4)
	for i := range subs {
		patterns := []string{"a*", "b"}
		if i == 3 {
			patterns = []string{"b", "a*"} // the same group, whatever the order
		}
		subs[i] = h.watchTenant(countingSel{Set: sel(t, []string{"a"}, patterns), tests: &tests}, From{Now: true})
	}
	other := h.watchTenant(countingSel{Set: sel(t, nil, []string{"b*"}), tests: &tests}, From{Now: true})
	tests.Store(0)
	var order []string
	for i := range 30 {
		topic := []string{"a", "b"}[i%2]
		order = append(order, topic)
		h.publishTopics(topic)
	}
	for _, sub := range subs {
		enc := &tenantFrames{}
		drainTenant(t, sub, enc, 30)
		if w := want(order, "a", "b"); !slices.Equal(enc.got, w) {
			t.Fatalf("got %v, want %v", enc.got, w)
		}
	}
	enc := &tenantFrames{}
	drainTenant(t, other, enc, 15)
	if w := want(order, "b"); !slices.Equal(enc.got, w) {
		t.Fatalf("the other group's stream got %v, want %v", enc.got, w)
	}
	if n := tests.Load(); n != 4 {
		t.Fatalf("%d pattern tests, want 4 (2 groups x 2 topics)", n)
	}
}

// Commits made by another process (straight into the log here) reach a
// live tenant stream through one hint, in position order, however the
// hints come; one whose hint is lost is caught by the periodic read.
func TestTenantHubReadsWhatOtherProcessesCommitted(t *testing.T) {
	h := newHarness(t)
	sub := h.watchTenant(sel(t, nil, nil), From{Now: true})
	commit := func(topic string) {
		if _, err := h.log.CommitBatch(context.Background(), []*backlog.Publish{{Tenant: "t", Topic: topic,
			Events: []event.Event{{Type: "message", Data: json.RawMessage(`"elsewhere"`)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	commit("a")
	commit("b")
	h.hubs.Remote("t", "b", 1, 1)
	h.hubs.Remote("t", "a", 1, 1)
	enc := &tenantFrames{}
	drainTenant(t, sub, enc, 2)
	commit("c") // its hint is lost
	h.hubs.Tick()
	drainTenant(t, sub, enc, 3)
	if w := []string{"a:1", "b:2", "c:3"}; !slices.Equal(enc.got, w) {
		t.Fatalf("got %v, want %v", enc.got, w)
	}
}

// A tenant hub whose last stream closed hears no commit (the router
// passes none on for a tenant with no tenant stream), though it runs on
// until it passivates: a stream that then joins must not trust its head.
func TestATenantHubWithNoStreamReadsItsHeadAgain(t *testing.T) {
	h := newHarness(t)
	first, err := h.hubs.WatchTenant(context.Background(), "t", sel(t, nil, nil), From{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	order := []string{"a"}
	h.publishTopics("a") // no tenant stream is open: no notice
	sub := h.watchTenant(sel(t, nil, nil), From{After: 0})
	if sub.Head() != 1 {
		t.Fatalf("hello's head is %d, want 1", sub.Head())
	}
	order = append(order, "b")
	h.publishTopics("b")
	enc := &tenantFrames{}
	drainTenant(t, sub, enc, 2)
	if w := want(order, "a", "b"); !slices.Equal(enc.got, w) {
		t.Fatalf("got %v, want %v", enc.got, w)
	}
}

// The events that tenant streams' live queues hold come from the
// tenant's share of the read budget once, however many streams hold
// them, until each has been handed out and written (the next Next) or
// its stream closed; a commit the budget has no room for sends the
// streams back to the log, which they read waiting for room, and none
// loses an event.
func TestTenantLiveQueuesCountOnceAgainstTheReadBudget(t *testing.T) {
	const total = 1 << 20
	budget := limits.NewBudget(total, 0, "read answers")
	h := newHarnessWith(t, -1, nil, func(o *Options) { o.ReadBudget = budget })
	var subs []*TenantSubscription
	for range 20 {
		subs = append(subs, h.watchTenant(sel(t, nil, []string{"*"}), From{Now: true}))
	}
	data := `"` + strings.Repeat("x", 10<<10) + `"`
	var order []string
	const n = 150 // 1.5 MB of events: more than the budget holds
	for i := range n {
		topic := []string{"a", "b"}[i%2]
		order = append(order, topic)
		recv(t, h.sendPublishTo(topic, data), "publish")
		if held := budget.Held(); held > total {
			t.Fatalf("the budget holds %d bytes, above its %d", held, total)
		}
	}
	if held := budget.Held(); held < total/2 {
		t.Fatalf("the live queues hold %d bytes of the budget, want most of it", held)
	}
	// Every stream reads now, each on its own goroutine as its client's.
	got := make([][]string, len(subs))
	var wg sync.WaitGroup
	for i, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			enc := &tenantFrames{}
			drainTenant(t, sub, enc, n)
			// One more call says the last frames are written, as a
			// client's writer makes once they are: what they held goes
			// back.
			if _, err := sub.Next(context.Background(), enc, nil, 64<<10); err != nil {
				t.Error(err)
			}
			got[i] = enc.got
		}()
	}
	wg.Wait()
	w := want(order, "a", "b")
	for i := range got {
		if !slices.Equal(got[i], w) {
			t.Fatalf("stream %d got %d events, want %d in order", i, len(got[i]), len(w))
		}
	}
	for _, sub := range subs {
		sub.Close()
	}
	awaitHeld(t, budget, 0, "every stream closed")
}

// What a tenant hub remembers of its pattern tests stays within its
// bounds however many topics its pattern streams match: 300 pattern
// groups (streams whose patterns differ) matching every one of 10 000
// topics would list three million.
func TestRememberedPatternTestsAreBounded(t *testing.T) {
	h := newTenantHub("t", &Options{Metrics: metrics.New()})
	for i := range 300 {
		s := newTStream(sel(t, nil, []string{strings.Repeat("*", i+1)}), 1<<20)
		h.addLive(s)
	}
	x := &h.native.patterns
	most := 0
	for i := range 10_000 {
		if got := len(x.matching(fmt.Sprintf("topic-%d", i))); got != 300 {
			t.Fatalf("topic %d matched %d groups, want 300", i, got)
		}
		listed := 0
		for _, m := range x.memo {
			listed += len(m.groups)
		}
		if listed != x.listed || listed > matchedGroupsMax || len(x.memo) > matchedTopicsMax {
			t.Fatalf("after %d topics: %d topics remembered listing %d groups (counted %d)", i+1, len(x.memo), listed, x.listed)
		}
		most = max(most, listed)
	}
	if most < matchedGroupsMax-300 {
		t.Fatalf("at most %d groups listed: the bound was never reached", most)
	}
}
