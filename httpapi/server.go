// Package httpapi is Edgehub's HTTP surface: the contract's routes, their
// checks in the contract's order (route, names, credentials, limits, body),
// and the watch stream's writer.
package httpapi

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/metrics"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
)

// Config is the HTTP side of the command line. Its tags are flags of
// edgehub serve (server.Config embeds it), with their EDGEHUB_ variables
// and defaults.
type Config struct {
	Dev bool `env:"EDGEHUB_DEV" help:"No credentials; every tenant exists; loopback only."`
	// AdminKey is the bearer key of the admin API; empty turns it off.
	AdminKey string `env:"EDGEHUB_ADMIN_KEY" help:"Bearer key of the admin API (prefer the environment or --admin-key-file: the command line is visible to every local user)."`
	// MaxTokenTTL caps the lifetime of minted tokens and refuses tokens
	// whose exp lies further ahead (0: no cap).
	MaxTokenTTL  time.Duration `name:"max-token-ttl" default:"24h" env:"EDGEHUB_MAX_TOKEN_TTL" help:"Longest lifetime of a token, minted or self-signed (0: no cap)."`
	Heartbeat    time.Duration `default:"15s" env:"EDGEHUB_HEARTBEAT" help:"Silence after which a stream gets a ping comment."`
	Retry        time.Duration `default:"2s" env:"EDGEHUB_RETRY" help:"Reconnect hint sent to clients."`
	MaxBody      int64         `default:"1048576" env:"EDGEHUB_MAX_BODY" help:"Largest publish body in bytes."`
	WriteTimeout time.Duration `default:"60s" env:"EDGEHUB_WRITE_TIMEOUT" help:"How long one write to a stream may block before the stream is closed."`
	// TokenAudience is what a token's aud, when it has one, must hold, so
	// that a token made for another service is not taken here; empty, the
	// URL's tenant.
	// JWKSAllowHTTP lets issuers' key sets be fetched over plain http,
	// for a provider on a trusted network or a test.
	JWKSAllowHTTP bool   `name:"jwks-allow-http" env:"EDGEHUB_JWKS_ALLOW_HTTP" help:"Fetch registered issuers' JWKS over http too, not only https (a provider on a trusted network)."`
	TokenAudience string `name:"token-audience" env:"EDGEHUB_TOKEN_AUDIENCE" help:"What the aud claim of a token, when it has one, must hold (empty: the name of the tenant in the URL); tokens without aud are accepted."`
	// AccessLog logs a line per request (no query string, no header). It
	// is off by default: the line's transient memory, at a stream's start,
	// grows the resident memory of many idle streams by half.
	AccessLog bool `env:"EDGEHUB_ACCESS_LOG" help:"Log a line per request: method, route, path (no query string), status, error code, bytes, duration, client address (refused credentials are logged at warn either way)."`
	// CORSOrigins may use the API from a browser ("*": any origin).
	CORSOrigins []string `name:"cors-origins" env:"EDGEHUB_CORS_ORIGINS" help:"Origins whose pages may use the API (comma-separated; * for any)."`
	// SpoolDir is where read answers too large for memory wait for their
	// clients, in unlinked files (empty: the system's temporary
	// directory). It is no flag of its own: the server sets it to the data
	// directory on SQLite.
	SpoolDir string `kong:"-"`
	// BodyTimeout is how long a publish body may take to arrive once its
	// headers have: a client that announces a large body and sends it
	// slowly holds its bytes for no longer than this.
	BodyTimeout time.Duration `default:"10s" env:"EDGEHUB_BODY_TIMEOUT" help:"Time a publish body has to arrive after its headers; a slower one is 400 invalid_body (0: the 1-minute read timeout)."`
}

// Tenants is the tenant store of the admin API and of credential checks.
type Tenants interface {
	Tenant(ctx context.Context, name string) (auth.Tenant, error)
	CreateTenant(ctx context.Context, name string) (auth.Tenant, bool, error)
	DeleteTenant(ctx context.Context, name string) error
	Rotate(ctx context.Context, name string) (auth.Tenant, error)
	Tenants(ctx context.Context, after string, limit int) ([]backlog.TenantEntry, error)
	auth.Store // the issuers and revoked token ids credential checks read
	PutIssuer(ctx context.Context, tenant string, iss auth.Issuer) (auth.Issuer, bool, error)
	DeleteIssuer(ctx context.Context, tenant, name string) error
	Revoke(ctx context.Context, tenant, jti string, until time.Time) error
	UpdateMercureSettings(ctx context.Context, tenant string, change func(*auth.MercureSettings) error) (auth.MercureSettings, error)
}

// Deps are the parts main builds and the routes use.
type Deps struct {
	Log     backlog.Log
	Tenants Tenants
	Limits  *limits.Limits
	// RetentionEvents is how many events retention keeps per topic (0:
	// every one), which the usage answer shows beside a tenant's events.
	RetentionEvents int64
	// AdminFailures throttles refused admin keys per client address, on
	// the admin API and the console's.
	AdminFailures *limits.Failures
	// PublishBodies bounds the publish bodies held in flight, server-wide
	// and per tenant; UnsignedBodies, a smaller budget, those read before
	// their webhook signature is checked, per tenant, and UnsignedByClient
	// the same bytes per client address.
	PublishBodies, UnsignedBodies, UnsignedByClient *limits.Budget
	Hubs                                            *hub.Router
	Metrics                                         *metrics.Metrics
	Logger                                          *slog.Logger
	// Ready tells /readyz why the server is not ready (nil: it is).
	Ready func() error
	// ReadBudget bounds the bytes of read answers (/events, /state; the hub
	// takes snapshot frames, catch-up pages and live queues from the same
	// budget) that the server holds in memory at once, however many
	// clients stop reading, in all and per tenant; SpoolBudget the bytes
	// of those answers kept on disk. Nil turns one off.
	ReadBudget, SpoolBudget *limits.Budget
	// AnonymousSelectors bounds what the selectors of anonymous streams
	// hold, compiled, in all and per tenant, and AnonymousByClient the
	// same bytes per client address: a smaller budget apart from the
	// read budget, whose tenant shares the token streams' selectors take.
	AnonymousSelectors, AnonymousByClient *limits.Budget
	// MatchWork bounds the matching work (per byte of a tested topic) of
	// the patterns of open tenant streams with a token, in all and per
	// tenant; AnonymousWork and AnonymousWorkByClient the same of streams
	// without one, apart from it, per tenant and per client address: a
	// topic new to a tenant's hub is tested against every live pattern,
	// so this is what one costs the hub at most.
	MatchWork, AnonymousWork, AnonymousWorkByClient *limits.Budget
	// Protocols are served beside the native API (Durable Streams).
	Protocols []Protocol
	// JWKSTransport carries issuers' JWKS fetches (nil: the default).
	JWKSTransport http.RoundTripper
}

// Hooks let tests hold a request inside a race window. Nil in production.
type Hooks struct {
	// AfterRegister runs after a watch is registered with its hub and
	// before the first byte of its answer is written.
	AfterRegister func(tenant, topic string)
	// BeforeBody runs when a publish, its tenant read (and its token
	// checked, if it has one), is about to read its body.
	BeforeBody func(tenant, topic string)
	// AwaitingCommit runs when a publish has been handed to its hub and
	// waits for the answer; PublisherLeft when its client has gone before
	// the answer came.
	AwaitingCommit, PublisherLeft func(tenant, topic string)
}

// Server serves the routes.
type Server struct {
	cfg    Config
	deps   Deps
	hooks  Hooks
	faults faultHooks // injected bugs; empty unless built with -tags faults
	router *httprouter.Router
	// routes are the router's routes as "METHOD /pattern", in the order
	// New registers them: what the OpenAPI document must describe.
	routes []string
	// gets are the GET routes, streamPaths those of them that are
	// streams, and heads the paths that answer HEAD themselves, for
	// answerHEAD.
	gets        []getRoute
	streamPaths map[string]bool
	heads       map[string]bool
	// adminLog samples the warnings of refused admin keys.
	adminLog *logSample
	// verifier checks tokens, with the issuers' key sets it keeps.
	verifier *auth.Verifier
	// credentialed say which paths a listed origin's pages may call with
	// their cookies (Gate.AllowCredentials).
	credentialed []func(path string) bool

	// endCtx is cancelled when the server ends its streams (EndStreams).
	endCtx  context.Context
	endAll  context.CancelFunc
	endOnce sync.Once

	mu      sync.Mutex // guards streams, held and ending
	streams map[*sseStream]struct{}
	// held are the open streams' credentials that a revocation ends them
	// by, per tenant (credentials.go).
	held map[string]map[*heldCredential]struct{}
	// onTopic counts the open topic streams of each tenant's topics, and
	// onTenant holds each tenant's open tenant streams, for the topic list.
	onTopic     map[string]map[string]int
	onTenant    map[string]map[*sseStream]struct{}
	ending      bool           // EndStreams has begun
	streamsDone sync.WaitGroup // one count per tracked stream
	// fanout writes the live pushes of the streams taken over from
	// net/http.
	fanout *fanout
	// endBy is when the streams' writes must end, in Unix nanoseconds:
	// 0 until EndStreams stores it, before it shortens each stream's
	// deadline (setWriteDeadline).
	endBy atomic.Int64
}

// endGrace is how long a stream may take, once the server is ending, to
// write its last frame: a client that stopped reading does not hold up a
// shutdown for the whole write timeout.
const endGrace = time.Second

// New builds the router.
func New(cfg Config, deps Deps, hooks Hooks) *Server {
	for _, b := range []**limits.Budget{&deps.ReadBudget, &deps.SpoolBudget, &deps.PublishBodies, &deps.UnsignedBodies, &deps.UnsignedByClient,
		&deps.AnonymousSelectors, &deps.AnonymousByClient, &deps.MatchWork, &deps.AnonymousWork, &deps.AnonymousWorkByClient} {
		if *b == nil {
			*b = limits.NewBudget(0, 0, "")
		}
	}
	s := &Server{cfg: cfg, deps: deps, hooks: hooks, faults: injectedFaults(), streams: map[*sseStream]struct{}{}, onTopic: map[string]map[string]int{}, onTenant: map[string]map[*sseStream]struct{}{},
		streamPaths: map[string]bool{}, heads: map[string]bool{},
		adminLog: newLogSample(adminLogEvery, adminLogBurst), fanout: newFanout(cfg.Heartbeat), held: map[string]map[*heldCredential]struct{}{},
		verifier: &auth.Verifier{MaxTTL: cfg.MaxTokenTTL, Audience: cfg.TokenAudience, JWKS: auth.NewJWKS(deps.JWKSTransport, cfg.JWKSAllowHTTP)}}
	s.endCtx, s.endAll = context.WithCancel(context.Background())
	r := httprouter.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleOPTIONS = false // CORS preflights are answered before the router
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, refusal.New(refusal.NotFound, "no such route"))
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, refusal.New(refusal.MethodNotAllowed, "method not allowed on this route"))
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		s.deps.Logger.Error("handler panic", "path", req.URL.Path, "panic", v)
		writeError(w, refusal.New(refusal.Internal, "internal error"))
	}
	const topicPath = "/v1/tenants/:tenant/topics/:topic"
	s.router = r
	route := s.route
	route(http.MethodPost, topicPath+"/notify", s.topicRoute(s.notify))
	s.streamRoute(topicPath+"/watch", s.topicRoute(queryToken(s.watch)))
	route(http.MethodGet, topicPath+"/events", s.topicRoute(s.events))
	route(http.MethodGet, topicPath+"/state", s.topicRoute(s.state))
	route(http.MethodGet, "/v1/tenants/:tenant/events", s.tenantRoute(s.tenantEvents))
	s.streamRoute("/v1/tenants/:tenant/watch", s.tenantRoute(s.tenantWatch))
	route(http.MethodGet, "/v1/tenants/:tenant/topics", s.tenantRoute(s.topics))
	route(http.MethodGet, "/v1/admin/tenants", s.listTenants)
	const adminPath = "/v1/admin/tenants/:tenant"
	route(http.MethodPut, adminPath, s.adminRoute(s.putTenant))
	route(http.MethodGet, adminPath, s.adminRoute(s.getTenant))
	route(http.MethodDelete, adminPath, s.adminRoute(s.deleteTenant))
	route(http.MethodPost, adminPath+"/tokens", s.adminRoute(s.postToken))
	route(http.MethodPost, adminPath+"/rotate", s.adminRoute(s.rotateTenant))
	route(http.MethodGet, adminPath+"/usage", s.adminRoute(s.tenantUsage))
	route(http.MethodGet, adminPath+"/mercure", s.adminRoute(s.getMercureSettings))
	route(http.MethodPut, adminPath+"/mercure", s.adminRoute(s.putMercureSettings))
	route(http.MethodGet, adminPath+"/issuers", s.adminRoute(s.getIssuers))
	route(http.MethodPut, adminPath+"/issuers/:name", s.adminNamedRoute("name", names.Valid, issuerRule, s.putIssuer))
	route(http.MethodGet, adminPath+"/issuers/:name", s.adminNamedRoute("name", names.Valid, issuerRule, s.getIssuer))
	route(http.MethodDelete, adminPath+"/issuers/:name", s.adminNamedRoute("name", names.Valid, issuerRule, s.deleteIssuer))
	route(http.MethodDelete, adminPath+"/tokens/:jti", s.adminNamedRoute("jti", validJTI, jtiRule, s.revokeToken))
	route(http.MethodGet, "/healthz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	route(http.MethodGet, "/readyz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		if s.deps.Ready != nil {
			if err := s.deps.Ready(); err != nil {
				writeError(w, refusal.New(refusal.NotReady, "%s", err))
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	metricsHandler := deps.Metrics.Handler()
	route(http.MethodGet, "/metrics", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		metricsHandler.ServeHTTP(w, r)
	})
	route(http.MethodGet, "/openapi.yaml", openapiDocument())
	s.consoleRoutes(route)
	for _, p := range deps.Protocols {
		p.Mount(&Gate{s: s})
	}
	s.answerHEAD()
	return s
}

// Routes are the routes as "METHOD /pattern", the native ones and the
// protocols': what the OpenAPI document describes.
func (s *Server) Routes() []string { return slices.Clone(s.routes) }

// route mounts h on the router, named for the access log and counted
// among the routes that the OpenAPI document describes.
func (s *Server) route(method, path string, h httprouter.Handle) {
	s.routes = append(s.routes, method+" "+path)
	s.router.Handle(method, path, named(method+" "+path, unescapeParams(h)))
	switch method {
	case http.MethodGet:
		s.gets = append(s.gets, getRoute{path, h})
	case http.MethodHead:
		s.heads[path] = true
	}
}

// getRoute is a GET route's path and handler.
type getRoute struct {
	path string
	h    httprouter.Handle
}

// streamRoute mounts a GET route that is a stream, which answers no HEAD:
// it would take a stream's place to send nothing.
func (s *Server) streamRoute(path string, h httprouter.Handle) {
	s.streamPaths[path] = true
	s.route(http.MethodGet, path, h)
}

// answerHEAD mounts HEAD on every GET route but the streams and those
// that answer HEAD themselves, with the GET's handler: net/http drops
// the body of a HEAD's answer and keeps its status and headers (its
// Content-Length too), as the contract asks. They are the GET
// operations of the OpenAPI document, which says so once.
func (s *Server) answerHEAD() {
	for _, g := range s.gets {
		if !s.streamPaths[g.path] && !s.heads[g.path] {
			s.router.Handle(http.MethodHead, g.path, named(http.MethodHead+" "+g.path, unescapeParams(g.h)))
		}
	}
}

// Handler is the server's http.Handler.
func (s *Server) Handler() http.Handler {
	return s.observe(s.withWriteDeadline(s.cors(routeEscaped(s.router))))
}

// EndStreams ends every open stream after its current frame, as SIGTERM
// asks, and returns once they have all ended: http.Server.Shutdown then
// sees their connections go idle, and the streams written on connections
// taken from net/http (which Shutdown does not wait for) are done too.
func (s *Server) EndStreams() {
	s.endOnce.Do(func() {
		s.endAll()
		endBy := time.Now().Add(endGrace)
		s.endBy.Store(endBy.UnixNano())
		s.mu.Lock()
		s.ending = true
		for st := range s.streams {
			st.ending(endBy)
		}
		s.mu.Unlock()
		s.streamsDone.Wait()
		s.fanout.stop()
	})
}

// track counts st among the open streams, or reports false if the server
// is ending its streams already.
func (s *Server) track(st *sseStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending {
		return false
	}
	s.streams[st] = struct{}{}
	s.streamsDone.Add(1)
	if st.topicSub == nil {
		if s.onTenant[st.tenant] == nil {
			s.onTenant[st.tenant] = map[*sseStream]struct{}{}
		}
		s.onTenant[st.tenant][st] = struct{}{}
		return true
	}
	if s.onTopic[st.tenant] == nil {
		s.onTopic[st.tenant] = map[string]int{}
	}
	s.onTopic[st.tenant][st.topic]++
	return true
}

// untrack takes st out of the open streams, if track counted it.
func (s *Server) untrack(st *sseStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.streams[st]; ok {
		delete(s.streams, st)
		s.streamsDone.Done()
		if st.topicSub == nil {
			delete(s.onTenant[st.tenant], st)
			if len(s.onTenant[st.tenant]) == 0 {
				delete(s.onTenant, st.tenant)
			}
			return
		}
		topics := s.onTopic[st.tenant]
		if topics[st.topic]--; topics[st.topic] == 0 {
			delete(topics, st.topic)
			if len(topics) == 0 {
				delete(s.onTopic, st.tenant)
			}
		}
	}
}

// openOn is what the topic list counts of the tenant's open streams: by
// topic, its topic streams and the tenant streams that name it exactly
// (watching it, they make it exist); and the tenant streams that select
// by pattern, grouped by their selection, for the topics listed.
func (s *Server) openOn(tenant string) (map[string]int, []selectionCount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	open := maps.Clone(s.onTopic[tenant])
	if open == nil {
		open = map[string]int{}
	}
	groups := map[string]*selectionCount{}
	for st := range s.onTenant[tenant] {
		for _, t := range st.sel.Exact() {
			open[t]++
		}
		if !st.sel.Patterned() {
			continue
		}
		k := st.sel.Key()
		if g := groups[k]; g != nil {
			g.n++
		} else {
			groups[k] = &selectionCount{sel: st.sel, n: 1}
		}
	}
	counts := make([]selectionCount, 0, len(groups))
	for _, g := range groups {
		counts = append(counts, *g)
	}
	return open, counts
}

// selectionCount is n open tenant streams with one selection.
type selectionCount struct {
	sel Selection
	n   int
}

type topicHandler func(w http.ResponseWriter, r *http.Request, tenant, topic string)

// topicRoute checks the names and the credentials of a topic route before
// its handler runs.
func (s *Server) topicRoute(h topicHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant, topic := p.ByName("tenant"), p.ByName("topic")
		if !names.Valid(tenant) {
			writeError(w, refusal.New(refusal.InvalidName,
				"tenant must be 1 to %d of A-Z a-z 0-9 . _ : ~ - and not start with '.'", names.MaxName))
			return
		}
		if !names.ValidTopic(topic) {
			writeError(w, refusal.New(refusal.InvalidName,
				"topic must be 1 to %d bytes of UTF-8 with no control or format character, not start with '.', and not be '*'", names.MaxTopic))
			return
		}
		h(w, r, tenant, topic)
	}
}

// parsePosition reads a non-negative decimal integer, digits only.
func parsePosition(v string) (int64, bool) {
	if v == "" || len(v) > 19 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}
