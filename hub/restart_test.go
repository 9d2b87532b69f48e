package hub

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/pgtest"
)

// A hub retired while its publish is being committed (the tenant was
// rotated or deleted: Router.EndTenant; the listener came back:
// Router.EndAll) is replaced by a new hub that reads its head before the
// commit lands. This process's own hints are not for it, and no other
// commit or head check comes: the new hub still hears of the commit, from
// the old one, and pushes it to its live streams.
func TestACommitOfARetiredHubReachesTheHubAfterIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(r *Router)
	}{
		{"EndTenant", func(r *Router) { r.EndTenant("t") }},
		{"EndAll", (*Router).EndAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.publish(`"first"`)
			release := make(chan struct{})
			h.gate.hold.Store(&release)
			pub := h.sendPublish(`"in flight"`)
			tc.end(h.hubs)
			st := newStream(1 << 20)
			if j := recv(t, h.sendWatch(st), "watch"); j.err != nil || j.head != 1 || !j.live {
				t.Fatalf("a watch on the new hub: %+v; want live at head 1, read before the commit in flight", j)
			}
			close(release)
			if r := recv(t, pub, "publish in flight"); r.err != nil || r.result.First != 2 {
				t.Fatalf("publish in flight: %+v", r)
			}
			if got := pushed(t, st, 1); !slices.Equal(got, []int64{2}) {
				t.Fatalf("the new hub's live stream got %v, want [2]", got)
			}
		})
	}
}

// An own commit that lands while the hub reads a range another process
// committed, and that does not follow it (a third commit, whose hint is
// lost, lies between), is not left waiting by the read's answer, which
// knew nothing of either: the hub reads on, and its live stream gets all
// three pushed, in order, with no other hint and no head check.
func TestAnOwnCommitDuringARangeReadIsNotLeftBehind(t *testing.T) {
	h := newHarness(t)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	f, read, release := holdFirst()
	h.afterRead.Store(&f)
	h.commitElsewhere(1)
	h.hubs.Remote("t", "x", 1, 1)
	recv(t, read, "the hub's read of 1") // it has read the log at head 1
	h.commitElsewhere(1)                 // 2, whose hint is lost
	if rep := recv(t, h.sendPublish(`"here"`), "publish"); rep.err != nil || rep.result.First != 3 {
		t.Fatalf("publish: %+v", rep)
	}
	// The read's answer reaches the hub after the commit's turn.
	release()
	if got := pushed(t, st, 3); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("the live stream got %v, want [1 2 3]", got)
	}
}

// retained is the count retention of the tests of two processes; their
// hubs keep as many recent commits.
const retained = 4

// twoProcesses is a harness on a fresh Postgres database with count
// retention of retained events, whose hubs learn whether the process
// hears hints from hearing (and whose options tune changes), and a second
// store on the same database: a process beside this one, whose commits
// this one learns of only by a hint, a head check or a read.
func twoProcesses(t *testing.T, hearing *Hearing, tune ...func(*Options)) (*harness, *backlog.Store) {
	t.Helper()
	h := newHarnessAt(t, pgtest.Database(t), retained, nil, append([]func(*Options){func(o *Options) {
		o.RetentionEvents = retained
		o.Hearing = hearing
	}}, tune...)...)
	other, err := backlog.OpenPostgres(context.Background(), h.url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return h, other
}

// listener is this process's hint listener, run as the server runs it:
// hints go to the router, and hearing follows whether it listens.
type listener struct {
	// changes gets each change of Listening, in order.
	changes chan bool
	// resume lets a listener that lost its connection listen again: until
	// it is called, it stays down.
	resume func()
}

func (h *harness) listen(hearing *Hearing) *listener {
	h.t.Helper()
	back := make(chan struct{})
	var once sync.Once
	l := &listener{changes: make(chan bool, 16), resume: func() { once.Do(func() { close(back) }) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.log.Listen(ctx, backlog.Hints{
			Commit:      h.hubs.Remote,
			TenantEnded: h.hubs.EndTenant,
			Listening: func(on bool) {
				hearing.Set(on)
				select {
				case l.changes <- on:
				default: // nobody waits for so many
				}
				if !on {
					<-back
				}
			},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	h.t.Cleanup(func() {
		l.resume()
		cancel()
		<-done
	})
	if !recv(h.t, l.changes, "the listener listening") {
		h.t.Fatal("the listener did not listen")
	}
	return l
}

// cut terminates the listener's connection and returns once the listener
// knows it is down; it stays down until resume.
func (l *listener) cut(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, backlog.ListenerName).Scan(&n); err != nil || n != 1 {
		t.Fatalf("cut %d listeners (%v), want 1", n, err)
	}
	if recv(t, l.changes, "the listener noticing its cut") {
		t.Fatal("the listener listened on after its cut")
	}
}

// commitOn commits n events to t/topic through store, as a process that
// has no hub for it would.
func commitOn(t *testing.T, store *backlog.Store, topic string, n int) {
	t.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{Type: "message", Data: json.RawMessage(`"elsewhere"`)}
	}
	if _, err := store.CommitBatch(context.Background(), []*backlog.Publish{{Tenant: "t", Topic: topic, Events: evs}}); err != nil {
		t.Fatal(err)
	}
}

// trimmedJoin trims t/x by count through the other process, then watches
// it on this one after position after, which retention has just passed,
// and checks that the stream's frames are those the log gives that
// position on the other process: the gap of what was trimmed, then the
// rest. A read of this hub's that the test holds may be released by
// release before the stream is drained.
func trimmedJoin(t *testing.T, h *harness, other *backlog.Store, after int64, release func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := other.TrimByCount(ctx, retained); err != nil {
		t.Fatal(err)
	}
	log, err := other.Read(ctx, "t", "x", after, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if log.Trimmed <= after {
		t.Fatalf("the log is trimmed to %d: nothing after %d is gone", log.Trimmed, after)
	}
	want := []int64{-(after + 1), -log.Trimmed}
	for _, e := range log.Events {
		want = append(want, e.Seq)
	}
	sub, err := h.hubs.Watch(ctx, "t", "x", From{After: after})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	release()
	if got := drain(t, sub, log.Head); !slices.Equal(got, want) {
		t.Fatalf("after=%d got %v (negative: a gap's from and to), want %v as the log says: the hub gave from memory what retention removed",
			after, got, want)
	}
}

// However the hub learns that the log's head has moved on (a hint of
// another process's commit, a head check, an own commit that does not
// follow its head, a read that finds more than it was told of), its
// recent commits let go at once of every event that count retention may
// now remove, and take none of them back from what it reads later, even
// while it is still reading the range it learned of: a stream joining
// behind them gets the gap the log gives on any other process, not the
// events from memory.
func TestRecentCommitsLetGoWhatCountRetentionMayRemove(t *testing.T) {
	for _, tc := range []struct {
		name string
		// listen runs this process's listener; without it, hints are lost.
		listen bool
		// pageSize is the hub's (0: its default); holdRead is the read of
		// the hub's that the test holds (1: the first).
		pageSize, holdRead int
		// learn has the other process commit after 1..4 and this one's
		// hub learn of it.
		learn func(t *testing.T, h *harness, other *backlog.Store)
		// after is where the stream joins: the recent commits held it and
		// the events after it, and retention removes it.
		after int64
	}{
		{"a hint", true, 0, 1, func(t *testing.T, h *harness, other *backlog.Store) {
			commitOn(t, other, "x", 3)
		}, 2},
		{"a head check", false, 0, 1, func(t *testing.T, h *harness, other *backlog.Store) {
			commitOn(t, other, "x", 3)
			h.hubs.Tick()
		}, 2},
		{"an own commit", false, 0, 1, func(t *testing.T, h *harness, other *backlog.Store) {
			commitOn(t, other, "x", 3)
			h.publish(`"here"`) // 8
		}, 3},
		// The hint names 5 alone. The hub's read of one event brings 5 and
		// says the log's head is 12, so that count retention may remove
		// up to 8; the test holds the hub's next read.
		{"a read", false, 1, 2, func(t *testing.T, h *harness, other *backlog.Store) {
			commitOn(t, other, "x", 8)
			h.hubs.Remote("t", "x", 5, 5)
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hearing := &Hearing{}
			h, other := twoProcesses(t, hearing, func(o *Options) { o.PageSize = tc.pageSize })
			if tc.listen {
				h.listen(hearing)
			} else {
				hearing.Set(true) // hints lost unnoticed
			}
			for range retained {
				h.publish(`"own"`) // 1..4, all in the hub's recent commits
			}
			live := newStream(1 << 20) // what the head check needs
			recv(t, h.sendWatch(live), "watch")
			entered, release := make(chan struct{}), make(chan struct{})
			var reads atomic.Int64 // the hub's come first, one at a time
			f := func() {
				if reads.Add(1) == int64(tc.holdRead) {
					close(entered)
					<-release
				}
			}
			h.onRead.Store(&f)
			tc.learn(t, h, other)
			recv(t, entered, "the hub's read of what it learned")
			trimmedJoin(t, h, other, tc.after, func() { close(release) })
		})
	}
}

// deafThroughCommitsElsewhere has this process commit 1..4 (its hub keeps
// them all), lose its listener's connection, and the other process
// commit 5..7 meanwhile, whose hints are lost.
func deafThroughCommitsElsewhere(t *testing.T) (*harness, *backlog.Store, *listener) {
	t.Helper()
	hearing := &Hearing{}
	h, other := twoProcesses(t, hearing)
	l := h.listen(hearing)
	for range retained {
		h.publish(`"own"`)
	}
	l.cut(t, h.url)
	commitOn(t, other, "x", 3)
	return h, other, l
}

// While the process does not hear the other's hints, its hubs cannot know
// how far the log has moved on, nor what count retention removed: a
// stream joining behind the recent commits reads the log, which gives it
// the gap, and is not given from memory events that are gone.
func TestADeafHubGivesNoRecentCommits(t *testing.T) {
	h, other, _ := deafThroughCommitsElsewhere(t)
	trimmedJoin(t, h, other, 2, func() {})
}

// Once the listener listens again the server retires every hub
// (Router.EndAll); until a hub has been, it may still take a watch. A hub
// that lived through the deafness gives it no recent commits either,
// although the process hears again: the hints it missed are not heard
// again.
func TestAHubThatWasDeafGivesNoRecentCommitsOnceTheListenerIsBack(t *testing.T) {
	h, other, l := deafThroughCommitsElsewhere(t)
	l.resume()
	if !recv(t, l.changes, "the listener listening again") {
		t.Fatal("the listener did not listen again")
	}
	trimmedJoin(t, h, other, 2, func() {})
}

// A stream that was reading the log when the process lost its listener,
// and then asks to go live just behind the recent commits, is not given
// them either: it reads on in the log, which gives it the gap.
func TestADeafHubGivesNoRecentCommitsToAStreamGoingLive(t *testing.T) {
	hearing := &Hearing{}
	h, other := twoProcesses(t, hearing)
	l := h.listen(hearing)
	for range retained + 2 {
		h.publish(`"own"`) // 1..6, of which the hub keeps 3..6
	}
	var once sync.Once
	f := func() { // in the stream's read of 1..2, on the test's goroutine
		once.Do(func() {
			l.cut(t, h.url)
			commitOn(t, other, "x", 3) // 7..9, unheard
			if _, err := other.TrimByCount(context.Background(), retained); err != nil {
				t.Fatal(err)
			}
		})
	}
	h.afterRead.Store(&f)
	sub, err := h.hubs.Watch(context.Background(), "t", "x", From{After: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The log keeps 6..9: after 2, it gives the gap of 3..5.
	if got, want := drain(t, sub, 9), []int64{1, 2, -3, -5, 6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("got %v (negative: a gap's from and to), want %v as the log says", got, want)
	}
}
