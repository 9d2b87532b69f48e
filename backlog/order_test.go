package backlog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/pgtest"
	"github.com/edgehub/edgehub/sql/schema"
)

func matchAll(string) bool { return true }

// readOrder reads a tenant's whole order, page by page.
func readOrder(t *testing.T, l *Store, tenant string, match func(string) bool) []event.OfTenant {
	t.Helper()
	var all []event.OfTenant
	after := int64(0)
	for {
		p, err := l.ReadTenant(context.Background(), tenant, after, TopicMatch(match), 7, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Events...)
		if p.Next == after {
			return all
		}
		after = p.Next
	}
}

// checkOrder fails unless events hold positions 1..n with no hole, and
// each topic's sequence rises with them by exactly one.
func checkOrder(t *testing.T, evs []event.OfTenant, n int) {
	t.Helper()
	if len(evs) != n {
		t.Fatalf("%d events in the tenant's order, want %d", len(evs), n)
	}
	seqs := map[string]int64{}
	for i, e := range evs {
		if e.Pos != int64(i+1) {
			t.Fatalf("event %d of the order has position %d: %+v", i+1, e.Pos, e)
		}
		if e.Seq != seqs[e.Topic]+1 {
			t.Fatalf("position %d is %s#%d after %s#%d: the two orders disagree", e.Pos, e.Topic, e.Seq, e.Topic, seqs[e.Topic])
		}
		seqs[e.Topic] = e.Seq
	}
}

// Every committed event gets the tenant's next position, across topics,
// in commit order; a batch takes consecutive ones; a refused request, a
// duplicate and another tenant take none of them.
func TestTenantPositionsHaveNoHole(t *testing.T) {
	l := openTest(t)
	l.SetQuotas(Quotas{TenantTopics: 3})
	ctx := context.Background()
	keyed := one("acme", "a")
	keyed.IdemKey, keyed.IdemHash = "k", []byte("h")
	batch := &Publish{Tenant: "acme", Topic: "c", Events: events(5), Batch: true}
	res, err := l.CommitBatch(ctx, []*Publish{one("acme", "a"), one("other", "a"), keyed, batch,
		one("acme", "b"), one("acme", "d") /* a 4th topic: over the quota */})
	if err != nil {
		t.Fatal(err)
	}
	if res[5].Err == nil {
		t.Fatalf("a 4th topic was not refused: %+v", res[5])
	}
	again := *keyed
	res2, err := l.CommitBatch(ctx, []*Publish{&again, one("acme", "a"), {Tenant: "acme", Topic: "b", Events: events(3), Batch: true}})
	if err != nil || !res2[0].Duplicate {
		t.Fatalf("the repeat: %+v, %v", res2, err)
	}
	evs := readOrder(t, l, "acme", matchAll)
	checkOrder(t, evs, 1+1+5+1+1+3)
	var answered []event.Event
	for _, r := range append(res, res2...) {
		answered = append(answered, r.Events...)
	}
	answered = append(answered[:1], answered[2:]...) // "other"'s
	for i, e := range answered {
		if e.Pos != evs[i].Pos || e.Seq != evs[i].Seq {
			t.Fatalf("the commit answered position %d for %d, the log holds %d", e.Pos, e.Seq, evs[i].Pos)
		}
	}
	if other := readOrder(t, l, "other", matchAll); len(other) != 1 || other[0].Pos != 1 {
		t.Fatalf("another tenant's order: %+v", other)
	}
	for tenant, want := range map[string]int64{"acme": 12, "other": 1, "nobody": 0} {
		if head, err := l.TenantHead(ctx, tenant); err != nil || head != want {
			t.Fatalf("the head of %s: %d, %v; want %d", tenant, head, err, want)
		}
	}
	// A filter leaves topics out but not positions: the rest keep theirs.
	onlyB := readOrder(t, l, "acme", func(topic string) bool { return topic == "b" })
	if len(onlyB) != 4 || onlyB[0].Pos != 8 || onlyB[1].Pos != 10 || onlyB[3].Pos != 12 {
		t.Fatalf("topic b of the order: %+v", onlyB)
	}
	// A read that starts inside a batch's segment starts at its position.
	p, err := l.ReadTenant(ctx, "acme", 4, TopicMatch(matchAll), 2, 1<<20)
	if err != nil || len(p.Events) != 2 || p.Events[0].Pos != 5 || p.Events[0].Seq != 3 || p.Head != 12 || p.Next != 6 {
		t.Fatalf("a read after 4: %+v, %v", p, err)
	}
}

// A tenant deleted and created again is another tenant: its order starts
// at 1, and none of the old one's events are in it, purged or not.
func TestARecreatedTenantStartsItsOrderAgain(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	mustPublish(t, l, one("acme", "a"), one("acme", "b"))
	if err := l.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	mustTenant(t, l, "acme")
	res := mustPublish(t, l, one("acme", "b"))
	if res[0].Events[0].Pos != 1 {
		t.Fatalf("the new tenant's first event has position %d", res[0].Events[0].Pos)
	}
	if evs := readOrder(t, l, "acme", matchAll); len(evs) != 1 || evs[0].Topic != "b" || evs[0].Pos != 1 {
		t.Fatalf("the new tenant's order: %+v", evs)
	}
}

// Three processes committing for one tenant at once, on shared and new
// topics, in singles and batches, share one order: the tenant's lock
// queues them, and each reads the tenant's position after taking it.
func TestProcessesShareOneTenantOrder(t *testing.T) {
	stores, _ := openProcesses(t, 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	total := 0
	for p, l := range stores {
		wg.Add(1)
		total += 60 * (1 + 1 + 2)
		go func() {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				reqs := []*Publish{one("acme", fmt.Sprintf("x%d", i%4)), one("acme", fmt.Sprintf("p%d-%d", p, i)),
					{Tenant: "acme", Topic: "shared", Events: events(2), Batch: true}}
				if _, err := l.CommitBatch(ctx, reqs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	checkOrder(t, readOrder(t, stores[0], "acme", matchAll), total)
}

// A database of the schema before tenant orders is numbered when it
// opens: each tenant's rows from 1 in commit order (a topic's in its
// sequence's, though its clock went back), a segment taking consecutive
// positions, a deleted tenant's leftover rows none; and commits go on
// from there. On the store the suite runs on.
func TestMigrationNumbersExistingEvents(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dialect, files, before, blob := goose.DialectSQLite3, "sqlite", int64(11), "x'%x'"
	topicsInsert := `INSERT INTO topics (id, tenant, topic, head)`
	var db *sql.DB
	var open func() (*Store, error)
	if pgtest.Enabled() {
		url := pgtest.Database(t)
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		db = stdlib.OpenDB(*cfg)
		dialect, files, before, blob = goose.DialectPostgres, "postgres", 3, `'\x%x'`
		topicsInsert += ` OVERRIDING SYSTEM VALUE`
		open = func() (*Store, error) { return OpenPostgres(ctx, url, logger) }
	} else {
		dir := t.TempDir()
		var err error
		if db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "edgehub.db")); err != nil {
			t.Fatal(err)
		}
		open = func() (*Store, error) { return OpenSQLite(ctx, dir, logger, SyncFull) }
	}
	migrations, _ := fs.Sub(schema.SQLite, files)
	if files == "postgres" {
		migrations, _ = fs.Sub(schema.Postgres, files)
	}
	p, err := goose.NewProvider(dialect, db, migrations, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	seg := encodeSegment(nil, []event.Event{{Seq: 2, Type: "m", Data: json.RawMessage(`2`)},
		{Seq: 3, Type: "m", Data: json.RawMessage(`3`)}, {Seq: 4, Type: "m", Data: json.RawMessage(`4`)}})
	for _, q := range []string{
		topicsInsert + ` VALUES (1, 'acme', 'a', 4), (2, 'acme', 'b', 2), (3, 'dev', 'a', 1)`,
		`INSERT INTO usage (tenant, bytes, topics) VALUES ('acme', 0, 2)`, // dev has no usage row
		// a: 1 at time 10, then a segment of 2..4 at time 20
		`INSERT INTO events (topic_id, seq, type, time, data) VALUES (1, 1, 'm', 10, '1')`,
		`INSERT INTO events (topic_id, seq, n, type, time, data) VALUES (1, 4, 3, '', 20, ` + fmt.Sprintf(blob, seg) + `)`,
		// b: 1 at 15, 2 at 5 (its clock went back): after b#1, so after a#1
		`INSERT INTO events (topic_id, seq, type, time, data) VALUES (2, 1, 'm', 15, '1'), (2, 2, 'm', 5, '2')`,
		`INSERT INTO events (topic_id, seq, type, time, data) VALUES (3, 1, 'm', 1, '1')`,
		// a deleted tenant's topic, not purged yet
		`INSERT INTO events (topic_id, seq, type, time, data) VALUES (99, 1, 'm', 1, '1')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	l, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mustPublish(t, l, one("acme", "b"), one("dev", "a"))
	var got []string
	for _, e := range readOrder(t, l, "acme", matchAll) {
		got = append(got, fmt.Sprintf("%d:%s#%d", e.Pos, e.Topic, e.Seq))
	}
	if want := "1:a#1 2:b#1 3:b#2 4:a#2 5:a#3 6:a#4 7:b#3"; strings.Join(got, " ") != want {
		t.Fatalf("acme's order after the migration: %s, want %s", strings.Join(got, " "), want)
	}
	dev := readOrder(t, l, "dev", matchAll)
	checkOrder(t, dev, 2)
	if n := count(t, l, `SELECT count(*) FROM events WHERE pos IS NULL`); n != 1 {
		t.Fatalf("%d rows have no position, want the deleted tenant's 1", n)
	}
}

// A reader of the tenant's order is told, per topic, of the events that
// retention removed after its position, once, in the page whose range
// holds the last of them, before or after the purge; a reader past them
// is told nothing.
func TestTenantReadsOweGapsPerTopic(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	// a#1..3 at 1..3, b#1 at 4, a#4..6 (a batch: one segment) at 5..7, b#2 at 8
	mustPublish(t, l, singles("acme", "a", events(3))...)
	mustPublish(t, l, one("acme", "b"), &Publish{Tenant: "acme", Topic: "a", Events: events(3), Batch: true}, one("acme", "b"))
	if _, err := l.TrimByCount(ctx, 1); err != nil { // a keeps a#6 (inside the segment), b keeps b#2
		t.Fatal(err)
	}
	gaps := func(after int64) string {
		p, err := l.ReadTenant(ctx, "acme", after, TopicMatch(matchAll), 100, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range p.Gaps {
			out = append(out, fmt.Sprintf("%s<=%d", g.Topic, g.To))
		}
		for _, e := range p.Events {
			out = append(out, fmt.Sprintf("%d:%s#%d", e.Pos, e.Topic, e.Seq))
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		after int64
		want  string
	}{
		{0, "b<=1 a<=5 7:a#6 8:b#2"},
		{4, "a<=5 7:a#6 8:b#2"}, // b#1 (4) is not owed
		{6, "7:a#6 8:b#2"},
		{8, ""},
	} {
		if got := gaps(c.after); got != c.want {
			t.Errorf("after %d: %q, want %q", c.after, got, c.want)
		}
	}
	if _, err := l.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gaps(0); got != "b<=1 a<=5 7:a#6 8:b#2" {
		t.Errorf("after the purge: %q", got)
	}
	// A page that ends early owes only the gaps up to where it ended.
	p, err := l.ReadTenant(ctx, "acme", 0, TopicMatch(matchAll), 1, 1<<20)
	if err != nil || len(p.Events) != 1 || p.Next != 7 || len(p.Gaps) != 2 {
		t.Fatalf("a page of one event: %+v, %v", p, err)
	}
	p, err = l.ReadTenant(ctx, "acme", 0, TopicMatch(func(topic string) bool { return topic == "a" }), 1, 1<<20)
	if err != nil || len(p.Events) != 1 || p.Next != 8 || len(p.Gaps) != 1 || p.Gaps[0].Topic != "a" {
		t.Fatalf("topic a's page: %+v, %v", p, err)
	}
	// By age: everything goes, and a reader at 0 is owed both topics.
	now := time.Now()
	l.now = func() time.Time { return now.Add(2 * time.Hour) }
	if _, err := l.TrimByAge(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := gaps(0); got != "a<=6 b<=2" {
		t.Errorf("after an age trim of everything: %q", got)
	}
}

// A read owed more gaps than a page holds ends at the last it holds; the
// next read goes on from there, and no gap is told twice or left out.
func TestManyGapsArePaged(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	var reqs []*Publish
	for i := range tenantGapsMax + 1 {
		reqs = append(reqs, one("acme", fmt.Sprintf("t%04d", i)))
	}
	mustPublish(t, l, reqs...)
	now := time.Now()
	l.now = func() time.Time { return now.Add(2 * time.Hour) }
	if _, err := l.TrimByAge(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	told := map[string]int{}
	after, pages := int64(0), 0
	for {
		p, err := l.ReadTenant(ctx, "acme", after, TopicMatch(matchAll), 100, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range p.Gaps {
			told[g.Topic]++
		}
		if p.Next == after {
			break
		}
		after, pages = p.Next, pages+1
	}
	if len(told) != tenantGapsMax+1 || pages != 2 {
		t.Fatalf("%d topics' gaps told in %d pages, want %d in 2", len(told), pages, tenantGapsMax+1)
	}
	for topic, n := range told {
		if n != 1 {
			t.Fatalf("the gap of %s was told %d times", topic, n)
		}
	}
}

// The topic list gives the tenant's topics in byte order of their names,
// after a name, those the filter accepts, with heads and first retained
// sequence numbers, in pages that lose and repeat nothing.
func TestTopicsAreListedInNameOrder(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustPublish(t, l, one("acme", "b"), one("acme", "a"), one("acme", "B"), one("other", "a"),
		&Publish{Tenant: "acme", Topic: "c", Events: events(3), Batch: true})
	if _, err := l.TrimByCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	list := func(after string, match func(string) bool, limit int) string {
		ts, next, _, err := l.Topics(ctx, "acme", after, match, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ts {
			out = append(out, fmt.Sprintf("%s:%d/%d", x.Topic, x.First, x.Head))
		}
		return strings.Join(out, " ") + " next=" + next
	}
	for _, c := range []struct {
		after string
		match func(string) bool
		limit int
		want  string
	}{
		{"", matchAll, 10, "B:1/1 a:1/1 b:1/1 c:3/3 next=c"},
		{"", matchAll, 2, "B:1/1 a:1/1 next=a"},
		{"a", matchAll, 2, "b:1/1 c:3/3 next=c"},
		{"c", matchAll, 2, " next=c"},
		{"", func(t string) bool { return t != "a" && t != "B" }, 1, "b:1/1 next=b"},
	} {
		if got := list(c.after, c.match, c.limit); got != c.want {
			t.Errorf("after %q limit %d: %q, want %q", c.after, c.limit, got, c.want)
		}
	}
}

// A listing looks at no more than topicsScanMax topics: a filter that
// accepts none of them ends the page empty, with next the last name
// looked at, from which the next page goes on and finds the rest.
func TestAListingStopsAtItsScanCap(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	const n = topicsScanMax + 5
	for from := 0; from < n; from += 10_000 {
		var reqs []*Publish
		for i := from; i < min(from+10_000, n); i++ {
			reqs = append(reqs, one("acme", fmt.Sprintf("t%06d", i)))
		}
		mustPublish(t, l, reqs...)
	}
	tail := func(topic string) bool { return topic > fmt.Sprintf("t%06d", topicsScanMax) }
	ts, next, complete, err := l.Topics(ctx, "acme", "", tail, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 0 || complete || next != fmt.Sprintf("t%06d", topicsScanMax-1) {
		t.Fatalf("first page: %d topics, next %q, complete %v", len(ts), next, complete)
	}
	ts, next, complete, err = l.Topics(ctx, "acme", next, tail, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 4 || !complete || next != fmt.Sprintf("t%06d", n-1) {
		t.Fatalf("second page: %d topics, next %q, complete %v", len(ts), next, complete)
	}
}
