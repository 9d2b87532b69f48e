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
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kong"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgehub/edgehub/actors"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/durable"
	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/loopback"
	"github.com/edgehub/edgehub/mercure"
	"github.com/edgehub/edgehub/metrics"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/sse"
)

// Config is everything serve takes from the command line but the admin
// key's file and the log level, which main resolves. Its tags, and those of
// the parts' configs it embeds, are the flags of edgehub serve with their
// EDGEHUB_ variables, help texts and defaults: main binds the command line
// to a Config, and Defaults reads the same tags, so each default is written
// once.
type Config struct {
	Addr string `default:"127.0.0.1:8080" env:"EDGEHUB_ADDR" help:"Address to listen on."`
	Data string `default:"./edgehub-data" env:"EDGEHUB_DATA" help:"Directory of the backlog."`
	// Store picks the backlog: SQLite in Data, or a PostgreSQL database
	// that several processes share.
	Store string `env:"EDGEHUB_STORE" help:"Where the backlog lives: empty or sqlite for SQLite in --data; a postgres:// URL for a PostgreSQL database that several Edgehub processes share (then --data and --sync play no part)."`

	// HTTP is the routes' side: dev mode, the admin key, token lifetimes,
	// stream timing, body size and CORS.
	HTTP `embed:""`
	// Streams is the Durable Streams protocol's: its dev-mode tenant and
	// the times of its live reads.
	Streams `embed:""`
	// Mercure is the Mercure protocol's: the tenant also served at
	// /.well-known/mercure.
	Mercure `embed:""`

	// MaxPublishBytes bounds the publish bodies in flight, server-wide.
	MaxPublishBytes int64 `default:"134217728" env:"EDGEHUB_MAX_PUBLISH_BYTES" help:"Bytes of publish bodies in flight server-wide; more are 429 overloaded (0: no cap)."`
	// TenantShare is the part of each server-wide budget one tenant (and,
	// for bodies awaiting their signature check, one client address) may
	// hold, so that one cannot deny the others.
	TenantShare float64 `default:"0.25" env:"EDGEHUB_TENANT_SHARE" help:"Part of each byte budget (publish bodies, read answers, answers on disk) one tenant may hold, and of the unsigned-body budget one client address may; more are 429 overloaded or wait (0 or 1: no share)."`
	// Quotas: a tenant's stored bytes and topics, a topic's state bytes.
	MaxTenantBytes  int64         `default:"10737418240" env:"EDGEHUB_MAX_TENANT_BYTES" help:"Bytes of events and state a tenant may store; more are 429 quota_exceeded (0: no cap)."`
	MaxTenantTopics int64         `default:"100000" env:"EDGEHUB_MAX_TENANT_TOPICS" help:"Topics a tenant may have; more are 429 quota_exceeded (0: no cap)."`
	MaxStateBytes   int64         `default:"67108864" env:"EDGEHUB_MAX_STATE_BYTES" help:"Bytes of keys and data one topic's state may hold; more are 429 quota_exceeded (0: no cap)."`
	RetentionEvents int64         `default:"1000000" env:"EDGEHUB_RETENTION_EVENTS" help:"Events kept per topic."`
	RetentionAge    time.Duration `default:"168h" env:"EDGEHUB_RETENTION_AGE" help:"Age after which events may be removed."`
	StreamBuffer    int           `default:"1048576" env:"EDGEHUB_STREAM_BUFFER" help:"Bytes a live stream may queue before it reads from the backlog instead."`
	// Sync is how durable a commit is before it is answered.
	Sync string `default:"full" enum:"full,normal" env:"EDGEHUB_SYNC" help:"full: every answered commit survives a power loss (the write-ahead log is flushed before the answer); normal: one survives a crash of the process, and a power loss may lose the last ones."`
	// CommitDelay is backlog.CommitterOptions.Delay.
	CommitDelay time.Duration `default:"250us" env:"EDGEHUB_COMMIT_DELAY" help:"Longest a commit waits for as many publishes as the last one held, so that concurrent publishers share an fsync (0: no wait)."`
	// MaxRecentBytes bounds the newest commits all hubs keep in memory, so
	// that a stream a little behind joins without reading the backlog.
	MaxRecentBytes int64 `default:"67108864" env:"EDGEHUB_MAX_RECENT_BYTES" help:"Bytes of recent events the hubs keep in memory, in all, for streams that reconnect a little behind (0: no bound)."`
	// PprofAddr, if set, serves /debug/pprof there, apart from the API.
	PprofAddr string `env:"EDGEHUB_PPROF_ADDR" help:"Loopback address to serve /debug/pprof on (off when empty)."`
	// HeadCheck is how often a hub with live streams compares its head
	// with the log's: the net under a lost hint of another process's
	// commit (and, on SQLite, a commit the hub never heard of).
	HeadCheck time.Duration `default:"10s" env:"EDGEHUB_HEAD_CHECK" help:"How often a topic's hub with live streams compares its head with the log, catching a commit whose notice was lost (0: never)."`
	// IdleAfter is how long a topic's hub stays up with nothing to do.
	IdleAfter time.Duration `default:"30s" env:"EDGEHUB_IDLE_AFTER" help:"How long an idle topic's hub stays in memory."`
	// PageSize is hub.Options.PageSize (0: the hub's default); it is no
	// flag, and tests make it small to hold a stream between pages.
	PageSize int `kong:"-"`
	// RecentEvents is hub.Options.RecentEvents (0: the hub's default); it
	// is no flag, and tests turn the recent commits off (-1) to drive a
	// stream through the backlog.
	RecentEvents int `kong:"-"`

	// Limits caps open streams and the publish rate.
	Limits `embed:""`

	HeaderTimeout  time.Duration `default:"10s" env:"EDGEHUB_HEADER_TIMEOUT" help:"Time a client has to send its request headers."`
	IdleTimeout    time.Duration `default:"2m" env:"EDGEHUB_IDLE_TIMEOUT" help:"Time an idle keep-alive connection stays open."`
	MaxHeaderBytes int           `default:"65536" env:"EDGEHUB_MAX_HEADER_BYTES" help:"Largest request header block."`
	// MaxReadBytes bounds the bytes of read answers held at once, across
	// the server (0: no bound); a read past it is 429 overloaded and a
	// catching-up stream waits.
	MaxReadBytes int64 `default:"268435456" env:"EDGEHUB_MAX_READ_BYTES" help:"Bytes of read answers (events, state, snapshots, catch-up pages, live queues) held in memory at once; more are 429 or wait. 0: no bound."`
	// MaxMatchWork bounds what testing a topic new to a tenant's hub
	// against the live patterns of its streams may cost (0: no bound).
	MaxMatchWork int64 `default:"8388608" env:"EDGEHUB_MAX_MATCH_WORK" help:"Matching work, per byte of a tested topic (steps of about 0.1 ns), that the selector patterns of open tenant and Mercure streams may add up to, in all; a tenant may take --tenant-share of it, and streams without a token a quarter of it apart, shared the same way per tenant and per client address; more are 429 overloaded. 0: no bound."`
	// MaxSpoolBytes bounds the read answers kept on disk for clients that
	// are still reading them.
	MaxSpoolBytes int64 `default:"1073741824" env:"EDGEHUB_MAX_SPOOL_BYTES" help:"Bytes of read answers (events, state, snapshots) kept on disk, in unlinked files of the data directory (on PostgreSQL, of $TMPDIR), for clients still reading them; more are 429. 0: no bound."`
	// TLSCert and TLSKey are PEM files; with them the server speaks TLS,
	// and so HTTP/2, which lets one browser page hold more than the six
	// streams per host that HTTP/1.1 allows it.
	TLSCert string `name:"tls-cert" env:"EDGEHUB_TLS_CERT" help:"PEM certificate file: serve HTTPS and HTTP/2 (with --tls-key)."`
	TLSKey  string `name:"tls-key" env:"EDGEHUB_TLS_KEY" help:"PEM private key file of --tls-cert."`
}

// HTTP and Limits name the parts' configs inside Config: both types are
// called Config, and Config embeds them so that their fields read as its
// own (cfg.AdminKey, cfg.MaxStreams) while New hands each part its whole
// struct (cfg.HTTP, cfg.Limits).
type (
	HTTP    = httpapi.Config
	Limits  = limits.Config
	Streams = durable.Config
	Mercure = mercure.Config
)

// Defaults is the Config of an empty command line, read from Config's
// default tags (the environment plays no part), for callers that build a
// Config by hand.
func Defaults() Config {
	var cfg Config
	k, err := kong.New(&cfg)
	if err != nil {
		panic(fmt.Sprintf("server.Config's flag tags: %v", err))
	}
	for _, f := range k.Model.Flags {
		if !f.HasDefault {
			continue
		}
		if err := f.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: f.Default}), f.Target); err != nil {
			panic(fmt.Sprintf("server.Config's default of --%s: %v", f.Name, err))
		}
	}
	return cfg
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

// anonymousShare: the selectors of anonymous streams may hold a quarter
// of --max-read-bytes, apart from it, so that strangers never take the
// read budget that a tenant's token streams need.
const anonymousShare = 4

func anonymousBytes(read int64) int64 {
	if read <= 0 {
		return 0
	}
	return max(1, read/anonymousShare)
}

// streamHeap is what an open stream holds in the heap outside the
// budgets, generously (an idle one holds about 9 KiB), and processHeap
// what the process holds besides its budgets and streams (its code's
// data, the actor system, the store's caches, the tenants' hubs).
const (
	streamHeap  = 16 << 10
	processHeap = 64 << 20
)

// HeapBound is the most heap the budgets let clients make the server
// hold, with its open streams and what it holds of its own: the sum of
// --max-read-bytes (and a quarter more for anonymous streams' selectors),
// --max-publish-bytes and --max-recent-bytes, plus 16 KiB per
// --max-streams and --max-anonymous-streams, and 64 MiB. It is 0, no
// bound, when any of them is off. Serve sets the runtime's soft memory
// limit to it, so that the collector works harder before the heap grows
// past what the budgets allow rather than letting garbage double it.
func (cfg Config) HeapBound() int64 {
	if cfg.MaxReadBytes <= 0 || cfg.MaxPublishBytes <= 0 || cfg.MaxRecentBytes <= 0 || cfg.MaxStreams <= 0 || cfg.MaxAnonymousStreams <= 0 {
		return 0
	}
	streams := int64(cfg.MaxStreams + cfg.MaxAnonymousStreams)
	return cfg.MaxReadBytes + anonymousBytes(cfg.MaxReadBytes) + cfg.MaxPublishBytes + cfg.MaxRecentBytes + streams*streamHeap + processHeap
}

// budgets are the server's byte budgets: what clients can make it hold,
// in memory or on disk, each bounded in all and per tenant (the unsigned
// bodies' and the anonymous streams' selectors' also per client address).
type budgets struct {
	publish, unsigned, unsignedByClient, read, spool, recent *limits.Budget
	anonymous, anonymousByClient                             *limits.Budget
	// The matching work of the streams' patterns (per byte of a topic).
	work, anonymousWork, anonymousWorkByClient *limits.Budget
}

// newBudgets builds the budgets of cfg, each with the configured share
// for one holder, and exports what each holds as
// edgehub_budget_held_bytes{budget}.
func newBudgets(cfg Config, m *metrics.Metrics) budgets {
	share := func(total int64) int64 {
		if cfg.TenantShare > 0 && cfg.TenantShare < 1 {
			return max(1, int64(float64(total)*cfg.TenantShare))
		}
		return total
	}
	unsigned := unsignedBytes(cfg.MaxPublishBytes)
	anonymous := anonymousBytes(cfg.MaxReadBytes)
	b := budgets{
		publish:           limits.NewBudget(cfg.MaxPublishBytes, share(cfg.MaxPublishBytes), "publish bodies in flight"),
		unsigned:          limits.NewBudget(unsigned, share(unsigned), "webhook bodies awaiting their signature check"),
		unsignedByClient:  limits.NewBudget(unsigned, share(unsigned), "webhook bodies awaiting their signature check"),
		read:              limits.NewBudget(cfg.MaxReadBytes, share(cfg.MaxReadBytes), "read answers"),
		spool:             limits.NewBudget(cfg.MaxSpoolBytes, share(cfg.MaxSpoolBytes), "read answers kept on disk"),
		recent:            limits.NewBudget(cfg.MaxRecentBytes, 0, "recent events"),
		anonymous:         limits.NewBudget(anonymous, share(anonymous), "selectors of streams without a token"),
		anonymousByClient: limits.NewBudget(anonymous, share(anonymous), "selectors of streams without a token"),
	}
	anonymousWork := cfg.MaxMatchWork / anonymousShare
	if cfg.MaxMatchWork > 0 {
		anonymousWork = max(1, anonymousWork)
	}
	b.work = limits.NewBudget(cfg.MaxMatchWork, share(cfg.MaxMatchWork), "selectors' matching work")
	b.anonymousWork = limits.NewBudget(anonymousWork, share(anonymousWork), "selectors' matching work of streams without a token")
	b.anonymousWorkByClient = limits.NewBudget(anonymousWork, share(anonymousWork), "selectors' matching work of streams without a token")
	for name, budget := range map[string]*limits.Budget{
		"publish_bodies": b.publish, "unsigned_bodies": b.unsigned, "read_answers": b.read,
		"spooled_answers": b.spool, "recent_events": b.recent, "anonymous_selectors": b.anonymous,
	} {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edgehub_budget_held_bytes", ConstLabels: prometheus.Labels{"budget": name},
			Help: "Bytes held of a server-wide budget: publish bodies, webhook bodies awaiting their signature check, read answers, live queues and the selectors of streams with a token in memory, read answers spooled to disk, recent events, the selectors of streams without a token.",
		}, func() float64 { return float64(budget.Held()) }))
	}
	return b
}

// tick is the hub manager's clock: idleness and head checks count in it.
const tick = time.Second

// Server is a running Edgehub.
type Server struct {
	cfg  Config
	lock *os.File // the data directory's lock, held until Shutdown; nil on Postgres
	log  *backlog.Store
	// mercure is the Mercure protocol, whose presence the retention
	// loops keep.
	mercure   *mercure.Protocol
	committer *backlog.Committer
	system    *actor.ActorSystem
	hubs      *hub.Router
	api       *httpapi.Server
	http      *http.Server
	logger    *slog.Logger
	metrics   *metrics.Metrics
	ready     atomic.Bool
	// hearing says the hint listener is listening (always, on SQLite):
	// until it is, commits of other processes could go unheard. The hubs
	// read it too.
	hearing    hub.Hearing
	stopListen context.CancelFunc
	listened   chan struct{}

	pprof         *http.Server // nil unless --pprof-addr
	stopRetention context.CancelFunc
	retained      chan struct{}
}

// Hooks let in-process tests hold requests inside race windows.
type Hooks struct {
	HTTP          httpapi.Hooks
	Hub           hub.Hooks
	Mercure       mercure.Hooks
	ManagerOnIdle func(key string)
	// ManualTicks stops the manager's clock and the retention loop; the
	// test calls RunRetention when it wants a trim.
	ManualTicks bool
}

// New opens the backlog and starts the actors; Serve starts answering.
func New(ctx context.Context, cfg Config, logger *slog.Logger, hooks Hooks) (*Server, error) {
	if t := cfg.Mercure.Tenant; t != "" && !names.Valid(t) {
		return nil, fmt.Errorf("--mercure-tenant %q is not a tenant's name", t)
	}
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
	log, lock, err := openStore(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	if err := claimMode(ctx, log, cfg); err != nil {
		return nil, errors.Join(err, log.Close(), unlockDir(lock, ""))
	}
	log.SetQuotas(backlog.Quotas{TenantBytes: cfg.MaxTenantBytes, TenantTopics: cfg.MaxTenantTopics, StateBytes: cfg.MaxStateBytes})
	m := metrics.New()
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "edgehub_store_retries_total",
		Help: "Write transactions run again after the shared log aborted them for racing another process's.",
	}, func() float64 { return float64(log.Retries()) }))
	m.WatchTotals(func(ctx context.Context) (metrics.Totals, error) {
		t, err := log.Totals(ctx)
		return metrics.Totals(t), err
	})
	s := &Server{cfg: cfg, lock: lock, log: log, logger: logger, metrics: m}
	s.committer = backlog.NewCommitter(log, backlog.CommitterOptions{Delay: cfg.CommitDelay, Observe: func(d time.Duration, n int) {
		m.CommitSeconds.Observe(d.Seconds())
		m.CommitEvents.Observe(float64(n))
		m.EventsPublished.Add(float64(n))
	}})
	actorLogger := logger.With("component", "actors")
	s.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLogger }))
	interval := tick
	if hooks.ManualTicks {
		interval = 0
	}
	b := newBudgets(cfg, m)
	spoolDir := cfg.Data // on SQLite, the directory this process holds
	if lock == nil {
		spoolDir = ""
	}
	s.hubs, err = hub.NewRouter(s.system, hub.Options{
		Log: log, Committer: s.committer, Logger: logger, Metrics: m, ReadBudget: b.read,
		SpoolBudget: b.spool, SpoolDir: spoolDir,
		Framing:      hub.Framing{Start: sse.AppendEventStart, End: sse.FrameEnd},
		StreamBuffer: cfg.StreamBuffer, PageSize: cfg.PageSize, RecentEvents: cfg.RecentEvents,
		RecentBudget:    b.recent,
		RetentionEvents: cfg.RetentionEvents, RetentionAge: cfg.RetentionAge,
		IdleTicks: max(1, int(cfg.IdleAfter/tick)), CheckTicks: int(cfg.HeadCheck / tick), Hearing: &s.hearing,
		Manager: actors.Options{
			TickInterval: interval, OnIdle: hooks.ManagerOnIdle,
			OnCount:     func(n int) { m.HubsActive.Set(float64(n)) },
			OnPassivate: m.HubsPassivated.Inc,
		},
		Hooks: hooks.Hub,
	})
	if err != nil {
		s.committer.Close()
		return nil, errors.Join(err, log.Close(), unlockDir(lock, ""))
	}
	api := cfg.HTTP
	api.SpoolDir = spoolDir
	s.mercure = mercure.New(cfg.Mercure, hooks.Mercure)
	s.api = httpapi.New(api, httpapi.Deps{
		PublishBodies: b.publish, UnsignedBodies: b.unsigned, UnsignedByClient: b.unsignedByClient,
		Log: log, Tenants: log, Hubs: s.hubs, Metrics: m, Logger: logger,
		Limits: limits.New(cfg.Limits), RetentionEvents: cfg.RetentionEvents,
		Ready:              s.readiness,
		ReadBudget:         b.read,
		SpoolBudget:        b.spool,
		AnonymousSelectors: b.anonymous, AnonymousByClient: b.anonymousByClient,
		MatchWork: b.work, AnonymousWork: b.anonymousWork, AnonymousWorkByClient: b.anonymousWorkByClient,
		AdminFailures: limits.NewFailures(cfg.AdminFailureRate, cfg.AdminFailureBurst),
		Protocols:     []httpapi.Protocol{durable.New(cfg.Streams), s.mercure},
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
	if err := s.listen(ctx); err != nil {
		return nil, errors.Join(err, s.Shutdown(ctx))
	}
	if cfg.PprofAddr != "" {
		if s.pprof, err = servePprof(cfg.PprofAddr, logger); err != nil {
			return nil, errors.Join(err, s.Shutdown(ctx))
		}
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
	s.stopListen()
	<-s.listened
	s.hubs.Stop()
	s.committer.Close()
	s.stopRetention()
	<-s.retained
	s.system.Shutdown()
	var perr error
	if s.pprof != nil {
		perr = s.pprof.Close()
	}
	lerr := s.log.Close()
	return errors.Join(herr, perr, lerr, unlockDir(s.lock, ""))
}

// readiness says why the server is not ready, if it is not: it must be
// up, and on a shared log hear the other processes' commits, or it could
// miss some.
func (s *Server) readiness() error {
	switch {
	case !s.ready.Load():
		return errors.New("the backlog or the actor system is not up")
	case !s.hearing.On():
		return errors.New("not listening for other processes' commits: the connection to the shared log is down")
	}
	return nil
}

// openStore opens (and migrates) the backlog --store names: SQLite in the
// data directory, which this process then holds locked, or a shared
// Postgres database; it logs which, and whether the last server on the
// data directory stopped cleanly.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger) (*backlog.Store, *os.File, error) {
	switch {
	case strings.HasPrefix(cfg.Store, "postgres://") || strings.HasPrefix(cfg.Store, "postgresql://"):
		log, err := backlog.OpenPostgres(ctx, cfg.Store, logger)
		if err == nil {
			// Host and database only: the URL may hold a password.
			u, _ := url.Parse(cfg.Store)
			logger.Info("backlog open", "store", "postgres", "host", u.Host, "database", strings.TrimPrefix(u.Path, "/"))
		}
		return log, nil, err
	case cfg.Store == "" || cfg.Store == "sqlite":
		lock, unclean, err := lockDir(cfg.Data)
		if err != nil {
			return nil, nil, err
		}
		log, err := backlog.OpenSQLite(ctx, cfg.Data, logger, backlog.Sync(cfg.Sync))
		if err != nil {
			return nil, nil, errors.Join(err, unlockDir(lock, unclean))
		}
		logger.Info("backlog open", "store", "sqlite", "data", cfg.Data, "sync", cfg.Sync)
		if unclean != "" {
			logger.Warn("the last server on this data directory did not stop cleanly (killed, crashed or without power): the backlog recovered what it had committed from its write-ahead log",
				"data", cfg.Data, "pid", unclean)
		}
		return log, lock, nil
	}
	return nil, nil, errors.New("--store must be empty, sqlite, or a postgres:// URL")
}

// listenTimeout bounds how long a start waits for the hint listener.
const listenTimeout = 30 * time.Second

// listen starts hearing other processes' commits on a shared log, and
// returns once it hears them: a process that served watches before could
// miss a commit made between a hub's head read and the listener's LISTEN.
// While it is down, no hub gives a joining stream its recent commits
// (hub.Hearing): what the process missed may have pushed them out of the
// log. Whenever the listener comes back after losing its connection, every
// stream ends and every hub stops (Router.EndAll), since the hints missed
// may have ended a tenant.
func (s *Server) listen(ctx context.Context) error {
	lctx, cancel := context.WithCancel(context.Background())
	s.stopListen, s.listened = cancel, make(chan struct{})
	if !s.log.Shared() {
		s.hearing.Set(true)
		close(s.listened)
		return nil
	}
	first := make(chan struct{})
	var heard bool
	var lost time.Time // when the listener lost its connection; zero while it hears
	go func() {
		defer close(s.listened)
		s.log.Listen(lctx, backlog.Hints{
			Commit:      s.hubs.Remote,
			TenantEnded: s.hubs.EndTenant,
			Revoked:     func(tenant, kind, name string) { s.api.Revoked(tenant, kind, name) },
			Listening: func(on bool) {
				s.hearing.Set(on)
				switch {
				case on && !heard:
					heard = true
					s.logger.Info("listening for other processes' commits")
					close(first)
				case on:
					s.logger.Warn("listening for other processes' commits again; ending every stream, since what was missed may have ended a tenant",
						"down", time.Since(lost).Round(time.Millisecond))
					lost = time.Time{}
					s.hubs.EndAll()
				case heard && lost.IsZero() && lctx.Err() == nil:
					lost = time.Now()
					s.logger.Warn("not listening for other processes' commits: lost the connection to the shared log; not ready until it is back")
				}
			},
		}, s.logger)
	}()
	select {
	case <-first:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("listen for other processes' commits: %w", ctx.Err())
	case <-time.After(listenTimeout):
		return fmt.Errorf("listen for other processes' commits: not listening after %s", listenTimeout)
	}
}

// claimMode refuses a data directory written in the other mode (see
// backlog.Store.ClaimMode), naming the directory and the way out.
func claimMode(ctx context.Context, log *backlog.Store, cfg Config) error {
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
		where, other := "data directory "+cfg.Data, "--data"
		if cfg.Store != "" && cfg.Store != "sqlite" {
			where, other = "the --store database", "--store"
		}
		return fmt.Errorf("%s holds %s-mode data and this server runs in %s mode; the two never mix: give this server another %s, or serve that one %s",
			where, got, want, other, how)
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
	if !loopback.Host(host) {
		return fmt.Errorf("--dev needs no credentials, so it only listens on a loopback address, not %q", addr)
	}
	return nil
}
