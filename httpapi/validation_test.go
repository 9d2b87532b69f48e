package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/server"
)

type call struct {
	method, path, ctype, body string
	header                    map[string]string
}

func do(t *testing.T, base string, c call) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.ctype != "" {
		req.Header.Set("Content-Type", c.ctype)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not the contract's error shape: %s", b)
	}
	return e.Error.Code
}

// Every refusal has the contract's status, code and JSON shape, and
// changes nothing stored: the topic's head stays 0.
func TestBadRequestsAreRefusedAndStoreNothing(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.MaxBody = 64 << 10 })
	const notify = "/v1/tenants/t/topics/x/notify"
	lines := strings.Repeat("1\n", 10001)
	for _, tc := range []struct {
		name   string
		c      call
		status int
		code   string
	}{
		{"tenant starts with dot", call{method: "POST", path: "/v1/tenants/.t/topics/x/notify", body: "1"}, 400, "invalid_name"},
		{"topic with a control character", call{method: "POST", path: "/v1/tenants/t/topics/a%09b/notify", body: "1"}, 400, "invalid_name"},
		{"topic with a format character", call{method: "POST", path: "/v1/tenants/t/topics/a%E2%80%8Bb/notify", body: "1"}, 400, "invalid_name"},
		{"topic that is a wildcard", call{method: "POST", path: "/v1/tenants/t/topics/%2A/notify", body: "1"}, 400, "invalid_name"},
		{"topic too long", call{method: "POST", path: "/v1/tenants/t/topics/" + strings.Repeat("a", 1025) + "/notify", body: "1"}, 400, "invalid_name"},
		{"reserved type", call{method: "POST", path: notify + "?type=hello", body: "1"}, 400, "invalid_type"},
		{"type with tilde", call{method: "POST", path: notify, body: "1", header: map[string]string{"Event-Type": "a~b"}}, 400, "invalid_type"},
		{"type too long", call{method: "POST", path: notify + "?type=" + strings.Repeat("a", 65), body: "1"}, 400, "invalid_type"},
		{"op without key", call{method: "POST", path: notify + "?op=delete", body: "1"}, 400, "invalid_op"},
		{"unknown op", call{method: "POST", path: notify + "?key=k&op=merge", body: "1"}, 400, "invalid_op"},
		{"bad key", call{method: "POST", path: notify + "?key=.k", body: "1"}, 400, "invalid_name"},
		{"broken JSON", call{method: "POST", path: notify, body: `{"a":`}, 400, "invalid_json"},
		{"empty body", call{method: "POST", path: notify, body: ""}, 400, "invalid_json"},
		{"two values", call{method: "POST", path: notify, body: `1 2`}, 400, "invalid_json"},
		{"too large", call{method: "POST", path: notify, body: `"` + strings.Repeat("a", 64<<10) + `"`}, 413, "too_large"},
		{"bad type beats bad body", call{method: "POST", path: notify + "?type=gap", body: `{`}, 400, "invalid_type"},
		{"batch with no event", call{method: "POST", path: notify, ctype: "application/x-ndjson", body: "\n \r\n"}, 400, "invalid_json"},
		{"batch with a bad line", call{method: "POST", path: notify, ctype: "application/x-ndjson", body: "1\n{\n2\n"}, 400, "invalid_json"},
		{"batch over 10000 events", call{method: "POST", path: notify, ctype: "application/x-ndjson", body: lines}, 413, "too_large"},
		{"batch over 10000 events, the first bad", call{method: "POST", path: notify, ctype: "application/x-ndjson", body: "{\n" + lines}, 413, "too_large"},
		{"invalid UTF-8", call{method: "POST", path: notify, body: "\"\xff\xfe\""}, 400, "invalid_json"},
		{"idempotency key with a space", call{method: "POST", path: notify, body: "1", header: map[string]string{"Idempotency-Key": "a b"}}, 400, "invalid_idempotency_key"},
		{"unknown route", call{method: "GET", path: "/v1/nothing"}, 404, "not_found"},
		{"trailing slash", call{method: "POST", path: notify + "/", body: "1"}, 404, "not_found"},
		{"wrong method", call{method: "GET", path: notify}, 405, "method_not_allowed"},
		{"read with zero limit", call{method: "GET", path: "/v1/tenants/t/topics/x/events?limit=0"}, 400, "invalid_position"},
		{"read with negative after", call{method: "GET", path: "/v1/tenants/t/topics/x/events?after=-1"}, 400, "invalid_position"},
		{"watch with bad after", call{method: "GET", path: "/v1/tenants/t/topics/x/watch?after=1e3"}, 400, "invalid_position"},
	} {
		status, b := do(t, base, tc.c)
		if status != tc.status || errorCode(t, b) != tc.code {
			t.Errorf("%s: got %d %s, want %d %s", tc.name, status, b, tc.status, tc.code)
		}
	}
	status, b := do(t, base, call{method: "GET", path: "/v1/tenants/t/topics/x/events?after=0"})
	if status != 200 || !strings.Contains(string(b), `"head":0`) {
		t.Fatalf("after refusals the topic holds: %s", b)
	}
}

// Without --dev there are no tenants yet (they come with the admin API),
// so every tenant route is 401 in the contract's shape.
func TestWithoutDevTenantRoutesAreUnauthorized(t *testing.T) {
	base := startServer(t, server.Hooks{}, func(c *server.Config) { c.Dev = false })
	// Credentials come before everything but route and names.
	for _, c := range []call{
		{method: "POST", path: "/v1/tenants/t/topics/x/notify", body: "1"},
		{method: "POST", path: "/v1/tenants/t/topics/x/notify?op=delete", body: "{"},
		{method: "POST", path: "/v1/tenants/t/topics/x/notify", body: "1", header: map[string]string{"Idempotency-Key": "a b"}},
		{method: "GET", path: "/v1/tenants/t/topics/x/watch"},
		{method: "GET", path: "/v1/tenants/t/topics/x/watch?after=x"},
		{method: "GET", path: "/v1/tenants/t/topics/x/events"},
		{method: "GET", path: "/v1/tenants/t/topics/x/events?limit=0"},
		{method: "GET", path: "/v1/tenants/t/topics/x/state"},
	} {
		if status, b := do(t, base, c); status != 401 || errorCode(t, b) != "unauthorized" {
			t.Errorf("%s %s: %d %s", c.method, c.path, status, b)
		}
	}
}

// Accepted shapes: NDJSON with CRLF, blank lines and no final newline,
// type and key from headers, deletes with any body, compacted data, and
// envelopes with exactly the contract's fields.
func TestPublishShapesAndEnvelopes(t *testing.T) {
	base := startServer(t, server.Hooks{}, nil)
	const notify = "/v1/tenants/t/topics/x/notify"
	status, b := do(t, base, call{method: "POST", path: notify, ctype: "application/x-ndjson; charset=utf-8",
		body: "{\"a\": 1}\r\n\n  \n[1, 2]", header: map[string]string{"Event-Type": "order.created"}})
	if status != 201 || string(b) != `{"first":1,"last":2,"count":2,"duplicate":false}`+"\n" {
		t.Fatalf("batch: %d %s", status, b)
	}
	// The same bytes as a batch repeat under the same key: the contract
	// compares body, type, key and op, so this is a duplicate.
	do(t, base, call{method: "POST", path: "/v1/tenants/t/topics/other/notify", body: `{"x":"<b>&"}`, header: map[string]string{"Idempotency-Key": "k"}})
	status, b = do(t, base, call{method: "POST", path: "/v1/tenants/t/topics/other/notify", ctype: "application/x-ndjson",
		body: `{"x":"<b>&"}`, header: map[string]string{"Idempotency-Key": "k"}})
	if status != 200 || string(b) != `{"seq":1,"duplicate":true}`+"\n" {
		t.Fatalf("repeat as a batch: %d %s", status, b)
	}
	if _, b = do(t, base, call{method: "GET", path: "/v1/tenants/t/topics/other/events?limit=99999999999999999999999"}); !strings.Contains(string(b), `"data":{"x":"<b>&"}`) {
		t.Fatalf("read answer changed the event's bytes or refused a huge limit: %s", b)
	}
	status, b = do(t, base, call{method: "POST", path: notify, body: "{\n \"b\" : true\n}",
		header: map[string]string{"Event-Key": "k1"}})
	if status != 201 || string(b) != `{"seq":3,"duplicate":false}`+"\n" {
		t.Fatalf("keyed: %d %s", status, b)
	}
	if status, b = do(t, base, call{method: "POST", path: notify + "?key=k1&op=delete", body: "not json"}); status != 201 {
		t.Fatalf("delete: %d %s", status, b)
	}
	_, b = do(t, base, call{method: "GET", path: "/v1/tenants/t/topics/x/events?after=0&limit=5000"})
	var ans struct {
		Events    []map[string]json.RawMessage
		Head      int64
		NextAfter int64 `json:"next_after"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || ans.Head != 4 || ans.NextAfter != 4 || len(ans.Events) != 4 {
		t.Fatalf("read: %s", b)
	}
	want := []struct {
		typ, data, key, op string
	}{
		{`"order.created"`, `{"a":1}`, "", ""},
		{`"order.created"`, `[1,2]`, "", ""},
		{`"message"`, `{"b":true}`, `"k1"`, `"upsert"`},
		{`"message"`, `null`, `"k1"`, `"delete"`},
	}
	for i, e := range ans.Events {
		w := want[i]
		fields := 4
		if w.key != "" {
			fields = 6
			if string(e["key"]) != w.key || string(e["op"]) != w.op {
				t.Errorf("event %d: key %s op %s", i+1, e["key"], e["op"])
			}
		}
		if len(e) != fields || string(e["type"]) != w.typ || string(e["data"]) != w.data || string(e["seq"]) != strconv.Itoa(i+1) {
			t.Errorf("event %d: %v", i+1, e)
		}
	}
}
