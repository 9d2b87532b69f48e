package tests

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/refusal"
)

type tenantEnvelope struct {
	Topic string          `json:"topic"`
	Pos   int64           `json:"pos"`
	Seq   int64           `json:"seq"`
	Type  string          `json:"type"`
	Time  string          `json:"time"`
	Data  json.RawMessage `json:"data"`
}

type tenantReadAnswer struct {
	Events    []tenantEnvelope `json:"events"`
	Head      int64            `json:"head"`
	NextAfter int64            `json:"next_after"`
	Gaps      []struct {
		Topic string `json:"topic"`
		To    int64  `json:"to"`
	} `json:"gaps"`
}

// mintAcme makes a token of acme with the admin key, for the publish and
// subscribe patterns given as JSON list items.
func (p *proc) mintAcme(t *testing.T, adminKey, publish, subscribe string) string {
	t.Helper()
	st, _, b := do(t, "POST", p.base+"/v1/admin/tenants/acme/tokens", adminKey,
		`{"publish":[`+publish+`],"subscribe":[`+subscribe+`],"ttl":"10m"}`)
	var tok struct{ Token string }
	if st != 201 || json.Unmarshal(b, &tok) != nil {
		t.Fatalf("mint a token: %d %s", st, b)
	}
	return tok.Token
}

// readTenant reads one page of the tenant read with the query q, as token.
func (p *proc) readTenant(t *testing.T, token, q string) (int, tenantReadAnswer, []byte) {
	t.Helper()
	st, _, b := do(t, "GET", p.base+"/v1/tenants/acme/events?"+q, token, "")
	var a tenantReadAnswer
	if st == 200 {
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return st, a, b
}

// readTenantAll pages through the tenant read from after=0.
func (p *proc) readTenantAll(t *testing.T, token, q string, limit int) []tenantEnvelope {
	t.Helper()
	var all []tenantEnvelope
	after := int64(0)
	for {
		st, a, b := p.readTenant(t, token, fmt.Sprintf("%s&after=%d&limit=%d", q, after, limit))
		if st != 200 {
			t.Fatalf("read after %d: %d %s", after, st, b)
		}
		all = append(all, a.Events...)
		if len(a.Events) == 0 || a.NextAfter == a.Head {
			return all
		}
		after = a.NextAfter
	}
}

// The tenant read gives every event of the selected topics once, in the
// tenant's order (positions 1..n across topics, a batch consecutive,
// each topic's sequence rising with them), with the topic envelope's
// fields plus topic and pos and no other; paging loses and repeats
// nothing; positions survive kill -9 and go on after it.
func TestTenantReadAcrossTopics(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	p.publish(t, "orders", `{"n":1}`)
	p.publish(t, "refunds", `{"n":2}`)
	p.publishBatch(t, "orders", 3, 3, 0)
	p.publish(t, "users", `{"n":6}`)
	want := []string{"1:orders#1", "2:refunds#1", "3:orders#2", "4:orders#3", "5:orders#4", "6:users#1"}
	got := func(evs []tenantEnvelope) []string {
		var out []string
		for _, e := range evs {
			out = append(out, fmt.Sprintf("%d:%s#%d", e.Pos, e.Topic, e.Seq))
		}
		return out
	}
	for _, limit := range []int{1, 2, 100} {
		if g := got(p.readTenantAll(t, "", "", limit)); !slices.Equal(g, want) {
			t.Fatalf("limit %d: %v, want %v", limit, g, want)
		}
	}
	_, _, raw := p.readTenant(t, "", "after=0&limit=1")
	var fields struct{ Events []map[string]json.RawMessage }
	json.Unmarshal(raw, &fields)
	var keys []string
	for k := range fields.Events[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !reflect.DeepEqual(keys, []string{"data", "pos", "seq", "time", "topic", "type"}) {
		t.Fatalf("a tenant envelope has fields %v", keys)
	}
	if g := got(p.readTenantAll(t, "", "topic=refunds&pattern=us*", 1)); !slices.Equal(g, []string{"2:refunds#1", "6:users#1"}) {
		t.Fatalf("topic=refunds&pattern=us*: %v", g)
	}
	if g := got(p.readTenantAll(t, "", "topic=nothing", 10)); len(g) != 0 {
		t.Fatalf("a topic never published to: %v", g)
	}
	p.kill9()
	p = start(t, dir)
	p.publish(t, "refunds", `{"n":7}`)
	if g := got(p.readTenantAll(t, "", "", 100)); !slices.Equal(g, append(want, "7:refunds#2")) {
		t.Fatalf("after kill -9: %v", g)
	}
}

// Bad selectors and positions are refused with the contract's codes.
func TestTenantReadRefusesBadSelectors(t *testing.T) {
	p := start(t, t.TempDir())
	many := strings.Repeat("pattern=a*&", 101)
	for _, c := range []struct {
		q      string
		status int
		code   refusal.Code
	}{
		{many, 400, refusal.InvalidSelector},
		{"topic=" + strings.Repeat("x", 1025), 400, refusal.InvalidSelector},
		{"pattern=" + strings.Repeat("x", 1025), 400, refusal.InvalidSelector},
		{"pattern=", 400, refusal.InvalidSelector},
		{"topic=.x", 400, refusal.InvalidName},
		{"after=-1", 400, refusal.InvalidPosition},
		{"limit=0", 400, refusal.InvalidPosition},
		{strings.Repeat("pattern=a*&", 100), 200, ""},
	} {
		st, _, b := p.readTenant(t, "", c.q)
		var e struct{ Error struct{ Code refusal.Code } }
		json.Unmarshal(b, &e)
		if st != c.status || e.Error.Code != c.code {
			t.Errorf("%.40s: %d %s, want %d %s", c.q, st, b, c.status, c.code)
		}
	}
}

// With credentials, a tenant read delivers, and the topic list lists,
// only the topics the token may subscribe to: a pattern selects the
// covered ones, an exact topic that is not covered is 403, no token is
// 401.
func TestTenantReadHonoursTheToken(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	mint := func(publish, subscribe string) string { return p.mintAcme(t, "k-123", publish, subscribe) }
	pub := mint(`"*"`, "")
	for _, topic := range []string{"orders", "refunds", "ord-2"} {
		if st, _, b := do(t, "POST", p.topicURL(topic, "notify"), pub, `1`); st != 201 {
			t.Fatalf("publish: %d %s", st, b)
		}
	}
	sub := mint("", `"ord*"`)
	if st, a, b := p.readTenant(t, sub, "pattern=*"); st != 200 || len(a.Events) != 2 || a.Events[0].Topic != "orders" || a.Events[1].Pos != 3 {
		t.Fatalf("pattern=* with a token for ord*: %d %s", st, b)
	}
	if st, a, _ := p.readTenant(t, sub, "topic=orders"); st != 200 || len(a.Events) != 1 {
		t.Fatalf("topic=orders: %d %+v", st, a)
	}
	if st, _, b := p.readTenant(t, sub, "topic=orders&topic=refunds"); st != 403 {
		t.Fatalf("an exact topic outside the token: %d %s", st, b)
	}
	if st, _, _ := p.readTenant(t, "", ""); st != 401 {
		t.Fatalf("no token: %d", st)
	}
	if st, _, _ := p.readTenant(t, pub, ""); st != 200 {
		t.Fatalf("a token with no subscribe patterns: %d", st)
	}
	if _, a, _ := p.readTenant(t, pub, ""); len(a.Events) != 0 {
		t.Fatalf("a token with no subscribe patterns read %+v", a.Events)
	}
	if _, got, _ := p.listTopics(t, sub, ""); got != "ord-2:1/1/0 orders:1/1/0 next=orders" {
		t.Fatalf("the topic list with a token for ord*: %s", got)
	}
	if _, got, _ := p.listTopics(t, pub, ""); got != "next=" {
		t.Fatalf("the topic list with a token with no subscribe patterns: %s", got)
	}
	if st, _, _ := p.listTopics(t, "", ""); st != 401 {
		t.Fatalf("the topic list without a token: %d", st)
	}
}

type topicList struct {
	Topics []struct {
		Topic   string `json:"topic"`
		Head    int64  `json:"head"`
		First   int64  `json:"first"`
		Streams int    `json:"streams"`
	} `json:"topics"`
	NextAfter string `json:"next_after"`
}

// listTopics reads one page of the topic list with the query q, as token,
// and writes it as "topic:first/head/streams ... next=N".
func (p *proc) listTopics(t *testing.T, token, q string) (int, string, topicList) {
	t.Helper()
	st, _, b := do(t, "GET", p.base+"/v1/tenants/acme/topics?"+q, token, "")
	var l topicList
	if st != 200 {
		return st, string(b), l
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var out []string
	for _, x := range l.Topics {
		out = append(out, fmt.Sprintf("%s:%d/%d/%d", x.Topic, x.First, x.Head, x.Streams))
	}
	return st, strings.Join(append(out, "next="+l.NextAfter), " "), l
}

// The topic list gives the tenant's topics in byte order of their names,
// each once across pages, with first and head, the streams open on each
// (a topic only watched is listed, with head 0, while it is watched),
// narrowed by pattern; past the last page it is empty with next_after
// the after asked.
func TestTopicListing(t *testing.T) {
	p := start(t, t.TempDir())
	p.publish(t, "orders", `1`)
	p.publishBatch(t, "orders", 2, 2, 0)
	p.publish(t, "Refunds", `1`)
	p.publish(t, "ord-2", `1`)
	if st, _, b := do(t, "POST", p.base+"/v1/tenants/other/topics/elsewhere/notify", "", `1`); st != 201 { // not acme's
		t.Fatalf("publish to another tenant: %d %s", st, b)
	}
	for range 2 {
		p.watch(t, "orders", "", nil).hello(t)
	}
	watched := p.watch(t, "ord-3", "", nil)
	watched.hello(t)

	all := "Refunds:1/1/0 ord-2:1/1/0 ord-3:0/0/1 orders:1/3/2"
	if _, got, _ := p.listTopics(t, "", ""); got != all+" next=orders" {
		t.Fatalf("the list: %s", got)
	}
	var paged []string
	after := ""
	for {
		st, got, l := p.listTopics(t, "", "limit=1&after="+after)
		if st != 200 {
			t.Fatalf("page after %q: %d %s", after, st, got)
		}
		if len(l.Topics) == 0 {
			if l.NextAfter != after {
				t.Fatalf("the end: next_after %q, want %q", l.NextAfter, after)
			}
			break
		}
		paged = append(paged, strings.TrimSuffix(got, " next="+l.NextAfter))
		after = l.NextAfter
	}
	if got := strings.Join(paged, " "); got != all {
		t.Fatalf("paged by one: %s, want %s", got, all)
	}
	if _, got, _ := p.listTopics(t, "", "pattern=ord*&after=ord-2"); got != "ord-3:0/0/1 orders:1/3/2 next=orders" {
		t.Fatalf("pattern=ord* after ord-2: %s", got)
	}
	watched.close()
	deadline := time.Now().Add(wait)
	for {
		_, got, _ := p.listTopics(t, "", "pattern=ord*")
		if got == "ord-2:1/1/0 orders:1/3/2 next=orders" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after its only stream ended, a topic never published to is still listed: %s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
