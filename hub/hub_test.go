package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"

	"github.com/edgehub/edgehub/actors"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/pgtest"
)

// wait bounds how long a test waits for an answer that must come; reaching
// it is a failure (a lost message), not a timing measurement.
const wait = 10 * time.Second

type harness struct {
	t    *testing.T
	log  *backlog.Store
	url  string // the log's Postgres database; empty on SQLite
	gate *gate
	sys  *actor.ActorSystem
	hubs *Router
	// beforeIdle and onIdle are swapped in by tests to hold the hub or the
	// manager inside the passivation window.
	beforeIdle atomic.Pointer[func()]
	onIdle     atomic.Pointer[func()]
	// onRead, when set, runs inside every backlog read of a catch-up page;
	// reads records each one.
	onRead  atomic.Pointer[func()]
	readsMu sync.Mutex
	reads   []pageRead
	count   atomic.Int64
	// afterRead, when set, runs inside every backlog read (a catch-up
	// page, a hinted range) once it has read, before its page goes back.
	afterRead atomic.Pointer[func()]
	// passivated counts the hubs the manager stopped as idle.
	passivated atomic.Int64
	// heads counts the head reads; afterHead, when set, runs inside each
	// once it has read; headApplied once a hub has applied what one read.
	heads       atomic.Int64
	afterHead   atomic.Pointer[func()]
	headApplied atomic.Pointer[func()]
}

// readHook runs the harness's onRead inside each page read.
type readHook struct {
	*backlog.Store
	h *harness
}

func (r readHook) Read(ctx context.Context, tenant, topic string, after int64, limit, maxBytes int) (backlog.Page, error) {
	if f := r.h.onRead.Load(); f != nil && *f != nil {
		(*f)()
	}
	p, err := r.Store.Read(ctx, tenant, topic, after, limit, maxBytes)
	if f := r.h.afterRead.Load(); f != nil && *f != nil {
		(*f)()
	}
	r.h.readsMu.Lock()
	r.h.reads = append(r.h.reads, pageRead{topic: topic, after: after, events: len(p.Events)})
	r.h.readsMu.Unlock()
	return p, err
}

func (r readHook) Head(ctx context.Context, tenant, topic string) (int64, error) {
	r.h.heads.Add(1)
	head, err := r.Store.Head(ctx, tenant, topic)
	if f := r.h.afterHead.Load(); f != nil && *f != nil {
		(*f)()
	}
	return head, err
}

// pageRead is one catch-up page read from the backlog.
type pageRead struct {
	topic  string
	after  int64
	events int
}

func (h *harness) pageReads() []pageRead {
	h.readsMu.Lock()
	defer h.readsMu.Unlock()
	return slices.Clone(h.reads)
}

// gate holds every commit until released, when set.
type gate struct {
	*backlog.Store
	hold atomic.Pointer[chan struct{}]
}

func (g *gate) CommitBatch(ctx context.Context, reqs []*backlog.Publish) ([]backlog.Result, error) {
	if c := g.hold.Load(); c != nil {
		<-*c
	}
	return g.Store.CommitBatch(ctx, reqs)
}

// newHarness keeps no recent commits in its hubs: a stream behind the head
// always reads the backlog, which is what most of these tests are about.
func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, -1, nil)
}

// newHarnessWith keeps recentEvents commits per hub, their bytes from
// budget (nil: unbounded), and lets tune change the rest of the options.
func newHarnessWith(t *testing.T, recentEvents int, budget *limits.Budget, tune ...func(*Options)) *harness {
	t.Helper()
	var url string
	if pgtest.Enabled() {
		url = pgtest.Database(t)
	}
	return newHarnessAt(t, url, recentEvents, budget, tune...)
}

// newHarnessAt is newHarnessWith on the Postgres database at url, or on
// SQLite if url is empty.
func newHarnessAt(t *testing.T, url string, recentEvents int, budget *limits.Budget, tune ...func(*Options)) *harness {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var l *backlog.Store
	var err error
	if url != "" {
		l, err = backlog.OpenPostgres(context.Background(), url, logger)
	} else {
		l, err = backlog.OpenSQLite(context.Background(), t.TempDir(), logger, backlog.SyncFull)
	}
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, log: l, url: url, gate: &gate{Store: l}}
	c := backlog.NewCommitter(h.gate, backlog.CommitterOptions{})
	h.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	opts := Options{
		Log: readHook{Store: l, h: h}, Committer: c, Logger: logger, IdleTicks: 1, CheckTicks: 1,
		RecentEvents: recentEvents, RecentBudget: budget, StreamBuffer: 1 << 20,
		Manager: actors.Options{
			OnIdle: func(string) {
				if f := h.onIdle.Load(); f != nil {
					(*f)()
				}
			},
			OnCount:     func(n int) { h.count.Store(int64(n)) },
			OnPassivate: func() { h.passivated.Add(1) },
		},
		Hooks: Hooks{BeforeIdle: func(string) {
			if f := h.beforeIdle.Load(); f != nil {
				(*f)()
			}
		}, HeadRead: func(string) {
			if f := h.headApplied.Load(); f != nil && *f != nil {
				(*f)()
			}
		}},
	}
	for _, f := range tune {
		f(&opts)
	}
	h.hubs, err = NewRouter(h.sys, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.hubs.Stop()
		c.Close()
		h.sys.Shutdown()
		l.Close()
	})
	return h
}

func (h *harness) sendPublish(data string) chan publishReply {
	return h.sendPublishTo("x", data)
}

func (h *harness) sendPublishTo(topic, data string) chan publishReply {
	reply := make(chan publishReply, 1)
	h.hubs.manager.Send(Key("t", topic), &publish{
		req:   &backlog.Publish{Tenant: "t", Topic: topic, Events: []event.Event{{Type: "message", Data: json.RawMessage(data)}}},
		reply: reply,
	})
	return reply
}

// publishTo publishes data to topic and waits for the commit.
func (h *harness) publishTo(topic, data string) {
	h.t.Helper()
	if r := recv(h.t, h.sendPublishTo(topic, data), "publish"); r.err != nil || r.result.Err != nil {
		h.t.Fatalf("publish to %s: %v %v", topic, r.err, r.result.Err)
	}
}

func (h *harness) sendWatch(st *stream) chan joined {
	reply := make(chan joined, 1)
	h.hubs.manager.Send(Key("t", "x"), &watch{stream: st, fromNow: true, reply: reply})
	return reply
}

// sendGoLive asks the hub to take st live at position.
func (h *harness) sendGoLive(j joined, st *stream, position int64) chan liveReply {
	live := make(chan liveReply, 1)
	h.sys.Root.Send(j.hub, &goLive{stream: st, position: position, reply: live})
	return live
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("no answer to %s", what)
		panic("unreachable")
	}
}

func (h *harness) publish(data string) int64 {
	h.t.Helper()
	r := recv(h.t, h.sendPublish(data), "publish")
	if r.err != nil || r.result.Err != nil {
		h.t.Fatalf("publish: %v %v", r.err, r.result.Err)
	}
	return r.result.First
}

// expectLive checks that a registered stream is in the live set of the hub
// that now serves the topic: every event after its position, through the
// next publish, is pushed into its queue in order.
func (h *harness) expectLive(st *stream, j joined) {
	h.t.Helper()
	seq := h.publish(`"after"`)
	next := j.position + 1
	for next <= seq {
		recv(h.t, st.ready, "an event on the stream")
		items, demoted, ended := st.take(nil)
		if demoted || ended {
			h.t.Fatalf("stream demoted %v, ended %v", demoted, ended)
		}
		for _, it := range items {
			if it.Event.Seq != next {
				h.t.Fatalf("stream got seq %d, want %d", it.Event.Seq, next)
			}
			next++
		}
	}
}

// holdIn installs a hook that blocks until released, and returns a channel
// that says the hook is holding and the release function.
func holdIn(p *atomic.Pointer[func()]) (<-chan struct{}, func()) {
	inside, release := make(chan struct{}), make(chan struct{})
	f := func() {
		close(inside)
		<-release
	}
	p.Store(&f)
	return inside, func() {
		var none func()
		p.Store(&none)
		close(release)
	}
}

// holdFirst is a hook that holds its first caller until release, with a
// channel that is closed once it holds it; later callers pass.
func holdFirst() (hook func(), entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func() { once.Do(func() { close(in); <-out }) }, in, func() { close(out) }
}

// The hub has decided it is idle and is about to say so; a publish and a
// watch reach the manager first. The manager must see that its count of
// routed messages is ahead of the hub's report and keep the hub.
func TestPublishAndWatchRacingIdleReportAreServed(t *testing.T) {
	h := newHarness(t)
	h.raceIdle(&h.beforeIdle)
}

// The manager holds the hub's idle report; a publish and a watch queue
// behind it. The manager passivates the hub, and both go to a new
// incarnation that loads the head from the log.
func TestPublishAndWatchRacingPassivationAreServed(t *testing.T) {
	h := newHarness(t)
	h.raceIdle(&h.onIdle)
}

// raceIdle holds the hook at window while a publish and a watch are sent,
// then checks that both were served by the hub that now owns the topic.
func (h *harness) raceIdle(window *atomic.Pointer[func()]) {
	t := h.t
	h.publish(`"first"`)
	inside, release := holdIn(window)
	h.hubs.Tick()
	<-inside
	pub := h.sendPublish(`"racing"`)
	st := newStream(1 << 20)
	watch := h.sendWatch(st)
	release()
	if r := recv(t, pub, "racing publish"); r.err != nil || r.result.First != 2 {
		t.Fatalf("racing publish: %+v", r)
	}
	j := recv(t, watch, "racing watch")
	if j.err != nil {
		t.Fatal(j.err)
	}
	h.expectLive(st, j)
}

// An idle hub with nothing in flight is passivated, and the next message
// starts it again at the head the log holds.
func TestIdleHubIsPassivatedAndRestartsAtHead(t *testing.T) {
	h := newHarness(t)
	h.publish(`1`)
	h.publish(`2`)
	passivated := make(chan struct{})
	f := func() { close(passivated) }
	h.onIdle.Store(&f)
	h.hubs.Tick()
	recv(t, passivated, "passivation of the idle hub")
	var none func()
	h.onIdle.Store(&none)
	deadline := time.Now().Add(wait)
	for h.count.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("hub not passivated")
		}
		time.Sleep(time.Millisecond) // polling the gauge the manager sets
	}
	if seq := h.publish(`3`); seq != 3 {
		t.Fatalf("after restart publish got seq %d, want 3", seq)
	}
	if n := h.passivated.Load(); n != 1 {
		t.Fatalf("%d passivations counted, want 1", n)
	}
}

// A live stream whose queue is full is demoted, never blocks the hub, and
// other live streams keep getting every event.
func TestFullStreamIsDemotedAndOthersContinue(t *testing.T) {
	h := newHarness(t)
	slow, fast := newStream(64), newStream(1<<20)
	js := recv(t, h.sendWatch(slow), "watch slow")
	jf := recv(t, h.sendWatch(fast), "watch fast")
	if js.position != 0 || jf.position != 0 {
		t.Fatalf("positions %d %d", js.position, jf.position)
	}
	for i := 0; i < 20; i++ {
		h.publish(`"0123456789012345678901234567890123456789"`)
	}
	got := pushed(t, fast, 20)
	for i, s := range got {
		if s != int64(i+1) {
			t.Fatalf("fast stream got %v", got)
		}
	}
	items, demoted, _ := slow.take(nil)
	if !demoted || len(items) == 0 || items[0].Event.Seq != 1 {
		t.Fatalf("slow stream: %d items, demoted %v", len(items), demoted)
	}
	// Asking to go live behind the head is refused: there is more to read.
	if recv(t, h.sendGoLive(js, slow, items[len(items)-1].Event.Seq), "go live").live {
		t.Fatal("hub took a stream live behind its head")
	}
}

// A commit that the hub never heard of (in a scale-out setup, another
// process's, whose hint was lost) is caught by the periodic head check:
// the hub reads the missing range once and pushes it to its live streams.
func TestHeadCheckCatchesACommitNoticeThatNeverCame(t *testing.T) {
	h := newHarness(t)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	if _, err := h.log.CommitBatch(context.Background(), []*backlog.Publish{{Tenant: "t", Topic: "x",
		Events: []event.Event{{Type: "message", Data: json.RawMessage(`"elsewhere"`)}}}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		h.hubs.Tick()
		select {
		case <-st.ready:
			items, demoted, _ := st.take(nil)
			if demoted || len(items) != 1 || items[0].Event.Seq != 1 || string(items[0].Event.Data) != `"elsewhere"` {
				t.Fatalf("stream got %d items, demoted %v; want event 1 pushed", len(items), demoted)
			}
			return
		case <-time.After(10 * time.Millisecond): // tick again: the check runs every CheckTicks ticks
		}
	}
	t.Fatal("the head check never delivered the commit")
}

// A hub stopped while a publish is being committed (its tenant was
// deleted) does not leave the publisher waiting: it ends its streams at
// once, stays up until the commit in flight has been answered, and only
// then stops.
func TestPublishInFlightWhenHubStopsIsAnswered(t *testing.T) {
	h := newHarness(t)
	h.publish(`"first"`)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	release := make(chan struct{})
	h.gate.hold.Store(&release)
	pub := h.sendPublish(`"in flight"`)
	h.hubs.EndTenant("t")
	for !st.isEnded() { // the hub ends its streams as it stops
		recv(t, st.ready, "the hub stopping")
	}
	close(release)
	if r := recv(t, pub, "publish in flight"); r.err != nil || r.result.First != 2 {
		t.Fatalf("publish in flight: %+v", r)
	}
}

// A publisher is answered by the committer once its commit is durable,
// not through its hub's mailbox: a hub held inside Receive (here, as it
// applies a head it read) delays its fan-out, never the answer (plan 056).
func TestAPublisherIsAnsweredWhileItsHubIsBusy(t *testing.T) {
	h := newHarness(t)
	commit := make(chan struct{})
	h.gate.hold.Store(&commit)
	pub := h.sendPublish(`"a"`) // a new hub hands it to the committer at once
	inside, release := holdIn(&h.headApplied)
	defer func() { release() }()
	joinedc := h.sendWatch(newStream(1 << 20)) // the hub reads its head for it
	recv(t, inside, "the hub applying its head")
	close(commit)
	if r := recv(t, pub, "the publish, while its hub is held"); r.err != nil || r.result.First != 1 {
		t.Fatalf("publish: %+v", r)
	}
	release()
	release = func() {}
	if j := recv(t, joinedc, "the watch"); j.err != nil {
		t.Fatal(j.err)
	}
}

// discard is an Encoder that keeps nothing but a count.
type discard struct{ events int }

func (d *discard) AppendEvent(b []byte, _ *event.Event, _ []byte) []byte {
	d.events++
	return append(b, '.')
}

func (d *discard) AppendGap(b []byte, _, _ int64) []byte { return append(b, 'g') }

// A stream catching up whose tenant is deleted (or rotated) while it reads
// its last page ends, although its hub has stopped and will never answer
// its request to go live, and although the signal of the end was taken by
// the writer's wait: it does not hang until its client leaves.
func TestStreamEndedDuringItsLastPageEnds(t *testing.T) {
	h := newHarness(t)
	h.publish(`1`)
	h.publish(`2`)
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	end := func() {
		h.hubs.EndTenant("t")
		for !sub.stream.isEnded() { // the hub ends its streams as it stops
			recv(t, sub.stream.done, "the hub ending the stream")
		}
	}
	h.onRead.Store(&end)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	enc := &discard{}
	for {
		<-sub.Ready() // as a writer waits
		var none func()
		if enc.events > 0 {
			h.onRead.Store(&none)
		}
		_, err := sub.Next(ctx, enc, nil, 64<<10)
		if errors.Is(err, ErrEnded) {
			break
		}
		if err != nil {
			t.Fatalf("the stream did not end: %v", err)
		}
	}
	if enc.events != 2 {
		t.Fatalf("handed out %d events of the page read as it ended, want 2", enc.events)
	}
}

// drain reads a subscription as a writer does until it has handed out
// every event through last, and returns their sequence numbers.
func drain(t *testing.T, sub *Subscription, last int64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	enc := &seqs{}
	for sub.Position() < last {
		select {
		case <-sub.Ready():
		case <-ctx.Done():
			t.Fatalf("stream stopped at %d, want %d", sub.Position(), last)
		}
		if _, err := sub.Next(ctx, enc, nil, 64<<10); err != nil {
			t.Fatalf("next: %v", err)
		}
	}
	return enc.got
}

// seqs is an Encoder that records the sequence numbers it is handed.
type seqs struct{ got []int64 }

func (s *seqs) AppendEvent(b []byte, e *event.Event, _ []byte) []byte {
	s.got = append(s.got, e.Seq)
	return append(b, '.')
}

func (s *seqs) AppendGap(b []byte, from, to int64) []byte {
	s.got = append(s.got, -from, -to)
	return append(b, 'g')
}

func wantSeqs(t *testing.T, got []int64, from, to int64) {
	t.Helper()
	want := []int64{}
	for s := from; s <= to; s++ {
		want = append(want, s)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A reconnect a few events behind, inside the hub's recent commits, joins
// live in one hub turn and is given them from memory: no backlog page is
// read, and each event comes once, in order.
func TestJoinInsideRecentReadsNoPage(t *testing.T) {
	h := newHarnessWith(t, 1024, nil)
	for i := 0; i < 10; i++ {
		h.publish(`"e"`)
	}
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantSeqs(t, drain(t, sub, 10), 6, 10)
	h.publish(`"live"`)
	wantSeqs(t, drain(t, sub, 11), 11, 11)
	if reads := h.pageReads(); len(reads) != 0 {
		t.Fatalf("read %d backlog pages: %+v", len(reads), reads)
	}
}

// A stream just behind the recent commits reads exactly the events before
// them from the backlog, one page, then joins live and is given the rest
// from memory: each event once, in order.
func TestJoinJustOutsideRecentReadsOnlyTheMissingRange(t *testing.T) {
	h := newHarnessWith(t, 4, nil) // holds 7..10 of 10
	for i := 0; i < 10; i++ {
		h.publish(`"e"`)
	}
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantSeqs(t, drain(t, sub, 10), 5, 10)
	reads := h.pageReads()
	if len(reads) != 1 || reads[0].after != 4 || reads[0].events != 2 {
		t.Fatalf("backlog reads %+v; want one, after 4, of events 5 and 6", reads)
	}
	h.publish(`"live"`)
	wantSeqs(t, drain(t, sub, 11), 11, 11)
}

// The recent commits' bytes come from one budget that all hubs share, so
// their total is bounded however many topics are busy, and they go back
// when the hubs stop.
func TestRecentBytesComeFromTheBudget(t *testing.T) {
	const total = 2000 // about 20 envelopes, of the 500 published below
	budget := limits.NewBudget(total, 0, "recent events")
	h := newHarnessWith(t, 1024, budget)
	for topic := 0; topic < 50; topic++ {
		for i := 0; i < 10; i++ {
			h.publishTo(fmt.Sprintf("x%d", topic), `"e"`)
		}
	}
	if budget.Grow("", total) {
		t.Fatal("the budget is untouched while 50 hubs hold recent commits")
	}
	h.hubs.EndTenant("t")
	// Each hub gives its bytes back as it stops, after the manager has let
	// it go: the deadline is a hang guard.
	for deadline := time.Now().Add(wait); !budget.Grow("", total); {
		if time.Now().After(deadline) {
			t.Fatal("stopped hubs kept bytes of the budget")
		}
		time.Sleep(time.Millisecond)
	}
}

// A commit notice that skips ahead (another process committed, or a
// notice was lost) empties the recent commits, which are no longer
// contiguous up to the head: a stream behind then reads the backlog and
// gets every event, the one the hub never heard of included.
func TestSkippedNoticeEmptiesRecent(t *testing.T) {
	h := newHarnessWith(t, 1024, nil)
	for i := 0; i < 3; i++ {
		h.publish(`"e"`)
	}
	if _, err := h.log.CommitBatch(context.Background(), []*backlog.Publish{{Tenant: "t", Topic: "x",
		Events: []event.Event{{Type: "message", Data: json.RawMessage(`"elsewhere"`)}}}}); err != nil {
		t.Fatal(err)
	}
	if seq := h.publish(`"after"`); seq != 5 {
		t.Fatalf("publish got %d, want 5", seq)
	}
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantSeqs(t, drain(t, sub, 5), 3, 5)
}

// A live stream whose queue holds more than one batch hands it out over
// several calls to Next. A demotion that comes after the queue was taken,
// whose signal the writer spends on the wake-up that hands out the last
// of that take, is still seen: the stream goes back to the backlog and
// gets every event, rather than waiting for pushes that will not come.
func TestDemotionAfterTheQueueWasTakenIsSeen(t *testing.T) {
	h := newHarnessWith(t, -1, nil, func(o *Options) { o.StreamBuffer = 200 })
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	h.publish(`"a"`)
	h.publish(`"b"`)
	<-sub.Ready()
	enc := &seqs{}
	// A batch of one frame: the second item stays taken, not handed out.
	if _, err := sub.Next(context.Background(), enc, nil, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // more than the queue holds: the hub demotes
		h.publish(`"0123456789012345678901234567890123456789"`)
	}
	got := append(enc.got, drain(t, sub, 7)...)
	wantSeqs(t, got, 1, 7)
}

// The recent commits never outlive the backlog's age retention: once an
// event may have been removed from the log, a stream behind reads the log,
// which says what is gone, instead of being given it from memory.
func TestRecentCommitsExpireAheadOfAgeRetention(t *testing.T) {
	h := newHarnessWith(t, 1024, nil, func(o *Options) { o.RetentionAge = time.Second }) // cutoff: the margin puts it ahead of now
	for i := 0; i < 3; i++ {
		h.publish(`"e"`)
	}
	h.hubs.Tick() // before the watch, in the hub's mailbox
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantSeqs(t, drain(t, sub, 3), 2, 3)
	if reads := h.pageReads(); len(reads) == 0 {
		t.Fatal("a stream behind was given expired events from memory")
	}
}

// commitElsewhere commits n events to t/x behind the hubs' back, as another
// process sharing the log would, and returns their range.
func (h *harness) commitElsewhere(n int) (first, last int64) {
	h.t.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{Type: "message", Data: json.RawMessage(`"elsewhere"`)}
	}
	rs, err := h.log.CommitBatch(context.Background(), []*backlog.Publish{{Tenant: "t", Topic: "x", Events: evs}})
	if err != nil {
		h.t.Fatal(err)
	}
	return rs[0].First, rs[0].Last
}

// pushed takes n events pushed to a live stream and returns their numbers;
// it fails if the hub sent the stream back to the backlog instead.
func pushed(t *testing.T, st *stream, n int) []int64 {
	t.Helper()
	var got []int64
	for len(got) < n {
		recv(t, st.ready, "pushed events")
		items, demoted, _ := st.take(nil)
		if demoted {
			t.Fatal("the live stream was demoted: it went back to the backlog")
		}
		for _, it := range items {
			got = append(got, it.Event.Seq)
		}
	}
	return got
}

// A hint of another process's commit reaches the live streams through one
// read of the range by the hub, not one per stream, in order and once,
// however often and in whatever order the hints come.
func TestAHintIsReadOnceForAllLiveStreams(t *testing.T) {
	h := newHarness(t)
	streams := []*stream{newStream(1 << 20), newStream(1 << 20), newStream(1 << 20)}
	for _, st := range streams {
		if j := recv(t, h.sendWatch(st), "watch"); !j.live {
			t.Fatal("a stream at the head did not join live")
		}
	}
	before := len(h.pageReads())
	h.commitElsewhere(2)
	h.commitElsewhere(1)
	h.hubs.Remote("t", "x", 3, 3) // out of order, and ahead of the first
	h.hubs.Remote("t", "x", 1, 2)
	h.hubs.Remote("t", "x", 1, 2) // repeated
	for _, st := range streams {
		if got := pushed(t, st, 3); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("a stream got %v, want [1 2 3]", got)
		}
	}
	if reads := h.pageReads()[before:]; len(reads) > 2 {
		t.Fatalf("%d reads of the range for 3 streams: %v", len(reads), reads)
	}
}

// A hint for a topic with no running hub starts none: a hub started later
// reads its head from the log.
func TestAHintStartsNoHub(t *testing.T) {
	h := newHarness(t)
	h.commitElsewhere(1)
	h.hubs.Remote("t", "x", 1, 1)
	// A publish to another topic is routed after the hint, so once it is
	// answered the manager has handled the hint: only y's hub may run.
	recv(t, h.sendPublishTo("y", `1`), "publish to y")
	if n := h.count.Load(); n != 1 {
		t.Fatalf("%d hubs running after a hint for x and a publish to y, want 1", n)
	}
	st := newStream(1 << 20)
	if j := recv(t, h.sendWatch(st), "watch"); j.head != 1 {
		t.Fatalf("a hub started after the commit has head %d, want 1", j.head)
	}
}

// A range the hub cannot push as a commit (retention removed its start)
// sends the live streams back to the backlog, which tells them what
// they lost.
func TestAHintForARangeNoLongerWholeDemotes(t *testing.T) {
	h := newHarness(t)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	h.commitElsewhere(5)
	if _, err := h.log.TrimByCount(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	h.hubs.Remote("t", "x", 1, 5)
	recv(t, st.ready, "the stream's signal")
	if _, demoted, _ := st.take(nil); !demoted {
		t.Fatal("the stream was not sent back to the backlog after events 1..3 were trimmed")
	}
}

// A hint that names more than the log holds (a topic deleted since, say)
// costs one read: the log's head, as read, is the truth, and the hub does
// not read again and again for events that will never come.
func TestAHintBeyondTheLogCostsOneRead(t *testing.T) {
	h := newHarness(t)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	read := make(chan struct{}, 1)
	f := func() {
		select {
		case read <- struct{}{}:
		default:
		}
	}
	h.onRead.Store(&f)
	h.hubs.Remote("t", "x", 1, 5)
	recv(t, read, "the hub's read of the hinted range")
	for range 3 { // each answer comes through the hub, after its fetch's
		if rep := recv(t, h.sendPublish(`1`), "publish"); rep.err != nil {
			t.Fatal(rep.err)
		}
	}
	if reads := h.pageReads(); len(reads) > 2 {
		t.Fatalf("%d reads for one hint beyond the log: %v", len(reads), reads)
	}
}

// Another process's commit, held open after it numbered its events, is
// delivered before this process's own commit to the same topic, which
// queues behind it: even when this hub hears of its own commit first and
// of the other only later, a watcher gets 1, 2 (the other's), then 3.
func TestAHeldCommitElsewhereIsDeliveredFirst(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("two processes on one log: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	h := newHarness(t)
	ctx := context.Background()
	other, err := backlog.OpenPostgres(ctx, h.url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	hook, entered, release := holdFirst()
	other.BeforeCommit = hook
	sub, err := h.hubs.Watch(ctx, "t", "x", From{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	elsewhere := make(chan error, 1)
	go func() {
		_, err := other.CommitBatch(ctx, []*backlog.Publish{{Tenant: "t", Topic: "x", Events: []event.Event{
			{Type: "message", Data: json.RawMessage(`"elsewhere"`)}, {Type: "message", Data: json.RawMessage(`"elsewhere"`)}}}})
		elsewhere <- err
	}()
	<-entered
	here := h.sendPublish(`"here"`)
	admin, err := pgx.Connect(ctx, h.url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for deadline := time.Now().Add(wait); ; {
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break // this process's commit waits behind the other's
		}
		select {
		case rep := <-here:
			t.Fatalf("this process's commit finished while the other held its numbers: %+v", rep)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("this process's commit never waited behind the other's")
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	if err := <-elsewhere; err != nil {
		t.Fatal(err)
	}
	rep := recv(t, here, "this process's publish")
	if rep.err != nil || rep.result.First != 3 {
		t.Fatalf("this process's publish: %+v", rep)
	}
	h.hubs.Remote("t", "x", 1, 2) // the other's hint, heard last
	wantSeqs(t, drain(t, sub, 3), 1, 3)
}

// This process's own commit that lands after another process's, whose
// hint has not come yet, waits for the hub to read that range: the live
// streams get both, in order, pushed, with no trip to the backlog.
func TestAnOwnCommitAfterAnotherProcesssWaitsForItsRange(t *testing.T) {
	h := newHarness(t)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	h.commitElsewhere(2)
	if rep := recv(t, h.sendPublish(`"here"`), "publish"); rep.err != nil || rep.result.First != 3 {
		t.Fatalf("publish: %+v", rep)
	}
	if got := pushed(t, st, 3); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("the stream got %v, want [1 2 3]", got)
	}
}

// A read of a hinted range that outlives its hub (the tenant ended while
// it was out) gives back what it took from the read budget: nothing that
// a stopped hub would have handed it back is needed.
func TestAFetchOutlivingItsHubGivesBackItsBudget(t *testing.T) {
	const total = 1 << 20
	budget := limits.NewBudget(total, 0, "read answers")
	h := newHarnessWith(t, -1, nil, func(o *Options) { o.ReadBudget = budget })
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	f, entered, release := holdFirst()
	h.onRead.Store(&f)
	h.commitElsewhere(1)
	h.hubs.Remote("t", "x", 1, 1)
	recv(t, entered, "the hub's read of the hinted range")
	h.hubs.EndTenant("t")
	for deadline := time.Now().Add(wait); h.count.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the hub did not stop")
		}
		time.Sleep(time.Millisecond)
	}
	release()
	for deadline := time.Now().Add(wait); ; {
		if give, refused := budget.TryTake("t", total); refused == nil {
			give()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the read budget never got back what the stopped hub's read took")
		}
		time.Sleep(time.Millisecond)
	}
}

// streams reads the gauges of streams live and catching up, across hubs.
func (h *harness) streams() (live, catchingUp float64) {
	h.t.Helper()
	families, err := h.hubs.opts.Metrics.Registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "edgehub_streams" {
			continue
		}
		for _, m := range f.GetMetric() {
			switch m.GetLabel()[0].GetValue() {
			case "live":
				live = m.GetGauge().GetValue()
			case "catching_up":
				catchingUp = m.GetGauge().GetValue()
			}
		}
	}
	return live, catchingUp
}

// expectStreams checks the gauges of streams live and catching up.
func (h *harness) expectStreams(what string, live, catchingUp float64) {
	h.t.Helper()
	if l, c := h.streams(); l != live || c != catchingUp {
		h.t.Fatalf("%s: %v live and %v catching up, want %v and %v", what, l, c, live, catchingUp)
	}
}

// The gauges of streams live and catching up follow the hub's sets: a
// stream that joins at the head is live, one behind catches up, a full
// stream is demoted to catching up and goes live again at the head; an
// unwatch takes a stream out, and a hub that ends its streams (its tenant
// ended; that is no passivation) takes both gauges back to 0.
func TestStreamGaugesFollowTheSets(t *testing.T) {
	h := newHarness(t)
	slow, fast := newStream(64), newStream(1<<20)
	js := recv(t, h.sendWatch(slow), "watch slow")
	jf := recv(t, h.sendWatch(fast), "watch fast")
	h.expectStreams("two streams at the head", 2, 0)
	for i := 0; i < 20; i++ {
		h.publish(`"0123456789012345678901234567890123456789"`)
	}
	// The demotion came in the hub's turn of a commit, before its turn of
	// this refused request.
	if recv(t, h.sendGoLive(js, slow, 1), "go live behind").live {
		t.Fatal("hub took a stream live behind its head")
	}
	h.expectStreams("the slow stream demoted", 1, 1)
	if !recv(t, h.sendGoLive(js, slow, 20), "go live at the head").live {
		t.Fatal("hub refused a stream at its head")
	}
	h.expectStreams("the slow stream live again", 2, 0)
	behind := newStream(1 << 20)
	reply := make(chan joined, 1)
	h.hubs.manager.Send(Key("t", "x"), &watch{stream: behind, position: 3, reply: reply})
	if j := recv(t, reply, "watch behind"); j.live {
		t.Fatal("a stream behind the head joined live")
	}
	h.expectStreams("a stream behind", 2, 1)
	h.sys.Root.Send(jf.hub, &unwatch{stream: fast})
	h.sys.Root.Send(jf.hub, &unwatch{stream: behind})
	// The hub handles its messages from one sender in order.
	recv(t, h.sendGoLive(js, slow, 20), "go live again")
	h.expectStreams("two streams gone", 1, 0)
	h.hubs.EndTenant("t")
	for deadline := time.Now().Add(wait); ; {
		if l, c := h.streams(); l == 0 && c == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.expectStreams("the hub ended its streams", 0, 0)
		}
		time.Sleep(time.Millisecond) // polling the gauges the hub sets as it stops
	}
	if n := h.passivated.Load(); n != 0 {
		t.Fatalf("a tenant's end counted as %d passivations", n)
	}
}

// Lag reports the events the hub pushed to a live stream as they were
// committed, and not those it gave the stream from its recent commits as
// the stream went live (at once, or after reading the backlog while more
// was committed), nor those the stream read from the backlog.
func TestLagCountsOnlyEventsPushedAsCommitted(t *testing.T) {
	for _, tc := range []struct {
		name           string
		recent, during int
	}{
		{"given from the recent commits", 1024, 0},
		{"read from the backlog", -1, 0},
		{"given from the recent commits after the backlog", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, tc.recent, nil)
			for i := 0; i < 3; i++ {
				h.publish(`"before"`)
			}
			sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 0})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			for i := 0; i < tc.during; i++ {
				h.publish(`"while it catches up"`)
			}
			enc := &discard{}
			old := 3 + tc.during
			for enc.events < old || !sub.live {
				recv(t, sub.Ready(), "something to hand out")
				before := enc.events
				if _, err := sub.Next(context.Background(), enc, nil, 1<<20); err != nil {
					t.Fatal(err)
				}
				if _, ok := sub.Lag(); ok {
					t.Fatalf("a lag was reported for events %d..%d, committed before the stream went live", before+1, enc.events)
				}
			}
			h.publish(`"after"`)
			for enc.events == old { // a signal from before may come first
				recv(t, sub.Ready(), "the pushed event")
				if _, err := sub.Next(context.Background(), enc, nil, 1<<20); err != nil {
					t.Fatal(err)
				}
				lag, ok := sub.Lag()
				if ok != (enc.events > old) || lag < 0 {
					t.Fatalf("%d events handed out of %d, and a lag of %v %v: want one for the pushed event, and only for it", enc.events, old+1, lag, ok)
				}
			}
		})
	}
}

// The first publish to a topic with no hub reads no head: the hub takes it
// from its commit, and a stream that joins from now after the answer is at
// that commit, live, and gets what follows exactly once.
func TestANewHubsFirstPublishReadsNoHead(t *testing.T) {
	h := newHarness(t)
	if seq := h.publish(`"first"`); seq != 1 {
		t.Fatalf("first publish numbered %d", seq)
	}
	if n := h.heads.Load(); n != 0 {
		t.Fatalf("the first publish to a new topic read its head %d times", n)
	}
	st := newStream(1 << 20)
	j := recv(t, h.sendWatch(st), "watch")
	if j.head != 1 || j.position != 1 || !j.live {
		t.Fatalf("joined %+v after the first commit; want head and position 1, live", j)
	}
	h.expectLive(st, j)
	if n := h.heads.Load(); n != 0 {
		t.Fatalf("%d head reads", n)
	}
}

// A watch reaches a new hub while its first publish is being committed:
// the watch reads the head (before the commit), joins live there, and gets
// the commit once.
func TestAWatchDuringTheFirstCommitGetsItOnce(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	h.gate.hold.Store(&hold)
	p := h.sendPublish(`"held"`)
	st := newStream(1 << 20)
	j := recv(t, h.sendWatch(st), "watch")
	if j.head != 0 || !j.live {
		t.Fatalf("joined %+v during the first commit; want head 0, live", j)
	}
	close(hold)
	if r := recv(t, p, "publish"); r.err != nil || r.result.First != 1 {
		t.Fatalf("publish: %+v", r)
	}
	if got := pushed(t, st, 1); !slices.Equal(got, []int64{1}) {
		t.Fatalf("the stream got %v, want [1]", got)
	}
	h.publish(`"next"`)
	if got := pushed(t, st, 1); !slices.Equal(got, []int64{2}) {
		t.Fatalf("the stream got %v, want [2]", got)
	}
}

// A new hub's head read (for a watch) reads before its first commit and
// answers after it: the hub, loaded from the commit, keeps that head
// rather than going back to what the read saw, so what follows is applied
// as it commits, with no read of the range.
func TestAHeadReadOvertakenByTheFirstCommitIsNotApplied(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	h.gate.hold.Store(&hold)
	hook, read, releaseRead := holdFirst()
	h.afterHead.Store(&hook)
	p := h.sendPublish(`"first"`)
	st := newStream(1 << 20)
	w := h.sendWatch(st)
	recv(t, read, "the head read") // it has read head 0: the commit is held
	close(hold)
	if r := recv(t, p, "publish"); r.err != nil || r.result.First != 1 {
		t.Fatalf("publish: %+v", r)
	}
	j := recv(t, w, "watch")
	if j.head != 1 || j.position != 1 || !j.live {
		t.Fatalf("joined %+v; want head and position 1, live", j)
	}
	applied := make(chan struct{})
	done := func() { close(applied) }
	h.headApplied.Store(&done)
	releaseRead()
	recv(t, applied, "the stale head read applied")
	st2 := newStream(1 << 20)
	if j2 := recv(t, h.sendWatch(st2), "second watch"); j2.head != 1 {
		t.Fatalf("the hub's head went back to %d after a stale read", j2.head)
	}
	reads := len(h.pageReads())
	h.publish(`"second"`)
	for _, s := range []*stream{st, st2} {
		if got := pushed(t, s, 1); !slices.Equal(got, []int64{2}) {
			t.Fatalf("a stream got %v, want [2]", got)
		}
	}
	if n := len(h.pageReads()) - reads; n != 0 {
		t.Fatalf("%d reads of the log for a commit that followed the head", n)
	}
}
