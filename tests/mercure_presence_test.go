package tests

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/pgtest"
)

// presenceHub sets a dev-mode tenant up for active subscriptions (its
// row, made with the admin key, holds the setting) on p.
func presenceHub(t *testing.T, p *proc, key string) string {
	t.Helper()
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, ""); st/100 != 2 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme/mercure", key, `{"subscriptions": true}`); st != 200 {
		t.Fatalf("turn subscriptions on: %d %s", st, b)
	}
	return p.base + "/v1/tenants/acme/.well-known/mercure"
}

// subscriberOf opens a subscriber with a token (dev mode: any grants
// everything) and returns its subscriber id, read from its own start.
func subscriberOf(t *testing.T, hub, match string) (*mercureStream, string) {
	t.Helper()
	s := subscribeMercure(t, hub, events+"&match="+url.QueryEscape(match), map[string]string{"Authorization": "Bearer any"})
	for {
		d := nextSubscriptionEvent(t, s, "its own start")
		if d.Match == match && d.Active {
			return s, d.Subscriber
		}
	}
}

// events selects the subscription events.
var events = "match_urlpattern=" + url.QueryEscape("/.well-known/mercure/subscriptions/*")

// awaitEnd reads s until the end of subscriber's subscription of match,
// and fails after limit.
func awaitEnd(t *testing.T, s *mercureStream, subscriber, match string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timer := time.AfterFunc(limit, func() { s.resp.Body.Close() })
	defer timer.Stop()
	for {
		d := nextSubscriptionEvent(t, s, "the end of "+subscriber)
		if d.Subscriber == subscriber && d.Match == match && !d.Active {
			return time.Since(start)
		}
	}
}

// endsOf counts the announced ends of subscriber's subscription of match
// in the tenant's log.
func endsOf(t *testing.T, p *proc, subscriber, match string) int {
	t.Helper()
	n := 0
	for _, e := range p.readTenantAll(t, "any", "topic="+url.QueryEscape("/.well-known/mercure/subscriptions"), 1000) {
		var d subscriptionDoc
		var raw string
		if json.Unmarshal(e.Data, &raw) != nil && json.Unmarshal(e.Data, &d) == nil && d.Subscriber == subscriber && d.Match == match && !d.Active {
			n++
		}
	}
	return n
}

// listed is the subscribers of match in the subscriptions API at hub.
func listed(t *testing.T, hub, match string) []string {
	t.Helper()
	st, _, b := do(t, "GET", hub+"/subscriptions/exact/"+url.PathEscape(match), "any", "")
	var list struct{ Subscriptions []subscriptionDoc }
	if st != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("the list of %s: %d %s", match, st, b)
	}
	var out []string
	for _, d := range list.Subscriptions {
		out = append(out, d.Subscriber)
	}
	return out
}

// A server killed with kill -9 never announces its subscribers' ends;
// restarted on its data directory, it announces them within 30 s, once,
// and lists them no more.
func TestMercureSubscribersOfACrashedServerEnd(t *testing.T) {
	if pgtest.Enabled() {
		t.Skip("one process per data directory: the PostgreSQL case is TestMercureSubscribersOfADeadProcessEnd")
	}
	const key = "k-presence-0123456789abcdef0123456789"
	dir := t.TempDir()
	p := start(t, dir, "--admin-key", key)
	hub := presenceHub(t, p, key)
	watcher, _ := subscriberOf(t, hub, "urn:watcher")
	_, gone := subscriberOf(t, hub, "urn:gone")
	var cursor string
	for { // the watcher sees the other's start; its position is the cursor
		f, err := watcher.dec.Next()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(f.Data, gone) {
			cursor = f.ID
			break
		}
	}
	p.kill9()
	killed := time.Now()
	p = start(t, dir, "--admin-key", key)
	hub = p.base + "/v1/tenants/acme/.well-known/mercure"
	after := subscribeMercure(t, hub, events, map[string]string{"Authorization": "Bearer any", "Last-Event-ID": cursor})
	took := awaitEnd(t, after, gone, "urn:gone", 45*time.Second)
	if since := time.Since(killed); since > 30*time.Second {
		t.Errorf("the dead server's subscriber was announced gone %v after the kill, want within 30 s", since)
	}
	t.Logf("announced gone %v after the restart", took)
	if n := endsOf(t, p, gone, "urn:gone"); n != 1 {
		t.Errorf("%d ends of %s, want 1", n, gone)
	}
	if l := listed(t, hub, "urn:gone"); len(l) != 0 {
		t.Errorf("still listed: %v", l)
	}
}

// Two processes on one PostgreSQL database: the subscriptions API of
// either lists the subscribers of both, and when one is killed with
// kill -9 the other announces its subscribers gone within 30 s, once.
func TestMercureSubscribersOfADeadProcessEnd(t *testing.T) {
	if pgtest.Enabled() {
		t.Skip("runs in the first pass, beside the other scale-out tests")
	}
	const key = "k-presence-0123456789abcdef0123456789"
	ps, _ := cluster(t, 2, "--admin-key", key)
	hub0 := presenceHub(t, ps[0], key)
	hub1 := ps[1].base + "/v1/tenants/acme/.well-known/mercure"
	watcher, _ := subscriberOf(t, hub1, "urn:watcher")
	// A selector each: a stream may see, after its own start, another's
	// committed just before it by another process.
	_, there := subscriberOf(t, hub0, "urn:there")
	_, here := subscriberOf(t, hub1, "urn:here")
	for _, hub := range []string{hub0, hub1} {
		if l := listed(t, hub, "urn:there"); len(l) != 1 || l[0] != there {
			t.Fatalf("urn:there at %s: %v, want %s", hub, l, there)
		}
		if l := listed(t, hub, "urn:here"); len(l) != 1 || l[0] != here {
			t.Fatalf("urn:here at %s: %v, want %s", hub, l, here)
		}
	}
	ps[0].kill9()
	took := awaitEnd(t, watcher, there, "urn:there", 45*time.Second)
	if took > 30*time.Second {
		t.Errorf("the dead process's subscriber was announced gone %v after the kill, want within 30 s", took)
	}
	t.Logf("announced gone %v after the kill", took)
	if l := listed(t, hub1, "urn:there"); len(l) != 0 {
		t.Errorf("urn:there after the kill: %v, want none", l)
	}
	if l := listed(t, hub1, "urn:here"); len(l) != 1 || l[0] != here {
		t.Errorf("urn:here after the kill: %v, want %s", l, here)
	}
	if n := endsOf(t, ps[1], there, "urn:there"); n != 1 {
		t.Errorf("%d ends of %s, want 1", n, there)
	}
}
