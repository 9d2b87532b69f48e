package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/server"
)

// heldBytes reads edgehub_budget_held_bytes{budget} from /metrics.
func heldBytes(t *testing.T, base, budget string) int64 {
	t.Helper()
	_, b := get(t, base+"/metrics")
	prefix := `edgehub_budget_held_bytes{budget="` + budget + `"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("no %s in /metrics", prefix)
	return 0
}

// waitHeld polls /metrics until the budget holds want bytes.
func waitHeld(t *testing.T, base, budget string, want int64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%s holds %d bytes", budget, want), func() bool { return heldBytes(t, base, budget) == want })
}

// slowBody starts a publish from the local address from (any of
// 127.0.0.0/8) that announces a body of announce bytes and sends only
// first: what the server holds for it is then what arrived, not what was
// announced. Its answer can be read from the returned reader.
func slowBody(t *testing.T, base, from, path string, header map[string]string, announce int, first string) *bufio.Reader {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var h strings.Builder
	for k, v := range header {
		fmt.Fprintf(&h, "%s: %s\r\n", k, v)
	}
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: edgehub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s",
		path, announce, h.String(), first); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(c)
}

// answerOf reads the status and error code of a raw request's answer.
func answerOf(t *testing.T, r *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, errorCode(t, b)
}

// A publish body holds bytes of the publish budget as they arrive, never
// what its Content-Length announces, and only of its tenant's share: one
// tenant's slow uploads make its own publishes 429 overloaded once they
// hold its share, never another tenant's; the body timeout cuts them off
// (400 invalid_body), gives their bytes back and stores nothing.
func TestPublishBodiesTakeTheirTenantsShareAsTheyArrive(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) {
		c.MaxPublishBytes, c.TenantShare, c.BodyTimeout = 4<<20, 0.25, 3*time.Second // 1 MiB a tenant
	})
	var slow []*bufio.Reader
	// Ten announce 1 MiB each and send a byte: 10 MiB announced, more
	// than the whole budget, holds one piece each.
	for i := range 10 {
		slow = append(slow, slowBody(t, base, "127.0.0.1", fmt.Sprintf("/v1/tenants/greedy/topics/slow%d/notify", i), nil, 1<<20, `"`))
	}
	waitHeld(t, base, "publish_bodies", 10*64<<10)
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/greedy/topics/x/notify", body: `{"a":1}`}); status != 201 {
		t.Fatalf("a publish of the tenant beside announced bodies it has not sent: %d %s", status, b)
	}
	// Six more fill the tenant's share.
	for i := range 6 {
		slow = append(slow, slowBody(t, base, "127.0.0.1", fmt.Sprintf("/v1/tenants/greedy/topics/more%d/notify", i), nil, 1<<20, `"`))
	}
	waitHeld(t, base, "publish_bodies", 16*64<<10)
	status, b := do(t, base, call{method: "POST", path: "/v1/tenants/greedy/topics/x/notify", body: "not json"})
	if status != 429 || errorCode(t, b) != "overloaded" || !strings.Contains(string(b), "tenant") {
		t.Fatalf("the tenant past its share: %d %s", status, b)
	}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/other/topics/x/notify", body: `{"a":1}`}); status != 201 {
		t.Fatalf("another tenant beside one that holds its whole share: %d %s", status, b)
	}
	for _, r := range slow {
		if status, code := answerOf(t, r); status != 400 || code != "invalid_body" {
			t.Fatalf("a body past the body timeout: %d %s", status, code)
		}
	}
	waitHeld(t, base, "publish_bodies", 0)
	if _, b := get(t, base+"/v1/tenants/greedy/topics/slow0/events"); !strings.Contains(string(b), `"head":0`) {
		t.Fatalf("a body cut off stored something: %s", b)
	}
}

// Bodies read to check a webhook signature come from a budget of their
// own, bounded per tenant and per client address: anonymous clients that
// know a tenant's name can make that tenant's unsigned bodies and their
// own 429, never another tenant's signed webhooks from another address,
// nor publishes with a token; the body timeout cuts them off.
func TestUnsignedBodiesAreBoundedPerTenantAndClient(t *testing.T) {
	base := authServer(t, func(c *server.Config) {
		c.MaxPublishBytes, c.TenantShare, c.BodyTimeout = 4<<20, 0.25, 3*time.Second // unsigned: 1 MiB, 256 KiB a tenant or client
	})
	createTenant(t, base, "target")
	victim := createTenant(t, base, "victim")
	tok := mint(t, base, "target", `{"publish":["*"]}`)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	anon := map[string]string{"webhook-id": "m", "webhook-timestamp": now, "webhook-signature": "v1,bm9wZQ=="}
	var slow []*bufio.Reader
	for i := range 4 {
		slow = append(slow, slowBody(t, base, "127.0.0.2", fmt.Sprintf("/v1/tenants/target/topics/s%d/notify", i), anon, 1<<20, `"`))
	}
	waitHeld(t, base, "unsigned_bodies", 4*64<<10)
	for _, c := range []struct{ what, from, tenant string }{
		{"the same tenant from another address", "127.0.0.3", "target"},
		{"another tenant from the same address", "127.0.0.2", "victim"},
	} {
		r := slowBody(t, base, c.from, "/v1/tenants/"+c.tenant+"/topics/x/notify", anon, 1, "1")
		if status, code := answerOf(t, r); status != 429 || code != "overloaded" {
			t.Fatalf("%s, anonymous: %d %s", c.what, status, code)
		}
	}
	body := []byte(`{"paid":true}`)
	signed := map[string]string{"webhook-id": "msg_v", "webhook-timestamp": now, "webhook-signature": sign(victim.WebhookSecret, "msg_v", now, body)}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/victim/topics/pay/notify", body: string(body), header: signed}); status != 201 {
		t.Fatalf("another tenant's signed webhook from another address: %d %s", status, b)
	}
	if status, b := do(t, base, call{method: "POST", path: "/v1/tenants/target/topics/x/notify", body: "1",
		header: map[string]string{"Authorization": "Bearer " + tok}}); status != 201 {
		t.Fatalf("a publish with a token while anonymous uploads hold the tenant's share: %d %s", status, b)
	}
	for _, r := range slow {
		if status, code := answerOf(t, r); status != 400 || code != "invalid_body" {
			t.Fatalf("an anonymous body past the body timeout: %d %s", status, code)
		}
	}
	waitHeld(t, base, "unsigned_bodies", 0)
}
