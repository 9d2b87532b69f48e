package backlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/event"
)

func one(tenant, topic string) *Publish {
	return &Publish{Tenant: tenant, Topic: topic, Events: events(1)}
}

func commitOne(t *testing.T, l *Store, a *Publish) Result {
	t.Helper()
	res, err := l.CommitBatch(context.Background(), []*Publish{a})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// A request authorized against one generation of a tenant commits only
// while the tenant has it: not after a deletion and re-creation under the
// same name, not after a rotation (which changes the generation).
func TestAppendRequiresTheGenerationItWasAuthorizedAgainst(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	old, _, err := l.CreateTenant(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	renewed, _, err := l.CreateTenant(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if renewed.ID == old.ID || renewed.Generation == old.Generation {
		t.Fatalf("re-created tenant kept id %d or generation %d", old.ID, old.Generation)
	}
	stale := one("a", "x")
	stale.RequireTenant, stale.Generation = true, old.Generation
	if r := commitOne(t, l, stale); !errors.Is(r.Err, ErrNoTenant) {
		t.Fatalf("a publish authorized before the deletion committed into the new tenant: %+v", r)
	}
	fresh := one("a", "x")
	fresh.RequireTenant, fresh.Generation = true, renewed.Generation
	if r := commitOne(t, l, fresh); r.Err != nil || r.First != 1 {
		t.Fatalf("a publish of the new tenant: %+v", r)
	}
	// A rotation is a new generation of the same tenant.
	if _, err := l.testExec(`UPDATE tenants SET generation = generation + 2 WHERE name = 'a'`); err != nil {
		t.Fatal(err)
	}
	if r := commitOne(t, l, fresh); !errors.Is(r.Err, ErrNoTenant) {
		t.Fatalf("a publish authorized before a rotation committed: %+v", r)
	}
	if h, _ := l.Head(ctx, "a", "x"); h != 1 {
		t.Fatalf("head %d, want 1", h)
	}
}

// A webhook-id is a tenant-wide key bound to its topic and request: a
// replay to another topic, or with another type, key, op or body, appends
// nothing; a true repeat is a duplicate; a key of an earlier incarnation
// of the tenant's name does not count.
func TestTenantWideKeyBindsTopicAndRequest(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	ten, _, err := l.CreateTenant(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	hook := func(topic, hash string) *Publish {
		a := one("a", topic)
		a.RequireTenant, a.Generation = true, ten.Generation
		a.IdemKey, a.IdemHash, a.TenantWideKey = "msg_1", []byte(hash), true
		return a
	}
	if r := commitOne(t, l, hook("audit", "h1")); r.Err != nil || r.First != 1 {
		t.Fatalf("first delivery: %+v", r)
	}
	if r := commitOne(t, l, hook("audit", "h1")); !r.Duplicate || r.First != 1 {
		t.Fatalf("redelivery: %+v", r)
	}
	for _, c := range []struct{ topic, hash string }{{"orders", "h1"}, {"audit", "h2"}, {"orders", "h2"}} {
		if r := commitOne(t, l, hook(c.topic, c.hash)); !errors.Is(r.Err, ErrKeyReused) {
			t.Fatalf("replay to %s with %s: %+v", c.topic, c.hash, r)
		}
	}
	// The same key as a topic-scoped Idempotency-Key is another key.
	plain := hook("orders", "h9")
	plain.TenantWideKey = false
	if r := commitOne(t, l, plain); r.Err != nil || r.First != 1 {
		t.Fatalf("topic-scoped key: %+v", r)
	}
	var n int
	if err := l.testQueryRow(`SELECT count(*) FROM topics WHERE tenant = 'a'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("topics %d (%v): a refused replay created one", n, err)
	}
	if h, _ := l.Head(ctx, "a", "audit"); h != 1 {
		t.Fatalf("audit head %d", h)
	}
	if err := l.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ten, _, err = l.CreateTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if r := commitOne(t, l, hook("orders", "h1")); r.Err != nil || r.Duplicate || r.First != 1 {
		t.Fatalf("the new tenant's first use of the id: %+v", r)
	}
}

// Quotas are checked in the commit: a tenant's topics, a tenant's stored
// bytes and a topic's state; a refused request stores nothing, and usage
// follows what is stored.
func TestQuotasRefuseAndStoreNothing(t *testing.T) {
	l := openTest(t)
	l.SetQuotas(Quotas{TenantTopics: 2, TenantBytes: 400, StateBytes: 100})
	data := func(s string) []event.Event { return []event.Event{{Type: "m", Data: json.RawMessage(s)}} }
	for _, topic := range []string{"x", "y"} {
		if r := commitOne(t, l, one("a", topic)); r.Err != nil {
			t.Fatalf("topic %s: %+v", topic, r)
		}
	}
	if r := commitOne(t, l, one("a", "z")); !errors.Is(r.Err, ErrQuota) {
		t.Fatalf("third topic: %+v", r)
	}
	if r := commitOne(t, l, one("b", "z")); r.Err != nil {
		t.Fatalf("another tenant's topic: %+v", r)
	}
	usage := func() (b, n int64) {
		t.Helper()
		if err := l.testQueryRow(`SELECT bytes, topics FROM usage WHERE tenant = 'a'`).Scan(&b, &n); err != nil {
			t.Fatal(err)
		}
		return b, n
	}
	b0, n0 := usage()
	if n0 != 2 || b0 != 2*int64(len(`{"n":0}`)+len("message")) {
		t.Fatalf("usage %d bytes %d topics", b0, n0)
	}
	keyed := func(key, op, d string) *Publish {
		return &Publish{Tenant: "a", Topic: "x", Events: []event.Event{{Type: "m", Key: key, Op: op, Data: json.RawMessage(d)}}}
	}
	big := `"` + strings.Repeat("0123456789", 11) + `"`
	if r := commitOne(t, l, keyed("k", event.OpUpsert, big)); !errors.Is(r.Err, ErrQuota) {
		t.Fatalf("state over its cap: %+v", r)
	}
	if r := commitOne(t, l, keyed("k", event.OpUpsert, `"small"`)); r.Err != nil {
		t.Fatalf("small state: %+v", r)
	}
	var stateBytes int64
	if err := l.testQueryRow(`SELECT state_bytes FROM topics WHERE tenant = 'a' AND topic = 'x'`).Scan(&stateBytes); err != nil || stateBytes != int64(len("k")+len(`"small"`)) {
		t.Fatalf("state bytes %d (%v)", stateBytes, err)
	}
	b1, _ := usage()
	if want := b0 + int64(len("m")+len("k")+len(`"small"`)) + stateBytes; b1 != want {
		t.Fatalf("usage %d, want %d", b1, want)
	}
	if r := commitOne(t, l, &Publish{Tenant: "a", Topic: "y", Events: data(`"` + strings.Repeat("0123456789", 40) + `"`)}); !errors.Is(r.Err, ErrQuota) {
		t.Fatalf("over the tenant's bytes: %+v", r)
	}
	// Deleting the key frees its state bytes even when the tenant is full.
	if r := commitOne(t, l, keyed("k", event.OpDelete, `null`)); r.Err != nil {
		t.Fatalf("delete: %+v", r)
	}
	if err := l.testQueryRow(`SELECT state_bytes FROM topics WHERE tenant = 'a' AND topic = 'x'`).Scan(&stateBytes); err != nil || stateBytes != 0 {
		t.Fatalf("state bytes after delete %d (%v)", stateBytes, err)
	}
	if h, _ := l.Head(context.Background(), "a", "y"); h != 1 {
		t.Fatalf("a refused request was stored: head %d", h)
	}
}

// oldest is the commit time of the oldest retained event, NULL when there
// is none: the age pass finds old topics through it.
func TestCommitSetsOldestOnce(t *testing.T) {
	l := openTest(t)
	commitOne(t, l, one("a", "x"))
	var first, second int64
	if err := l.testQueryRow(`SELECT oldest FROM topics`).Scan(&first); err != nil || first == 0 {
		t.Fatalf("oldest %d (%v)", first, err)
	}
	commitOne(t, l, one("a", "x"))
	if err := l.testQueryRow(`SELECT oldest FROM topics`).Scan(&second); err != nil || second != first {
		t.Fatalf("oldest moved from %d to %d (%v)", first, second, err)
	}
}

// A topic whose every event was trimmed has no oldest; the commit that
// appends to it again sets it, though a commit to a topic with an oldest
// leaves that column out (plan 056).
func TestAnAppendAfterEverythingWasTrimmedSetsOldest(t *testing.T) {
	l := openTest(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	commitOne(t, l, one("a", "x"))
	now = now.Add(2 * time.Hour)
	if n, err := l.TrimByAge(context.Background(), time.Hour); err != nil || n != 1 {
		t.Fatalf("trimmed %d topics: %v", n, err)
	}
	if n := count(t, l, `SELECT count(*) FROM topics WHERE oldest IS NULL`); n != 1 {
		t.Fatalf("%d topics with nothing retained have no oldest, want 1", n)
	}
	commitOne(t, l, one("a", "x"))
	checkOldest(t, l)
}

// A stream deleted and created again in one commit, after an append to
// it in the same commit, keeps the invariant of oldest: the deletion
// trims everything (oldest NULL), and the events after it are retained.
func TestAStreamDeletedAndCreatedInOneCommitKeepsItsOldest(t *testing.T) {
	l := openTest(t)
	commitOne(t, l, streamCreate("x", "text/plain"))
	again := streamCreate("x", "text/plain")
	again.Events = []event.Event{{Type: "message", Data: []byte("new"), Raw: true}}
	outcomes(t, l, streamAppend("x", StreamOp{ContentType: "text/plain"}, "a"),
		&Publish{Tenant: "s", Topic: "x", Stream: &StreamOp{Delete: true}}, again)
	checkOldest(t, l)
	if n := count(t, l, `SELECT count(*) FROM topics WHERE oldest IS NULL`); n != 0 {
		t.Fatalf("%d topics retain an event and have no oldest", n)
	}
}

// In dev mode a tenant with no row has id 0 before and after its deletion;
// a webhook-id it used before the deletion is gone with its events, not a
// duplicate of an event that no longer exists.
func TestDevTenantWebhookKeyGoesWithItsDeletion(t *testing.T) {
	l := openTest(t)
	hook := func() *Publish {
		a := one("d", "x")
		a.IdemKey, a.IdemHash, a.TenantWideKey = "msg_1", []byte("h"), true
		return a
	}
	if r := commitOne(t, l, hook()); r.Err != nil || r.First != 1 {
		t.Fatalf("first: %+v", r)
	}
	if err := l.DeleteTenant(context.Background(), "d"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("delete of a tenant with no row: %v", err)
	}
	if r := commitOne(t, l, hook()); r.Err != nil || r.Duplicate || r.First != 1 {
		t.Fatalf("after the deletion: %+v", r)
	}
	if r := commitOne(t, l, hook()); !r.Duplicate || r.First != 1 {
		t.Fatalf("a repeat after the deletion: %+v", r)
	}
}

// Batches of every size around the events one segment holds are
// stored whole: every event, numbered in line order after the last, with
// its own data and type, and keyed events fold into the state in order.
func TestBatchStoresEveryEventInOrder(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	var want, wantTypes []string
	for _, n := range []int{1, 2, segmentMax - 1, segmentMax, segmentMax + 1, 2*segmentMax + 5} {
		evs := make([]event.Event, n)
		for i := range evs {
			data := fmt.Sprintf(`{"batch":%d,"i":%d}`, n, i)
			evs[i] = event.Event{Type: fmt.Sprintf("t%d", i%3), Key: "k", Op: event.OpUpsert, Data: json.RawMessage(data)}
			want, wantTypes = append(want, data), append(wantTypes, evs[i].Type)
		}
		res, err := l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Batch: true, Events: evs}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("batch of %d: %v %v", n, err, res[0].Err)
		}
		if got := res[0].Last - res[0].First + 1; got != int64(n) {
			t.Fatalf("batch of %d answered %d..%d", n, res[0].First, res[0].Last)
		}
	}
	page, err := l.Read(ctx, "a", "x", 0, 10000, 1<<24)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != len(want) {
		t.Fatalf("%d events stored, %d published", len(page.Events), len(want))
	}
	for i, e := range page.Events {
		if e.Seq != int64(i+1) || string(e.Data) != want[i] || e.Type != wantTypes[i] {
			t.Fatalf("event %d: seq %d %s %s, want seq %d %s %s", i, e.Seq, e.Type, e.Data, i+1, wantTypes[i], want[i])
		}
	}
	if st, wantState := readState(t, l, "a", "x"), fmt.Sprintf(`{"seq":%d,"state":{"k":%s}}`, len(want), want[len(want)-1]); st != wantState {
		t.Fatalf("state %s, want %s", st, wantState)
	}
}

// A commit stores a group's single publishes to a topic as segments, cut
// where another topic of the tenant took a position between them and
// around an update with its publisher's id, which keeps a row of its own
// to be found by (plan 054). Reads by topic and by tenant see each event
// once, in order, at its position.
func TestGroupOfSinglesIsStoredAsSegments(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	var reqs []*Publish
	add := func(topic string, n int) {
		reqs = append(reqs, singles("acme", topic, events(n))...)
	}
	add("a", 5) // a#1..5 at 1..5: one segment
	add("b", 1) // b#1 at 6
	add("a", 5) // a#6..10 at 7..11: one segment
	reqs = append(reqs, &Publish{Tenant: "acme", Topic: "a", Events: []event.Event{{Type: "message",
		Data: json.RawMessage(`{"u":1}`), Update: &event.Update{ID: "u1", Topics: []string{"a"}}}}}) // a#11 at 12
	add("a", 2) // a#12..13 at 13..14: one segment
	reqs = append(reqs, one("other", "a"))
	mustPublish(t, l, reqs...)

	page, err := l.Read(ctx, "acme", "a", 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range page.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("a's event %d is seq %d", i, e.Seq)
		}
	}
	if len(page.Events) != 13 {
		t.Fatalf("a has %d events, want 13", len(page.Events))
	}
	checkOrder(t, readOrder(t, l, "acme", matchAll), 14)
	if pos, ok, err := l.UpdatePosition(ctx, "acme", "u1"); err != nil || !ok || pos != 12 {
		t.Fatalf("update u1 at %d %v %v, want 12", pos, ok, err)
	}
	rows := func(topic string) int64 {
		return count(t, l, `SELECT count(*) FROM events e JOIN topics t ON t.id = e.topic_id WHERE t.tenant = 'acme' AND t.topic = ?`, topic)
	}
	if a, b := rows("a"), rows("b"); a != 4 || b != 1 {
		t.Fatalf("rows: a %d, b %d; want 4 (three segments and the update) and 1", a, b)
	}

	// A segment gathered from several requests weighs at most
	// segmentMaxBytes: five events of 300 KiB are two rows, of three and
	// two.
	big := make([]event.Event, 5)
	for i := range big {
		big[i] = event.Event{Type: "message", Data: json.RawMessage(`"` + strings.Repeat(strconv.Itoa(i), 300<<10) + `"`)}
	}
	mustPublish(t, l, singles("acme", "big", big)...)
	if n := rows("big"); n != 2 {
		t.Fatalf("five events of 300 KiB are %d rows, want 2", n)
	}
	page, err = l.Read(ctx, "acme", "big", 0, 100, 8<<20)
	if err != nil || len(page.Events) != 5 {
		t.Fatalf("big: %d events, %v", len(page.Events), err)
	}
	for i, e := range page.Events {
		if e.Seq != int64(i+1) || string(e.Data) != string(big[i].Data) {
			t.Fatalf("big's event %d is seq %d, %d bytes", i, e.Seq, len(e.Data))
		}
	}
}
