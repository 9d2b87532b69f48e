package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/edgehub/edgehub/client"
)

// conn is how the topic commands reach the hub.
type conn struct {
	Server serverURL `default:"http://127.0.0.1:8080" env:"EDGEHUB_SERVER" help:"Base URL of the hub."`
	Token  string    `env:"EDGEHUB_TOKEN" placeholder:"TOKEN" help:"Bearer token (none in dev mode)."`
	CACert caCert    `name:"ca-cert" env:"EDGEHUB_CA_CERT" placeholder:"FILE" help:"PEM certificates to trust besides the system's (a private CA, a self-signed hub)."`
}

// cliRetries is how many times a command retries a 429 or 503 (after the
// server's Retry-After) and, for publish and the reads, a request that got
// no answer (a server restarting, a cut connection), before it exits with
// the failure: backing off from half a second, doubling up to 30 s, eight
// retries wait about a minute and a half, more than a restart takes.
const cliRetries = 8

func (c *conn) client() *client.Client {
	return &client.Client{Server: string(c.Server), Token: c.Token, Retries: cliRetries, HTTP: c.CACert.httpClient()}
}

// signalled is the context of a client command: SIGINT or SIGTERM ends it.
func signalled() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// target is a topic command's TENANT/TOPIC, split when the command line
// is parsed, so that a malformed one is a usage error.
type target struct{ tenant, topic string }

func (t *target) UnmarshalText(b []byte) error {
	tenant, topic, ok := strings.Cut(string(b), "/")
	if !ok || tenant == "" || topic == "" {
		return fmt.Errorf("%q is not TENANT/TOPIC", b)
	}
	t.tenant, t.topic = tenant, topic
	return nil
}

func (t target) String() string { return t.tenant + "/" + t.topic }

// printJSON writes v as one line of JSON to stdout.
func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	if _, err := fmt.Println(string(b)); err != nil {
		return fmt.Errorf("write to stdout: %w", err)
	}
	return nil
}

type publishCmd struct {
	conn
	Target         target `arg:"" help:"TENANT/TOPIC."`
	Body           string `arg:"" optional:"" help:"The event's JSON, or - to read stdin (NDJSON there is a batch)."`
	Type           string `placeholder:"TYPE" help:"Event type (default message)."`
	Key            string `placeholder:"KEY" help:"Key of a keyed (state) event."`
	Op             string `placeholder:"OP" enum:"upsert,delete," default:"" help:"upsert or delete, with --key."`
	IdempotencyKey string `placeholder:"KEY" help:"Idempotency key: a repeat with the same key appends nothing (default: a random one, which the command's own retries reuse)."`
}

// Validate refuses a publish with no event whose stdin is a terminal: it
// would wait for one typed there. With no event and stdin a pipe or a
// file, the event is read from stdin, as with -.
func (p *publishCmd) Validate() error {
	if p.Body == "" && term.IsTerminal(int(os.Stdin.Fd())) {
		return errors.New("no event: give its JSON as an argument, or pipe it in (- reads stdin)")
	}
	return nil
}

func (p *publishCmd) Run() error {
	tenant, topic := p.Target.tenant, p.Target.topic
	ctx, stop := signalled()
	defer stop()
	o := client.PublishOptions{Type: p.Type, Key: p.Key, Op: p.Op, IdempotencyKey: p.IdempotencyKey}
	body := []byte(p.Body)
	if p.Body == "-" || p.Body == "" {
		var err error
		if body, err = io.ReadAll(os.Stdin); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if lines := ndjsonLines(body); !json.Valid(body) && lines != nil {
			r, err := p.client().PublishBatch(ctx, tenant, topic, lines, o)
			if err != nil {
				return mayBeStored(err, r.IdempotencyKey)
			}
			return printJSON(r)
		}
	}
	r, err := p.client().Publish(ctx, tenant, topic, json.RawMessage(body), o)
	if err != nil {
		return mayBeStored(err, r.IdempotencyKey)
	}
	return printJSON(r)
}

// mayBeStored adds to a failed publish's error that the event may be
// stored all the same, and how to send it again without storing it twice:
// with the key its attempts carried. A 503, a lost answer or an interrupt
// leaves the outcome unknown; only a refusal of the request itself (a 4xx
// other than 429, which every attempt met) says that nothing was stored.
func mayBeStored(err error, key string) error {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Status/100 == 4 && apiErr.Status != http.StatusTooManyRequests {
		return err
	}
	return fmt.Errorf("%w (the event may be stored all the same: publish it again with --idempotency-key %s to store it once)", err, key)
}

// ndjsonLines is b's lines, each one JSON value, when b is NDJSON, and
// nil when it is not. Stdin that is one JSON value, on one line or
// spread over several, is one event; only several values make a batch.
func ndjsonLines(b []byte) []any {
	var lines []any
	for _, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil
		}
		lines = append(lines, json.RawMessage(line))
	}
	return lines
}

type watchCmd struct {
	conn
	Target   stream   `arg:"" help:"TENANT/TOPIC, or TENANT for several topics in one stream (--topic, --pattern; every topic with neither)."`
	Topic    []string `placeholder:"T" help:"A topic of a tenant stream (repeatable)."`
	Pattern  []string `placeholder:"P" help:"A pattern of a tenant stream's topics, '*' any run of characters (repeatable)."`
	After    *int64   `placeholder:"N" help:"Start after this sequence number, a tenant stream's after this tenant position (0: the whole backlog)."`
	Snapshot bool     `help:"Start with the topic's state (a topic's watch only)."`
	JSON     bool     `name:"json" help:"One JSON object a line on stdout, nothing else."`
}

// stream is a watch's target: TENANT/TOPIC, or TENANT for a tenant
// stream.
type stream struct{ tenant, topic string }

func (t *stream) UnmarshalText(b []byte) error {
	tenant, topic, slash := strings.Cut(string(b), "/")
	if tenant == "" || slash && topic == "" {
		return fmt.Errorf("%q is not TENANT/TOPIC or TENANT", b)
	}
	t.tenant, t.topic = tenant, topic
	return nil
}

// Validate refuses a negative --after, which names no position, and the
// flags of one kind of stream given to the other.
func (w *watchCmd) Validate() error {
	switch {
	case w.After != nil && *w.After < 0:
		return errNegativeAfter
	case w.Target.topic != "" && len(w.Topic)+len(w.Pattern) > 0:
		return errors.New("--topic and --pattern select a tenant stream's topics: watch TENANT --topic T, or TENANT/TOPIC alone")
	case w.Target.topic == "" && w.Snapshot:
		return errors.New("--snapshot is a topic's state: a tenant stream (TENANT without /TOPIC) has none")
	}
	return nil
}

// errNegativeAfter is the usage error of an --after below 0.
var errNegativeAfter = errors.New("--after is a sequence number: 0 (the whole backlog) or more")

func (w *watchCmd) Run() error {
	tenant, topic := w.Target.tenant, w.Target.topic
	name := tenant + "/" + topic
	if topic == "" {
		name = tenant
	}
	ctx, stop := signalled()
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	var failed error // a write to stdout that failed, which ends the watch
	write := func(line string) {
		if failed == nil {
			_, failed = out.WriteString(line + "\n")
		}
		if failed == nil {
			failed = out.Flush()
		}
	}
	// A replay to a file shows its progress up to the head of the first
	// hello; from there the watch is live and the bar is done.
	var bar *progress
	hellos := 0
	o := client.WatchOptions{After: w.After, Snapshot: w.Snapshot,
		OnHello: func(h client.Hello) {
			if hellos++; hellos == 1 && h.Head > h.Position {
				bar = newProgress(h.Position, h.Head, name)
			}
			notice("connected: head %d, position %d", h.Head, h.Position)
		},
		OnSnapshot: func(s client.Snapshot) {
			b, err := json.Marshal(s)
			if err != nil {
				failed = err
				return
			}
			if w.JSON {
				write(`{"snapshot":` + string(b) + `}`)
			} else {
				write("snapshot " + string(b))
			}
		},
		OnGap: func(g client.Gap) {
			if g.Topic != "" {
				notice("gap: events of %s up to %d were removed by retention", g.Topic, g.To)
				return
			}
			notice("gap: events %d..%d were removed by retention", g.From, g.To)
		},
		OnRetry: func(r client.Retry) {
			notice("%v; resuming after %q in %s", r.Err, r.LastEventID, r.Delay.Round(1e6))
		},
	}
	events := w.client().Watch(ctx, tenant, topic, o)
	if topic == "" {
		events = w.client().WatchTenant(ctx, tenant, client.Selection{Topics: w.Topic, Patterns: w.Pattern}, o)
	}
	for e, err := range events {
		if err != nil {
			bar.done()
			if ctx.Err() != nil {
				return nil // interrupted: the way a watch ends
			}
			return err
		}
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		at := e.Seq
		switch {
		case w.JSON:
			write(string(b))
		case topic == "":
			write(fmt.Sprintf("%d %s %d %s %s", e.Pos, e.Topic, e.Seq, e.Type, b))
		default:
			write(fmt.Sprintf("%d %s %s", e.Seq, e.Type, b))
		}
		if failed != nil {
			bar.done()
			return fmt.Errorf("write to stdout: %w", failed)
		}
		if topic == "" {
			at = e.Pos
		}
		if bar.at(at) {
			bar = nil
		}
	}
	return nil
}

// notice tells the person at the terminal, on stderr, what happens to the
// stream; stdout keeps only what was asked for.
func notice(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

type eventsCmd struct {
	conn
	Target target `arg:"" help:"TENANT/TOPIC."`
	After  int64  `placeholder:"N" help:"Start after this sequence number (0: the oldest retained)."`
	Limit  int    `placeholder:"N" help:"Events per request (0: the server's default, 100; it takes at most 1000)."`
	All    bool   `help:"Follow the pages up to the head, not only the first."`
}

// Validate refuses a negative --after or --limit.
func (e *eventsCmd) Validate() error {
	switch {
	case e.After < 0:
		return errNegativeAfter
	case e.Limit < 0:
		return errors.New("--limit is a number of events: 0 (the server's default) or more")
	}
	return nil
}

func (e *eventsCmd) Run() error {
	tenant, topic := e.Target.tenant, e.Target.topic
	ctx, stop := signalled()
	defer stop()
	if e.Limit < 0 {
		return errors.New("--limit must not be negative")
	}
	out := bufio.NewWriter(os.Stdout)
	var bar *progress
	for p, err := range e.client().Pages(ctx, tenant, topic, e.After, e.Limit) {
		if err != nil {
			bar.done()
			return errors.Join(err, out.Flush())
		}
		if p.Gap != nil {
			notice("gap: events %d..%d were removed by retention", p.Gap.From, p.Gap.To)
		}
		for _, ev := range p.Events {
			b, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("encode event %d: %w", ev.Seq, err)
			}
			if _, err := out.Write(append(b, '\n')); err != nil {
				return fmt.Errorf("write to stdout: %w", err)
			}
		}
		if !e.All {
			if !p.Last() {
				notice("more after %d (the head is %d): --after %d, or --all", p.NextAfter, p.Head, p.NextAfter)
			}
			break
		}
		if bar == nil {
			bar = newProgress(e.After, p.Head, tenant+"/"+topic)
		}
		bar.grow(p.Head)
		bar.at(p.NextAfter)
	}
	bar.done()
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write to stdout: %w", err)
	}
	return nil
}

type stateCmd struct {
	conn
	Target target `arg:"" help:"TENANT/TOPIC."`
}

func (s *stateCmd) Run() error {
	tenant, topic := s.Target.tenant, s.Target.topic
	ctx, stop := signalled()
	defer stop()
	st, err := s.client().State(ctx, tenant, topic)
	if err != nil {
		return err
	}
	return printJSON(st)
}

type topicsCmd struct {
	conn
	Tenant  string `arg:"" help:"The tenant's name."`
	Pattern string `placeholder:"PATTERN" help:"Only the topics it matches (* matches any run of characters)."`
	All     bool   `help:"Follow the pages to the last topic, not only the first."`
}

// Run prints one topic a line, {"topic", "head", "first", "streams"}.
func (t *topicsCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	c := t.client()
	return printPages("", t.All, func(after string) ([]client.Topic, string, error) {
		p, err := c.Topics(ctx, t.Tenant, t.Pattern, after, 0)
		return p.Topics, p.NextAfter, err
	})
}

// printPages prints a paged list one JSON line an item: the page after
// after, or with all every page, until one is empty or does not move on.
func printPages[T any](after string, all bool, page func(after string) ([]T, string, error)) error {
	out := bufio.NewWriter(os.Stdout)
	for {
		items, next, err := page(after)
		if err != nil {
			return err
		}
		for _, it := range items {
			b, err := json.Marshal(it)
			if err != nil {
				return err
			}
			out.Write(append(b, '\n')) //nolint:errcheck // the flush reports it
		}
		if !all || len(items) == 0 || next == after {
			break
		}
		after = next
	}
	return out.Flush()
}
