package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Plan 052: a subscription's selectors bounded and charged, anonymous
// streams' own caps and budget, relative URL patterns at the hub URL.

const selectorsAdminKey = "k-selectors-0123456789abcdefghijklmnop"

// startSelectors runs a production server (bin) with the admin key and
// flags, and creates the tenants, each letting anonymous subscribers in.
func startSelectors(t *testing.T, bin string, tenants []string, flags ...string) *proc {
	t.Helper()
	p := startAt(t, bin, []string{"EDGEHUB_ADMIN_KEY=" + selectorsAdminKey}, t.TempDir(), "127.0.0.1:0", flags...)
	for _, tenant := range tenants {
		if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/"+tenant, selectorsAdminKey, ""); st != 201 {
			t.Fatalf("create %s: %d %s", tenant, st, b)
		}
		allowAnonymous(t, p, tenant)
	}
	return p
}

// allowAnonymous turns on the tenant's anonymous Mercure subscribers
// (the tenant's Mercure settings, off by default); a server without the
// settings route (404 not_found) lets them in anyway.
func allowAnonymous(t *testing.T, p *proc, tenant string) {
	t.Helper()
	st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/"+tenant+"/mercure", selectorsAdminKey, `{"anonymous": true}`)
	var e struct{ Error struct{ Code string } }
	if st == 200 || st == 404 && json.Unmarshal(b, &e) == nil && e.Error.Code == "not_found" {
		return
	}
	t.Fatalf("let %s's anonymous subscribers in: %d %s", tenant, st, b)
}

// mintFor mints a token of tenant that grants publish and subscribe on
// every topic.
func mintFor(t *testing.T, p *proc, tenant string) string {
	t.Helper()
	st, _, b := do(t, "POST", p.base+"/v1/admin/tenants/"+tenant+"/tokens", selectorsAdminKey, `{"publish":["*"],"subscribe":["*"],"ttl":"1h"}`)
	var tok struct{ Token string }
	if st != 201 || json.Unmarshal(b, &tok) != nil {
		t.Fatalf("mint a token of %s: %d %s", tenant, st, b)
	}
	return tok.Token
}

// openSub is a subscription request's answer: the open stream when it
// is 200, else the refusal's code.
type openSub struct {
	status int
	code   string
	retry  string
	resp   *http.Response
}

func (o *openSub) close() {
	if o.resp != nil {
		o.resp.Body.Close()
	}
}

// subscribeAs opens a subscription (or any stream) at u through c, with
// the token unless empty; a 200 stays open until closed (or the test
// ends), after its first bytes have arrived: it is registered.
func subscribeAs(t *testing.T, c *http.Client, u, token string) *openSub {
	t.Helper()
	o, err := trySubscribe(c, u, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.close)
	return o
}

// trySubscribe is subscribeAs for a goroutine other than the test's; the
// caller closes what it opens.
func trySubscribe(c *http.Client, u, token string) (*openSub, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	o := &openSub{status: resp.StatusCode, retry: resp.Header.Get("Retry-After")}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error struct{ Code string } }
		json.Unmarshal(b, &e)
		o.code = e.Error.Code
		return o, nil
	}
	o.resp = resp
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("%.80s: no first byte: %w", u, err)
	}
	return o, nil
}

// costlyPatterns is a subscription's query of 100 URL patterns of 1024
// bytes each, all different (tag makes them differ from another
// subscription's), each of the costliest shape that a subscription may
// hold 100 of: 60 named groups (the matching work of 100 of them is
// near the bound for one subscription), then fixed text up to 1024 bytes.
func costlyPatterns(tag string, n int) string {
	var q strings.Builder
	for i := range n {
		var p strings.Builder
		p.WriteString("/" + tag + "-" + strconv.Itoa(i))
		for g := range 60 {
			p.WriteString("/:g" + strconv.Itoa(g))
		}
		p.WriteString("/")
		for p.Len() < 1024 {
			p.WriteByte("abcdefghij"[p.Len()%10])
		}
		if i > 0 {
			q.WriteByte('&')
		}
		q.WriteString("match_urlpattern=" + p.String()) // / and : need no escape in a query
	}
	return q.String()
}

// Relative URL patterns resolve against the hub URL as the request
// reached the server (scheme, Host, the hub's path), as docs/mercure.md
// says: at the tenant's hub URL, /books/:id receives the update of
// http://127.0.0.1:PORT/books/9 and of the relative topic /books/8 (which
// resolves against the same URL), not that of another origin.
func TestMercureRelativePatternsResolveAgainstTheHubURL(t *testing.T) {
	p := start(t, t.TempDir(), "--no-mercure-subscriptions")
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	for _, topic := range []string{p.base + "/books/9", "/books/8", "https://example.com/books/7", p.base + "/authors/6", p.base + "/books/5"} {
		if st, _, b := mercurePost(t, hub, url.Values{"topic": {topic}, "data": {topic}}, nil); st != 200 {
			t.Fatalf("publish %s: %d %s", topic, st, b)
		}
	}
	// In dev mode any token grants everything: the updates are public
	// anyway, the token keeps the anonymous settings out of the way.
	s := subscribeMercure(t, hub, "match_urlpattern=/books/:id", map[string]string{"Last-Event-ID": "earliest", "Authorization": "Bearer dev"})
	for i, f := range s.want(t, "/books/:id at "+hub, "#1", "#2", "#5") {
		if want := []string{p.base + "/books/9", "/books/8", p.base + "/books/5"}[i]; f.Data != want {
			t.Errorf("frame %s: %q, want %q", f.ID, f.Data, want)
		}
	}
}

// Anonymous streams have their own caps, per client address, per tenant
// and in all, and never count against the token streams': while they
// are full, the tenant's token streams (a topic watch, a tenant watch, a
// Mercure subscriber with a token) still open, up to their own caps. A
// refusal is 429 too_many_streams with Retry-After; a slot an anonymous
// subscriber gives back opens again.
func TestAnonymousStreamsHaveTheirOwnSlots(t *testing.T) {
	p := startSelectors(t, binary, []string{"acme", "other"},
		"--max-tenant-streams", "3", "--max-streams", "4",
		"--max-client-anonymous-streams", "2", "--max-tenant-anonymous-streams", "3", "--max-anonymous-streams", "4")
	hub := func(tenant string) string { return p.base + "/v1/tenants/" + tenant + "/.well-known/mercure?match=x" }
	from2, from3, from4 := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3"), clientFrom(t, "127.0.0.4")
	expect := func(what string, o *openSub, status int, code string) {
		t.Helper()
		if o.status != status || o.code != code || status == 429 && o.retry == "" {
			t.Fatalf("%s: %d %q (Retry-After %q), want %d %q", what, o.status, o.code, o.retry, status, code)
		}
	}
	first := subscribeAs(t, from2, hub("acme"), "")
	expect("127.0.0.2's first on acme", first, 200, "")
	expect("127.0.0.2's second on acme", subscribeAs(t, from2, hub("acme"), ""), 200, "")
	expect("127.0.0.2's third, past its address's cap", subscribeAs(t, from2, hub("other"), ""), 429, "too_many_streams")
	expect("127.0.0.3's first on acme", subscribeAs(t, from3, hub("acme"), ""), 200, "")
	expect("127.0.0.3's second on acme, past the tenant's cap", subscribeAs(t, from3, hub("acme"), ""), 429, "too_many_streams")
	expect("127.0.0.3's first on other", subscribeAs(t, from3, hub("other"), ""), 200, "")
	expect("127.0.0.4's on other, past the cap in all", subscribeAs(t, from4, hub("other"), ""), 429, "too_many_streams")

	token := mintFor(t, p, "acme")
	expect("acme's topic watch", subscribeAs(t, http.DefaultClient, p.base+"/v1/tenants/acme/topics/orders/watch", token), 200, "")
	expect("acme's tenant watch", subscribeAs(t, http.DefaultClient, p.base+"/v1/tenants/acme/watch?pattern=orders*", token), 200, "")
	expect("acme's Mercure subscriber with a token", subscribeAs(t, http.DefaultClient, hub("acme"), token), 200, "")
	expect("acme's fourth token stream, past its own cap", subscribeAs(t, http.DefaultClient, hub("acme"), token), 429, "too_many_streams")

	first.close()
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		o := subscribeAs(t, from2, hub("acme"), "")
		if o.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot given back never opened again: %d %s", o.status, o.code)
		}
	}
}

// Compiled selectors are charged to their stream's budget for its life:
// an anonymous subscriber's to the anonymous streams' own, a quarter of
// --max-read-bytes with --tenant-share of it per tenant, a token
// subscriber's to its tenant's share of the read budget. What does not
// fit is 429 overloaded with Retry-After, and anonymous subscribers
// filling theirs leave the token subscribers' room untouched.
func TestSelectorsAreChargedToTheirStreamsBudget(t *testing.T) {
	// Read budget 64 MiB: 16 MiB a tenant; anonymous 16 MiB, 4 MiB a
	// tenant. 20 patterns are about 3.3 MB once compiled, 40 about 6.6.
	p := startSelectors(t, binary, []string{"acme"}, "--max-read-bytes", "67108864", "--max-header-bytes", "1048576")
	hub := p.base + "/v1/tenants/acme/.well-known/mercure?"
	token := mintFor(t, p, "acme")
	if o := subscribeAs(t, http.DefaultClient, hub+costlyPatterns("a1", 20), ""); o.status != 200 {
		t.Fatalf("an anonymous subscriber of 20 costly patterns: %d %s", o.status, o.code)
	}
	held := p.value(t, `edgehub_budget_held_bytes{budget="anonymous_selectors"}`)
	if held < 20*100<<10 {
		t.Fatalf("20 costly patterns charged %v bytes", held)
	}
	if o := subscribeAs(t, http.DefaultClient, hub+costlyPatterns("a2", 20), ""); o.status != 429 || o.code != "overloaded" || o.retry == "" {
		t.Fatalf("a second anonymous subscriber past the tenant's anonymous share: %d %s (Retry-After %q)", o.status, o.code, o.retry)
	}
	if o := subscribeAs(t, http.DefaultClient, hub+"match=x", ""); o.status != 200 {
		t.Fatalf("an anonymous subscriber of one topic: %d %s", o.status, o.code)
	}
	if o := subscribeAs(t, http.DefaultClient, hub+costlyPatterns("t1", 40), token); o.status != 200 {
		t.Fatalf("a token subscriber of 40 costly patterns, anonymous ones full: %d %s", o.status, o.code)
	}
	if o := subscribeAs(t, http.DefaultClient, hub+costlyPatterns("t2", 100), token); o.status != 429 || o.code != "overloaded" {
		t.Fatalf("a token subscriber past the tenant's read share: %d %s", o.status, o.code)
	}
	if got := p.value(t, `edgehub_budget_held_bytes{budget="anonymous_selectors"}`); got != held+float64(2*len("x")+128) {
		t.Fatalf("anonymous selectors hold %v, want %v: the refused and the token ones took none", got, held+float64(2*len("x")+128))
	}
}

// pprofHeap is the server's live heap (HeapAlloc), read after a
// collection through pprof's heap profile.
func pprofHeap(t *testing.T, pprofAddr string) float64 {
	t.Helper()
	st, _, b := do(t, "GET", "http://"+pprofAddr+"/debug/pprof/heap?gc=1&debug=1", "", "")
	if st != 200 {
		t.Fatalf("a collection through pprof: %d %s", st, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no HeapAlloc in the heap profile:\n%.2000s", b)
	return 0
}

// The heap an anonymous subscription at the bounds holds (100 costly URL
// patterns of 1024 bytes), measured after a collection, is never more
// than what it is charged.
func TestASubscriptionAtTheBoundsHoldsNoMoreThanItIsCharged(t *testing.T) {
	pprofAddr := freeAddr(t)
	p := startSelectors(t, plainBinary, []string{"acme"}, "--pprof-addr", pprofAddr, "--no-mercure-subscriptions",
		"--max-header-bytes", "1048576", "--max-read-bytes", "2147483648", "--max-match-work", "0")
	hub := p.base + "/v1/tenants/acme/.well-known/mercure?"
	warm := subscribeAs(t, http.DefaultClient, hub+costlyPatterns("warm", 1), "") // the hub's actors, pools, code paths
	warm.close()
	const subs = 4
	before := pprofHeap(t, pprofAddr)
	charged := p.value(t, `edgehub_budget_held_bytes{budget="anonymous_selectors"}`)
	for i := range subs {
		if o := subscribeAs(t, http.DefaultClient, hub+costlyPatterns("s"+strconv.Itoa(i), 100), ""); o.status != 200 {
			t.Fatalf("subscription %d at the bounds: %d %s", i, o.status, o.code)
		}
	}
	held := (pprofHeap(t, pprofAddr) - before) / subs
	charge := (p.value(t, `edgehub_budget_held_bytes{budget="anonymous_selectors"}`) - charged) / subs
	t.Logf("a subscription of 100 URL patterns of 1024 bytes: %.1f MiB held, %.1f MiB charged", held/(1<<20), charge/(1<<20))
	if held > charge {
		t.Fatalf("a subscription at the bounds holds %.0f bytes, more than the %.0f it is charged", held, charge)
	}
}

// While anonymous subscriptions at the bounds churn on a tenant (its
// anonymous caps full, each of 100 costly URL patterns of 1024 bytes, all
// different, one closed and another opened about every second, each
// announced as subscriptions are), a token subscriber of the same tenant
// and another tenant's keep receiving every update within 2 s of its
// publish, though each update has a topic never seen before.
func TestAnonymousPatternChurnLeavesDeliveriesOnTime(t *testing.T) {
	p := startSelectors(t, plainBinary, []string{"acme", "other"}, "--max-header-bytes", "1048576", "--max-read-bytes", "2147483648",
		"--max-tenant-anonymous-streams", "4", "--max-client-anonymous-streams", "4", "--max-anonymous-streams", "4")
	hub := func(tenant string) string { return p.base + "/v1/tenants/" + tenant + "/.well-known/mercure" }
	// The anonymous streams' matching work (--max-match-work's anonymous
	// part, by default 512 Ki steps per tenant) holds a few such
	// subscriptions: they are opened until it is full, then one is closed
	// to make room for the churn.
	var held []*openSub
	for i := 0; ; i++ {
		o := subscribeAs(t, http.DefaultClient, hub("acme")+"?"+costlyPatterns("held"+strconv.Itoa(i), 20), "")
		if o.status == 200 {
			held = append(held, o)
			continue
		}
		if o.status != 429 || o.code != "overloaded" || len(held) == 0 {
			t.Fatalf("anonymous subscription %d: %d %s, want 200 until the matching budget is full, then 429 overloaded", i, o.status, o.code)
		}
		break
	}
	held[0].close()
	tokens := map[string]string{"acme": mintFor(t, p, "acme"), "other": mintFor(t, p, "other")}
	type delivery struct {
		tenant string
		n      int
		late   time.Duration
	}
	got := make(chan delivery, 1000)
	for tenant, token := range tokens {
		s := subscribeMercure(t, hub(tenant), "match_urlpattern="+url.QueryEscape("https://example.com/orders/:n"), map[string]string{"Authorization": "Bearer " + token})
		go func() {
			for {
				f, err := s.dec.Next()
				if err != nil {
					return
				}
				var sent struct {
					N  int
					At int64
				}
				if f.Event == "message" && json.Unmarshal([]byte(f.Data), &sent) == nil {
					got <- delivery{tenant, sent.N, time.Since(time.Unix(0, sent.At))}
				}
			}
		}()
	}
	var (
		stop     = make(chan struct{})
		churned  atomic.Int32
		churnErr error
		wg       sync.WaitGroup
	)
	wg.Add(1)
	go func() { // one slot left: closed and opened again about every second
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			o, err := trySubscribe(http.DefaultClient, hub("acme")+"?"+costlyPatterns(fmt.Sprintf("churn%d", k), 20), "")
			if err != nil {
				churnErr = err
				return
			}
			if o.status == 200 {
				churned.Add(1)
				time.Sleep(time.Second)
				o.close()
			} else {
				time.Sleep(50 * time.Millisecond) // the slot given back is not free yet
			}
		}
	}()
	const updates = 40
	for n := range updates {
		for tenant, token := range tokens {
			data, _ := json.Marshal(map[string]int64{"n": int64(n), "at": time.Now().UnixNano()})
			form := url.Values{"topic": {"https://example.com/orders/" + strconv.Itoa(n)}, "data": {string(data)}}
			if st, _, b := mercurePost(t, hub(tenant), form, map[string]string{"Authorization": "Bearer " + token}); st != 200 {
				t.Fatalf("publish %d to %s: %d %s", n, tenant, st, b)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	close(stop)
	seen := map[string]int{}
	var worst time.Duration
	for seen["acme"]+seen["other"] < 2*updates {
		select {
		case d := <-got:
			if d.n != seen[d.tenant] {
				t.Fatalf("%s's subscriber got update %d after %d", d.tenant, d.n, seen[d.tenant])
			}
			seen[d.tenant]++
			worst = max(worst, d.late)
			if d.late > 2*time.Second {
				t.Errorf("%s's update %d arrived %v after its publish", d.tenant, d.n, d.late)
			}
		case <-time.After(wait):
			t.Fatalf("updates stopped arriving: %v of %d each", seen, updates)
		}
	}
	wg.Wait()
	if churnErr != nil {
		t.Fatal(churnErr)
	}
	t.Logf("%d anonymous subscriptions opened and closed meanwhile; the latest update arrived %v after its publish", churned.Load(), worst)
	if churned.Load() < updates/4/2 {
		t.Fatalf("only %d anonymous subscriptions churned", churned.Load())
	}
}

// The costliest patterns a selector may be ((.*)* repeated, each near
// the bound of one selector's matching work), a few to a subscription
// from one client address: their work is taken from the anonymous
// streams' matching budget until it is full (429 overloaded), so that a
// topic new to the tenant's hub is tested in a bounded time. Every
// update, each to a topic of its own (as Mercure applications publish,
// one topic per resource), reaches the tenant's token subscriber within
// 2 s. Without the budget, ten such subscriptions delayed each update by
// about 0.8 s more than the one before.
func TestAnonymousMatchingWorkIsBounded(t *testing.T) {
	p := startSelectors(t, plainBinary, []string{"acme"})
	hub := p.base + "/v1/tenants/acme/.well-known/mercure"
	var held, refused int
	for i := range 10 {
		q := url.Values{}
		for j := range 4 {
			q.Add("match_urlpattern", strings.Repeat("/(.*)*", 88)+fmt.Sprintf("/k%dx%d", i, j))
		}
		o := subscribeAs(t, http.DefaultClient, hub+"?"+q.Encode(), "")
		switch {
		case o.status == 200:
			held++
		case o.status == 429 && o.code == "overloaded":
			refused++
		default:
			t.Fatalf("anonymous subscription %d: %d %s", i, o.status, o.code)
		}
	}
	if held == 0 || refused == 0 {
		t.Fatalf("%d costly anonymous subscriptions opened and %d refused, want some of each", held, refused)
	}
	token := mintFor(t, p, "acme")
	s := openStream(t, p.base+"/v1/tenants/acme/watch?pattern=*", map[string]string{"Authorization": "Bearer " + token})
	s.hello(t)
	const updates = 20
	sent := make([]time.Time, updates)
	for n := range updates {
		topic := fmt.Sprintf("https://example.com/books/%d/%s", n, strings.Repeat("p", 960))
		sent[n] = time.Now()
		if st, _, b := do(t, "POST", p.base+"/v1/tenants/acme/topics/"+url.PathEscape(topic)+"/notify", token, `{"n":1}`); st != 201 {
			t.Fatalf("publish %d: %d %s", n, st, b)
		}
	}
	var worst time.Duration
	for n := range updates {
		if f := s.next(t); f.Event != "message" {
			t.Fatalf("update %d: %+v", n, f)
		}
		late := time.Since(sent[n])
		worst = max(worst, late)
		if late > 2*time.Second {
			t.Errorf("update %d arrived %v after its publish", n, late)
		}
	}
	t.Logf("%d costly anonymous subscriptions held, %d refused; the latest of %d updates to new topics arrived %v after its publish", held, refused, updates, worst)
}
