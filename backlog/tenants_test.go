package backlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/event"
)

// Deleting a tenant is one short transaction that leaves its rows to
// PurgeDoomed, which removes them at most purgeChunk rows per transaction
// with other tenants' commits running between, until nothing of the
// tenant is left in any table.
func TestDeleteTenantPurgesInChunks(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	big := mustTenant(t, l, "big")
	mustTenant(t, l, "other")
	keyedEvents := make([]event.Event, 8000)
	for i := range keyedEvents {
		keyedEvents[i] = keyed(fmt.Sprintf("k%d", i), event.OpUpsert, `{"v":1}`)
	}
	// One request per event, each committed apart, so that each is a
	// row: purgeChunk counts rows.
	reqs := singles("big", "a", events(12000))
	reqs[0].IdemKey, reqs[0].IdemHash = "i1", []byte("h")
	reqs = append(reqs, singles("big", "b", keyedEvents)...)
	commitApart(t, l, append(reqs, &Publish{Tenant: "other", Topic: "x", Events: events(3)}))
	for _, w := range []struct {
		tenant string
		id     int64
	}{{"big", big.ID}, {"other", 0}} {
		if _, err := l.testExec(`INSERT INTO webhook_keys (tenant, key, tenant_id, topic, hash, first, last, batch, created)
			VALUES (?, 'msg_1', ?, 'a', ?, 1, 1, FALSE, ?)`, w.tenant, w.id, []byte{0}, l.now().UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	rows, err := l.testQuery(`SELECT id FROM topics WHERE tenant = 'big'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 2 {
		t.Fatalf("big has %d topics", len(ids))
	}
	left := func() int64 {
		var n int64
		for _, table := range []string{"events", "state", "idempotency"} {
			n += count(t, l, `SELECT count(*) FROM `+table+` WHERE topic_id IN (?, ?)`, ids[0], ids[1])
		}
		return n + count(t, l, `SELECT count(*) FROM webhook_keys WHERE tenant = 'big'`)
	}
	const total = 12000 + 8000 + 8000 + 1 + 1

	if err := l.DeleteTenant(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if n := left(); n != total {
		t.Fatalf("DeleteTenant's transaction deleted %d rows itself; they are PurgeDoomed's", total-n)
	}
	for _, q := range []string{`SELECT count(*) FROM tenants WHERE name = 'big'`, `SELECT count(*) FROM usage WHERE tenant = 'big'`,
		`SELECT count(*) FROM topics WHERE tenant = 'big'`} {
		if n := count(t, l, q); n != 0 {
			t.Fatalf("%s: %d after DeleteTenant", q, n)
		}
	}
	if _, err := l.Tenant(ctx, "big"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("deleted tenant still found: %v", err)
	}

	seen := []int64{}
	l.BeforeRetentionTx = func(duty string) {
		if duty != "doomed" {
			return
		}
		if len(seen) == 1 {
			mustPublish(t, l, &Publish{Tenant: "other", Topic: "x", Events: events(1)})
		}
		seen = append(seen, left())
	}
	removed, err := l.PurgeDoomed(ctx)
	if err != nil || removed != total {
		t.Fatalf("PurgeDoomed removed %d rows, want %d: %v", removed, total, err)
	}
	seen = append(seen, left())
	for i := 1; i < len(seen); i++ {
		if d := seen[i-1] - seen[i]; d > purgeChunk {
			t.Fatalf("one transaction deleted %d rows, more than %d (remaining after each: %v)", d, purgeChunk, seen)
		}
	}
	if seen[0] != total || seen[len(seen)-1] != 0 {
		t.Fatalf("remaining rows before each transaction: %v", seen)
	}
	for _, q := range []string{`SELECT count(*) FROM doomed_topics`, `SELECT count(*) FROM doomed_tenants`,
		`SELECT count(*) FROM webhook_keys WHERE tenant = 'big'`} {
		if n := count(t, l, q); n != 0 {
			t.Fatalf("%s: %d after PurgeDoomed", q, n)
		}
	}
	if n := count(t, l, `SELECT count(*) FROM webhook_keys WHERE tenant = 'other'`); n != 1 {
		t.Fatalf("other's webhook key: %d rows", n)
	}
	if p, err := l.Read(ctx, "other", "x", 0, 100, 1<<20); err != nil || len(p.Events) != 4 {
		t.Fatalf("other's topic: %d events, %v", len(p.Events), err)
	}
	if again, err := l.PurgeDoomed(ctx); err != nil || again != 0 {
		t.Fatalf("second PurgeDoomed: %d %v", again, err)
	}
}

// A tenant without a row (dev mode) is deleted all the same, and told
// apart by ErrNoTenant.
func TestDeleteTenantWithoutRow(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	commitApart(t, l, singles("dev", "x", events(3)))
	if err := l.DeleteTenant(ctx, "dev"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("want ErrNoTenant, got %v", err)
	}
	if n := count(t, l, `SELECT count(*) FROM topics WHERE tenant = 'dev'`); n != 0 {
		t.Fatalf("%d topics left", n)
	}
	if n, err := l.PurgeDoomed(ctx); err != nil || n != 3 {
		t.Fatalf("PurgeDoomed: %d %v", n, err)
	}
}

// A deleted tenant's data does not stay readable in the database file or
// the WAL: secure_delete zeroes it and the checkpoint drops the WAL's old
// copies of its pages.
func TestDeletedTenantLeavesNoBytesOnDisk(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenSQLite(context.Background(), dir, slog.New(slog.NewTextHandler(io.Discard, nil)), SyncFull)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	const marker = "zqxv-secret-marker"
	mustTenant(t, l, "sec")
	mustTenant(t, l, "keep")
	mustPublish(t, l,
		&Publish{Tenant: "sec", Topic: "x", Events: []event.Event{
			keyed("k", event.OpUpsert, `"`+marker+`-state"`),
			{Type: "message", Data: json.RawMessage(`{"m":"` + marker + `-event"}`)},
		}},
		&Publish{Tenant: "keep", Topic: "y", Events: events(50)})
	onDisk := func() bool {
		found := false
		for _, name := range []string{"edgehub.db", "edgehub.db-wal"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			found = found || bytes.Contains(b, []byte(marker))
		}
		return found
	}
	if !onDisk() {
		t.Fatal("the marker is not on disk before the deletion: the test proves nothing")
	}
	if err := l.DeleteTenant(ctx, "sec"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PurgeDoomed(ctx); err != nil {
		t.Fatal(err)
	}
	if onDisk() {
		t.Fatal("the deleted tenant's data is still readable in edgehub.db or edgehub.db-wal")
	}
	if p, err := l.Read(ctx, "keep", "y", 0, 100, 1<<20); err != nil || len(p.Events) != 50 {
		t.Fatalf("keep/y: %d events, %v", len(p.Events), err)
	}
}

// Rotation gives new secrets and a new generation and keeps the id; an
// unknown tenant is ErrNoTenant.
func TestRotate(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	before := mustTenant(t, l, "r")
	after, err := l.Rotate(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != before.ID || after.Name != "r" {
		t.Fatalf("rotation changed the tenant: %+v -> %+v", before, after)
	}
	if after.SigningSecret == before.SigningSecret || after.WebhookSecret == before.WebhookSecret ||
		after.Generation == before.Generation || after.Generation <= 0 || !strings.HasPrefix(after.WebhookSecret, "whsec_") {
		t.Fatalf("rotation did not renew everything: %+v -> %+v", before, after)
	}
	if got, err := l.Tenant(ctx, "r"); err != nil || !reflect.DeepEqual(got, after) {
		t.Fatalf("stored tenant %+v (%v), want %+v", got, err, after)
	}
	if _, err := l.Rotate(ctx, "nobody"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("rotate unknown: %v", err)
	}
}
