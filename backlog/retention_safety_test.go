package backlog

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/pgtest"
)

// checkOldest checks the invariant of topics.oldest on every topic: NULL
// exactly when nothing is retained (head = trimmed), else the time of
// event trimmed+1.
func checkOldest(t testing.TB, l *Store) {
	t.Helper()
	if n := count(t, l, `SELECT count(*) FROM topics WHERE (oldest IS NULL) != (head = trimmed)
		OR oldest IS DISTINCT FROM (SELECT e.time FROM events e WHERE e.topic_id = topics.id AND e.seq > topics.trimmed
			ORDER BY e.seq LIMIT 1)`); n != 0 {
		t.Fatalf("%d topics break the invariant of oldest", n)
	}
}

func count(t testing.TB, l *Store, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := l.testQueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func mustTenant(t testing.TB, l *Store, name string) auth.Tenant {
	t.Helper()
	tn, _, err := l.CreateTenant(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func mustPublish(t testing.TB, l *Store, reqs ...*Publish) []Result {
	t.Helper()
	res, err := l.CommitBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return res
}

// checkIntact checks that other/fresh holds its 5 answered events, none
// trimmed.
func checkIntact(t *testing.T, l *Store) {
	t.Helper()
	p, err := l.Read(context.Background(), "other", "fresh", 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if p.Head != 5 || p.Trimmed != 0 || len(p.Events) != 5 {
		t.Fatalf("the new topic lost answered events: head %d, trimmed %d, %d events", p.Head, p.Trimmed, len(p.Events))
	}
}

// R1, age variant: the age pass lists a deleted tenant's topic (the one
// with the highest id); the tenant is deleted and another tenant creates a
// topic before the pass writes. The new topic's young, answered events
// must stay: the move reads the topic's row again in its transaction, and
// ids are never reused.
func TestAgeTrimActsOnlyOnTheTopicItListed(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	mustTenant(t, l, "gone")
	mustTenant(t, l, "other")
	mustPublish(t, l, &Publish{Tenant: "gone", Topic: "old", Events: events(1000)})
	now = now.Add(2 * time.Hour)
	fired := false
	l.BeforeRetentionTx = func(duty string) {
		if duty != "age" || fired {
			return
		}
		fired = true
		if err := l.DeleteTenant(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		mustPublish(t, l, &Publish{Tenant: "other", Topic: "fresh", Events: events(5)})
	}
	n, err := l.TrimByAge(ctx, time.Hour)
	if err != nil || !fired {
		t.Fatalf("age trim: %v (hook fired: %v)", err, fired)
	}
	if n != 0 {
		t.Errorf("age trim moved %d topics; the only old one was deleted", n)
	}
	checkIntact(t, l)
	if _, err := l.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	checkIntact(t, l)
	checkOldest(t, l)
}

// R1, purge variant: the purge lists a topic with trimmed rows; its tenant
// is deleted and another tenant creates a topic before the purge deletes.
// The purge must not delete the new topic's rows.
func TestPurgeActsOnlyOnTheTopicItListed(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "gone")
	mustTenant(t, l, "other")
	mustPublish(t, l, &Publish{Tenant: "gone", Topic: "old", Events: events(1000)})
	if n, err := l.TrimByCount(ctx, 10); err != nil || n != 1 {
		t.Fatalf("trim: %d %v", n, err)
	}
	fired := false
	l.BeforeRetentionTx = func(duty string) {
		if duty != "purge" || fired {
			return
		}
		fired = true
		if err := l.DeleteTenant(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		mustPublish(t, l, &Publish{Tenant: "other", Topic: "fresh", Events: events(5)})
	}
	deleted, err := l.Purge(ctx)
	if err != nil || !fired {
		t.Fatalf("purge: %v (hook fired: %v)", err, fired)
	}
	if deleted != 0 {
		t.Errorf("purge deleted %d rows; the only trimmed topic was deleted", deleted)
	}
	checkIntact(t, l)
	if n := count(t, l, `SELECT sum(n) FROM events WHERE topic_id = (SELECT id FROM topics WHERE topic = 'fresh')`); n != 5 {
		t.Fatalf("the new topic has %d events, want 5", n)
	}
}

// explain returns the details of a statement's query plan.
func explain(t *testing.T, l *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := l.testQuery(`EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var details []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		details = append(details, detail)
	}
	return details
}

// Retention's cost is what it removes: with 20000 idle topics, the count
// trim, the age listing and the purge listing search their indexes (never
// scan topics), and a round with nothing to do runs no write transaction;
// a topic over the limit is still trimmed to exactly the newest N, an old
// one by age, and oldest stays consistent everywhere.
func TestRetentionCostsWhatItRemoves(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := base
	l.now = func() time.Time { return now }
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "old", Events: events(5)})
	now = base.Add(2 * time.Hour)
	for i := 0; i < 50; i++ {
		now = now.Add(time.Second)
		mustPublish(t, l, &Publish{Tenant: "a", Topic: "busy", Events: events(1)})
	}
	const idle = 20000
	if _, err := l.testExec(`WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1)
		INSERT INTO topics (tenant, topic, head, oldest) SELECT 'idle', 't' || x, 1, ?2 FROM n`, idle, now.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.testExec(`INSERT INTO events (topic_id, seq, type, time, data)
		SELECT id, 1, 'message', ?, '{}' FROM topics WHERE tenant = 'idle'`, now.UnixNano()); err != nil {
		t.Fatal(err)
	}
	checkOldest(t, l)
	now = base.Add(3 * time.Hour)
	cutoff := now.Add(-90 * time.Minute).UnixNano()

	// The plans are SQLite's; Postgres's planner picks by its statistics.
	for _, q := range []struct {
		sql, index string
		args       []any
	}{
		{trimByCountSQL, "INDEX topics_over", []any{10}},
		{listAgedSQL, "INDEX topics_oldest", []any{cutoff, topicChunk}},
		{listToPurgeSQL, "INDEX topics_to_purge", []any{0, topicChunk}},
	} {
		if pgtest.Enabled() {
			break
		}
		plan := explain(t, l, q.sql, q.args...)
		t.Logf("plan using %s: %q", q.index, plan)
		if !strings.Contains(strings.Join(plan, "\n"), q.index) {
			t.Errorf("%s\ndoes not use %s: %q", q.sql, q.index, plan)
		}
		for _, d := range plan {
			if strings.HasPrefix(d, "SCAN") {
				t.Errorf("%s\nscans: %q", q.sql, plan)
			}
		}
	}

	txs := map[string]int{}
	l.BeforeRetentionTx = func(duty string) { txs[duty]++ }
	if ids, err := l.listTopics(ctx, listAgedSQL, cutoff); err != nil || len(ids) != 1 {
		t.Fatalf("age listing: %v %v, want only a/old", ids, err)
	}
	if n, err := l.TrimByAge(ctx, 90*time.Minute); err != nil || n != 1 {
		t.Fatalf("age trim: %d %v", n, err)
	}
	if n, err := l.TrimByCount(ctx, 10); err != nil || n != 1 {
		t.Fatalf("count trim: %d %v", n, err)
	}
	if ids, err := l.listTopics(ctx, l.d.listToPurge, 0); err != nil || len(ids) != 2 {
		t.Fatalf("purge listing: %v %v, want a/old and a/busy", ids, err)
	}
	if n, err := l.Purge(ctx); err != nil || n != 5+40 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if txs["age"] != 1 || txs["count"] != 1 || txs["purge"] != 1 {
		t.Fatalf("write transactions: %v, want 1 age, 1 count, 1 purge (both topics' rows)", txs)
	}
	p, err := l.Read(ctx, "a", "busy", 0, 100, 1<<20)
	if err != nil || p.Trimmed != 40 || len(p.Events) != 10 || p.Events[0].Seq != 41 {
		t.Fatalf("busy: trimmed %d, %d events, %v", p.Trimmed, len(p.Events), err)
	}
	if p, _ := l.Read(ctx, "a", "old", 0, 100, 1<<20); p.Trimmed != 5 || len(p.Events) != 0 {
		t.Fatalf("old: trimmed %d, %d events", p.Trimmed, len(p.Events))
	}
	checkOldest(t, l)

	clear(txs)
	if n, err := l.TrimByAge(ctx, 90*time.Minute); err != nil || n != 0 {
		t.Fatalf("idle age trim: %d %v", n, err)
	}
	if n, err := l.TrimByCount(ctx, 10); err != nil || n != 0 {
		t.Fatalf("idle count trim: %d %v", n, err)
	}
	if n, err := l.Purge(ctx); err != nil || n != 0 {
		t.Fatalf("idle purge: %d %v", n, err)
	}
	// The count trim is always its one statement, which finds nothing
	// through topics_over and changes no page; nothing else writes.
	if len(txs) != 1 || txs["count"] != 1 {
		t.Fatalf("an idle round ran write transactions: %v, want only the count trim's statement", txs)
	}
}

// Purge batches topics: one write transaction (one fsync) takes topics
// in listing order and deletes at most purgeChunk rows in all. 50 topics
// with 10 trimmed rows each are purged in one transaction; a topic with
// more than purgeChunk trimmed rows goes on in the next transaction, which
// also takes the topics after it. No transaction deletes more than
// purgeChunk rows, none deletes above trimmed, and usage drops by the
// deleted rows' measure.
func TestPurgeBatchesTopicsPerTransaction(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	usage := func() int64 { return count(t, l, `SELECT coalesce(sum(bytes), 0) FROM usage`) }
	trimmedBytes := func() int64 {
		return count(t, l, `SELECT `+eventBytesSQL+` FROM events e JOIN topics t ON t.id = e.topic_id WHERE e.seq <= t.trimmed`)
	}
	var perTx []int64 // rows deleted by each purge transaction
	rows := func() int64 { return count(t, l, `SELECT count(*) FROM events`) }
	var before int64
	l.BeforeRetentionTx = func(duty string) {
		if duty != "purge" {
			return
		}
		n := rows()
		if len(perTx) > 0 {
			perTx[len(perTx)-1] = before - n
		}
		perTx, before = append(perTx, 0), n
	}
	purge := func(want int64) {
		t.Helper()
		perTx, before = nil, 0
		u, gone := usage(), trimmedBytes()
		n, err := l.Purge(ctx)
		if err != nil || n != want {
			t.Fatalf("purge: %d %v, want %d", n, err, want)
		}
		if len(perTx) > 0 {
			perTx[len(perTx)-1] = before - rows()
		}
		if got := usage(); got != u-gone {
			t.Fatalf("usage %d after purge, want %d - %d", got, u, gone)
		}
		if n := count(t, l, `SELECT count(*) FROM topics WHERE purged != trimmed`); n != 0 {
			t.Fatalf("%d topics not purged to their trim point", n)
		}
		if n := count(t, l, `SELECT count(*) FROM events e JOIN topics t ON t.id = e.topic_id
			WHERE e.seq <= t.trimmed OR e.seq > t.head`); n != 0 {
			t.Fatalf("%d rows at or below trimmed left", n)
		}
		if n := count(t, l, `SELECT count(*) FROM topics t WHERE (SELECT count(*) FROM events e WHERE e.topic_id = t.id) != t.head - t.trimmed`); n != 0 {
			t.Fatalf("%d topics lost retained rows", n)
		}
	}

	var reqs []*Publish
	for i := 0; i < 50; i++ {
		reqs = append(reqs, singles(fmt.Sprint("t", i%3), fmt.Sprint("small", i), events(20))...)
	}
	commitApart(t, l, reqs)
	if n, err := l.TrimByCount(ctx, 10); err != nil || n != 50 {
		t.Fatalf("trim: %d %v", n, err)
	}
	purge(50 * 10)
	if len(perTx) != 1 || perTx[0] != 500 {
		t.Fatalf("purge transactions deleted %v rows, want one of 500", perTx)
	}

	// In id order: a (10 trimmed rows), big (purgeChunk+10), c (10).
	commitApart(t, l, singles("t0", "a", events(20)))
	commitApart(t, l, singles("t1", "big", events(purgeChunk+20)))
	commitApart(t, l, singles("t2", "c", events(20)))
	if n, err := l.TrimByCount(ctx, 10); err != nil || n != 3 {
		t.Fatalf("trim: %d %v", n, err)
	}
	purge(purgeChunk + 30)
	if len(perTx) != 2 || perTx[0] != purgeChunk || perTx[1] != 30 {
		t.Fatalf("purge transactions deleted %v rows, want [%d 30]", perTx, purgeChunk)
	}
	checkOldest(t, l)
}

// The age pass never moves a trim point back, nor past the head, even
// when a count trim went further than age would.
func TestAgeTrimNeverMovesBack(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(3)})
	now = now.Add(2 * time.Hour)
	mustPublish(t, l, &Publish{Tenant: "a", Topic: "x", Events: events(10)})
	if _, err := l.TrimByCount(ctx, 5); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	if n, err := l.TrimByAge(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("age trim: %d %v", n, err)
	}
	if p, _ := l.Read(ctx, "a", "x", 0, 100, 1<<20); p.Trimmed != 8 || len(p.Events) != 5 {
		t.Fatalf("trimmed %d, %d events; want 8 and 5", p.Trimmed, len(p.Events))
	}
	now = now.Add(24 * time.Hour)
	if n, err := l.TrimByAge(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("age trim: %d %v", n, err)
	}
	if p, _ := l.Read(ctx, "a", "x", 0, 100, 1<<20); p.Trimmed != 13 || p.Head != 13 || len(p.Events) != 0 {
		t.Fatalf("trimmed %d of head %d, %d events", p.Trimmed, p.Head, len(p.Events))
	}
	checkOldest(t, l)
}

// Trimming and purging every event gives the tenant's usage back to its
// state's bytes: the purge takes off each row's length(data) +
// length(type) + length(key), the measure the commit adds.
func TestPurgeGivesBackUsage(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	evs := append(events(purgeChunk+1000), keyed("k1", event.OpUpsert, `{"a":1}`), keyed("k2", event.OpUpsert, `"two"`),
		keyed("k1", event.OpUpsert, `[1,2,3]`), keyed("k3", event.OpUpsert, `3`), keyed("k3", event.OpDelete, `null`))
	for i := range evs {
		evs[i].Type = fmt.Sprintf("type-%d", i%7)
	}
	mustPublish(t, l, &Publish{Tenant: "u", Topic: "x", Events: evs})
	var eventBytes, stateBytes int64
	for _, e := range evs {
		eventBytes += int64(len(e.Data) + len(e.Type) + len(e.Key))
	}
	stateBytes = count(t, l, `SELECT coalesce(sum(length(key) + length(data)), 0) FROM state`)
	usage := func() int64 { return count(t, l, `SELECT bytes FROM usage WHERE tenant = 'u'`) }
	if got := usage(); got != stateBytes+eventBytes {
		t.Fatalf("usage %d after commit, want %d", got, stateBytes+eventBytes)
	}
	now = now.Add(2 * time.Hour)
	if n, err := l.TrimByAge(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("age trim: %d %v", n, err)
	}
	if n, err := l.Purge(ctx); err != nil || n != int64(len(evs)) {
		t.Fatalf("purge: %d %v", n, err)
	}
	if got := usage(); got != stateBytes {
		t.Fatalf("usage %d after purging every event, want the state's %d", got, stateBytes)
	}
}

// Expiry forgets old idempotency keys and webhook ids, in chunks, and
// keeps young ones.
func TestExpireKeysBothTables(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	old := now.Add(-48 * time.Hour).UnixNano()
	if _, err := l.testExec(`WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1)
		INSERT INTO idempotency (topic_id, key, hash, first, last, batch, created) SELECT 1, 'k' || x, ?3, 1, 1, FALSE, ?2 FROM n`,
		2*keyChunk+10, old, []byte{0}); err != nil {
		t.Fatal(err)
	}
	for i, created := range []int64{old, old, now.UnixNano()} {
		if _, err := l.testExec(`INSERT INTO webhook_keys (tenant, key, tenant_id, topic, hash, first, last, batch, created)
			VALUES ('a', ?, 1, 'x', ?, 1, 1, FALSE, ?)`, fmt.Sprint("msg_", i), []byte{0}, created); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := l.ExpireKeys(ctx, 24*time.Hour); err != nil || n != 2*keyChunk+10+2 {
		t.Fatalf("expired %d: %v", n, err)
	}
	if n := count(t, l, `SELECT count(*) FROM idempotency`) + count(t, l, `SELECT count(*) FROM webhook_keys`); n != 1 {
		t.Fatalf("%d keys left, want the young webhook id", n)
	}
}
