// Package server assembles a running Edgehub from its parts: the backlog,
// the committer, the actor system with its hub manager, and the HTTP
// routes. main and the in-process tests build it the same way.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"edgehub/actors"
	"edgehub/backlog"
	"edgehub/httpapi"
	"edgehub/hub"
	"edgehub/limits"
	"edgehub/metrics"
)

// Config is everything serve takes from the command line.
type Config struct {
	Addr            string
	Data            string
	Dev             bool
	AdminKey        string
	RetentionEvents int64
	RetentionAge    time.Duration
	Heartbeat       time.Duration
	Retry           time.Duration
	MaxBody         int64
	WriteTimeout    time.Duration
	StreamBuffer    int
	// IdleAfter is how long a topic's hub stays up with nothing to do.
	IdleAfter time.Duration
	// PageSize is how many events a catching-up stream reads at a time
	// (default 1000); tests make it small to hold a stream between pages.
	PageSize int

	CORSOrigins      []string
	MaxStreams       int
	MaxTenantStreams int
	PublishRate      float64
	PublishBurst     int
	HeaderTimeout    time.Duration
	IdleTimeout      time.Duration
	MaxHeaderBytes   int
	// MaxTokenTTL caps token lifetimes, minted or self-signed.
	MaxTokenTTL time.Duration
	// MaxPublishBytes bounds the publish bodies in flight, server-wide.
	MaxPublishBytes int64
	// Quotas: a tenant's stored bytes and topics, a topic's state bytes.
	MaxTenantBytes  int64
	MaxTenantTopics int64
	MaxStateBytes   int64
	// MaxReadBytes bounds the bytes of read answers held at once, across
	// the server (0: no bound); a read past it is 429 overloaded and a
	// catching-up stream waits.
	MaxReadBytes int64
	// TLSCert and TLSKey are PEM files; with them the server speaks TLS,
	// and so HTTP/2, which lets one browser page hold more than the six
	// streams per host that HTTP/1.1 allows it.
	TLSCert, TLSKey string
}

// Defaults are the command line's defaults, for callers that build a Config
// by hand.
func Defaults() Config {
	return Config{
		Addr: "127.0.0.1:8080", Data: "./edgehub-data",
		RetentionEvents: 1_000_000, RetentionAge: 168 * time.Hour,
		Heartbeat: 15 * time.Second, Retry: 2 * time.Second, MaxBody: 1 << 20,
		WriteTimeout: time.Minute, StreamBuffer: 1 << 20, IdleAfter: 30 * time.Second,
		MaxStreams: 10000, MaxTenantStreams: 1000, PublishRate: 5000, PublishBurst: 10000,
		HeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		MaxTokenTTL: 24 * time.Hour, MaxPublishBytes: 128 << 20,
		MaxTenantBytes: 10 << 30, MaxTenantTopics: 100_000, MaxStateBytes: 64 << 20,
		MaxReadBytes: 256 << 20,
	}
}

// minAdminKey is the shortest admin key given without a warning: the
// admin API has no lockout, so the key's length is its only defence
// against guessing.
const minAdminKey = 32

// unsignedShare: bodies read before their webhook signature is checked
// may take a quarter of the publish budget, so that anonymous clients
// cannot take it all from the publishers that have shown credentials.
const unsignedShare = 4

func unsignedBytes(publish int64) int64 {
	if publish <= 0 {
		return 0
	}
	return max(1, publish/unsignedShare)
}

// tick is the hub manager's clock: idleness and head checks count in it.
const tick = time.Second

// Server is a running Edgehub.
type Server struct {
	cfg       Config
	lock      *os.File // the data directory's lock, held until Shutdown
	log       *backlog.SQLite
	committer *backlog.Committer
	system    *actor.ActorSystem
	hubs      *hub.Router
	api       *httpapi.Server
	http      *http.Server
	logger    *slog.Logger
	metrics   *metrics.Metrics
	ready     atomic.Bool

	stopRetention context.CancelFunc
	retained      chan struct{}
}

// Hooks let in-process tests hold requests inside race windows.
type Hooks struct {
	HTTP          httpapi.Hooks
	Hub           hub.Hooks
	ManagerOnIdle func(key string)
	// ManualTicks stops the manager's clock and the retention loop; the
	// test calls RunRetention when it wants a trim.
	ManualTicks bool
}

// New opens the backlog and starts the actors; Serve starts answering.
func New(ctx context.Context, cfg Config, logger *slog.Logger, hooks Hooks) (*Server, error) {
	if cfg.Dev {
		if err := checkLoopback(cfg.Addr); err != nil {
			return nil, err
		}
	}
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	lock, err := lockDir(cfg.Data)
	if err != nil {
		return nil, err
	}
	log, err := backlog.OpenSQLite(ctx, cfg.Data, logger)
	if err != nil {
		lock.Close()
		return nil, err
	}
	if err := claimMode(ctx, log, cfg); err != nil {
		log.Close()
		lock.Close()
		return nil, err
	}
	log.SetQuotas(backlog.Quotas{TenantBytes: cfg.MaxTenantBytes, TenantTopics: cfg.MaxTenantTopics, StateBytes: cfg.MaxStateBytes})
	m := metrics.New()
	s := &Server{cfg: cfg, lock: lock, log: log, logger: logger, metrics: m}
	s.committer = backlog.NewCommitter(log, backlog.CommitterOptions{Observe: func(d time.Duration, n int) {
		m.CommitSeconds.Observe(d.Seconds())
		m.CommitEvents.Observe(float64(n))
	}})
	actorLogger := logger.With("component", "actors")
	s.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLogger }))
	interval := tick
	if hooks.ManualTicks {
		interval = 0
	}
	readBudget := limits.NewBudget(cfg.MaxReadBytes, "read answers")
	s.hubs, err = hub.NewRouter(s.system, hub.Options{
		Log: log, Committer: s.committer, Logger: logger, Metrics: m, ReadBudget: readBudget,
		StreamBuffer: cfg.StreamBuffer, PageSize: cfg.PageSize,
		IdleTicks: max(1, int(cfg.IdleAfter/tick)), CheckTicks: 10,
		Manager: actors.Options{
			TickInterval: interval, OnIdle: hooks.ManagerOnIdle,
			OnCount: func(n int) { m.HubsActive.Set(float64(n)) },
		},
		Hooks: hooks.Hub,
	})
	if err != nil {
		s.committer.Close()
		log.Close()
		lock.Close()
		return nil, err
	}
	s.api = httpapi.New(httpapi.Config{
		Dev: cfg.Dev, MaxBody: cfg.MaxBody, Retry: cfg.Retry, Heartbeat: cfg.Heartbeat,
		WriteTimeout: cfg.WriteTimeout,
		AdminKey:     cfg.AdminKey, CORSOrigins: cfg.CORSOrigins, MaxTokenTTL: cfg.MaxTokenTTL,
		UnsignedBodyTimeout: cfg.HeaderTimeout,
	}, httpapi.Deps{
		PublishBodies:  limits.NewBudget(cfg.MaxPublishBytes, "publish bodies in flight"),
		UnsignedBodies: limits.NewBudget(unsignedBytes(cfg.MaxPublishBytes), "webhook bodies awaiting their signature check"),
		Log:            log, Tenants: log, Hubs: s.hubs, Metrics: m, Logger: logger,
		Limits: limits.New(limits.Config{MaxStreams: cfg.MaxStreams, MaxTenantStreams: cfg.MaxTenantStreams,
			PublishRate: cfg.PublishRate, PublishBurst: cfg.PublishBurst}),
		Ready:      s.ready.Load,
		ReadBudget: readBudget,
	}, hooks.HTTP)
	switch {
	case !cfg.Dev && cfg.AdminKey == "":
		logger.Warn("no admin key: no tenant can be created, so every tenant route answers 401")
	case cfg.AdminKey != "" && len(cfg.AdminKey) < minAdminKey:
		logger.Warn("the admin key is short: use at least 32 random characters", "length", len(cfg.AdminKey))
	}
	s.http = &http.Server{
		Handler:           s.api.Handler(),
		ReadHeaderTimeout: cfg.HeaderTimeout,
		ReadTimeout:       time.Minute,
		WriteTimeout:      cfg.WriteTimeout, // a backstop: handlers set their own, streams one per flush
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	s.http.TLSConfig = tlsConfig
	s.http.RegisterOnShutdown(s.api.EndStreams)
	rctx, cancel := context.WithCancel(context.Background())
	s.stopRetention, s.retained = cancel, make(chan struct{})
	if hooks.ManualTicks {
		close(s.retained)
	} else {
		go s.retain(rctx, time.Second)
	}
	s.ready.Store(true)
	return s, nil
}

// Handler is the HTTP handler, for tests that serve it themselves.
func (s *Server) Handler() http.Handler { return s.api.Handler() }

// Serve answers on ln until Shutdown; it returns nil after a shutdown.
// With a TLS certificate it serves TLS, offering HTTP/2 and HTTP/1.1.
func (s *Server) Serve(ln net.Listener) error {
	serve := s.http.Serve
	if s.http.TLSConfig != nil {
		serve = func(ln net.Listener) error { return s.http.ServeTLS(ln, "", "") }
	}
	if err := serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// Shutdown stops accepting connections, ends every stream after a whole
// frame, waits for the publishes in flight to be committed and answered,
// then stops the actors and closes the backlog.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	herr := s.http.Shutdown(ctx)
	if errors.Is(herr, context.DeadlineExceeded) {
		// Handlers still running past the deadline are cut off; what they
		// accepted is still committed below, before the backlog closes.
		s.logger.Warn("shutdown deadline passed; closing remaining connections")
		herr = s.http.Close()
	}
	s.api.EndStreams()
	s.hubs.Stop()
	s.committer.Close()
	s.stopRetention()
	<-s.retained
	s.system.Shutdown()
	return errors.Join(herr, s.log.Close(), s.lock.Close())
}

// claimMode refuses a data directory written in the other mode (see
// backlog.SQLite.ClaimMode), naming the directory and the way out.
func claimMode(ctx context.Context, log *backlog.SQLite, cfg Config) error {
	want := backlog.ModeProduction
	if cfg.Dev {
		want = backlog.ModeDev
	}
	got, err := log.ClaimMode(ctx, want)
	if err != nil {
		return err
	}
	if got != want {
		how := "without --dev"
		if got == backlog.ModeDev {
			how = "with --dev"
		}
		return fmt.Errorf("data directory %s holds %s-mode data and this server runs in %s mode; the two never mix: give this server another --data, or serve that directory %s",
			cfg.Data, got, want, how)
	}
	return nil
}

// checkLoopback refuses to run dev mode, which needs no credentials, on an
// address that other machines can reach.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad --addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--dev needs no credentials, so it only listens on a loopback address, not %q", addr)
}
