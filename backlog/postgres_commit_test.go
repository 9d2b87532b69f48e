package backlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/pgtest"
)

// turns counts round trips on a connection: a write that follows a read
// (or is the connection's first) is the client's next turn to speak.
type turns struct {
	net.Conn
	n    *atomic.Int64
	mu   sync.Mutex
	read bool
	used bool
}

func (c *turns) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.read || !c.used {
		c.n.Add(1)
	}
	c.read, c.used = false, true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *turns) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.read = true
	c.mu.Unlock()
	return n, err
}

// openCounted opens a Postgres store whose write connections count their
// round trips into n.
func openCounted(t *testing.T, url string, n *atomic.Int64) *Store {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := openPostgres(context.Background(), url, logger, func(c *pgx.ConnConfig) {
		dial := c.DialFunc
		c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &turns{Conn: conn, n: n}, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// roundTripCase is a kind of commit, and the round trips it may take
// (before plan 033: 11, 12, 13, 8, 13, 13, 17, 64, 15, 18).
type roundTripCase struct {
	name string
	reqs func(i int) []*Publish
	most int64
}

// roundTripCases are commits of each kind, each after one like it (so
// that what a connection prepares once is prepared): name, the commit.
func roundTripCases() []roundTripCase {
	keyed := func(n int, key string) []event.Event {
		evs := events(n)
		for i := range evs {
			evs[i].Key, evs[i].Op = key, event.OpUpsert
		}
		return evs
	}
	itoa := func(i int) string { return string(rune('a' + i%26)) }
	return []roundTripCase{
		{"one event", func(int) []*Publish { return []*Publish{{Tenant: "a", Topic: "x", Events: events(1)}} }, 2},
		{"one event, new topic", func(i int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "new" + itoa(i) + itoa(i/26), Events: events(1)}}
		}, 3}, // the new topic's id
		{"idempotency key", func(i int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "k" + itoa(i) + itoa(i/26), IdemHash: []byte{1}}}
		}, 2},
		{"repeat of an idempotency key", func(int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "ka", IdemHash: []byte{1}}}
		}, 2},
		{"webhook-id", func(i int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "w" + itoa(i) + itoa(i/26), IdemHash: []byte{1}, TenantWideKey: true}}
		}, 2},
		{"keyed upsert", func(int) []*Publish { return []*Publish{{Tenant: "a", Topic: "x", Events: keyed(1, "k")}} }, 2},
		{"batch of 100", func(int) []*Publish { return []*Publish{{Tenant: "a", Topic: "x", Batch: true, Events: events(100)}} }, 2},
		{"16 requests on 4 topics, keys", func(i int) []*Publish {
			reqs := make([]*Publish, 16)
			for j := range reqs {
				reqs[j] = &Publish{Tenant: "a", Topic: "g" + itoa(j%4), Events: events(1),
					IdemKey: "g" + itoa(i) + itoa(i/26) + itoa(j), IdemHash: []byte{1}}
			}
			return reqs
		}, 2},
		// Durable Streams: the stream's row, and its producer's, are read
		// when the logic asks for them.
		{"stream append with a producer", func(i int) []*Publish {
			if i == 0 {
				return []*Publish{streamCreate("ds", "text/plain")}
			}
			return []*Publish{streamAppend("ds", StreamOp{ContentType: "text/plain",
				Producer: &Producer{ID: "p", Seq: int64(i - 1)}}, "m")}
		}, 4},
		{"2 tenants", func(int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1)}, {Tenant: "b", Topic: "x", Events: events(1)}}
		}, 2},
	}
}

// Each kind of commit takes two round trips on PostgreSQL (three when it
// creates a topic), whatever it holds: one for the locks and the reads,
// one for the writes and COMMIT.
func TestRoundTripsPerCommit(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	var n atomic.Int64
	l := openCounted(t, pgtest.Database(t), &n)
	ctx := context.Background()
	for _, c := range roundTripCases() {
		// Warm every pooled connection up: each prepares its statements
		// once.
		for i := 0; i < 8; i++ {
			if _, err := l.CommitBatch(ctx, c.reqs(i)); err != nil {
				t.Fatal(err)
			}
		}
		n.Store(0)
		if _, err := l.CommitBatch(ctx, c.reqs(8)); err != nil {
			t.Fatal(err)
		}
		t.Logf("%-32s %d round trips", c.name, n.Load())
		if n.Load() > c.most {
			t.Errorf("%s took %d round trips, want at most %d", c.name, n.Load(), c.most)
		}
	}
}

// Processes on one database, each with one sequential publisher on a
// tenant of its own (a Store is a process's pools): the commits/s of them
// all. Tenants apart, nothing should queue one process behind another.
func BenchmarkPostgresProcessesOnSeparateTenants(b *testing.B) {
	if !pgtest.Enabled() {
		b.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres")
	}
	url := pgtest.Database(b)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var stores []*Store
	for range 3 {
		l, err := OpenPostgres(context.Background(), url, logger)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		stores = append(stores, l)
	}
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("processes=%d", n), func(b *testing.B) {
			var before int64
			for _, l := range stores {
				before += l.Retries()
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			for i, l := range stores[:n] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := []*Publish{{Tenant: fmt.Sprintf("t%d", i), Topic: "x", Events: events(1)}}
					for left.Add(-1) >= 0 {
						if _, err := l.CommitBatch(b.Context(), req); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
			retries := -before
			for _, l := range stores {
				retries += l.Retries()
			}
			b.ReportMetric(float64(retries)/float64(b.N), "retries/commit")
		})
	}
}

// Every commit statement says which rows it reads or writes, so that no
// answer read ahead outlives a write that changes it.
func TestEveryCommitStatementSaysWhatItTouches(t *testing.T) {
	st := &statements{}
	touches := st.pgTouches()
	for _, x := range st.list() {
		if _, ok := touches[x.stmt]; !ok {
			t.Errorf("%s says nothing of what it touches (pgTouches)", brief(x.sql))
		}
	}
	if len(touches) != len(st.list()) {
		t.Errorf("pgTouches declares %d statements, the commit has %d", len(touches), len(st.list()))
	}
}

// Requests of one commit on a topic that exists, whose answers the
// PostgreSQL commit reads ahead of its logic: each request still sees the
// writes of the requests before it (a key remembered, a state key's
// size, a webhook-id), on either store.
func TestACommitsRequestsSeeTheWritesOfTheOnesBefore(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	l.SetQuotas(Quotas{StateBytes: 10})
	if r := commitOne(t, l, one("a", "x")); r.Err != nil {
		t.Fatal(r.Err)
	}
	keyed := func(data string) *Publish {
		return &Publish{Tenant: "a", Topic: "x", Events: []event.Event{{Type: "m", Key: "k", Op: event.OpUpsert, Data: json.RawMessage(data)}}}
	}
	idem := func(key string, wide bool) *Publish {
		return &Publish{Tenant: "a", Topic: "x", Events: events(1), IdemKey: key, IdemHash: []byte("h"), TenantWideKey: wide}
	}
	res, err := l.CommitBatch(ctx, []*Publish{
		idem("k1", false), idem("k1", false),
		idem("w1", true), idem("w1", true),
		// 1+8 bytes, then 1+9: 10 once the first is counted, 19 if not.
		keyed(`"123456"`), keyed(`"1234567"`),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		first, last int64
		dup         bool
	}{{2, 2, false}, {2, 2, true}, {3, 3, false}, {3, 3, true}, {4, 4, false}, {5, 5, false}} {
		r := res[i]
		if r.Err != nil || r.First != want.first || r.Last != want.last || r.Duplicate != want.dup {
			t.Errorf("request %d: %d..%d duplicate %v (%v), want %d..%d duplicate %v",
				i, r.First, r.Last, r.Duplicate, r.Err, want.first, want.last, want.dup)
		}
	}
	var stateBytes int64
	if err := l.testQueryRow(`SELECT state_bytes FROM topics WHERE tenant = 'a' AND topic = 'x'`).Scan(&stateBytes); err != nil || stateBytes != 10 {
		t.Fatalf("state bytes %d (%v), want 10", stateBytes, err)
	}
	// And a delete of the key frees what the upserts before it took.
	res, err = l.CommitBatch(ctx, []*Publish{keyed(`"1"`), {Tenant: "a", Topic: "x",
		Events: []event.Event{{Type: "m", Key: "k", Op: event.OpDelete, Data: json.RawMessage(`null`)}}}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("%+v %v", res, err)
	}
	if err := l.testQueryRow(`SELECT state_bytes FROM topics WHERE tenant = 'a' AND topic = 'x'`).Scan(&stateBytes); err != nil || stateBytes != 0 {
		t.Fatalf("state bytes %d (%v) after the delete, want 0", stateBytes, err)
	}
}

// Two processes commit to one tenant at once, on topics they share, with
// idempotency keys they share, under a quota of topics: every topic is
// numbered 1..n with no hole, each key appended once, the quota holds,
// and neither process's commits abort the other's (they queue on the
// tenant's lock instead).
func TestTwoProcessesOnOneTenantQueueInsteadOfAborting(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	ctx := context.Background()
	url := pgtest.Database(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var stores []*Store
	for range 2 {
		l, err := OpenPostgres(ctx, url, logger)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		l.SetQuotas(Quotas{TenantTopics: 4})
		stores = append(stores, l)
	}
	const commits = 150
	type answer struct {
		topic, key  string
		first, last int64
		dup         bool
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for p, l := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < commits; i++ {
				var reqs []*Publish
				for j := 0; j < 1+i%3; j++ {
					topic := fmt.Sprintf("t%d", (i+j+p)%6) // 6 topics, 4 allowed
					reqs = append(reqs, &Publish{Tenant: "a", Topic: topic, Events: events(1 + j),
						IdemKey: fmt.Sprintf("k%d-%d", i, j), IdemHash: []byte{byte(j)}})
				}
				res, err := l.CommitBatch(ctx, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for k, r := range res {
					if r.Err == nil {
						answers = append(answers, answer{reqs[k].Topic, reqs[k].IdemKey, r.First, r.Last, r.Duplicate})
					} else if !errors.Is(r.Err, ErrQuota) {
						t.Errorf("request %+v: %v", reqs[k], r.Err)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for p, l := range stores {
		if n := l.Retries(); n != 0 {
			t.Errorf("process %d ran %d commits again: they raced instead of queueing", p, n)
		}
	}
	seqs := map[string]map[int64]bool{}
	keys := map[[2]string]answer{}
	for _, a := range answers {
		k := [2]string{a.topic, a.key}
		if prev, ok := keys[k]; ok {
			if !a.dup && !prev.dup || prev.first != a.first || prev.last != a.last {
				t.Errorf("key %v appended twice or answered differently: %+v and %+v", k, prev, a)
			}
			continue
		}
		keys[k] = a
		if a.dup {
			continue // its original is answered too
		}
		if seqs[a.topic] == nil {
			seqs[a.topic] = map[int64]bool{}
		}
		for s := a.first; s <= a.last; s++ {
			if seqs[a.topic][s] {
				t.Errorf("%s: seq %d answered twice", a.topic, s)
			}
			seqs[a.topic][s] = true
		}
	}
	if len(seqs) > 4 {
		t.Errorf("%d topics hold events: the quota allows 4", len(seqs))
	}
	for topic, got := range seqs {
		p, err := stores[0].Read(ctx, "a", topic, 0, 10000, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if int(p.Head) != len(got) || len(p.Events) != len(got) {
			t.Errorf("%s: head %d and %d events stored, %d answered", topic, p.Head, len(p.Events), len(got))
		}
		for i, e := range p.Events {
			if e.Seq != int64(i+1) || !got[e.Seq] {
				t.Errorf("%s: event %d has seq %d (answered: %v)", topic, i, e.Seq, got[e.Seq])
				break
			}
		}
	}
}

// A commit group sends its other processes one hint, naming every range
// it numbered, and a group that numbered nothing sends none.
func TestACommitGroupSendsOneHint(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	ctx := context.Background()
	url := pgtest.Database(t)
	l := openCounted(t, url, new(atomic.Int64))
	l.SetQuotas(Quotas{TenantTopics: 4})
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+hintChannel); err != nil {
		t.Fatal(err)
	}
	hints := func() []string {
		var got []string
		for {
			wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			n, err := listener.WaitForNotification(wait)
			cancel()
			if err != nil {
				return got
			}
			got = append(got, n.Payload)
		}
	}
	reqs := make([]*Publish, 16)
	for i := range reqs {
		reqs[i] = &Publish{Tenant: "a", Topic: fmt.Sprintf("t%d", i%4), Events: events(1)}
	}
	if _, err := l.CommitBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	got := hints()
	if len(got) != 1 || len(strings.Fields(got[0])) != 2+4*16 {
		t.Fatalf("a group of 16 sent %d hints, want one with 16 ranges: %q", len(got), got)
	}
	// A fifth topic is over the quota: nothing numbered, nothing hinted.
	if r := commitOne(t, l, one("a", "t4")); !errors.Is(r.Err, ErrQuota) {
		t.Fatalf("fifth topic: %+v", r)
	}
	if got := hints(); len(got) != 0 {
		t.Fatalf("a group that numbered nothing sent %q", got)
	}
}

// openProcesses opens n stores on one fresh database, as n processes
// would, and returns its URL too.
func openProcesses(t *testing.T, n int) ([]*Store, string) {
	t.Helper()
	if !pgtest.Enabled() {
		t.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	url := pgtest.Database(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	stores := make([]*Store, n)
	for i := range stores {
		l, err := OpenPostgres(context.Background(), url, logger)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		stores[i] = l
	}
	return stores, url
}

// Three processes commit at once, each to a tenant of its own, on topics
// old and new: none of their commits aborts another's, so that processes
// add throughput for separate tenants.
func TestProcessesOnSeparateTenantsDoNotAbortEachOther(t *testing.T) {
	stores, _ := openProcesses(t, 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	for p, l := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				tenant := fmt.Sprintf("t%d", p)
				reqs := []*Publish{{Tenant: tenant, Topic: fmt.Sprintf("x%d", i%5), Events: events(1)}}
				if i%10 == 0 {
					reqs = append(reqs, &Publish{Tenant: tenant, Topic: fmt.Sprintf("new%d", i), Events: events(1)})
				}
				if _, err := l.CommitBatch(ctx, reqs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for p, l := range stores {
		if n := l.Retries(); n != 0 {
			t.Errorf("process %d ran %d of its 150 commits again: commits of separate tenants aborted each other", p, n)
		}
	}
}

// A tenant deleted while a commit of it that creates a topic has its
// snapshot and has written nothing yet: the deletion waits for the
// commit, and then removes its topic too, so that no row of the tenant
// outlives its deletion.
func TestADeletionWaitsForACommitOfItsTenant(t *testing.T) {
	stores, _ := openProcesses(t, 2)
	a, b := stores[0], stores[1]
	ctx := context.Background()
	ten, _, err := a.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if r := commitOne(t, a, &Publish{Tenant: "acme", Topic: "old", Events: events(1), RequireTenant: true, Generation: ten.Generation}); r.Err != nil {
		t.Fatal(r.Err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	afterSnapshot = func(l *Store) {
		if l == a {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	defer func() { afterSnapshot = nil }()
	committed := make(chan error, 1)
	go func() {
		_, err := a.CommitBatch(ctx, []*Publish{{Tenant: "acme", Topic: "new", Events: events(1), RequireTenant: true, Generation: ten.Generation}})
		committed <- err
	}()
	<-entered
	deleted := make(chan error, 1)
	go func() { deleted <- b.DeleteTenant(ctx, "acme") }()
	for deadline := time.Now().Add(time.Minute); ; {
		var waiting int
		if err := b.read.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		done := false
		select {
		case err := <-deleted:
			t.Errorf("the deletion finished (%v) while a commit of the tenant was open", err)
			deleted <- err
			done = true
		default:
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deletion never waited for the commit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := b.testQuery(`SELECT topic FROM topics WHERE tenant = 'acme'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		left = append(left, name)
	}
	rows.Close()
	if len(left) != 0 {
		t.Fatalf("topics %v of the deleted tenant are left", left)
	}
	var doomed int
	if err := b.testQueryRow(`SELECT count(*) FROM doomed_topics`).Scan(&doomed); err != nil || doomed != 2 {
		t.Fatalf("%d doomed topics (%v), want 2: the one the held commit made was missed", doomed, err)
	}
}

// A commit whose writes fail consumes no number and gives its tenant's
// lock back: the other process commits next, numbered after what was
// committed before, and the failed process's next commit after that.
func TestAFailedCommitGivesBackItsLockAndNoNumber(t *testing.T) {
	stores, url := openProcesses(t, 2)
	a, b := stores[0], stores[1]
	ctx := context.Background()
	if r := commitOne(t, a, one("a", "x")); r.Err != nil || r.First != 1 {
		t.Fatalf("%+v", r)
	}
	// A row in the way of the next event: every attempt of the next
	// commit fails at its second round trip.
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `INSERT INTO events (topic_id, seq, type, time, data) SELECT id, 2, 'm', 0, '\x00' FROM topics`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CommitBatch(ctx, []*Publish{one("a", "x")}); err == nil {
		t.Fatal("a commit whose insert conflicts succeeded")
	}
	if h, err := b.Head(ctx, "a", "x"); err != nil || h != 1 {
		t.Fatalf("head %d (%v) after a failed commit, want 1", h, err)
	}
	if _, err := admin.Exec(ctx, `DELETE FROM events WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := b.CommitBatch(quick, []*Publish{one("a", "x")})
	if err != nil {
		t.Fatalf("the other process's commit after the failure: %v (the failed one kept its tenant's lock?)", err)
	}
	if res[0].First != 2 {
		t.Fatalf("the other process's commit got %d, want 2", res[0].First)
	}
	if r := commitOne(t, a, one("a", "x")); r.Err != nil || r.First != 3 {
		t.Fatalf("the failed process's next commit: %+v", r)
	}
}
