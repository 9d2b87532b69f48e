package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/edgehub/edgehub/sse"
)

// Event is one committed event as the server hands it out: its envelope.
// Key and Op are set only on keyed events; a delete's Data is null.
// Topic and Pos, the event's position in its tenant's order, are set on
// a tenant stream's events (WatchTenant). Encoded with encoding/json it
// is the same envelope again.
type Event struct {
	Topic string          `json:"topic,omitempty"`
	Pos   int64           `json:"pos,omitempty"`
	Seq   int64           `json:"seq"`
	Type  string          `json:"type"`
	Time  time.Time       `json:"time"`
	Key   string          `json:"key,omitempty"`
	Op    string          `json:"op,omitempty"`
	Data  json.RawMessage `json:"data"`
}

// Hello opens each stream: the topic's head when the stream registered
// and the position it starts after.
type Hello struct {
	Head     int64 `json:"head"`
	Position int64 `json:"position"`
}

// Snapshot is a topic's state as of sequence number Seq: the latest data
// of every key not deleted since. Events after Seq follow it.
type Snapshot struct {
	Seq   int64                      `json:"seq"`
	State map[string]json.RawMessage `json:"state"`
}

// Gap says that events From..To, which the stream owed, were removed by
// retention before they could be sent; delivery goes on with To+1. On a
// tenant stream, Topic names the topic whose sequence numbers they are,
// and From is 0: the server says only where the topic goes on.
type Gap struct {
	Topic string `json:"topic,omitempty"`
	From  int64  `json:"from"`
	To    int64  `json:"to"`
}

// Selection picks a tenant stream's topics: exact names, and patterns in
// which '*' matches any run of characters; with neither, every topic the
// token may subscribe to.
type Selection struct {
	Topics, Patterns []string
}

// Retry tells of a reconnect about to happen: why the stream ended or was
// refused, how long Watch waits first, and the position it resumes after
// ("" for none: a live stream that never opened, or a snapshot stream
// still owed its snapshot).
type Retry struct {
	Err         error
	Delay       time.Duration
	LastEventID string
}

// WatchOptions say where a watch starts and what it is told besides the
// events. Every callback runs on the goroutine of the loop over Watch,
// between two events, in the order of the stream.
type WatchOptions struct {
	// After starts the watch after this sequence number (0: the whole
	// retained backlog); nil starts it live, from the head at the moment
	// the stream registers.
	After *int64
	// Snapshot starts a watch that has no After with the topic's state
	// (OnSnapshot), then every event after it.
	Snapshot bool
	// OnHello hears each stream open (once per connection).
	OnHello func(Hello)
	// OnSnapshot receives the snapshot of a Snapshot watch.
	OnSnapshot func(Snapshot)
	// OnGap hears of events that retention removed before the watch
	// could get them.
	OnGap func(Gap)
	// OnRetry hears of each reconnect before Watch waits for it.
	OnRetry func(Retry)
}

// defaultRetry is the wait before a reconnect until the server has sent
// its retry field, the value it sends by default.
const defaultRetry = 2 * time.Second

// Watch streams the events of tenant/topic, in order, each once, until
// ctx ends, the loop over it stops, or the server refuses for good (a bad
// token, a tenant that does not exist): the last element is then that
// error, with a zero Event. Breaking out of the loop closes the stream.
//
// A stream that ends (the network failed, the server restarted or ended
// it) is resumed with Last-Event-ID set to the last id seen, after the
// server's retry delay, doubled on each failed attempt; a temporary
// refusal (429, 503) is retried after its Retry-After. Each delay has up
// to 50% jitter. Reconnects are invisible to the loop: it sees every
// event after its start exactly once.
//
// The hello frame's id is the stream's position, so a stream that drops
// before its first event resumes where it started. A snapshot stream is
// the exception: until its snapshot frame has arrived, it resumes with no
// position, so that the server sends the snapshot again; resuming from
// hello's position would skip the state for good.
func (c *Client) Watch(ctx context.Context, tenant, topic string, o WatchOptions) iter.Seq2[Event, error] {
	return c.watch(ctx, &watch{c: c, tenant: tenant, topic: topic, o: o,
		needSnapshot: o.Snapshot && o.After == nil, b: backoff{base: defaultRetry}})
}

// WatchTenant is Watch over several topics of tenant at once, in the
// tenant's order: one stream whose positions (Event.Pos, Hello, After,
// Last-Event-ID) are the tenant's, whose events carry their Topic, and
// whose gaps are per topic. It has no snapshot: o.Snapshot is an error.
func (c *Client) WatchTenant(ctx context.Context, tenant string, sel Selection, o WatchOptions) iter.Seq2[Event, error] {
	if o.Snapshot {
		return func(yield func(Event, error) bool) {
			yield(Event{}, permanent{fmt.Errorf("watch tenant %s: a tenant stream has no snapshot", tenant)})
		}
	}
	q := url.Values{}
	for _, t := range sel.Topics {
		q.Add("topic", t)
	}
	for _, p := range sel.Patterns {
		q.Add("pattern", p)
	}
	return c.watch(ctx, &watch{c: c, tenant: tenant, sel: q, o: o, b: backoff{base: defaultRetry}})
}

// watch runs w's connections, one after another, until one ends for good.
func (c *Client) watch(ctx context.Context, w *watch) iter.Seq2[Event, error] {
	o := w.o
	return func(yield func(Event, error) bool) {
		for {
			err := w.stream(ctx, yield)
			if errors.Is(err, errStopped) {
				return
			}
			if ctx.Err() != nil {
				yield(Event{}, ctx.Err())
				return
			}
			var apiErr *APIError
			var fatal permanent
			if errors.As(err, &apiErr) && !apiErr.Temporary() || errors.As(err, &fatal) {
				yield(Event{}, err)
				return
			}
			var after time.Duration
			if apiErr != nil {
				after = apiErr.RetryAfter
			}
			delay := w.b.next(after)
			if o.OnRetry != nil {
				o.OnRetry(Retry{Err: err, Delay: delay, LastEventID: w.lastID})
			}
			if err := sleep(ctx, delay); err != nil {
				yield(Event{}, err)
				return
			}
		}
	}
}

// watch is one Watch's state across its connections.
type watch struct {
	c             *Client
	tenant, topic string
	// sel is a tenant stream's selectors (nil for a topic's watch).
	sel          url.Values
	o            WatchOptions
	lastID       string
	needSnapshot bool
	b            backoff
}

// errStopped is the loop's break, which ends Watch quietly.
var errStopped = errors.New("stopped by the caller")

// permanent marks an error that reconnecting would not mend: a URL that
// makes no request, a frame that no Edgehub server sends.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// stream runs one connection: it opens the stream and yields its events
// until the stream ends, and says why it ended.
func (w *watch) stream(ctx context.Context, yield func(Event, error) bool) error {
	q := url.Values{}
	for k, v := range w.sel {
		q[k] = v
	}
	if w.o.After != nil {
		q.Set("after", strconv.FormatInt(*w.o.After, 10))
	}
	if w.o.Snapshot {
		q.Set("snapshot", "1")
	}
	u := w.c.topicURL(w.tenant, w.topic, "watch", q)
	if w.sel != nil {
		u = w.c.url("/v1/tenants/"+url.PathEscape(w.tenant)+"/watch", q)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return permanent{fmt.Errorf("watch %s: %w", w.name(), err)}
	}
	req.Header.Set("Accept", "text/event-stream")
	if w.lastID != "" {
		req.Header.Set("Last-Event-ID", w.lastID)
	}
	if w.c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+w.c.Token)
	}
	resp, err := w.c.http().Do(req)
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.name(), err)
	}
	defer resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return decodeError(resp, b, w.c.Token, false)
	}
	d := sse.NewDecoder(resp.Body)
	for {
		f, err := d.Next()
		if d.Retry > 0 {
			w.b.base = time.Duration(d.Retry) * time.Millisecond
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the server ended the stream")
			}
			return fmt.Errorf("read the stream: %w", err)
		}
		if err := w.frame(f, yield); err != nil {
			return err
		}
	}
}

// name is what the watch watches, for its errors.
func (w *watch) name() string {
	if w.sel != nil {
		return "tenant " + w.tenant
	}
	return w.tenant + "/" + w.topic
}

// frame hands one frame to the caller and keeps the position the next
// connection resumes from.
func (w *watch) frame(f sse.Frame, yield func(Event, error) bool) error {
	if f.Event != "hello" {
		w.b.failures = 0 // the stream delivers: back off afresh next time
	}
	switch f.Event {
	case "hello":
		if !w.needSnapshot && f.IDSet {
			w.lastID = f.ID
		}
		return deliver(f, w.o.OnHello)
	case "snapshot":
		w.needSnapshot, w.lastID = false, f.ID
		return deliver(f, w.o.OnSnapshot)
	case "gap":
		w.lastID = f.ID
		return deliver(f, w.o.OnGap)
	}
	var e Event
	if err := decodeFrame(f, &e); err != nil {
		return err
	}
	w.lastID = f.ID
	if !yield(e, nil) {
		return errStopped
	}
	return nil
}

// deliver decodes a frame of the hub's own into its type and hands it to
// the callback, if the caller set one.
func deliver[T any](f sse.Frame, to func(T)) error {
	var v T
	if err := decodeFrame(f, &v); err != nil {
		return err
	}
	if to != nil {
		to(v)
	}
	return nil
}

func decodeFrame(f sse.Frame, v any) error {
	if err := json.Unmarshal([]byte(f.Data), v); err != nil {
		return permanent{fmt.Errorf("not an Edgehub stream: %s frame %.200q: %w", f.Event, f.Data, err)}
	}
	return nil
}
