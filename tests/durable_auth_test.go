package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With credentials, a stream belongs to the token's tenant and the
// token's patterns apply to its name; an append may come signed as a
// webhook instead, naming its tenant in Edgehub-Tenant, and a bad
// signature stores nothing.
func TestDurableStreamsWithCredentials(t *testing.T) {
	const key = "admin-key-of-the-durable-streams-test-0123"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, "")
	if st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	var tenant struct {
		WebhookSecret string `json:"webhook_secret"`
	}
	json.Unmarshal(b, &tenant)
	_, _, b = do(t, "POST", p.base+"/v1/admin/tenants/acme/tokens", key, `{"publish":["jobs"],"subscribe":["jobs"],"ttl":"10m"}`)
	var tok struct{ Token string }
	json.Unmarshal(b, &tok)
	url := p.base + "/v1/stream/jobs"
	send := func(req *http.Request, bearer string) int {
		t.Helper()
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	request := func(method, url, body string) *http.Request {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return req
	}
	if got := send(request("PUT", url, ""), ""); got != 401 {
		t.Fatalf("create without credentials: %d, want 401", got)
	}
	if got := send(request("PUT", p.base+"/v1/stream/other", ""), tok.Token); got != 403 {
		t.Fatalf("create outside the token's patterns: %d, want 403", got)
	}
	if got := send(request("PUT", url, `{"n":1}`), tok.Token); got != 201 {
		t.Fatalf("create with the token: %d, want 201", got)
	}
	signedAppend := func(secret, body string) *http.Request {
		req := signed(t, url, secret, "msg_"+body, time.Now(), body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Edgehub-Tenant", "acme")
		return req
	}
	if got := send(signedAppend(tenant.WebhookSecret, `{"n":2}`), ""); got != 204 {
		t.Fatalf("webhook-signed append: %d, want 204", got)
	}
	if got := send(signedAppend("whsec_"+strings.Repeat("A", 32), `{"n":3}`), ""); got != 401 {
		t.Fatalf("append signed with another secret: %d, want 401", got)
	}
	// The token's read holds both appends, and nothing of the refused one.
	res, err := http.DefaultClient.Do(func() *http.Request {
		req, _ := http.NewRequest("GET", url+"?offset=-1", nil)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]int
	json.NewDecoder(res.Body).Decode(&got)
	res.Body.Close()
	if len(got) != 2 || got[0]["n"] != 1 || got[1]["n"] != 2 {
		t.Fatalf("the stream holds %v, want n 1 and 2", got)
	}
}
