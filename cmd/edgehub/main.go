// Command edgehub runs the hub (serve) and talks to one (publish, watch).
// It parses flags, wires the parts and handles signals; nothing else.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"edgehub/client"
	"edgehub/server"
	"edgehub/sse"
)

type cli struct {
	Serve   serveCmd   `cmd:"" help:"Run the hub."`
	Publish publishCmd `cmd:"" help:"Publish an event (or an NDJSON batch from stdin) and print the answer."`
	Watch   watchCmd   `cmd:"" help:"Watch a topic and print its events as they come."`
}

type serveCmd struct {
	Addr             string        `default:"127.0.0.1:8080" env:"EDGEHUB_ADDR" help:"Address to listen on."`
	Data             string        `default:"./edgehub-data" env:"EDGEHUB_DATA" help:"Directory of the backlog."`
	Dev              bool          `env:"EDGEHUB_DEV" help:"No credentials; every tenant exists; loopback only."`
	AdminKey         string        `env:"EDGEHUB_ADMIN_KEY" help:"Bearer key of the admin API (prefer the environment or --admin-key-file: the command line is visible to every local user)."`
	AdminKeyFile     string        `name:"admin-key-file" env:"EDGEHUB_ADMIN_KEY_FILE" help:"File holding the admin API's bearer key."`
	MaxTokenTTL      time.Duration `name:"max-token-ttl" default:"24h" env:"EDGEHUB_MAX_TOKEN_TTL" help:"Longest lifetime of a token, minted or self-signed (0: no cap)."`
	MaxPublishBytes  int64         `default:"134217728" env:"EDGEHUB_MAX_PUBLISH_BYTES" help:"Bytes of publish bodies in flight server-wide; more are 429 overloaded (0: no cap)."`
	MaxTenantBytes   int64         `default:"10737418240" env:"EDGEHUB_MAX_TENANT_BYTES" help:"Bytes of events and state a tenant may store; more are 429 quota_exceeded (0: no cap)."`
	MaxTenantTopics  int64         `default:"100000" env:"EDGEHUB_MAX_TENANT_TOPICS" help:"Topics a tenant may have; more are 429 quota_exceeded (0: no cap)."`
	MaxStateBytes    int64         `default:"67108864" env:"EDGEHUB_MAX_STATE_BYTES" help:"Bytes of keys and data one topic's state may hold; more are 429 quota_exceeded (0: no cap)."`
	RetentionEvents  int64         `default:"1000000" env:"EDGEHUB_RETENTION_EVENTS" help:"Events kept per topic."`
	RetentionAge     time.Duration `default:"168h" env:"EDGEHUB_RETENTION_AGE" help:"Age after which events may be removed."`
	Heartbeat        time.Duration `default:"15s" env:"EDGEHUB_HEARTBEAT" help:"Silence after which a stream gets a ping comment."`
	Retry            time.Duration `default:"2s" env:"EDGEHUB_RETRY" help:"Reconnect hint sent to clients."`
	MaxBody          int64         `default:"1048576" env:"EDGEHUB_MAX_BODY" help:"Largest publish body in bytes."`
	WriteTimeout     time.Duration `default:"60s" env:"EDGEHUB_WRITE_TIMEOUT" help:"How long one write to a stream may block before the stream is closed."`
	StreamBuffer     int           `default:"1048576" env:"EDGEHUB_STREAM_BUFFER" help:"Bytes a live stream may queue before it reads from the backlog instead."`
	IdleAfter        time.Duration `default:"30s" env:"EDGEHUB_IDLE_AFTER" help:"How long an idle topic's hub stays in memory."`
	LogLevel         slog.Level    `default:"info" env:"EDGEHUB_LOG_LEVEL" help:"debug, info, warn or error."`
	CORSOrigins      []string      `name:"cors-origins" env:"EDGEHUB_CORS_ORIGINS" help:"Origins whose pages may use the API (comma-separated; * for any)."`
	MaxStreams       int           `default:"10000" env:"EDGEHUB_MAX_STREAMS" help:"Open streams in all; more are 429."`
	MaxTenantStreams int           `default:"1000" env:"EDGEHUB_MAX_TENANT_STREAMS" help:"Open streams per tenant; more are 429."`
	PublishRate      float64       `default:"5000" env:"EDGEHUB_PUBLISH_RATE" help:"Publish requests per second per tenant; more are 429."`
	PublishBurst     int           `default:"10000" env:"EDGEHUB_PUBLISH_BURST" help:"Publish requests a tenant may make at once above the rate."`
	HeaderTimeout    time.Duration `default:"10s" env:"EDGEHUB_HEADER_TIMEOUT" help:"Time a client has to send its request headers."`
	IdleTimeout      time.Duration `default:"2m" env:"EDGEHUB_IDLE_TIMEOUT" help:"Time an idle keep-alive connection stays open."`
	MaxHeaderBytes   int           `default:"65536" env:"EDGEHUB_MAX_HEADER_BYTES" help:"Largest request header block."`
	MaxReadBytes     int64         `default:"268435456" env:"EDGEHUB_MAX_READ_BYTES" help:"Bytes of read answers (events, state, snapshots, catch-up pages) held at once; more are 429 or wait. 0: no bound."`
	TLSCert          string        `name:"tls-cert" env:"EDGEHUB_TLS_CERT" help:"PEM certificate file: serve HTTPS and HTTP/2 (with --tls-key)."`
	TLSKey           string        `name:"tls-key" env:"EDGEHUB_TLS_KEY" help:"PEM private key file of --tls-cert."`
}

type conn struct {
	Server string `default:"http://127.0.0.1:8080" env:"EDGEHUB_SERVER" help:"Base URL of the hub."`
	Token  string `env:"EDGEHUB_TOKEN" help:"Bearer token."`
}

type publishCmd struct {
	conn
	Target         string `arg:"" help:"TENANT/TOPIC."`
	Body           string `arg:"" optional:"" help:"The event's JSON, or - to read stdin (NDJSON there is a batch)."`
	Type           string `help:"Event type."`
	Key            string `help:"Key of a keyed (state) event."`
	Op             string `help:"upsert or delete, with --key."`
	IdempotencyKey string `help:"Idempotency key."`
}

type watchCmd struct {
	conn
	Target   string `arg:"" help:"TENANT/TOPIC."`
	After    *int64 `help:"Start after this sequence number (0: the whole backlog)."`
	Snapshot bool   `help:"Start with the topic's state."`
	JSON     bool   `name:"json" help:"One JSON object a line on stdout, nothing else."`
}

func main() {
	var c cli
	kctx := kong.Parse(&c, kong.Name("edgehub"), kong.Description("Edgehub: a durable SSE streaming hub."), kong.UsageOnError())
	if err := kctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "edgehub:", err)
		os.Exit(1)
	}
}

// Validate refuses flag values that would make the server misbehave
// rather than fail: a zero heartbeat would ping in a tight loop.
func (s *serveCmd) Validate() error {
	for name, d := range map[string]time.Duration{"--heartbeat": s.Heartbeat, "--retry": s.Retry,
		"--write-timeout": s.WriteTimeout, "--idle-after": s.IdleAfter,
		"--header-timeout": s.HeaderTimeout, "--idle-timeout": s.IdleTimeout} {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, not %s", name, d)
		}
	}
	switch {
	case s.MaxBody <= 0:
		return fmt.Errorf("--max-body must be positive, not %d", s.MaxBody)
	case s.StreamBuffer <= 0:
		return fmt.Errorf("--stream-buffer must be positive, not %d", s.StreamBuffer)
	case s.MaxHeaderBytes <= 0:
		return fmt.Errorf("--max-header-bytes must be positive, not %d", s.MaxHeaderBytes)
	case s.MaxStreams < 0 || s.MaxTenantStreams < 0 || s.PublishRate < 0 || s.PublishBurst < 0 ||
		s.MaxTokenTTL < 0 || s.MaxPublishBytes < 0 || s.MaxTenantBytes < 0 || s.MaxTenantTopics < 0 || s.MaxStateBytes < 0:
		return fmt.Errorf("limits must not be negative (0 turns a limit off)")
	case s.AdminKey != "" && s.AdminKeyFile != "":
		return fmt.Errorf("give the admin key once: --admin-key (or EDGEHUB_ADMIN_KEY) or --admin-key-file")
	case s.RetentionEvents < 0:
		return fmt.Errorf("--retention-events must not be negative (0 keeps every event)")
	case s.RetentionAge < 0:
		return fmt.Errorf("--retention-age must not be negative (0 keeps events of any age)")
	case s.MaxReadBytes < 0:
		return fmt.Errorf("--max-read-bytes must not be negative (0 turns the bound off)")
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	return nil
}

// adminKey reads the admin key from --admin-key-file when given (one line;
// surrounding white space is not part of it), else takes --admin-key, and
// warns when the key came on the command line, which /proc shows to
// every local user.
func (s *serveCmd) adminKey(logger *slog.Logger) (string, error) {
	if s.AdminKeyFile != "" {
		b, err := os.ReadFile(s.AdminKeyFile)
		if err != nil {
			return "", fmt.Errorf("read --admin-key-file: %w", err)
		}
		key := strings.TrimSpace(string(b))
		if key == "" {
			return "", fmt.Errorf("--admin-key-file %s is empty", s.AdminKeyFile)
		}
		return key, nil
	}
	for _, a := range os.Args[1:] {
		if a == "--admin-key" || strings.HasPrefix(a, "--admin-key=") {
			logger.Warn("the admin key was given on the command line, where every local user can read it; use EDGEHUB_ADMIN_KEY or --admin-key-file")
			break
		}
	}
	return s.AdminKey, nil
}

func (s *serveCmd) Run() error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: s.LogLevel}))
	adminKey, err := s.adminKey(logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := server.Config{
		Addr: s.Addr, Data: s.Data, Dev: s.Dev, AdminKey: adminKey,
		RetentionEvents: s.RetentionEvents, RetentionAge: s.RetentionAge,
		Heartbeat: s.Heartbeat, Retry: s.Retry, MaxBody: s.MaxBody,
		WriteTimeout: s.WriteTimeout, StreamBuffer: s.StreamBuffer, IdleAfter: s.IdleAfter,
		CORSOrigins: s.CORSOrigins, MaxStreams: s.MaxStreams, MaxTenantStreams: s.MaxTenantStreams,
		PublishRate: s.PublishRate, PublishBurst: s.PublishBurst,
		HeaderTimeout: s.HeaderTimeout, IdleTimeout: s.IdleTimeout, MaxHeaderBytes: s.MaxHeaderBytes,
		TLSCert: s.TLSCert, TLSKey: s.TLSKey,
		MaxTokenTTL: s.MaxTokenTTL, MaxPublishBytes: s.MaxPublishBytes,
		MaxTenantBytes: s.MaxTenantBytes, MaxTenantTopics: s.MaxTenantTopics, MaxStateBytes: s.MaxStateBytes,
		MaxReadBytes: s.MaxReadBytes,
	}
	srv, err := server.New(ctx, cfg, logger, server.Hooks{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		srv.Shutdown(context.Background()) //nolint:errcheck // already failing
		return fmt.Errorf("listen on %s: %w", s.Addr, err)
	}
	logger.Info("listening", "addr", ln.Addr().String(), "dev", s.Dev, "data", s.Data, "tls", s.TLSCert != "")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	logger.Info("stopped")
	return nil
}

func splitTarget(t string) (string, string, error) {
	tenant, topic, ok := strings.Cut(t, "/")
	if !ok || tenant == "" || topic == "" {
		return "", "", fmt.Errorf("target %q is not TENANT/TOPIC", t)
	}
	return tenant, topic, nil
}

// cliRetries is how many times publish retries a 429 or 503 (after the
// server's Retry-After) before it exits with the refusal.
const cliRetries = 8

func (c *conn) client() *client.Client {
	return &client.Client{Server: strings.TrimRight(c.Server, "/"), Token: c.Token, Retries: cliRetries}
}

func (p *publishCmd) Run() error {
	tenant, topic, err := splitTarget(p.Target)
	if err != nil {
		return err
	}
	body := []byte(p.Body)
	batch := false
	if p.Body == "-" {
		if body, err = io.ReadAll(os.Stdin); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		batch = isNDJSON(body)
	}
	ans, err := p.client().Publish(context.Background(), tenant, topic, body, client.PublishOptions{
		Type: p.Type, Key: p.Key, Op: p.Op, IdempotencyKey: p.IdempotencyKey, Batch: batch,
	})
	if err != nil {
		return err
	}
	fmt.Println(string(bytes.TrimSpace(ans)))
	return nil
}

// isNDJSON tells NDJSON (every non-blank line one JSON value: a batch, even
// of one) from one JSON value spread over lines.
func isNDJSON(b []byte) bool {
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if !json.Valid(line) {
			return false
		}
		n++
	}
	return n > 0
}

func (w *watchCmd) Run() error {
	tenant, topic, err := splitTarget(w.Target)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	o := client.WatchOptions{
		Snapshot: w.Snapshot, Reconnect: true,
		Notice: func(s string) { fmt.Fprintln(os.Stderr, s) },
	}
	if w.After != nil {
		o.After, o.HasAfter = *w.After, true
	}
	err = w.client().Watch(ctx, tenant, topic, o, func(f sse.Frame) error {
		return w.print(out, f)
	})
	out.Flush()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (w *watchCmd) print(out *bufio.Writer, f sse.Frame) error {
	switch f.Event {
	case "hello":
		fmt.Fprintln(os.Stderr, "connected:", f.Data)
		return nil
	case "gap":
		fmt.Fprintln(os.Stderr, "gap: events removed by retention:", f.Data)
		return nil
	case "snapshot":
		if w.JSON {
			fmt.Fprintf(out, "{\"snapshot\":%s}\n", f.Data)
		} else {
			fmt.Fprintf(out, "snapshot %s\n", f.Data)
		}
	default:
		if w.JSON {
			fmt.Fprintln(out, f.Data)
		} else {
			fmt.Fprintf(out, "%s %s %s\n", f.ID, f.Event, f.Data)
		}
	}
	return out.Flush()
}
