package durable

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/notify"
	"github.com/edgehub/edgehub/refusal"
)

// The refusals of the protocol's own checks, in the contract's shape.
func conflict(format string, args ...any) *refusal.Error {
	return refusal.New(refusal.Conflict, format, args...)
}

func badHeader(format string, args ...any) *refusal.Error {
	return refusal.New(refusal.InvalidHeader, format, args...)
}

// maxSafe is the largest integer JavaScript holds exactly, the bound of
// producer epochs and sequence numbers.
const maxSafe = 1<<53 - 1

// parseCount reads a non-negative decimal integer with no sign, no
// leading zero, no point and no exponent, as the protocol writes them.
func parseCount(v string, limit int64) (int64, bool) {
	if v == "" || len(v) > 19 || (len(v) > 1 && v[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n <= limit
}

// createConfig reads a PUT's headers; a fork's source is a stream of
// tenant.
func createConfig(r *http.Request, tenant string) (*backlog.StreamConfig, *refusal.Error) {
	h := r.Header
	c := &backlog.StreamConfig{ContentType: h.Get("Content-Type"), TTL: -1, ForkOffset: -1}
	ttl, expires := h.Get("Stream-TTL"), h.Get("Stream-Expires-At")
	if ttl != "" && expires != "" {
		return nil, badHeader("Stream-TTL and Stream-Expires-At exclude each other")
	}
	if ttl != "" {
		n, ok := parseCount(ttl, maxSafe)
		if !ok {
			return nil, refusal.New(refusal.InvalidTTL, "Stream-TTL must be a whole number of seconds")
		}
		c.TTL = n
	}
	if expires != "" {
		t, err := time.Parse(time.RFC3339Nano, expires)
		if err != nil {
			return nil, badHeader("Stream-Expires-At must be an RFC 3339 time")
		}
		c.ExpiresAt = t.UnixNano()
	}
	c.Closed = truthy(h.Get("Stream-Closed"))
	from := h.Get("Stream-Forked-From")
	if from == "" {
		if h.Get("Stream-Fork-Offset") != "" || h.Get("Stream-Fork-Sub-Offset") != "" {
			return nil, badHeader("Stream-Fork-Offset needs Stream-Forked-From")
		}
		if c.ContentType == "" {
			c.ContentType = "application/octet-stream"
		}
		return c, nil
	}
	name, ok := forkSource(from, tenant)
	if !ok {
		return nil, refusal.New(refusal.NotFound, "Stream-Forked-From must be the path of a stream of this tenant: %s{name} or %s%s%s{name}",
			Path, tenantPath, tenant, tenantStreams)
	}
	c.ForkOf = name
	if v := h.Get("Stream-Fork-Offset"); v != "" {
		o, ok := parseOffset(v)
		if !ok || o.now {
			return nil, badHeader("Stream-Fork-Offset must be an offset this server gave")
		}
		if !o.start {
			c.ForkOffset = o.seq
		}
	}
	if v := h.Get("Stream-Fork-Sub-Offset"); v != "" {
		n, ok := parseCount(v, maxSafe)
		if !ok {
			return nil, badHeader("Stream-Fork-Sub-Offset must be a non-negative integer")
		}
		c.ForkSub = n
	}
	return c, nil
}

// forkSource is the name of the stream that a Stream-Forked-From path
// names, in either route's form (its segments percent-decoded, as the
// router decodes them); the tenant form must name tenant, the request's
// own: a fork never reaches into another tenant.
func forkSource(from, tenant string) (string, bool) {
	name, ok := strings.CutPrefix(from, Path)
	if !ok {
		var rest, in string
		if rest, ok = strings.CutPrefix(from, tenantPath); !ok {
			return "", false
		}
		if in, name, ok = strings.Cut(rest, tenantStreams); !ok {
			return "", false
		}
		if t, err := url.PathUnescape(in); err != nil || t != tenant {
			return "", false
		}
	}
	if strings.Contains(name, "/") {
		return "", false
	}
	name, err := url.PathUnescape(name)
	return name, err == nil && names.Valid(name)
}

// mayFork checks that a fork's credentials may read its source, as a
// direct read of it must: a fork copies what the source holds. It looks
// at names only, before anything is read, so that a source that does not
// exist and one the token may not read are refused alike, and a fork is
// no oracle of names. A webhook signature grants no read.
func (p *Protocol) mayFork(r *http.Request, tenant, source string, via notify.Credentials) *refusal.Error {
	if via == notify.Signature {
		return refusal.New(refusal.Forbidden, "a fork reads its source: it needs a token that may subscribe to it, not a webhook signature")
	}
	_, aerr := p.g.AuthorizeRead(r, tenant, source)
	return aerr
}

// messages turns a body into the events that store it: in JSON mode one
// event per message, a top-level array flattened one level; otherwise
// one event of the bytes as they came.
func messages(body []byte, contentType string, create bool) ([]event.Event, *refusal.Error) {
	if len(body) == 0 {
		return nil, nil
	}
	if !jsonMode(contentType) {
		return []event.Event{{Type: "message", Data: body, Raw: true}}, nil
	}
	if !json.Valid(body) {
		return nil, refusal.New(refusal.InvalidJSON, "the body must be JSON")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		var b bytes.Buffer
		json.Compact(&b, body) //nolint:errcheck // valid already
		return []event.Event{{Type: "message", Data: b.Bytes()}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		return nil, refusal.New(refusal.InvalidJSON, "the body must be JSON")
	}
	if len(items) == 0 && !create {
		return nil, refusal.New(refusal.InvalidJSON, "an append of an empty array appends nothing")
	}
	events := make([]event.Event, len(items))
	for i, item := range items {
		var b bytes.Buffer
		json.Compact(&b, item) //nolint:errcheck // valid already
		events[i] = event.Event{Type: "message", Data: b.Bytes()}
	}
	return events, nil
}

// keyed applies the keyed-compaction extension's headers to an append's
// messages: Stream-Key names the key each of them sets (the last one
// wins), and Stream-Key-Op: delete removes the key instead. A snapshot
// read (?snapshot=1) then starts from each key's latest value.
func keyed(r *http.Request, events []event.Event, contentType string) *refusal.Error {
	key, op := r.Header.Get("Stream-Key"), r.Header.Get("Stream-Key-Op")
	if key == "" {
		if op != "" {
			return badHeader("Stream-Key-Op needs Stream-Key")
		}
		return nil
	}
	switch {
	case !jsonMode(contentType):
		return badHeader("Stream-Key is for JSON streams")
	case !names.Valid(key):
		return refusal.New(refusal.InvalidName, "Stream-Key must be 1 to %d of A-Z a-z 0-9 . _ : ~ - and not start with '.'", names.MaxName)
	case op != "" && op != event.OpUpsert && op != event.OpDelete:
		return refusal.New(refusal.InvalidOp, "Stream-Key-Op must be upsert or delete")
	}
	if op == "" {
		op = event.OpUpsert
	}
	for i := range events {
		events[i].Key, events[i].Op = key, op
		if op == event.OpDelete {
			events[i].Data = []byte("null")
		}
	}
	return nil
}

// create is PUT: create the stream, or confirm it.
func (p *Protocol) create(w http.ResponseWriter, r *http.Request, at place) {
	tenant, name := at.tenant, at.name
	var c *backlog.StreamConfig
	a, aerr := p.g.Admit(w, r, tenant, name, func(via notify.Credentials) *refusal.Error {
		var aerr *refusal.Error
		if c, aerr = createConfig(r, tenant); aerr == nil && c.ForkOf != "" {
			aerr = p.mayFork(r, tenant, c.ForkOf, via)
		}
		return aerr
	})
	defer a.Release()
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	ct := c.ContentType
	if ct == "" {
		ct = "application/json" // a fork's type is its source's; only its JSON-ness matters here
		if !json.Valid(a.Body()) {
			ct = "application/octet-stream"
		}
	}
	events, aerr := messages(a.Body(), ct, true)
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	req := &backlog.Publish{Tenant: tenant, Topic: name, Events: events, Batch: true,
		Stream: &backlog.StreamOp{Create: c}}
	res, ok := p.g.Commit(w, r, req, a)
	if !ok {
		return
	}
	sr := res.Stream
	switch sr.Outcome {
	case backlog.StreamDone, backlog.StreamExists:
		streamHeaders(w.Header(), &sr.Info, sr.Info.Head)
		status := http.StatusOK
		if sr.Outcome == backlog.StreamDone {
			status = http.StatusCreated
			w.Header().Set("Location", location(r, at))
		}
		w.WriteHeader(status)
	case backlog.ForkSourceMissing:
		p.g.WriteError(w, refusal.New(refusal.NotFound, "the fork's source stream does not exist"))
	case backlog.ForkBadOffset:
		p.g.WriteError(w, refusal.New(refusal.InvalidPosition, "the fork offset is past the source's tail or before its retained data"))
	default:
		p.g.WriteError(w, conflict("a stream exists here with another configuration (or was deleted while forks read it)"))
	}
}

// location is the stream's absolute URL, as the request reached it, in
// its route's form.
func location(r *http.Request, at place) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + at.path()
}

// appendOp reads a POST's headers.
func appendOp(r *http.Request) (*backlog.StreamOp, *refusal.Error) {
	h := r.Header
	op := &backlog.StreamOp{ContentType: h.Get("Content-Type"), WriterSeq: h.Get("Stream-Seq"), Close: truthy(h.Get("Stream-Closed"))}
	id, epoch, seq := h.Values("Producer-Id"), h.Get("Producer-Epoch"), h.Get("Producer-Seq")
	switch n := boolCount(len(id) > 0, epoch != "", seq != ""); {
	case n == 3:
		if id[0] == "" {
			return nil, badHeader("Producer-Id must not be empty")
		}
		e, ok1 := parseCount(epoch, maxSafe)
		s, ok2 := parseCount(seq, maxSafe)
		if !ok1 || !ok2 {
			return nil, badHeader("Producer-Epoch and Producer-Seq must be integers from 0 to 2^53-1")
		}
		op.Producer = &backlog.Producer{ID: id[0], Epoch: e, Seq: s}
	case n > 0:
		return nil, badHeader("Producer-Id, Producer-Epoch and Producer-Seq go together")
	}
	return op, nil
}

func boolCount(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// append is POST: append, close, or both.
func (p *Protocol) append(w http.ResponseWriter, r *http.Request, at place) {
	tenant, name := at.tenant, at.name
	var op *backlog.StreamOp
	a, aerr := p.g.Admit(w, r, tenant, name, func(notify.Credentials) *refusal.Error {
		var aerr *refusal.Error
		op, aerr = appendOp(r)
		return aerr
	})
	defer a.Release()
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	body := a.Body()
	switch {
	case len(body) == 0 && !op.Close:
		p.g.WriteError(w, refusal.New(refusal.InvalidBody, "an append needs a body (or Stream-Closed: true)"))
		return
	case len(body) > 0 && op.ContentType == "":
		p.g.WriteError(w, badHeader("an append with a body needs a Content-Type"))
		return
	}
	events, aerr := messages(body, op.ContentType, false)
	if aerr == nil {
		aerr = keyed(r, events, op.ContentType)
	}
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	req := &backlog.Publish{Tenant: tenant, Topic: name, Events: events, Batch: true, Stream: op}
	res, ok := p.g.Commit(w, r, req, a)
	if !ok {
		return
	}
	sr := res.Stream
	h := w.Header()
	info := &sr.Info
	if pr := op.Producer; pr != nil && sr.Outcome != backlog.ProducerGap && sr.Outcome != backlog.ProducerBadStart {
		h.Set("Producer-Epoch", strconv.FormatInt(sr.Epoch, 10))
		if sr.Outcome != backlog.ProducerStale {
			h.Set("Producer-Seq", strconv.FormatInt(sr.Seq, 10))
		}
	}
	switch sr.Outcome {
	case backlog.StreamDone:
		h.Set("Stream-Next-Offset", formatOffset(info.Head))
		if info.Config.Closed {
			h.Set("Stream-Closed", "true")
			p.closing.wake(tenant, name)
		}
		status := http.StatusNoContent
		if op.Producer != nil && len(events) > 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
	case backlog.ProducerDuplicate:
		h.Set("Stream-Next-Offset", formatOffset(info.Head))
		if info.Config.Closed {
			h.Set("Stream-Closed", "true")
		}
		w.WriteHeader(http.StatusNoContent)
	case backlog.StreamClosed:
		h.Set("Stream-Next-Offset", formatOffset(info.Head))
		h.Set("Stream-Closed", "true")
		if len(body) == 0 {
			w.WriteHeader(http.StatusNoContent) // closing again: done already
			return
		}
		p.g.WriteError(w, conflict("the stream is closed"))
	case backlog.StreamMissing:
		p.g.WriteError(w, refusal.New(refusal.NotFound, "no such stream"))
	case backlog.StreamGone:
		p.g.WriteError(w, refusal.New(refusal.Gone, "the stream was deleted"))
	case backlog.StreamTypeMismatch:
		p.g.WriteError(w, conflict("the stream's content type is %s", info.Config.ContentType))
	case backlog.StreamSeqRegress:
		p.g.WriteError(w, conflict("Stream-Seq must be above the last one, %q", info.WriterSeq))
	case backlog.ProducerStale:
		p.g.WriteError(w, refusal.New(refusal.Forbidden, "a newer epoch of this producer is writing"))
	case backlog.ProducerBadStart:
		p.g.WriteError(w, badHeader("a producer's new epoch starts at Producer-Seq 0"))
	case backlog.ProducerGap:
		h.Set("Producer-Expected-Seq", strconv.FormatInt(sr.ExpectedSeq, 10))
		h.Set("Producer-Received-Seq", strconv.FormatInt(sr.Seq, 10))
		p.g.WriteError(w, conflict("Producer-Seq %d is past the next one, %d", sr.Seq, sr.ExpectedSeq))
	default:
		p.g.WriteError(w, refusal.New(refusal.Internal, "unexpected outcome %d", sr.Outcome))
	}
}

// delete is DELETE.
func (p *Protocol) delete(w http.ResponseWriter, r *http.Request, at place) {
	tenant, name := at.tenant, at.name
	ten, aerr := p.g.AuthorizeWrite(r, tenant, name)
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	res, ok := p.g.CommitQuiet(w, r, &backlog.Publish{Tenant: tenant, Topic: name, Stream: &backlog.StreamOp{Delete: true}}, ten.Tenant)
	if !ok {
		return
	}
	switch res.Stream.Outcome {
	case backlog.StreamDone:
		p.closing.wake(tenant, name)
		w.WriteHeader(http.StatusNoContent)
	case backlog.StreamGone:
		p.g.WriteError(w, refusal.New(refusal.Gone, "the stream was deleted"))
	default:
		p.g.WriteError(w, refusal.New(refusal.NotFound, "no such stream"))
	}
}
