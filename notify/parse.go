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

// Credentials says what let a publish in, which decides what its
// webhook-id header means.
type Credentials int

const (
	// Token: a bearer token, which covers no header. A webhook-id beside
	// it is ignored: only a signature binds one, so a token (perhaps
	// limited to one topic) cannot claim a tenant's future webhook ids.
	Token Credentials = iota
	// Signature: a Standard Webhooks signature, which covers webhook-id.
	Signature
	// Dev: none were needed (dev mode); webhook-id is a key there too.
	Dev
)

// ParseOptions reads op, idempotency key and batch-ness into m; it runs
// after credentials, which decide what webhook-id means. Signed as a
// webhook, the request's webhook-id is its key, and an Idempotency-Key
// that differs (one a replayer could choose) is refused. Otherwise an
// Idempotency-Key wins and is scoped to the topic; in dev mode a
// webhook-id alone is scoped to the tenant, so that one delivery can
// never append to two topics; with a token it is ignored.
func ParseOptions(r *http.Request, m *Meta, via Credentials) *refusal.Error {
	m.Op = r.URL.Query().Get("op")
	idem, webhookID := r.Header.Get("Idempotency-Key"), r.Header.Get("webhook-id")
	switch {
	case via == Signature && idem != "" && idem != webhookID:
		return refusal.New(refusal.InvalidIdempotencyKey,
			"a request signed as a webhook is idempotent by its webhook-id; an Idempotency-Key must equal it or be left out")
	case via == Signature || via == Dev && idem == "":
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
	if aerr := CheckIdempotencyKey(m.IdemKey); aerr != nil {
		return aerr
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/x-ndjson" {
			m.Batch = true
		}
	}
	return nil
}

// bodyPiece is the first part of a body that is admitted and read: a
// body holds budget bytes for what has arrived, never for what its
// Content-Length announces, so that a client that announces a megabyte
// and sends a byte holds no more than this.
const bodyPiece = 64 << 10

// ReadBody reads at most maxBody bytes of the request body; more is
// too_large. Before the buffer grows, admit is given the bytes it grows
// by (a piece, then doubling, never past the Content-Length or maxBody):
// the caller takes them from its budgets, and a refusal from admit ends
// the read with that refusal.
func ReadBody(r *http.Request, maxBody int64, admit func(n int64) *refusal.Error) ([]byte, *refusal.Error) {
	if r.ContentLength > maxBody {
		return nil, tooLarge(maxBody)
	}
	// One byte past the end is room to see it: the read that finds it
	// returns io.EOF, or proves the body too large.
	end := maxBody + 1
	if r.ContentLength >= 0 {
		end = r.ContentLength + 1
	}
	var body []byte
	for {
		if len(body) == cap(body) {
			grow := min(int64(max(cap(body), bodyPiece)), end-int64(len(body)))
			if perr := admit(grow); perr != nil {
				return nil, perr
			}
			body = append(make([]byte, 0, int64(len(body))+grow), body...)
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case int64(len(body)) > maxBody:
			return nil, tooLarge(maxBody)
		case errors.Is(err, io.EOF):
			return body, nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, refusal.New(refusal.InvalidBody, "the body did not arrive in time")
		case err != nil:
			// The error names the server's own socket; the client needs none of it.
			return nil, refusal.New(refusal.InvalidBody, "the body could not be read")
		}
	}
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

// CheckIdempotencyKey refuses a key that is not at most MaxIdempotencyKey
// printable ASCII characters: the one rule of every protocol's keys.
func CheckIdempotencyKey(k string) *refusal.Error {
	if len(k) > MaxIdempotencyKey || !printable(k) {
		return refusal.New(refusal.InvalidIdempotencyKey,
			"idempotency key must be at most %d printable ASCII characters", MaxIdempotencyKey)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
