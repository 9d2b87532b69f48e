package notify

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/refusal"
)

// Whatever the body, content type, type, key and op, the parser either
// refuses with a contract code or yields events whose data is one compact
// JSON value with no line break, at most MaxBatch of them, all carrying the
// request's type, key and op.
func FuzzPublishParser(f *testing.F) {
	f.Add([]byte(`{"a": 1}`), "application/json", "", "", "")
	f.Add([]byte("1\r\n\n{\"b\":\n2}\n[3]"), "application/x-ndjson", "t.x", "k", "upsert")
	f.Add([]byte(""), "application/json", "", "k", "delete")
	f.Add([]byte("1 2"), "text/plain", "hello", "", "")
	f.Add([]byte("\"\\u2028\"\n\"x\""), "application/x-ndjson; charset=utf-8", "", ".k", "merge")
	codes := map[refusal.Code]bool{"invalid_json": true, "invalid_type": true, "invalid_op": true,
		"invalid_name": true, "too_large": true, "invalid_idempotency_key": true}
	f.Fuzz(func(t *testing.T, body []byte, ctype, typ, key, op string) {
		q := url.Values{}
		for k, v := range map[string]string{"type": typ, "key": key, "op": op} {
			if v != "" {
				q.Set(k, v)
			}
		}
		r := httptest.NewRequest(http.MethodPost, "/notify?"+q.Encode(), bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		m, perr := ParseNames(r)
		if perr == nil {
			perr = ParseOptions(r, &m, Credentials(len(body)%3))
		}
		if perr == nil {
			var got []byte
			got, perr = ReadBody(r, 1<<20, func(int64) *refusal.Error { return nil })
			if perr == nil {
				req, berr := Build("t", "x", m, got)
				perr = berr
				if berr == nil {
					checkEvents(t, m, req.Events)
				}
			}
		}
		if perr != nil && !codes[perr.Code] {
			t.Fatalf("refusal with an unknown code: %+v", perr)
		}
	})
}

func checkEvents(t *testing.T, m Meta, events []event.Event) {
	t.Helper()
	if len(events) == 0 || len(events) > MaxBatch || (!m.Batch && len(events) != 1) {
		t.Fatalf("%d events from one request (batch %v)", len(events), m.Batch)
	}
	for _, e := range events {
		if e.Type != m.Type || e.Key != m.Key || e.Op != m.Op {
			t.Fatalf("event %+v does not carry the request's meta %+v", e, m)
		}
		if !json.Valid(e.Data) || !utf8.Valid(e.Data) || bytes.ContainsAny(e.Data, "\r\n") {
			t.Fatalf("event data %q is not one compact JSON value", e.Data)
		}
		var buf bytes.Buffer
		if json.Compact(&buf, e.Data) != nil || !bytes.Equal(buf.Bytes(), e.Data) {
			t.Fatalf("event data %q is not compact", e.Data)
		}
	}
}
