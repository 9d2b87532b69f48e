// Package notify turns the contract's notify request into a publish for the
// backlog: it picks the event type, key and op, reads the body within its
// limit, checks and compacts the JSON (one value, or NDJSON lines), and
// derives the idempotency key and the hash that tells a true repeat from a
// reuse. It refuses with a *refusal.Error, a contract code and a message;
// the HTTP status is the code's, from package refusal's table.
package notify

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
)

// MaxBatch is the most events one NDJSON request may carry.
const MaxBatch = 10000

// MaxIdempotencyKey bounds an idempotency key, which is stored per topic.
const MaxIdempotencyKey = 256

// Meta is what a request says about its events outside the body.
// TenantWideKey marks an IdemKey that came from webhook-id, which binds
// its request tenant-wide (see ParseOptions).
type Meta struct {
	Type, Key, Op, IdemKey string
	Batch, TenantWideKey   bool
}

// ParseNames reads the event type and key, which are names: the contract
// checks names before credentials.
func ParseNames(r *http.Request) (Meta, *refusal.Error) {
	q := r.URL.Query()
	m := Meta{
		Type: first(q.Get("type"), r.Header.Get("Event-Type"), "message"),
		Key:  first(q.Get("key"), r.Header.Get("Event-Key"), ""),
	}
	if !names.ValidType(m.Type) {
		return m, refusal.New(refusal.InvalidType,
			"event type must be 1 to %d of A-Z a-z 0-9 . _ : - and not hello, gap or snapshot", names.MaxType)
	}
	if m.Key != "" && !names.Valid(m.Key) {
		return m, refusal.New(refusal.InvalidName, "key must follow the name rules")
	}
	return m, nil
}

// ParseOptions reads op, idempotency key and batch-ness into m; it runs
// after credentials. signed says the request was authenticated by its
// webhook signature, which covers webhook-id but no other header: its
// webhook-id is then its key, and an Idempotency-Key that differs (one a
// replayer could choose) is refused. Otherwise an Idempotency-Key wins
// and is scoped to the topic; a webhook-id alone is scoped to the tenant,
// so that one delivery can never append to two topics.
func ParseOptions(r *http.Request, m *Meta, signed bool) *refusal.Error {
	m.Op = r.URL.Query().Get("op")
	idem, webhookID := r.Header.Get("Idempotency-Key"), r.Header.Get("webhook-id")
	switch {
	case signed && idem != "" && idem != webhookID:
		return refusal.New(refusal.InvalidIdempotencyKey,
			"a request signed as a webhook is idempotent by its webhook-id; an Idempotency-Key must equal it or be left out")
	case signed || idem == "":
		m.IdemKey, m.TenantWideKey = webhookID, webhookID != ""
	default:
		m.IdemKey = idem
	}
	switch {
	case m.Key == "" && m.Op != "":
		return refusal.New(refusal.InvalidOp, "op needs a key")
	case m.Key == "":
	case m.Op == "":
		m.Op = event.OpUpsert
	case m.Op != event.OpUpsert && m.Op != event.OpDelete:
		return refusal.New(refusal.InvalidOp, "op must be upsert or delete")
	}
	if len(m.IdemKey) > MaxIdempotencyKey || !printable(m.IdemKey) {
		return refusal.New(refusal.InvalidIdempotencyKey,
			"idempotency key must be at most %d printable ASCII characters", MaxIdempotencyKey)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/x-ndjson" {
			m.Batch = true
		}
	}
	return nil
}

// ReadBody reads at most maxBody bytes of the request body; more is
// too_large.
func ReadBody(r *http.Request, maxBody int64) ([]byte, *refusal.Error) {
	if r.ContentLength > maxBody {
		return nil, tooLarge(maxBody)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, refusal.New(refusal.InvalidBody, "the body did not arrive in time")
	case err != nil:
		// The error names the server's own socket; the client needs none of it.
		return nil, refusal.New(refusal.InvalidBody, "the body could not be read")
	}
	if int64(len(body)) > maxBody {
		return nil, tooLarge(maxBody)
	}
	return body, nil
}

func tooLarge(maxBody int64) *refusal.Error {
	return refusal.New(refusal.TooLarge, "the body is over %d bytes", maxBody)
}

// Build makes the publish for tenant/topic from the request's meta and body.
func Build(tenant, topic string, m Meta, body []byte) (*backlog.Publish, *refusal.Error) {
	datas, perr := parseBody(m, body)
	if perr != nil {
		return nil, perr
	}
	a := &backlog.Publish{Tenant: tenant, Topic: topic, Batch: m.Batch, Events: make([]event.Event, len(datas))}
	for i, d := range datas {
		a.Events[i] = event.Event{Type: m.Type, Key: m.Key, Op: m.Op, Data: d}
	}
	if m.IdemKey != "" {
		a.IdemKey, a.TenantWideKey = m.IdemKey, m.TenantWideKey
		a.IdemHash = requestHash(m, body)
	}
	return a, nil
}

var null = json.RawMessage("null")

func parseBody(m Meta, body []byte) ([]json.RawMessage, *refusal.Error) {
	if !m.Batch {
		if m.Op == event.OpDelete {
			return []json.RawMessage{null}, nil
		}
		d, err := compact(body)
		if err != nil {
			return nil, refusal.New(refusal.InvalidJSON, "the body is not one JSON value: %v", err)
		}
		return []json.RawMessage{d}, nil
	}
	// Count first: an oversized batch is a limit, refused before its
	// content is looked at.
	var lines [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(lines) == MaxBatch {
			return nil, refusal.New(refusal.TooLarge, "a batch holds at most %d events", MaxBatch)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return nil, refusal.New(refusal.InvalidJSON, "the batch has no event")
	}
	out := make([]json.RawMessage, len(lines))
	for i, line := range lines {
		if m.Op == event.OpDelete {
			out[i] = null
			continue
		}
		d, err := compact(line)
		if err != nil {
			return nil, refusal.New(refusal.InvalidJSON, "event %d of the batch is not one JSON value: %v", i+1, err)
		}
		out[i] = d
	}
	return out, nil
}

var (
	errEmpty = errors.New("empty")
	errUTF8  = errors.New("not valid UTF-8")
)

// compact checks that b is exactly one JSON value and strips its
// insignificant white space, so the envelope never spans lines.
func compact(b []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errEmpty
	}
	if !utf8.Valid(b) {
		return nil, errUTF8
	}
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// requestHash covers what the contract compares between a request and its
// repeat: body bytes, type, key and op.
func requestHash(m Meta, body []byte) []byte {
	h := sha256.New()
	for _, s := range []string{m.Type, m.Key, m.Op} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	h.Write(body)
	return h.Sum(nil)
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
