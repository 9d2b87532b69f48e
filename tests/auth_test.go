package tests

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/refusal"
)

// The binary without --dev: the admin key comes from EDGEHUB_ADMIN_KEY, a
// tenant and a token come from the admin API, the CLI client publishes
// and watches with the token, and without it the same calls are refused.
func TestProductionModeEndToEnd(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	_, _, b := do(t, "POST", p.base+"/v1/admin/tenants/acme/tokens", "k-123", `{"publish":["orders"],"subscribe":["orders"],"ttl":"10m"}`)
	var tok struct{ Token string }
	json.Unmarshal(b, &tok)

	anon := &client.Client{Server: p.base}
	if _, err := anon.Publish(context.Background(), "acme", "orders", []byte(`1`), client.PublishOptions{}); !isAPIError(err, 401, "unauthorized") {
		t.Fatalf("anonymous publish: %v", err)
	}
	c := &client.Client{Server: p.base, Token: tok.Token}
	if _, err := c.Publish(context.Background(), "acme", "orders", []byte(`{"n":1}`), client.PublishOptions{}); err != nil {
		t.Fatalf("publish with token: %v", err)
	}
	if _, err := c.Publish(context.Background(), "acme", "refunds", []byte(`1`), client.PublishOptions{}); !isAPIError(err, 403, "forbidden") {
		t.Fatalf("publish outside the token: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := int64(0)
	for e, err := range c.Watch(ctx, "acme", "orders", client.WatchOptions{After: &after}) {
		if err != nil || string(e.Data) != `{"n":1}` {
			t.Fatalf("watch with token: %+v %v", e, err)
		}
		break
	}
}

func isAPIError(err error, status int, code refusal.Code) bool {
	ae, ok := err.(*client.APIError)
	return ok && ae.Status == status && ae.Code == code
}

// The admin key read from --admin-key-file works and raises no warning;
// given on the command line it works but is warned about, since every
// local user can read a process's arguments.
func TestAdminKeyFromAFileAndTheCommandLine(t *testing.T) {
	key := strings.Repeat("k", 40)
	file := t.TempDir() + "/admin-key"
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	put := func(p *proc) int {
		st, _, _ := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, "")
		return st
	}
	fromFile := startAt(t, binary, nil, t.TempDir(), "127.0.0.1:0", "--admin-key-file", file)
	if status := put(fromFile); status != 201 {
		t.Fatalf("admin key from a file: %d", status)
	}
	if strings.Contains(fromFile.logText(), "command line") {
		t.Fatalf("a key from a file was warned about: %s", fromFile.logText())
	}
	onArgv := startAt(t, binary, nil, t.TempDir(), "127.0.0.1:0", "--admin-key", key)
	if status := put(onArgv); status != 201 {
		t.Fatalf("admin key on the command line: %d", status)
	}
	if !strings.Contains(onArgv.logText(), "given on the command line") {
		t.Fatalf("no warning for a key on the command line: %s", onArgv.logText())
	}
}
