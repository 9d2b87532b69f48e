package tests

import (
	"encoding/json"
	"strings"
	"testing"
)

// The admin API lists tenants (plan 049): with the admin key only, in byte
// order of their names, paged by after, names and creation times and never
// a secret; a deleted tenant is gone from it; bad paging is refused in the
// contract's shape; `edgehub tenant list --all` prints every one a line.
func TestTenantList(t *testing.T) {
	const key = "k-list-0123456789abcdef0123456789abcdef"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	var secrets []string
	for _, name := range []string{"b", "B", "a", "gone"} {
		st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/"+name, key, "")
		var ten struct {
			SigningSecret string `json:"signing_secret"`
			WebhookSecret string `json:"webhook_secret"`
		}
		if st != 201 || json.Unmarshal(b, &ten) != nil || ten.SigningSecret == "" {
			t.Fatalf("create %s: %d %s", name, st, b)
		}
		secrets = append(secrets, ten.SigningSecret, ten.WebhookSecret)
	}
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/gone", key, ""); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	type page struct {
		Tenants []struct {
			Tenant  string
			Created string
		}
		NextAfter string `json:"next_after"`
	}
	var got []string
	after := ""
	for range 5 {
		st, _, b := do(t, "GET", p.base+"/v1/admin/tenants?limit=2&after="+after, key, "")
		var pg page
		if st != 200 || json.Unmarshal(b, &pg) != nil {
			t.Fatalf("list after %q: %d %s", after, st, b)
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Fatalf("the list holds a secret: %s", b)
			}
		}
		if len(pg.Tenants) == 0 {
			if pg.NextAfter != after {
				t.Fatalf("an empty page's next_after is %q, want %q", pg.NextAfter, after)
			}
			break
		}
		for _, e := range pg.Tenants {
			if !strings.HasPrefix(e.Created, "20") {
				t.Fatalf("created %q is no RFC 3339 time: %s", e.Created, b)
			}
			got = append(got, e.Tenant)
		}
		after = pg.NextAfter
	}
	if strings.Join(got, " ") != "B a b" {
		t.Fatalf("listed %q, want B a b", got)
	}
	for _, c := range []struct{ query, bearer, want string }{
		{"", "", `"code":"unauthorized"`},
		{"?after=.x", key, `"code":"invalid_name"`},
		{"?limit=0", key, `"code":"invalid_position"`},
	} {
		if _, _, b := do(t, "GET", p.base+"/v1/admin/tenants"+c.query, c.bearer, ""); !strings.Contains(string(b), c.want) {
			t.Errorf("GET /v1/admin/tenants%s: %s, want %s", c.query, b, c.want)
		}
	}
	out, errOut, code := cliRun(t, []string{"EDGEHUB_ADMIN_KEY=" + key}, nil, "", "tenant", "list", "--all", "--server", p.base)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], `{"tenant":"B","created":"20`) {
		t.Fatalf("tenant list --all: exit %d, %q %s", code, out, errOut)
	}
}
