package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/sse"
)

// No tenant can starve another (issue 20): with the default budgets, one
// tenant's slow uploads, anonymous uploads to one tenant's name, and one
// tenant's unread answers take at most that tenant's (or that client
// address's) share of each budget, so another tenant's publishes,
// webhooks and reads are answered meanwhile. Each test drives the real
// binary the way the outside review did.

const fairKey = "admin-key-of-the-fairness-tests-0123456789"

// fairServer starts the binary in production mode with the default
// budgets (and args), and makes each tenant with a token that may do
// everything.
func fairServer(t *testing.T, tenants []string, args ...string) (*proc, map[string]tenantAnswer, map[string]*client.Client) {
	t.Helper()
	p := startAt(t, plainBinary, []string{"EDGEHUB_ADMIN_KEY=" + fairKey}, t.TempDir(), "127.0.0.1:0", args...)
	secrets, clients := map[string]tenantAnswer{}, map[string]*client.Client{}
	for _, name := range tenants {
		var ten tenantAnswer
		var tok struct{ Token string }
		p.adminCall(t, fairKey, "PUT", name, "", http.StatusCreated, &ten)
		p.adminCall(t, fairKey, "POST", name+"/tokens", `{"publish":["*"],"subscribe":["*"],"ttl":"1h"}`, http.StatusCreated, &tok)
		secrets[name], clients[name] = ten, &client.Client{Server: p.base, Token: tok.Token}
	}
	return p, secrets, clients
}

// held is what the budget holds, from /metrics.
func (p *proc) held(t *testing.T, budget string) int64 {
	t.Helper()
	prefix := `edgehub_budget_held_bytes{budget="` + budget + `"} `
	for _, line := range strings.Split(p.metricsText(t), "\n") {
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

// awaitHeld polls /metrics until the budget holds at least want bytes (a
// hang guard, not a timing).
func (p *proc) awaitHeld(t *testing.T, budget string, want int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for p.held(t, budget) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %d bytes (holds %d)", budget, want, p.held(t, budget))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// upload starts a publish from the local address from (any of 127/8) that
// announces announce bytes of body and sends only first, then nothing.
func (p *proc) upload(t *testing.T, from, path string, header http.Header, announce int, first []byte) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var h strings.Builder
	_ = header.Write(&h) // a strings.Builder does not fail
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: edgehub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n",
		path, announce, h.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	return c
}

// statusOf reads the status of a raw request's answer.
func statusOf(t *testing.T, c net.Conn) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The review's attack on the publish budget, and a harder one: about 130
// connections of one tenant announce 1 MiB bodies and send a byte; then
// 140 more send 900 KiB of theirs (more than the whole budget) and stall.
// The first hold a piece each, not what they announced; the second take
// the tenant's share, after which its own publishes are 429. Another
// tenant's publishes are 201 throughout, and the body timeout ends the
// uploads with 400.
func TestOneTenantsSlowBodiesNeverFailAnothersPublish(t *testing.T) {
	p, _, c := fairServer(t, []string{"att", "vic"}, "--body-timeout", "10s")
	ctx := context.Background()
	bearer := http.Header{"Authorization": {"Bearer " + c["att"].Token}}
	event := []byte(`"` + strings.Repeat("v", 100<<10) + `"`)
	victim := func(when string) {
		t.Helper()
		for i := range 5 {
			if _, err := c["vic"].Publish(ctx, "vic", "orders", event, client.PublishOptions{}); err != nil {
				t.Fatalf("%s: the other tenant's publish %d: %v", when, i, err)
			}
		}
	}
	var uploads []net.Conn
	for i := range 130 {
		uploads = append(uploads, p.upload(t, "127.0.0.1", fmt.Sprintf("/v1/tenants/att/topics/s%d/notify", i), bearer, 1<<20, []byte(`"`)))
	}
	p.awaitHeld(t, "publish_bodies", 130*64<<10)
	victim("130 announced megabytes")
	if _, err := c["att"].Publish(ctx, "att", "own", []byte(`1`), client.PublishOptions{}); err != nil {
		t.Fatalf("the tenant's own publish beside bodies announced and not sent: %v", err)
	}
	chunk := []byte(`"` + strings.Repeat("x", 900<<10))
	for i := range 140 {
		uploads = append(uploads, p.upload(t, "127.0.0.1", fmt.Sprintf("/v1/tenants/att/topics/b%d/notify", i), bearer, 1<<20, chunk))
	}
	// The tenant's share is a quarter of 128 MiB: 31 bodies fit whole.
	p.awaitHeld(t, "publish_bodies", 31<<20)
	victim("one tenant's uploads past the whole budget")
	if held := p.held(t, "publish_bodies"); held > 32<<20 {
		t.Fatalf("one tenant's uploads hold %d bytes, past its share", held)
	}
	whole := []byte(`"` + strings.Repeat("x", 1<<20-2) + `"`)
	if _, err := c["att"].Publish(ctx, "att", "own", whole, client.PublishOptions{}); !isAPIError(err, 429, "overloaded") {
		t.Fatalf("the tenant past its share: %v, want 429 overloaded", err)
	}
	for _, u := range uploads {
		if status := statusOf(t, u); status != 400 && status != 429 {
			t.Fatalf("a stalled upload ended with %d, want 400 (past the body timeout) or 429 (past the share)", status)
		}
	}
}

// The review's attack on the unsigned-body budget, scaled up: 600
// anonymous connections, knowing only a tenant's name, announce 1 MiB
// webhook bodies, send a byte and stall, wanting 37.5 MiB, more than the
// whole budget (32 MiB). They hold at most that tenant's and their
// address's share (a quarter: 128 of them hold a piece each, the other
// 472 are refused at once); another tenant's signed webhooks from another
// address are 201, 10 of 10 (of 100 KiB each).
func TestAnonymousBodiesNeverBlockAnotherTenantsWebhooks(t *testing.T) {
	p, secrets, _ := fairServer(t, []string{"pl", "vic"})
	anon := http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {strconv.FormatInt(time.Now().Unix(), 10)}, "Webhook-Signature": {"v1,bm9wZQ=="}}
	answers := make(chan int, 600)
	for i := range 600 {
		u := p.upload(t, "127.0.0.2", fmt.Sprintf("/v1/tenants/pl/topics/s%d/notify", i), anon, 1<<20, []byte(`"`))
		go func() {
			u.SetReadDeadline(time.Now().Add(2 * wait))
			resp, err := http.ReadResponse(bufio.NewReader(u), nil)
			if err != nil {
				answers <- -1
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	for refused := 0; refused < 472; {
		select {
		case status := <-answers:
			if status != http.StatusTooManyRequests {
				t.Fatalf("an anonymous upload ended with %d after %d were refused (they hold %d bytes)", status, refused, p.held(t, "unsigned_bodies"))
			}
			refused++
		case <-time.After(wait):
			t.Fatalf("%d anonymous uploads refused, want 472: they hold %d bytes", refused, p.held(t, "unsigned_bodies"))
		}
	}
	event := `"` + strings.Repeat("v", 100<<10) + `"`
	for i := range 10 {
		req := signed(t, p.base+"/v1/tenants/vic/topics/pay/notify", secrets["vic"].WebhookSecret, fmt.Sprintf("msg_%d", i), time.Now(), event)
		if status, b := send(t, req); status != http.StatusCreated {
			t.Fatalf("signed webhook %d of the other tenant: %d %s", i, status, b)
		}
	}
}

// The review's attack on the read budget: one tenant asks for its own
// large state and its events and never reads them, until its own reads
// are 429 (its share of the answers on disk, and of the pages in memory,
// is taken). Another tenant's /state, /events and snapshot stream are
// answered in full meanwhile.
func TestOneTenantsStalledReadsNeverRefuseAnothersReads(t *testing.T) {
	p, _, c := fairServer(t, []string{"att", "vic"})
	ctx := context.Background()
	pad := `"` + strings.Repeat("x", 1000<<10) + `"`
	for _, tenant := range []string{"att", "vic"} {
		for i := range 16 {
			if _, err := c[tenant].Publish(ctx, tenant, "kv", []byte(pad), client.PublishOptions{Key: fmt.Sprintf("k%02d", i)}); err != nil {
				t.Fatal(err)
			}
			if _, err := c[tenant].Publish(ctx, tenant, "big", []byte(pad), client.PublishOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	token := "access_token=" + c["att"].Token
	own := func(route string) int {
		t.Helper()
		status, _, _ := do(t, "GET", p.base+"/v1/tenants/att/topics/"+route, c["att"].Token, "")
		return status
	}
	// Unread /state answers until the tenant's own /state is refused; the
	// answers are spooled to disk, a quarter of 1 GiB for the tenant.
	for n := 0; own("kv/state") != http.StatusTooManyRequests; n++ {
		if n == 40 {
			t.Fatal("40 unread 16 MiB states, and the tenant's own /state is still answered")
		}
		p.stallAuthorized(t, "/v1/tenants/att/topics/kv/state", c["att"].Token)
	}
	// Unread catch-up streams until the tenant's own /events is refused:
	// their pages are in memory, a quarter of 256 MiB for the tenant.
	for n := 0; own("big/events?after=0") != http.StatusTooManyRequests; n++ {
		if n == 200 {
			t.Fatal("200 unread catch-up streams, and the tenant's own /events is still answered")
		}
		conn := p.stall(t, "/v1/tenants/att/topics/big/watch?after=0&"+token)
		deadline := time.Now().Add(wait)
		for queued(t, conn) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("a stalled stream got no hello")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	vic := c["vic"]
	if st, err := vic.State(ctx, "vic", "kv"); err != nil || len(st.State) != 16 {
		t.Fatalf("the other tenant's state: %d keys, %v", len(st.State), err)
	}
	page, err := vic.Events(ctx, "vic", "big", 0, 1000)
	if err != nil || len(page.Events) == 0 {
		t.Fatalf("the other tenant's events: %v", err)
	}
	resp, err := http.Get(p.base + "/v1/tenants/vic/topics/kv/watch?snapshot=1&access_token=" + vic.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := sse.NewDecoder(resp.Body)
	hello, _ := frames.Next()
	snap, err := frames.Next()
	if resp.StatusCode != http.StatusOK || hello.Event != "hello" || snap.Event != "snapshot" || err != nil || len(snap.Data) < 16*1000<<10 {
		t.Fatalf("the other tenant's snapshot stream: %d %s %s %d bytes %v", resp.StatusCode, hello.Event, snap.Event, len(snap.Data), err)
	}
}

// stallAuthorized is stall with a bearer token.
func (p *proc) stallAuthorized(t *testing.T, path, token string) net.Conn {
	t.Helper()
	conn, err := smallBufferDialer(4096).Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: edgehub\r\nAuthorization: Bearer %s\r\n\r\n", path, token); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for queued(t, conn) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a stalled answer never began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return conn
}

// Only a webhook's signature binds its webhook-id: a token limited to one
// topic that sends a webhook-id header claims nothing (the review's
// pre-claim), so the real webhook with that id, to another topic of the
// tenant, is stored; and the token's requests are not made idempotent by
// the header either.
func TestATokensWebhookIDClaimsNothing(t *testing.T) {
	p, secrets, _ := fairServer(t, []string{"alpha"})
	var tok struct{ Token string }
	p.adminCall(t, fairKey, "POST", "alpha/tokens", `{"publish":["scoped"],"ttl":"1h"}`, http.StatusCreated, &tok)
	for want := 1; want <= 2; want++ {
		req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/tenants/alpha/topics/scoped/notify", strings.NewReader(`{"n":1}`))
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		req.Header.Set("webhook-id", "msg_future_X")
		if status, b := send(t, req); status != http.StatusCreated || !strings.Contains(string(b), fmt.Sprintf(`"seq":%d`, want)) {
			t.Fatalf("token publish %d with a webhook-id: %d %s", want, status, b)
		}
	}
	req := signed(t, p.base+"/v1/tenants/alpha/topics/orders2/notify", secrets["alpha"].WebhookSecret, "msg_future_X", time.Now(), `{"paid":true}`)
	if status, b := send(t, req); status != http.StatusCreated {
		t.Fatalf("the real webhook after a token sent its id: %d %s", status, b)
	}
}

// send sends req and returns its answer's status and body.
func send(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// The budgets' new flags refuse values that would make no sense, with
// the command line's exit code and the flag's name, before anything is
// served.
func TestBadBudgetFlagsAreRefused(t *testing.T) {
	for _, c := range []struct{ flag, value string }{
		{"--tenant-share", "2"},
		{"--tenant-share", "-0.5"},
		{"--max-spool-bytes", "-1"},
		{"--body-timeout", "-1s"},
		{"--memory-limit", "lots"},
		{"--memory-limit", "-5"},
	} {
		out, err := exec.Command(binary, "serve", "--dev", "--addr", "127.0.0.1:0", "--data", t.TempDir(), c.flag, c.value).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), c.flag) {
			t.Errorf("serve %s %s: %v, want exit 2 naming the flag:\n%s", c.flag, c.value, err, out)
		}
	}
}
