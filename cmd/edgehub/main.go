// Command edgehub runs the hub (serve) and talks to one (publish, watch).
// It parses flags, wires the parts and handles signals; nothing else.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/server"
	"github.com/edgehub/edgehub/sse"
)

type cli struct {
	Serve   serveCmd   `cmd:"" help:"Run the hub."`
	Publish publishCmd `cmd:"" help:"Publish an event (or an NDJSON batch from stdin) and print the answer."`
	Watch   watchCmd   `cmd:"" help:"Watch a topic and print its events as they come."`
	Version versionCmd `cmd:"" help:"Print the version of this binary and what it was built from."`
}

// Exit codes, as --help documents them.
const (
	exitFailed = 1 // the server refused, could not be reached, or serve failed
	exitUsage  = 2 // the command line is wrong
)

const description = `Edgehub: a durable SSE streaming hub.

Exit codes: 0 success; 1 the server refused the request or could not be
reached, or serve failed; 2 the command line is wrong.`

// serveCmd is server.Config, whose tags make most of serve's flags, plus
// the two that main resolves itself.
type serveCmd struct {
	server.Config `embed:""`

	AdminKeyFile string     `name:"admin-key-file" env:"EDGEHUB_ADMIN_KEY_FILE" help:"File holding the admin API's bearer key."`
	LogLevel     slog.Level `default:"info" env:"EDGEHUB_LOG_LEVEL" help:"debug, info, warn or error."`
	LogFormat    string     `default:"text" enum:"text,json" env:"EDGEHUB_LOG_FORMAT" help:"text (key=value) or json (one object a line)."`
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
	k, err := kong.New(&c, kong.Name("edgehub"), kong.Description(description))
	if err != nil {
		panic(fmt.Sprintf("the command line's tags: %v", err))
	}
	kctx, err := k.Parse(os.Args[1:])
	if err != nil {
		os.Exit(usageError(os.Stderr, err))
	}
	if err := kctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "edgehub:", err)
		os.Exit(exitFailed)
	}
}

// usageError tells what is wrong with the command line, first and alone,
// then where the help is, rather than the whole help with the one line
// that matters at its end.
func usageError(w io.Writer, err error) int {
	help := "edgehub --help"
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if cmd := pe.Context.Selected(); cmd != nil {
			help = cmd.FullPath() + " --help"
		}
	}
	fmt.Fprintf(w, "edgehub: error: %v\nrun %q for usage\n", err, help) //nolint:errcheck // stderr: nowhere to tell of a failed write
	return exitUsage
}

type versionCmd struct{}

// Run prints what the Go toolchain recorded in the binary: the module's
// version (a tagged release, or "(devel)" from a clone), the commit and
// whether the tree had changes, and the Go version.
func (versionCmd) Run() error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("this binary carries no build information")
	}
	line := "edgehub " + info.Main.Version
	var rev, when, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		line += " commit " + rev
		if modified == "true" {
			line += " (with changes)"
		}
	}
	if when != "" {
		line += " of " + when
	}
	fmt.Println(line + " " + info.GoVersion)
	return nil
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
	opts := &slog.HandlerOptions{Level: s.LogLevel}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if s.LogFormat == "json" {
		handler = slog.NewJSONHandler(os.Stderr, opts)
	}
	logger := slog.New(handler)
	adminKey, err := s.adminKey(logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := s.Config
	cfg.AdminKey = adminKey
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
		batch = !json.Valid(body) && isNDJSON(body)
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

// isNDJSON tells NDJSON (every non-blank line one JSON value) from what is
// not. Stdin that is one JSON value, on one line or spread over several,
// is one event; only several values make a batch.
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
	err = errors.Join(err, out.Flush())
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
	}
	var line string
	switch {
	case f.Event == "snapshot" && w.JSON:
		line = fmt.Sprintf("{\"snapshot\":%s}\n", f.Data)
	case f.Event == "snapshot":
		line = fmt.Sprintf("snapshot %s\n", f.Data)
	case w.JSON:
		line = f.Data + "\n"
	default:
		line = fmt.Sprintf("%s %s %s\n", f.ID, f.Event, f.Data)
	}
	if _, err := out.WriteString(line); err != nil {
		return fmt.Errorf("write to stdout: %w", err)
	}
	return out.Flush()
}
