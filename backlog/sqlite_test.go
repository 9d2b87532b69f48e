package backlog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/pgtest"
)

// openTest opens a fresh log on the store the suite runs on (SQLite, or
// Postgres with EDGEHUB_TEST_STORE=postgres).
func openTest(t testing.TB) *Store {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var l *Store
	var err error
	if pgtest.Enabled() {
		l, err = OpenPostgres(context.Background(), pgtest.Database(t), logger)
	} else {
		l, err = OpenSQLite(context.Background(), t.TempDir(), logger, SyncFull)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// stateBuffer is a StateWriter that keeps the state in memory, with hooks
// that may refuse.
type stateBuffer struct {
	bytes.Buffer
	expect func(n int64) error
	write  func(p []byte) error
}

func (b *stateBuffer) Expect(n int64) error {
	if b.expect != nil {
		return b.expect(n)
	}
	return nil
}

func (b *stateBuffer) Write(p []byte) (int, error) {
	if b.write != nil {
		if err := b.write(p); err != nil {
			return 0, err
		}
	}
	return b.Buffer.Write(p)
}

// readState is the topic's state answer.
func readState(t *testing.T, l *Store, tenant, topic string) string {
	t.Helper()
	var b stateBuffer
	if _, err := l.State(context.Background(), tenant, topic, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func events(n int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{Type: "message", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return evs
}

// singles publishes evs one request each, so that each is a row of its
// own: tests of what retention does per row use them.
func singles(tenant, topic string, evs []event.Event) []*Publish {
	reqs := make([]*Publish, len(evs))
	for i := range evs {
		reqs[i] = &Publish{Tenant: tenant, Topic: topic, Events: evs[i : i+1]}
	}
	return reqs
}

// commitApart commits each request in a transaction of its own, so that
// each event of a request of one is a row: one commit stores the
// consecutive events of a topic as segments (plan 054). The flush, which
// makes them durable, is shared.
func commitApart(t testing.TB, l *Store, reqs []*Publish) {
	t.Helper()
	for _, r := range reqs {
		res, err := l.commitVisible(context.Background(), []*Publish{r})
		if err == nil && res[0].Err != nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.flush(); err != nil {
		t.Fatal(err)
	}
}

func TestAppendNumbersEachTopicFromOneWithoutHoles(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	res, err := l.CommitBatch(ctx, []*Publish{
		{Tenant: "a", Topic: "x", Events: events(3)},
		{Tenant: "a", Topic: "y", Events: events(1)},
		{Tenant: "a", Topic: "x", Events: events(2), Batch: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{1, 3}, {1, 1}, {4, 5}}
	for i, r := range res {
		if r.First != want[i][0] || r.Last != want[i][1] || len(r.Events) != int(r.Last-r.First+1) {
			t.Errorf("request %d: got %d..%d (%d events), want %v", i, r.First, r.Last, len(r.Events), want[i])
		}
	}
	if h, _ := l.Head(ctx, "a", "x"); h != 5 {
		t.Errorf("head of x = %d, want 5", h)
	}
	p, err := l.Read(ctx, "a", "x", 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range p.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	if len(p.Events) != 5 || p.Head != 5 {
		t.Fatalf("read %d events, head %d", len(p.Events), p.Head)
	}
}

func TestIdempotentRepeatInOneTransactionAppendsOnce(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	req := func(hash string) *Publish {
		return &Publish{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "k", IdemHash: []byte(hash)}
	}
	res, err := l.CommitBatch(ctx, []*Publish{req("h"), req("h"), req("other")})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || res[0].First != 1 {
		t.Errorf("first: %+v", res[0])
	}
	if !res[1].Duplicate || res[1].First != 1 || len(res[1].Events) != 0 {
		t.Errorf("repeat: %+v", res[1])
	}
	if !errors.Is(res[2].Err, ErrKeyReused) {
		t.Errorf("reuse: %+v", res[2])
	}
	// A later request with a new key continues at 2: neither the repeat
	// nor the refusal consumed a number.
	res, err = l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "k2", IdemHash: []byte("h")}})
	if err != nil || res[0].First != 2 {
		t.Fatalf("next: %+v %v", res, err)
	}
}

func TestReadPagesAfterPosition(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	if _, err := l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Events: events(25)}}); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for after := int64(0); ; {
		p, err := l.Read(ctx, "a", "x", after, 10, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 {
			break
		}
		for _, e := range p.Events {
			got = append(got, e.Seq)
		}
		after = p.Events[len(p.Events)-1].Seq
	}
	if len(got) != 25 || got[0] != 1 || got[24] != 25 {
		t.Fatalf("paged read got %v", got)
	}
	p, _ := l.Read(ctx, "a", "nothing", 0, 10, 1<<20)
	if p.Head != 0 || len(p.Events) != 0 {
		t.Fatalf("unknown topic: %+v", p)
	}
}

// gatedLog holds the first commit until released, so the test knows that
// every later request queued while a commit was running.
type gatedLog struct {
	*Store
	entered, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	sizes            []int
}

// queueBehindFirst commits one event to a/x, and once its commit is held
// inside the log queues reqs behind it, then lets the log go on.
func (g *gatedLog) queueBehindFirst(c *Committer, done func(Result, error), reqs ...*Publish) {
	c.Commit(&Publish{Tenant: "a", Topic: "x", Events: events(1)}, done)
	<-g.entered
	for _, r := range reqs {
		c.Commit(r, done)
	}
	close(g.release)
}

// ones is n requests of one event each to a/topic.
func ones(topic string, n int) []*Publish {
	reqs := make([]*Publish, n)
	for i := range reqs {
		reqs[i] = &Publish{Tenant: "a", Topic: topic, Events: events(1)}
	}
	return reqs
}

// newGatedLog is a gatedLog over a fresh log (the suite's store).
func newGatedLog(t *testing.T) *gatedLog {
	return &gatedLog{Store: openTest(t), entered: make(chan struct{}), release: make(chan struct{})}
}

// awaitAnswers takes n answers from results and fails on an error, or
// with missing when one does not come by the hang guard.
func awaitAnswers(t *testing.T, results <-chan error, n int, missing string) {
	t.Helper()
	for range n {
		select {
		case err := <-results:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(hangGuard):
			t.Fatal(missing)
		}
	}
}

func (g *gatedLog) CommitBatch(ctx context.Context, reqs []*Publish) ([]Result, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	g.mu.Lock()
	g.sizes = append(g.sizes, len(reqs))
	g.mu.Unlock()
	return g.Store.CommitBatch(ctx, reqs)
}

func TestCommitterGroupsRequestsThatQueueDuringACommit(t *testing.T) {
	g := newGatedLog(t)
	c := NewCommitter(g, CommitterOptions{})
	results := make(chan Result, 51)
	done := func(r Result, err error) {
		if err != nil {
			t.Error(err)
		}
		results <- r
	}
	var queued []*Publish
	for i := 0; i < 50; i++ {
		queued = append(queued, &Publish{Tenant: "a", Topic: fmt.Sprintf("t%d", i%3), Events: events(2)})
	}
	g.queueBehindFirst(c, done, queued...)
	c.Close()
	if len(results) != 51 {
		t.Fatalf("%d of 51 requests answered", len(results))
	}
	if len(g.sizes) != 2 || g.sizes[0] != 1 || g.sizes[1] != 50 {
		t.Fatalf("transactions held %v requests, want [1 50]", g.sizes)
	}
}

func TestCommitterAfterCloseRefuses(t *testing.T) {
	c := NewCommitter(openTest(t), CommitterOptions{})
	c.Close()
	var got error
	c.Commit(&Publish{Tenant: "a", Topic: "x", Events: events(1)}, func(_ Result, err error) { got = err })
	if !errors.Is(got, ErrClosed) {
		t.Fatalf("submit after close: %v", got)
	}
}

// A request authorized before its tenant was deleted commits nothing: the
// commit looks the tenant up in its own transaction.
func TestAppendRefusesADeletedTenant(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	if _, _, err := l.CreateTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	res, err := l.CommitBatch(ctx, []*Publish{
		{Tenant: "a", Topic: "x", Events: events(1), RequireTenant: true},
		{Tenant: "dev", Topic: "x", Events: events(1)},
	})
	if err != nil || !errors.Is(res[0].Err, ErrNoTenant) || res[1].Err != nil || res[1].First != 1 {
		t.Fatalf("got %+v %v", res, err)
	}
	if p, _ := l.Read(ctx, "a", "x", 0, 10, 1<<20); p.Head != 0 || len(p.Events) != 0 {
		t.Fatalf("the deleted tenant has data: %+v", p)
	}
}

// A page ends before the event that would take its data past maxBytes,
// holds one event however large it is, and paging on from next reaches
// every event: the caller bounds what it holds, whatever the topic holds.
func TestReadBoundsAPageInBytes(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	evs := make([]event.Event, 10)
	for i := range evs {
		evs[i] = event.Event{Type: "big", Data: json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)} // 1002 bytes
	}
	if _, err := l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Events: evs}}); err != nil {
		t.Fatal(err)
	}
	p, err := l.Read(ctx, "a", "x", 0, 100, 3500)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 3 || p.Head != 10 {
		t.Fatalf("a 3500-byte page of 1002-byte events holds %d events (head %d), want 3", len(p.Events), p.Head)
	}
	if p, _ = l.Read(ctx, "a", "x", 3, 100, 10); len(p.Events) != 1 || p.Events[0].Seq != 4 {
		t.Fatalf("a page smaller than one event holds %d events, want event 4 alone", len(p.Events))
	}
	n := 0
	for after := int64(0); ; n++ {
		p, err := l.Read(ctx, "a", "x", after, 100, 2004)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 {
			break
		}
		after = p.Events[len(p.Events)-1].Seq
	}
	if n != 5 {
		t.Fatalf("paging 10 events two at a time took %d pages, want 5", n)
	}
}

// State tells its writer the answer's size, as state_bytes says, before
// it writes a byte; a refusal from Expect or from Write ends the read.
// What it writes is the state's JSON, whatever state_bytes says (here 0).
func TestStateTellsItsSizeBeforeWriting(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	evs := make([]event.Event, 300)
	for i := range evs {
		evs[i] = event.Event{Type: "message", Key: fmt.Sprintf("k%03d", i), Op: event.OpUpsert, Data: json.RawMessage(`1`)}
	}
	if _, err := l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Events: evs}}); err != nil {
		t.Fatal(err)
	}
	var expected int64 = -1
	w := &stateBuffer{expect: func(n int64) error {
		expected = n
		return nil
	}}
	w.write = func(p []byte) error {
		if expected < 0 {
			t.Fatal("written before Expect")
		}
		return nil
	}
	if _, err := l.State(ctx, "a", "x", w); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(w.Bytes()) || expected < 300*int64(len(`k000`+`1`)) {
		t.Fatalf("expected %d bytes for a %d-byte answer (valid %v)", expected, w.Len(), json.Valid(w.Bytes()))
	}
	if _, err := l.testExec(`UPDATE topics SET state_bytes = 0`); err != nil {
		t.Fatal(err)
	}
	if got := readState(t, l, "a", "x"); got != w.String() {
		t.Fatalf("with state_bytes 0: %s", got)
	}
	refusal := errors.New("no room")
	if _, err := l.State(ctx, "a", "x", &stateBuffer{expect: func(int64) error { return refusal }}); !errors.Is(err, refusal) {
		t.Fatalf("a refused Expect: %v", err)
	}
	written := 0
	if _, err := l.State(ctx, "a", "x", &stateBuffer{write: func([]byte) error {
		if written++; written > 10 {
			return refusal
		}
		return nil
	}}); !errors.Is(err, refusal) {
		t.Fatalf("a refused Write: %v", err)
	}
}

// A commit whose last one held 8 requests waits, when fewer are queued,
// until 8 are (commit siblings): publishers that each wait for their
// answer then share one transaction and one fsync instead of trickling
// in one by one. The first commit, after none, never waits.
func TestCommitterWaitsForTheLastCommitsSiblings(t *testing.T) {
	g := newGatedLog(t)
	waiting := make(chan int, 4)
	c := NewCommitter(g, CommitterOptions{Delay: time.Hour, Waiting: func(want int) { waiting <- want }})
	results := make(chan error, 17)
	done := func(_ Result, err error) { results <- err }
	g.queueBehindFirst(c, done, ones("x", 8)...)
	awaitAnswers(t, results, 9, "a request was not answered")
	select {
	case want := <-waiting:
		if want != 8 {
			t.Fatalf("the commit after one of 8 waited for %d", want)
		}
	case <-results:
		t.Fatal("a request was committed without waiting for its siblings")
	case <-time.After(hangGuard):
		t.Fatal("the commit after one of 8 did not wait for its siblings")
	}
	for range 8 {
		c.Commit(&Publish{Tenant: "a", Topic: "x", Events: events(1)}, done)
	}
	awaitAnswers(t, results, 8, "a request was not answered")
	c.Close()
	if fmt.Sprint(g.sizes) != "[1 8 8]" {
		t.Fatalf("transactions held %v requests, want [1 8 8]", g.sizes)
	}
}

// The wait for siblings ends at its delay, or when the committer closes:
// a request is never held for longer, nor left behind.
func TestCommitterWaitsForSiblingsNoLongerThanItsDelay(t *testing.T) {
	for _, c := range []struct {
		name  string
		delay time.Duration
		close bool
	}{{"delay", time.Millisecond, false}, {"close", time.Hour, true}} {
		t.Run(c.name, func(t *testing.T) {
			g := newGatedLog(t)
			waiting := make(chan int, 4)
			cm := NewCommitter(g, CommitterOptions{Delay: c.delay, Waiting: func(want int) { waiting <- want }})
			results := make(chan error, 4)
			done := func(_ Result, err error) { results <- err }
			g.queueBehindFirst(cm, done, append(ones("x", 1), ones("y", 1)...)...)
			awaitAnswers(t, results, 3, "a request was not answered")
			select {
			case want := <-waiting:
				if want != 2 {
					t.Fatalf("the commit after one of 2 waited for %d", want)
				}
			case <-time.After(hangGuard):
				t.Fatal("the commit after one of 2 did not wait for its siblings")
			}
			cm.Commit(&Publish{Tenant: "a", Topic: "x", Events: events(1)}, done) // one of the two
			if c.close {
				go cm.Close()
			}
			awaitAnswers(t, results, 1, "a lone request was held past the wait")
			cm.Close()
		})
	}
}

// hangGuard is how long a test waits for what must come; a guard against
// hanging, not a timing assertion.
const hangGuard = 10 * time.Second

// Requests that MaxEvents kept out of a commit have waited for it
// already: the next commit takes them at once, not after a wait for as
// many siblings as the capped commit held.
func TestCommitterLeftoversOfACappedCommitDoNotWait(t *testing.T) {
	g := newGatedLog(t)
	c := NewCommitter(g, CommitterOptions{MaxEvents: 2, Delay: time.Hour})
	results := make(chan error, 4)
	done := func(_ Result, err error) { results <- err }
	g.queueBehindFirst(c, done, ones("x", 3)...)
	awaitAnswers(t, results, 4, "the request a capped commit left behind waited for siblings")
	c.Close()
	if fmt.Sprint(g.sizes) != "[1 2 1]" {
		t.Fatalf("transactions held %v requests, want [1 2 1]", g.sizes)
	}
}

// The tests' own statements, in the store's placeholders.
func (s *Store) testExec(query string, args ...any) (sql.Result, error) {
	return s.write.Exec(s.q(query), args...)
}

func (s *Store) testQueryRow(query string, args ...any) *sql.Row {
	return s.read.QueryRow(s.q(query), args...)
}

func (s *Store) testQuery(query string, args ...any) (*sql.Rows, error) {
	return s.read.Query(s.q(query), args...)
}

// TestAReadNeedsOneConnectionOfThePool holds every connection of the read
// pool but one, then reads: a read that asked the pool for a second
// connection while its transaction held the last (as preparing a
// statement on first use did) would wait for itself, and reads that each
// held one would wait for each other forever.
func TestAReadNeedsOneConnectionOfThePool(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	if _, err := l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Events: events(3)}}); err != nil {
		t.Fatal(err)
	}
	for range l.read.Stats().MaxOpenConnections - 1 {
		c, err := l.read.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := l.Read(short, "a", "x", 0, 10, 1<<20)
	if err != nil {
		t.Fatalf("a read on the pool's last connection: %v", err)
	}
	if len(p.Events) != 3 {
		t.Fatalf("read %d events, want 3", len(p.Events))
	}
	if _, err := l.Head(short, "a", "x"); err != nil {
		t.Fatalf("a head read on the pool's last connection: %v", err)
	}
}
