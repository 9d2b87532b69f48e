package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgehub/edgehub/server"
)

// serveCmd is server.Config, whose tags make most of serve's flags, plus
// the two that main resolves itself.
type serveCmd struct {
	server.Config `embed:""`

	AdminKeyFile string     `name:"admin-key-file" env:"EDGEHUB_ADMIN_KEY_FILE" help:"File holding the admin API's bearer key."`
	LogLevel     slog.Level `default:"info" env:"EDGEHUB_LOG_LEVEL" help:"debug, info, warn or error."`
	LogFormat    string     `default:"text" enum:"text,json" env:"EDGEHUB_LOG_FORMAT" help:"text (key=value) or json (one object a line)."`
	MemoryLimit  string     `default:"auto" env:"EDGEHUB_MEMORY_LIMIT" help:"Soft limit of the Go heap in bytes, past which the collector works harder: auto (the budgets' sum plus what the open streams and the process need, see docs/operations.md; GOMEMLIMIT, if set, wins), or 0 for none."`
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
		s.AdminFailureRate < 0 || s.AdminFailureBurst < 0 || s.MaxTokenTTL < 0 || s.MaxPublishBytes < 0 || s.MaxTenantBytes < 0 || s.MaxTenantTopics < 0 || s.MaxStateBytes < 0:
		return fmt.Errorf("limits must not be negative (0 turns a limit off)")
	case s.AdminKey != "" && s.AdminKeyFile != "":
		return fmt.Errorf("give the admin key once: --admin-key (or EDGEHUB_ADMIN_KEY) or --admin-key-file")
	case !s.Dev && s.AdminKey == "" && s.AdminKeyFile == "":
		// Such a server could never have a tenant: every request would be
		// 401. Refused before the data directory is touched.
		return fmt.Errorf("neither --dev nor an admin key, so no tenant could ever be created: " +
			"run with --dev (loopback only, no credentials) or give an admin key (--admin-key, EDGEHUB_ADMIN_KEY or --admin-key-file)")
	case s.RetentionEvents < 0:
		return fmt.Errorf("--retention-events must not be negative (0 keeps every event)")
	case s.RetentionAge < 0:
		return fmt.Errorf("--retention-age must not be negative (0 keeps events of any age)")
	case s.MaxReadBytes < 0:
		return fmt.Errorf("--max-read-bytes must not be negative (0 turns the bound off)")
	case s.MaxSpoolBytes < 0:
		return fmt.Errorf("--max-spool-bytes must not be negative (0 turns the bound off)")
	case s.TenantShare < 0 || s.TenantShare > 1:
		return fmt.Errorf("--tenant-share must be a fraction from 0 to 1 (0 or 1: no share), not %g", s.TenantShare)
	case s.BodyTimeout < 0:
		return fmt.Errorf("--body-timeout must not be negative (0: the read timeout of a minute)")
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if _, err := s.memoryLimit(); err != nil {
		return err
	}
	return nil
}

// memoryLimit is the heap limit --memory-limit asks for: a number of
// bytes (0: none), or for auto the budgets' sum plus what open streams
// and the process hold outside them (server.Config.HeapBound); ok is
// false when the runtime's own limit is to stay (auto with GOMEMLIMIT
// set, or a budget that is off).
func (s *serveCmd) memoryLimit() (limit int64, err error) {
	if s.MemoryLimit != "auto" {
		n, err := strconv.ParseInt(s.MemoryLimit, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--memory-limit must be auto or a number of bytes (0: none), not %q", s.MemoryLimit)
		}
		return n, nil
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		return -1, nil
	}
	return s.HeapBound(), nil
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
		warnIfShared(logger, s.AdminKeyFile, "the admin key file is readable by other users: make it its owner's alone (chmod 600)")
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

// warnIfShared warns, with msg, when the file at path, which holds a
// secret, is readable by its group or by others: any local user who may
// read it has the secret.
func warnIfShared(logger *slog.Logger, path, msg string) {
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm()&0o044 == 0 {
		return
	}
	logger.Warn(msg, "file", path, "mode", fmt.Sprintf("%04o", info.Mode().Perm()))
}

// durationsWithUnits writes a duration in a JSON log as Go writes one
// ("1.5ms"), not as a bare number of nanoseconds whose unit a reader
// must guess.
func durationsWithUnits(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// Run serves until SIGTERM or SIGINT. Kong hands it the whole command
// line (root), whose --config file it checks: one that holds the admin
// key must be its owner's alone, as the key file must.
func (s *serveCmd) Run(root *cli) error {
	opts := &slog.HandlerOptions{Level: s.LogLevel}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if s.LogFormat == "json" {
		json := *opts
		json.ReplaceAttr = durationsWithUnits
		handler = slog.NewJSONHandler(os.Stderr, &json)
	}
	logger := slog.New(handler)
	if path := string(root.Config); path != "" && holdsAdminKey(path) {
		warnIfShared(logger, path, "the config file holds admin_key and is readable by other users: make it its owner's alone (chmod 600)")
	}
	adminKey, err := s.adminKey(logger)
	if err != nil {
		return err
	}
	switch limit, _ := s.memoryLimit(); {
	case limit > 0:
		debug.SetMemoryLimit(limit)
		logger.Info("heap limit set", "bytes", limit)
	case limit == 0:
		debug.SetMemoryLimit(math.MaxInt64)
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
