// Package durable serves the Durable Streams protocol at
// /v1/tenants/{tenant}/streams/{name} and /v1/stream/{name} over Edgehub's
// hubs: a stream is a topic of a tenant, its offsets are the topic's
// sequence numbers (so a Durable Streams reader and a native watcher see
// the same events in the same order), and every check the protocol makes
// of a write (closure, content type, Stream-Seq, producer fencing) runs in
// the transaction that commits it (backlog.StreamOp). Credentials, limits,
// budgets and the error shape are the native API's, through httpapi.Gate.
package durable

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
)

// Config is the protocol's part of the command line (server.Config
// embeds it).
type Config struct {
	// Tenant owns the streams in dev mode, and those of requests that
	// name no tenant otherwise (a webhook without Edgehub-Tenant).
	Tenant string `name:"streams-tenant" default:"streams" env:"EDGEHUB_STREAMS_TENANT" help:"Tenant of the Durable Streams at /v1/stream/{name} in dev mode (with credentials: the token's tenant)."`
	// LongPoll is how long a long-poll waits for data before its 204.
	LongPoll time.Duration `name:"streams-long-poll" default:"20s" env:"EDGEHUB_STREAMS_LONG_POLL" help:"How long a Durable Streams long-poll waits for data."`
	// SSELife is how long an SSE read stays open before the server
	// closes it, so that clients reconnect (the protocol's collapsing).
	SSELife time.Duration `name:"streams-sse-life" default:"60s" env:"EDGEHUB_STREAMS_SSE_LIFE" help:"How long a Durable Streams SSE read stays open before the client is asked to reconnect."`
}

// Protocol is the Durable Streams protocol, mounted with httpapi.Deps.
type Protocol struct {
	cfg     Config
	g       *httpapi.Gate
	closing closers
}

// New is the protocol with its configuration.
func New(cfg Config) *Protocol {
	return &Protocol{cfg: cfg, closing: closers{waiting: map[string]chan struct{}{}}}
}

// Path is where the streams of the request's tenant are served: its
// token's, a webhook's Edgehub-Tenant, or --streams-tenant.
const Path = "/v1/stream/"

// tenantPath and tenantStreams frame TenantPath's form of a stream's
// path: /v1/tenants/{tenant}/streams/{name}.
const (
	tenantPath    = "/v1/tenants/"
	tenantStreams = "/streams/"
)

// TenantPath is where the streams of the tenant the path names are
// served, so that any token the tenant accepts works there, a registered
// issuer's (which names no tenant) among them.
const TenantPath = tenantPath + ":tenant" + tenantStreams

// Mount registers the protocol's routes, at Path and at TenantPath.
func (p *Protocol) Mount(g *httpapi.Gate) {
	p.g = g
	for _, at := range []struct {
		path  string
		place func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (place, bool)
	}{{Path + ":name", p.fromRequest}, {TenantPath + ":name", p.fromPath}} {
		g.Handle(http.MethodPut, at.path, p.stream(at.place, p.create))
		g.Handle(http.MethodPost, at.path, p.stream(at.place, p.append))
		g.Handle(http.MethodGet, at.path, p.stream(at.place, p.read))
		g.Handle(http.MethodHead, at.path, p.stream(at.place, p.head))
		g.Handle(http.MethodDelete, at.path, p.stream(at.place, p.delete))
	}
}

// place is where a request found its stream: the stream's tenant and
// name, and whether the tenant came from the path (TenantPath) or from
// the request (Path).
type place struct {
	tenant, name string
	inPath       bool
}

// path is the stream's path in the form of the route it was reached by.
func (at place) path() string {
	if at.inPath {
		return tenantPath + at.tenant + tenantStreams + at.name
	}
	return Path + at.name
}

type streamHandler func(w http.ResponseWriter, r *http.Request, at place)

// stream checks the stream's name, then find finds its place (and
// answers if it cannot), before h runs.
func (p *Protocol) stream(find func(http.ResponseWriter, *http.Request, httprouter.Params) (place, bool), h streamHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		if !names.Valid(ps.ByName("name")) {
			p.g.WriteError(w, refusal.New(refusal.InvalidName,
				"a stream's name must be 1 to %d of A-Z a-z 0-9 . _ : ~ - and not start with '.'", names.MaxName))
			return
		}
		at, ok := find(w, r, ps)
		if !ok {
			return
		}
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Cross-Origin-Resource-Policy", "cross-origin")
		h(w, r, at)
	}
}

// fromPath is the place of a request on TenantPath: the path's tenant,
// which must be a tenant's name.
func (p *Protocol) fromPath(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) (place, bool) {
	at := place{tenant: ps.ByName("tenant"), name: ps.ByName("name"), inPath: true}
	if !names.Valid(at.tenant) {
		p.g.WriteError(w, refusal.New(refusal.InvalidName,
			"tenant must be 1 to %d of A-Z a-z 0-9 . _ : ~ - and not start with '.'", names.MaxName))
		return at, false
	}
	return at, true
}

// fromRequest is the place of a request on Path: the tenant its
// credentials name (Gate.TenantOf).
func (p *Protocol) fromRequest(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (place, bool) {
	at := place{tenant: p.g.TenantOf(r, p.cfg.Tenant), name: ps.ByName("name")}
	if !names.Valid(at.tenant) {
		p.g.WriteError(w, refusal.New(refusal.InvalidName, "Edgehub-Tenant must be a tenant's name"))
		return at, false
	}
	return at, true
}

// Offsets are the topic's sequence numbers, zero-padded to 16 digits so
// that they sort as they are ordered, then "_" and 16 zeros: the shape of
// the reference servers' offsets (read sequence, byte offset), which
// clients and the conformance suite write by hand as the start of a
// stream. -1 and now are the protocol's sentinels.
const (
	seqWidth    = 16
	offsetTail  = "_0000000000000000"
	offsetWidth = seqWidth + len(offsetTail)
)

func formatOffset(seq int64) string {
	s := strconv.FormatInt(seq, 10)
	return strings.Repeat("0", max(0, seqWidth-len(s))) + s + offsetTail
}

// offset is a parsed offset: a position, the stream's start, or its tail.
type offset struct {
	seq        int64
	start, now bool
}

func parseOffset(v string) (offset, bool) {
	switch v {
	case "-1":
		return offset{start: true}, true
	case "now":
		return offset{now: true}, true
	}
	digits, tail, ok := strings.Cut(v, "_")
	if !ok || len(digits) != seqWidth || "_"+tail != offsetTail {
		return offset{}, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return offset{}, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return offset{seq: n}, err == nil
}

// cursorEpoch and cursorInterval are the protocol's defaults for the
// cursors of live reads, which let caches collapse long-polls.
var cursorEpoch = time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)

const cursorInterval = 20 * time.Second

// cursor is the interval number now, or past the client's if it has
// caught up with it (with jitter, so that cached answers expire).
func cursor(r *http.Request, now time.Time) string {
	n := int64(now.Sub(cursorEpoch) / cursorInterval)
	if c, err := strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64); err == nil && c >= n {
		n = c + 1 + rand.Int64N(int64(time.Hour/cursorInterval))
	}
	return strconv.FormatInt(n, 10)
}

// jsonMode says a content type is application/json: messages keep their
// boundaries and reads answer JSON arrays.
func jsonMode(contentType string) bool {
	t, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(t), "application/json")
}

// textual says SSE may carry the stream's data as it is; other types go
// in base64.
func textual(contentType string) bool {
	t, _, _ := strings.Cut(contentType, ";")
	t = strings.ToLower(strings.TrimSpace(t))
	return strings.HasPrefix(t, "text/") || t == "application/json"
}

// streamHeaders are the headers of a stream's metadata, on HEAD, reads
// and writes.
func streamHeaders(h http.Header, info *backlog.StreamInfo, next int64) {
	h.Set("Content-Type", info.Config.ContentType)
	h.Set("Stream-Next-Offset", formatOffset(next))
	if c := info.Config; c.ExpiresAt > 0 {
		h.Set("Stream-Expires-At", time.Unix(0, c.ExpiresAt).UTC().Format(time.RFC3339Nano))
	} else if c.TTL >= 0 {
		h.Set("Stream-TTL", strconv.FormatInt(c.TTL, 10))
	}
	if info.Config.Closed && next >= info.Head {
		h.Set("Stream-Closed", "true")
	}
}

// closers wake the live reads of a stream when it is closed or deleted
// by this process; readers also look at the stream's row now and then,
// for another process's.
type closers struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

// wait is the channel closed at the stream's next closure or deletion.
func (c *closers) wait(tenant, name string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tenant + "/" + name
	ch, ok := c.waiting[k]
	if !ok {
		ch = make(chan struct{})
		c.waiting[k] = ch
	}
	return ch
}

// wake wakes the stream's readers.
func (c *closers) wake(tenant, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tenant + "/" + name
	if ch, ok := c.waiting[k]; ok {
		close(ch)
		delete(c.waiting, k)
	}
}

// truthy is the protocol's reading of Stream-Closed: exactly "true", in
// any case; anything else is as if the header were absent.
func truthy(v string) bool { return strings.EqualFold(v, "true") }
