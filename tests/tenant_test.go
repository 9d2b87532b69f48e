package tests

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

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

// With credentials, a tenant read delivers only the topics the token may
// subscribe to: a pattern selects the covered ones, an exact topic that
// is not covered is 403, no token is 401.
func TestTenantReadHonoursTheToken(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	mint := func(publish, subscribe string) string {
		_, _, b := do(t, "POST", p.base+"/v1/admin/tenants/acme/tokens", "k-123",
			`{"publish":[`+publish+`],"subscribe":[`+subscribe+`],"ttl":"10m"}`)
		var tok struct{ Token string }
		json.Unmarshal(b, &tok)
		return tok.Token
	}
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
}
