package tests

import (
	"encoding/json"
	"strings"
	"testing"
)

// The usage answer shows what a tenant holds beside each limit: its
// stored bytes as the quota counts them (data, type, key), topics,
// retained events beside retention's count, and its open streams; the
// next publish past the bytes quota is the 429 it let one see coming.
func TestTenantUsage(t *testing.T) {
	const key = "k-usage-0123456789abcdef0123456789abcdef"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0",
		"--max-tenant-bytes", "50", "--max-tenant-topics", "5", "--max-tenant-streams", "7", "--retention-events", "40")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	tok := p.mintAcme(t, key, `"*"`, `"*"`)
	for _, topic := range []string{"a", "a", "b"} {
		if st, _, b := do(t, "POST", p.base+"/v1/tenants/acme/topics/"+topic+"/notify", tok, `{"n":1}`); st != 201 {
			t.Fatalf("publish to %s: %d %s", topic, st, b)
		}
	}
	s := p.watch(t, "a", "?access_token="+tok, nil)
	s.next(t) // the hello: the stream is open
	type used struct{ Used, Limit int64 }
	var u struct {
		Tenant      string
		StoredBytes used `json:"stored_bytes"`
		Topics      used
		Events      struct {
			Used          int64
			LimitPerTopic int64 `json:"limit_per_topic"`
		}
		Streams used
	}
	st, _, b := do(t, "GET", p.base+"/v1/admin/tenants/acme/usage", key, "")
	if st != 200 || json.Unmarshal(b, &u) != nil {
		t.Fatalf("usage: %d %s", st, b)
	}
	// Three events of {"n":1} (7 bytes) and type message (7 bytes).
	if u.Tenant != "acme" || u.StoredBytes != (used{42, 50}) || u.Topics != (used{2, 5}) ||
		u.Events.Used != 3 || u.Events.LimitPerTopic != 40 || u.Streams != (used{1, 7}) {
		t.Fatalf("usage: %s", b)
	}
	if out, errOut, code := cliRun(t, []string{"EDGEHUB_ADMIN_KEY=" + key}, nil, "", "tenant", "usage", "acme", "--server", p.base); code != 0 ||
		!strings.Contains(out, `"stored_bytes":{"used":42,"limit":50}`) {
		t.Fatalf("tenant usage: exit %d, %s %s", code, out, errOut)
	}
	if st, _, b := do(t, "POST", p.base+"/v1/tenants/acme/topics/b/notify", tok, `{"n":1}`); st != 429 {
		t.Fatalf("a publish past the 50 bytes the usage showed 42 of: %d %s", st, b)
	}
	// /metrics has the server's totals, with no tenant label.
	if _, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/other", key, ""); len(b) == 0 {
		t.Fatal("create tenant other")
	}
	st, _, b = do(t, "POST", p.base+"/v1/admin/tenants/other/tokens", key, `{"publish":["*"]}`)
	var minted struct{ Token string }
	if st != 201 || json.Unmarshal(b, &minted) != nil {
		t.Fatalf("mint for other: %d %s", st, b)
	}
	other := minted.Token
	if st, _, b := do(t, "POST", p.base+"/v1/tenants/other/topics/c/notify", other, `{"n":22}`); st != 201 {
		t.Fatalf("publish to other: %d %s", st, b)
	}
	series := p.series(t)
	if series["edgehub_stored_bytes"] != 42+15 || series["edgehub_topics"] != 3 || series["edgehub_database_bytes"] <= 0 {
		t.Fatalf("totals: stored %v, topics %v, database %v", series["edgehub_stored_bytes"], series["edgehub_topics"], series["edgehub_database_bytes"])
	}
}
