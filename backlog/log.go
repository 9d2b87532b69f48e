// Package backlog is the durable event log behind every topic: it numbers
// events in the transaction that commits them, reads them back after any
// position, and remembers idempotency keys. Log is an interface so that a
// shared log (Postgres) can stand beside the embedded SQLite one.
package backlog

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/edgehub/edgehub/event"
)

// ErrKeyReused answers a request whose idempotency key was used before on
// the topic for a different request; nothing is appended.
var ErrKeyReused = errors.New("idempotency key reused with a different request")

// ErrQuota answers a request that would take its tenant past a quota
// (stored bytes, topics) or its topic's state past its cap; nothing is
// appended. It is wrapped with which one.
var ErrQuota = errors.New("quota exceeded")

// Publish is one publish request: one event, or an NDJSON batch committed as
// a unit. Events carry type, key, op and data; the log assigns Seq and Time.
type Publish struct {
	Tenant, Topic string
	Events        []event.Event
	// Batch records whether the request was NDJSON, for the answer that a
	// repeat of it gets.
	Batch bool
	// RequireTenant refuses the request (Result.Err = ErrNoTenant) unless
	// the tenant exists when it commits with the Generation the request
	// was authorized against: a tenant deleted (and perhaps created again)
	// or rotated after the check gets no data from it.
	RequireTenant bool
	Generation    int64
	// IdemKey, when set, makes the request idempotent on its topic; IdemHash
	// tells a true repeat from a different request under the same key.
	// TenantWideKey scopes the key to the tenant instead (a webhook-id,
	// whose signature does not cover the topic): the same key on another
	// topic is ErrKeyReused.
	IdemKey       string
	IdemHash      []byte
	TenantWideKey bool
	// Stream, if set, makes the request a Durable Streams operation,
	// checked and applied in the same transaction (streams.go).
	Stream *StreamOp
	// Presence, if set, adds or removes a subscriber's presence rows in
	// the transaction that appends their announcement (presence.go).
	Presence *PresenceOp
}

// Result is what one Publish came to. A duplicate carries the original
// range and no events; Err is ErrKeyReused, ErrNoTenant, ErrQuota or nil.
type Result struct {
	First, Last int64
	// Pos is the tenant position of the first event: a duplicate's is the
	// original's, which its key remembers (0 for a key remembered before
	// positions were).
	Pos       int64
	Batch     bool
	Duplicate bool
	Events    []event.Event
	Err       error
	// Stream is a StreamOp's outcome.
	Stream *StreamResult
}

// Page is a read after a position. Trimmed is the newest sequence number
// that retention removed: a reader at a position below it has lost
// Position+1..Trimmed and must be told.
type Page struct {
	Events  []event.Event
	Head    int64
	Trimmed int64
}

// StateWriter takes a state as State encodes it: Expect is told about how
// many bytes it will write before any key is read, and Write is given
// them; either may refuse (a read budget), which ends the read.
type StateWriter interface {
	io.Writer
	Expect(n int64) error
}

// Log is the durable, per-topic numbered event log.
type Log interface {
	// CommitBatch commits every request in one transaction, numbering each
	// topic's events after its head inside that transaction, so a failed
	// commit or a duplicate consumes no number. It returns one Result per
	// request, or an error for the whole batch (nothing committed).
	CommitBatch(ctx context.Context, reqs []*Publish) ([]Result, error)
	// Read returns up to limit events with seq > after, in order, with the
	// head and trim point read in the same transaction. It stops before the
	// event that would take the page's data past maxBytes, though a page
	// always holds one event if there is one: the caller, not the topic,
	// decides how much a page may hold. So a page may stop short of limit:
	// only an empty page, or a page that reaches the head, says there is
	// no more.
	Read(ctx context.Context, tenant, topic string, after int64, limit, maxBytes int) (Page, error)
	// ReadTenant reads the tenant's order after a position, the events
	// sel selects, with the gaps owed (Store.ReadTenant).
	ReadTenant(ctx context.Context, tenant string, after int64, sel TenantSelection, limit, maxBytes int) (TenantPage, error)
	// UpdatePosition finds the tenant position of the earliest update that
	// its publisher gave the id (Store.UpdatePosition).
	UpdatePosition(ctx context.Context, tenant, id string) (pos int64, found bool, err error)
	// Topics lists the tenant's topics by name (Store.Topics).
	Topics(ctx context.Context, tenant, after string, match func(topic string) bool, limit int) ([]TopicInfo, string, bool, error)
	// State writes the topic's state to w as the state answer's body and
	// the snapshot frame's data, {"seq":S,"state":{"<key>":<data>,...}},
	// and returns S, the head it folds, read in one transaction with the
	// keys. Before it reads the keys it tells w what the answer will take,
	// so that w can refuse a state it has no room for; w's error ends the
	// read, wrapped.
	State(ctx context.Context, tenant, topic string, w StateWriter) (seq int64, err error)
	// Stream reads the Durable Streams stream that tenant/name is, if it
	// is one, with its topic's head and trim point.
	Stream(ctx context.Context, tenant, name string) (StreamInfo, bool, error)
	// Head is the sequence number of the topic's newest event, 0 for none.
	Head(ctx context.Context, tenant, topic string) (int64, error)
	// TenantHead is the position of the tenant's newest event, 0 for none.
	TenantHead(ctx context.Context, tenant string) (int64, error)
	// Usage is what the tenant holds against its quotas.
	Usage(ctx context.Context, tenant string) (Usage, error)
	// Presence reads the tenant's presence rows under an id prefix with
	// its head, in one snapshot (Store.Presence).
	Presence(ctx context.Context, tenant, prefix string, limit int) (PresencePage, error)
	// RenewLease and DropLease keep and give up a process's lease on its
	// presence rows; Orphans lists the rows of owners without one
	// (presence.go).
	RenewLease(ctx context.Context, owner string, until time.Time) error
	DropLease(ctx context.Context, owner string) error
	Orphans(ctx context.Context, now time.Time, limit int) ([]Orphan, error)
	// Ping tells whether the log is open and answering.
	Ping(ctx context.Context) error
	Close() error
}
