package durable

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/refusal"
)

const (
	// pageEvents and pageBytes bound one catch-up answer: the protocol's
	// server-defined chunk, after which the client asks again.
	pageEvents = 1000
	pageBytes  = 1 << 20
	// frameBytes is how much one SSE data event carries at most.
	frameBytes = 64 << 10
	// recheck is how often a live read looks at its stream's row, for a
	// closure or deletion by another process.
	recheck = time.Second
)

// find checks a read's credentials and reads its stream: a stream that
// does not exist (or has expired) is 404, one deleted while forks read
// it 410.
func (p *Protocol) find(w http.ResponseWriter, r *http.Request, at place) (*backlog.StreamInfo, httpapi.Access, bool) {
	tenant, name := at.tenant, at.name
	ten, aerr := p.g.AuthorizeRead(r, tenant, name)
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return nil, ten, false
	}
	info, ok, err := p.g.Log().Stream(r.Context(), tenant, name)
	switch {
	case err != nil:
		p.g.Logger().Error("read stream", "tenant", tenant, "stream", name, "err", err)
		p.g.WriteError(w, refusal.New(refusal.Unavailable, "the stream could not be read"))
		return nil, ten, false
	case !ok || info.Expired(time.Now()):
		p.g.WriteError(w, refusal.New(refusal.NotFound, "no such stream"))
		return nil, ten, false
	case info.Deleted:
		p.g.WriteError(w, refusal.New(refusal.Gone, "the stream was deleted"))
		return nil, ten, false
	}
	return &info, ten, true
}

// head is HEAD: the stream's metadata, never cached.
func (p *Protocol) head(w http.ResponseWriter, r *http.Request, at place) {
	info, _, ok := p.find(w, r, at)
	if !ok {
		return
	}
	streamHeaders(w.Header(), info, info.Head)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// touch restarts a sliding TTL: a read keeps its stream alive.
func (p *Protocol) touch(w http.ResponseWriter, r *http.Request, info *backlog.StreamInfo, ten httpapi.Access, tenant, name string) bool {
	if info.Config.TTL < 0 {
		return true
	}
	_, ok := p.g.CommitQuiet(w, r, &backlog.Publish{Tenant: tenant, Topic: name, Stream: &backlog.StreamOp{Touch: true}}, ten.Tenant)
	return ok
}

// read is GET: catch-up, long-poll or SSE.
func (p *Protocol) read(w http.ResponseWriter, r *http.Request, at place) {
	info, ten, ok := p.find(w, r, at)
	if !ok {
		return
	}
	tenant, name := at.tenant, at.name
	q := r.URL.Query()
	live := q.Get("live")
	if live != "" && live != "long-poll" && live != "sse" {
		p.g.WriteError(w, refusal.New(refusal.InvalidPosition, "live must be long-poll or sse"))
		return
	}
	raw, given := q["offset"]
	if !given && live != "" {
		p.g.WriteError(w, refusal.New(refusal.InvalidPosition, "a live read needs an offset"))
		return
	}
	o := offset{start: true}
	if given {
		var valid bool
		if o, valid = parseOffset(raw[0]); !valid || len(raw) > 1 {
			p.g.WriteError(w, refusal.New(refusal.InvalidPosition, "offset must be -1, now, or an offset this server gave"))
			return
		}
	}
	after := o.seq
	switch {
	case o.start:
		after = info.Start
	case o.now:
		after = info.Head
	}
	if after < info.Oldest() || (o.start && info.Trimmed > info.Start) {
		p.g.WriteError(w, refusal.New(refusal.Gone, "retention removed the events after this offset"))
		return
	}
	if !p.touch(w, r, info, ten, tenant, name) {
		return
	}
	if o.start && (q.Get("snapshot") == "1" || q.Get("snapshot") == "true") && jsonMode(info.Config.ContentType) {
		p.fromSnapshot(w, r, info, ten, tenant, name, live == "sse")
		return
	}
	switch {
	case live == "sse":
		p.sse(w, r, info, ten, tenant, name, after, nil)
	case live == "long-poll" && (after >= info.Head || o.now):
		p.longPoll(w, r, info, ten, at, after)
	default:
		p.catchUp(w, r, info, at, after, o.now, live != "")
	}
}

// body builds a read answer's body from events: a JSON array in JSON
// mode, the bytes one after the other otherwise. A gap (retention)
// stops it: what follows is not handed out.
type body struct {
	json bool
	n    int
	last int64
	gap  bool
}

// AppendEvent is for the hub's subscription.
func (c *body) AppendEvent(b []byte, e *event.Event, _ []byte) []byte {
	if c.gap {
		return b
	}
	if c.json && c.n > 0 {
		b = append(b, ',')
	}
	c.n++
	c.last = e.Seq
	return append(b, e.Data...)
}

// AppendGap is for the hub's subscription: the stream cannot say it.
func (c *body) AppendGap(b []byte, _, _ int64) []byte {
	c.gap = true
	return b
}

func (c *body) wrap(b []byte) []byte {
	if !c.json {
		return b
	}
	return append(append([]byte{'['}, b...), ']')
}

// catchUp answers a page of the events after after.
func (p *Protocol) catchUp(w http.ResponseWriter, r *http.Request, info *backlog.StreamInfo, at place, after int64, now, live bool) {
	tenant, name := at.tenant, at.name
	c := &body{json: jsonMode(info.Config.ContentType)}
	var b []byte
	head := info.Head
	if !now {
		// The page and its answer come from the tenant's share of the
		// read budget, as a native read's do, held until it is written.
		hold := p.g.Hold(tenant)
		defer hold.Release()
		if err := hold.Try(2*pageBytes + pageEvents); err != nil {
			p.refuse(w, err)
			return
		}
		page, err := p.g.Log().Read(r.Context(), tenant, name, after, pageEvents, pageBytes)
		if err != nil {
			p.g.Logger().Error("read stream", "tenant", tenant, "stream", name, "err", err)
			p.g.WriteError(w, refusal.New(refusal.Unavailable, "the stream could not be read"))
			return
		}
		if page.Trimmed > after {
			p.g.WriteError(w, refusal.New(refusal.Gone, "retention removed the events after this offset"))
			return
		}
		for i := range page.Events {
			b = c.AppendEvent(b, &page.Events[i], nil)
		}
		head = max(head, page.Head)
	}
	next := after
	if c.n > 0 {
		next = c.last
	}
	h := w.Header()
	streamHeaders(h, info, next)
	closed := info.Config.Closed && next >= info.Head
	if next >= head {
		h.Set("Stream-Up-To-Date", "true")
	}
	if !closed || live {
		h.Set("Stream-Cursor", cursor(r, time.Now()))
	}
	if now {
		h.Set("Cache-Control", "no-store")
	} else {
		p.cacheable(h, at)
		tag := `"` + strconv.FormatInt(info.TopicID, 10) + ":" + formatOffset(after) + ":" + formatOffset(next)
		if closed {
			tag += ":c"
		}
		tag += `"`
		h.Set("ETag", tag)
		if match := r.Header.Get("If-None-Match"); match != "" && match == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	out := c.wrap(b)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(out) //nolint:errcheck // the client may be gone
	}
}

// cacheable marks a read answer that a cache may keep (a catch-up page,
// its 304, a long-poll's data): any cache in dev mode, where no
// credential picks the answer; otherwise the client's own only, keyed by
// what picks the answer, the token and, on Path, Edgehub-Tenant, so that
// no other credential's request is ever answered from it.
func (p *Protocol) cacheable(h http.Header, at place) {
	if p.g.Dev() {
		h.Set("Cache-Control", "public, max-age=60, stale-while-revalidate=300")
		return
	}
	h.Set("Cache-Control", "private, max-age=60, stale-while-revalidate=300")
	if at.inPath {
		h.Add("Vary", "Authorization")
	} else {
		h.Add("Vary", "Authorization, Edgehub-Tenant")
	}
}

// watch registers a live read with the stream's hub, under the stream
// limits, and holds its credential, so that a revocation ends it; done
// gives back what it holds.
func (p *Protocol) watch(w http.ResponseWriter, r *http.Request, access httpapi.Access, name string, after int64) (*hub.Subscription, func(), bool) {
	tenant := access.Tenant.Name
	release, refused := p.g.OpenStream(tenant)
	if refused != nil {
		p.g.WriteError(w, refused)
		return nil, nil, false
	}
	sub, err := p.g.Hubs().Watch(r.Context(), tenant, name, hub.From{After: after})
	if err != nil {
		release()
		if r.Context().Err() == nil {
			p.g.WriteError(w, refusal.New(refusal.Unavailable, "the stream could not be opened"))
		}
		return nil, nil, false
	}
	forget := p.g.HoldCredential(access, sub.End)
	done := func() { forget(); sub.Close(); release() }
	if aerr := p.g.StillThere(r, access, name); aerr != nil {
		done()
		p.g.WriteError(w, aerr)
		return nil, nil, false
	}
	return sub, done, true
}

// longPoll waits, for at most the long-poll time, for events after
// after, or the stream's closure. It always answers: however it ends
// with nothing to hand out (its time is up, its hub ended its
// subscription, the server ends its streams, its token expired or was
// revoked, its client left), it answers as its timeout does, so that
// the client asks again from the same offset, never a bare 200.
func (p *Protocol) longPoll(w http.ResponseWriter, r *http.Request, info *backlog.StreamInfo, access httpapi.Access, at place, after int64) {
	tenant, name := at.tenant, at.name
	h := w.Header()
	upToDate := func() {
		streamHeaders(h, info, after)
		h.Set("Stream-Up-To-Date", "true")
		h.Set("Stream-Cursor", cursor(r, time.Now()))
		w.WriteHeader(http.StatusNoContent)
	}
	if info.Config.Closed {
		streamHeaders(h, info, after)
		h.Set("Stream-Up-To-Date", "true")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	closing := p.closing.wait(tenant, name)
	sub, done, ok := p.watch(w, r, access, name, after)
	if !ok {
		return
	}
	defer done()
	timeout := time.NewTimer(p.cfg.LongPoll)
	defer timeout.Stop()
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	c := &body{json: jsonMode(info.Config.ContentType)}
	var b []byte
	for c.n == 0 && !c.gap {
		select {
		case <-sub.Ready():
			var err error
			if b, err = sub.Next(r.Context(), c, b, pageBytes); err != nil && c.n == 0 && !c.gap {
				upToDate() // the hub ended the subscription, or the client left
				return
			}
			continue
		case <-closing:
		case <-tick.C:
		case <-timeout.C:
			upToDate()
			return
		case <-r.Context().Done():
			upToDate()
			return
		case <-p.g.Ending().Done():
			upToDate()
			return
		}
		if !p.reread(r, tenant, name, info) {
			p.g.WriteError(w, refusal.New(refusal.NotFound, "the stream was deleted"))
			return
		}
		if info.Config.Closed && info.Head <= after {
			streamHeaders(h, info, after)
			h.Set("Stream-Up-To-Date", "true")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		closing = p.closing.wait(tenant, name)
	}
	if c.gap && c.n == 0 {
		p.g.WriteError(w, refusal.New(refusal.Gone, "retention removed the events after this offset"))
		return
	}
	now, ok, err := p.g.Log().Stream(r.Context(), tenant, name)
	if err == nil && ok {
		*info = now
	}
	streamHeaders(h, info, c.last)
	if len(sub.Ready()) == 0 {
		h.Set("Stream-Up-To-Date", "true")
	}
	h.Set("Stream-Cursor", cursor(r, time.Now()))
	p.cacheable(h, at)
	out := c.wrap(b)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	w.Write(out) //nolint:errcheck // the client may be gone
}

// sse streams the events after after as the protocol's data and control
// events, until the stream closes, the client leaves, the server ends
// its streams, or the SSE life is over (the client then reconnects).
func (p *Protocol) sse(w http.ResponseWriter, r *http.Request, info *backlog.StreamInfo, access httpapi.Access, tenant, name string, after int64, snapshot []byte) {
	closing := p.closing.wait(tenant, name)
	var sub *hub.Subscription
	if !info.Config.Closed || after < info.Head {
		var done func()
		var ok bool
		if sub, done, ok = p.watch(w, r, access, name, after); !ok {
			return
		}
		defer done()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	encode := frameText
	switch {
	case jsonMode(info.Config.ContentType):
		encode = frameJSON
	case !textual(info.Config.ContentType):
		h.Set("Stream-Sse-Data-Encoding", "base64")
		encode = frameBase64
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	out := &sseOut{w: w, rc: rc, timeout: p.g.WriteTimeout()}
	position := after
	control := func(upToDate bool) error {
		closed := info.Config.Closed && position >= info.Head
		return out.control(position, closed, upToDate, r)
	}
	if sub == nil {
		if snapshot != nil {
			out.data(encode, snapshot)
		}
		control(true) //nolint:errcheck // the stream ends either way
		return
	}
	if snapshot != nil {
		out.data(encode, snapshot)
	}
	if position >= sub.Head() || snapshot != nil {
		if err := control(position >= sub.Head()); err != nil {
			return
		}
	}
	life := time.NewTimer(p.cfg.SSELife)
	defer life.Stop()
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	ping := time.NewTicker(p.g.Heartbeat())
	defer ping.Stop()
	c := &body{json: jsonMode(info.Config.ContentType)}
	var b []byte
	for {
		select {
		case <-sub.Ready():
			var err error
			*c = body{json: c.json}
			b, err = sub.Next(r.Context(), c, b[:0], frameBytes)
			if c.n > 0 {
				position = c.last
				out.data(encode, b)
				if werr := control(len(sub.Ready()) == 0 || c.gap); werr != nil {
					return
				}
			}
			if err != nil || c.gap || (info.Config.Closed && position >= info.Head) {
				return // ended by the hub, or retention: the client reconnects from its offset
			}
			continue
		case <-closing:
			closing = p.closing.wait(tenant, name)
		case <-tick.C:
		case <-ping.C:
			if out.write([]byte(": ping\n\n")) != nil {
				return
			}
			continue
		case <-life.C:
			return
		case <-r.Context().Done():
			return
		case <-p.g.Ending().Done():
			return
		}
		if !p.reread(r, tenant, name, info) {
			return
		}
		if info.Config.Closed && position >= info.Head {
			control(true) //nolint:errcheck // the stream ends either way
			return
		}
	}
}

// reread reads a live read's stream again into info, after a wake or
// the recheck tick, and reports false if it is gone (deleted, expired,
// or deleted and created again by the same name).
func (p *Protocol) reread(r *http.Request, tenant, name string, info *backlog.StreamInfo) bool {
	now, ok, err := p.g.Log().Stream(r.Context(), tenant, name)
	if err != nil || !ok || now.Deleted || now.TopicID != info.TopicID || now.Start != info.Start || now.Expired(time.Now()) {
		return false
	}
	*info = now
	return true
}

// sseOut writes SSE frames whole, each under the write timeout.
type sseOut struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
}

func (o *sseOut) write(b []byte) error {
	if o.timeout > 0 {
		o.rc.SetWriteDeadline(time.Now().Add(o.timeout)) //nolint:errcheck // a writer without deadlines writes without
	}
	if _, err := o.w.Write(b); err != nil {
		return err
	}
	return o.rc.Flush()
}

// data buffers a data event; the control event that follows it goes in
// the same write, so that a reader never sees one without the other.
func (o *sseOut) data(encode func([]byte, []byte) []byte, payload []byte) {
	o.buf = append(encode(append(o.buf[:0], "event: data\n"...), payload), '\n')
}

// control writes a control event, after the data event buffered if any.
func (o *sseOut) control(position int64, closed, upToDate bool, r *http.Request) error {
	b := append(o.buf, `event: control`+"\n"+`data:{"streamNextOffset":"`...)
	b = append(b, formatOffset(position)...)
	b = append(b, '"')
	if closed {
		b = append(b, `,"streamClosed":true,"upToDate":true`...)
	} else {
		b = append(b, `,"streamCursor":"`...)
		b = append(b, cursor(r, time.Now())...)
		b = append(b, '"')
		if upToDate {
			b = append(b, `,"upToDate":true`...)
		}
	}
	o.buf = append(b, "}\n\n"...)
	err := o.write(o.buf)
	o.buf = o.buf[:0]
	return err
}

// frameJSON is a data event of JSON messages, as one array.
func frameJSON(b, payload []byte) []byte {
	b = append(b, "data:["...)
	b = append(b, payload...)
	return append(b, "]\n"...)
}

// frameText is a data event of text, a data line per line of it.
func frameText(b, payload []byte) []byte {
	start := 0
	for i := 0; i <= len(payload); i++ {
		if i == len(payload) || payload[i] == '\n' || payload[i] == '\r' {
			b = dataLine(b, payload[start:i])
			if i < len(payload) && payload[i] == '\r' && i+1 < len(payload) && payload[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	return b
}

// dataLine is one data line. The field's value follows "data:" with no
// space, unless it starts with one: a reader drops the first space.
func dataLine(b, line []byte) []byte {
	b = append(b, "data:"...)
	if len(line) > 0 && line[0] == ' ' {
		b = append(b, ' ')
	}
	b = append(b, line...)
	return append(b, '\n')
}

// frameBase64 is a data event of bytes in base64.
func frameBase64(b, payload []byte) []byte {
	b = append(b, "data:"...)
	b = base64.StdEncoding.AppendEncode(b, payload)
	return append(b, '\n')
}

// maxSnapshot bounds the state a snapshot read holds while it answers:
// the latest value of every key of a keyed stream.
const maxSnapshot = 8 << 20

// snapshotBuffer takes a state as the log writes it, up to maxSnapshot,
// its bytes (twice: the state and its values) from the read budget.
type snapshotBuffer struct {
	bytes.Buffer
	hold *limits.Hold
}

// Expect refuses a state larger than maxSnapshot, or than the read
// budget has room for, before it is read.
func (b *snapshotBuffer) Expect(n int64) error {
	if n > maxSnapshot {
		return refusal.New(refusal.TooLarge, "the stream's state is over %d bytes: read it from an offset instead", maxSnapshot)
	}
	return b.hold.Try(2 * n)
}

// refuse answers a budget's refusal, or an error of the log.
func (p *Protocol) refuse(w http.ResponseWriter, err error) {
	var refused *refusal.Error
	if errors.As(err, &refused) {
		p.g.WriteError(w, refused)
		return
	}
	p.g.Logger().Error("read stream", "err", err)
	p.g.WriteError(w, refusal.New(refusal.Unavailable, "the stream could not be read"))
}

// snapshotValues turns {"seq":S,"state":{"k":v,...}} into the messages
// v,... in key order, as a JSON array's inside.
func snapshotValues(state []byte) ([]byte, error) {
	var s struct {
		State json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(state, &s); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(s.State))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var out []byte
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if len(out) > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return out, nil
}

// fromSnapshot answers a read from the start of a keyed JSON stream with
// ?snapshot=1: the latest value of each key (in key order) as of a
// position, then, over SSE, everything after it live; a page or a
// long-poll answers the snapshot with that position as its
// Stream-Next-Offset, from which the client reads on.
func (p *Protocol) fromSnapshot(w http.ResponseWriter, r *http.Request, info *backlog.StreamInfo, access httpapi.Access, tenant, name string, live bool) {
	buf := snapshotBuffer{hold: p.g.Hold(tenant)}
	defer buf.hold.Release()
	seq, err := p.g.Log().State(r.Context(), tenant, name, &buf)
	var values []byte
	if err == nil {
		values, err = snapshotValues(buf.Bytes())
	}
	var refused *refusal.Error
	switch {
	case errors.As(err, &refused):
		p.g.WriteError(w, refused)
		return
	case err != nil:
		p.g.Logger().Error("read stream state", "tenant", tenant, "stream", name, "err", err)
		p.g.WriteError(w, refusal.New(refusal.Unavailable, "the stream could not be read"))
		return
	}
	if values == nil {
		values = []byte{}
	}
	if live {
		p.sse(w, r, info, access, tenant, name, seq, values)
		return
	}
	h := w.Header()
	streamHeaders(h, info, seq)
	if seq >= info.Head {
		h.Set("Stream-Up-To-Date", "true")
	}
	h.Set("Stream-Cursor", cursor(r, time.Now()))
	h.Set("Cache-Control", "no-store")
	out := append(append([]byte{'['}, values...), ']')
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	w.Write(out) //nolint:errcheck // the client may be gone
}
