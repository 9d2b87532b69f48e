package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"
	"golang.org/x/time/rate"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
)

// adminRoute checks the tenant name, then the admin key, before h.
func (s *Server) adminRoute(h func(w http.ResponseWriter, r *http.Request, tenant string)) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant := p.ByName("tenant")
		if !names.Valid(tenant) {
			writeError(w, refusal.New(refusal.InvalidName, "tenant names follow the name rules"))
			return
		}
		if !s.adminAllowed(w, r, "the admin API needs the admin key as a bearer token") {
			return
		}
		h(w, r, tenant)
	}
}

// adminAllowed lets r in if it carries the admin key as a bearer token,
// and otherwise answers it: 429 rate_limited while the client's address
// has spent its refused keys (limits.Failures), the right key included,
// so that no one guesses faster than the throttle's rate; else 401 with
// message. A request that presented a key that is not the admin key
// spends one failure of its address; one that presented none guesses
// nothing and spends nothing. Each refusal is a security event, logged
// at warn here rather than as a request line, and sampled (adminLog) so
// that a flood of guesses writes a few lines, each with the number of
// refusals since the last line, instead of one line each.
func (s *Server) adminAllowed(w http.ResponseWriter, r *http.Request, message string) bool {
	now := time.Now()
	client := clientHost(r)
	if aerr := s.deps.AdminFailures.Admit(client, now); aerr != nil {
		writeError(w, aerr)
		return false
	}
	if s.adminKeyGiven(r) {
		return true
	}
	reason := "no admin key"
	if r.Header.Get("Authorization") != "" {
		reason = "not the admin key"
		s.deps.AdminFailures.Failed(client, now)
	}
	if o := observedOf(w); o != nil {
		o.logged = true
	}
	if unlogged, ok := s.adminLog.take(now); ok {
		s.deps.Logger.LogAttrs(r.Context(), slog.LevelWarn, "admin key refused",
			slog.String("path", r.URL.Path), slog.String("reason", reason),
			slog.String("client", r.RemoteAddr), slog.Int("unlogged", unlogged))
	}
	writeError(w, refusal.New(refusal.Unauthorized, "%s", message))
	return false
}

// clientHost is the address a request came from: its connection's peer,
// without the port. A header such as X-Forwarded-For is whatever the
// client writes in it, and so nothing to throttle by.
func clientHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	// One IPv6 client holds a whole /64 (RFC 6177): its addresses are one.
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && !ip.Is4In6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return host
}

// The admin key's refusals are logged at most adminLogBurst at once and
// then one a second (adminLogEvery), server-wide, however many addresses
// they come from.
const (
	adminLogBurst = 10
	adminLogEvery = time.Second
)

// logSample lets lines through at a rate, and counts the ones it held
// back for the next line to tell.
type logSample struct {
	mu   sync.Mutex
	lim  *rate.Limiter
	held int
}

func newLogSample(every time.Duration, burst int) *logSample {
	return &logSample{lim: rate.NewLimiter(rate.Every(every), burst)}
}

// take reports whether a line may be written now and, if it may, how many
// were held back since the last one.
func (l *logSample) take(now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lim.AllowN(now, 1) {
		l.held++
		return 0, false
	}
	held, l.held = l.held, 0
	return held, true
}

// adminKeyGiven reports whether r carries the admin key as a bearer
// token; without an admin key configured, none does.
func (s *Server) adminKeyGiven(r *http.Request) bool {
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return s.cfg.AdminKey != "" && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(s.cfg.AdminKey)) == 1
}

// writeSecrets answers a tenant body: it holds secrets, so no cache may
// keep it.
func writeSecrets(w http.ResponseWriter, status int, t auth.Tenant) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, t)
}

// listTenants answers GET /v1/admin/tenants: a page of the tenants'
// names, in byte order after ?after=, for a console or an operator to
// find a tenant without knowing its name. Names only, never secrets.
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if !s.adminAllowed(w, r, "the admin API needs the admin key as a bearer token") {
		return
	}
	q := r.URL.Query()
	limit, aerr := limitParam(q)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	after := q.Get("after")
	if after != "" && !names.Valid(after) {
		writeError(w, refusal.New(refusal.InvalidName, "after is a tenant name, and tenant names follow the name rules"))
		return
	}
	list, err := s.deps.Tenants.Tenants(r.Context(), after, limit)
	if err != nil {
		s.deps.Logger.Error("list tenants", "err", err)
		writeError(w, refusal.New(refusal.Unavailable, "the tenants could not be listed"))
		return
	}
	type entry struct {
		Tenant  string    `json:"tenant"`
		Created time.Time `json:"created"`
	}
	page := struct {
		Tenants   []entry `json:"tenants"`
		NextAfter string  `json:"next_after"`
	}{Tenants: make([]entry, 0, len(list)), NextAfter: after}
	for _, t := range list {
		page.Tenants = append(page.Tenants, entry{t.Name, t.Created})
		page.NextAfter = t.Name
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) putTenant(w http.ResponseWriter, r *http.Request, name string) {
	t, created, err := s.deps.Tenants.CreateTenant(r.Context(), name)
	if err != nil {
		s.deps.Logger.Error("create tenant", "tenant", name, "err", err)
		writeError(w, refusal.New(refusal.Unavailable, "the tenant could not be created"))
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.adminAction(r, "tenant created", name)
	}
	writeSecrets(w, status, t)
}

// adminAction logs, at info, an admin call that changed something, with
// the tenant and the client's address and whatever attrs say of it:
// never a secret or a token, which the answer alone carries.
func (s *Server) adminAction(r *http.Request, what, tenant string, attrs ...slog.Attr) {
	s.deps.Logger.LogAttrs(r.Context(), slog.LevelInfo, what,
		append([]slog.Attr{slog.String("tenant", tenant), slog.String("client", r.RemoteAddr)}, attrs...)...)
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request, name string) {
	if t, ok := s.adminTenant(w, r, name); ok {
		writeSecrets(w, http.StatusOK, t)
	}
}

// used is one measure of a tenant beside its cap (0: none).
type used struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
}

// usedPerTopic is a measure whose cap is per topic (retention's).
type usedPerTopic struct {
	Used          int64 `json:"used"`
	LimitPerTopic int64 `json:"limit_per_topic"`
}

// tenantUsage answers what the tenant holds beside its limits, so that a
// 429 quota_exceeded or too_many_streams can be seen coming: its stored
// bytes, topics and retained events in the log, and its streams open at
// this server.
func (s *Server) tenantUsage(w http.ResponseWriter, r *http.Request, name string) {
	if _, ok := s.adminTenant(w, r, name); !ok {
		return
	}
	u, err := s.deps.Log.Usage(r.Context(), name)
	if s.refuseAdmin(w, err, "read", name) {
		return
	}
	open, streamLimit := s.deps.Limits.TenantStreams(name)
	writeJSON(w, http.StatusOK, struct {
		Tenant      string       `json:"tenant"`
		StoredBytes used         `json:"stored_bytes"`
		Topics      used         `json:"topics"`
		Events      usedPerTopic `json:"events"`
		Streams     used         `json:"streams"`
	}{name, used{u.Bytes, u.Quotas.TenantBytes}, used{u.Topics, u.Quotas.TenantTopics},
		usedPerTopic{u.Events, s.deps.RetentionEvents}, used{int64(open), int64(streamLimit)}})
}

// rotateTenant replaces both secrets and the generation, then ends the
// tenant's streams (their clients reconnect with new tokens); every
// credential made with the old secrets is 401 from the moment it answers.
func (s *Server) rotateTenant(w http.ResponseWriter, r *http.Request, name string) {
	t, err := s.deps.Tenants.Rotate(r.Context(), name)
	if s.refuseAdmin(w, err, "rotated", name) {
		return
	}
	s.deps.Hubs.EndTenant(name)
	s.adminAction(r, "tenant rotated", name)
	writeSecrets(w, http.StatusOK, t)
}

// adminTenant looks a tenant up for the admin API, where an unknown one is
// 404 (the admin key is good; the tenant is what is missing). A lookup
// never creates anything, dev mode included.
func (s *Server) adminTenant(w http.ResponseWriter, r *http.Request, name string) (auth.Tenant, bool) {
	t, err := s.deps.Tenants.Tenant(r.Context(), name)
	return t, !s.refuseAdmin(w, err, "read", name)
}

// refuseAdmin answers an admin call on tenant name that failed: 404 for a
// tenant that does not exist (the admin key is good; the tenant is what
// is missing), 503 if the store could not do it. It reports whether it
// answered.
func (s *Server) refuseAdmin(w http.ResponseWriter, err error, done, name string) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, backlog.ErrNoTenant):
		writeError(w, refusal.New(refusal.UnknownTenant, "no tenant %s", name))
	default:
		s.deps.Logger.Error("tenant not "+done, "tenant", name, "err", err)
		writeError(w, refusal.New(refusal.Unavailable, "the tenant could not be %s", done))
	}
	return true
}

type tokenRequest struct {
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
	TTL       string   `json:"ttl"`
}

func (s *Server) postToken(w http.ResponseWriter, r *http.Request, name string) {
	t, ok := s.adminTenant(w, r, name)
	if !ok {
		return
	}
	var req tokenRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, refusal.New(refusal.InvalidJSON, "the body must be {\"publish\": [...], \"subscribe\": [...], \"ttl\": \"1h\"}"))
		return
	}
	ttl := time.Hour
	if s.cfg.MaxTokenTTL > 0 {
		ttl = min(ttl, s.cfg.MaxTokenTTL)
	}
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			writeError(w, refusal.New(refusal.InvalidTTL, "ttl must be a positive Go duration such as 1h"))
			return
		}
	}
	if s.cfg.MaxTokenTTL > 0 && ttl > s.cfg.MaxTokenTTL {
		writeError(w, refusal.New(refusal.InvalidTTL, "ttl may be at most %v (--max-token-ttl)", s.cfg.MaxTokenTTL))
		return
	}
	tok, err := auth.Mint(t, req.Publish, req.Subscribe, ttl, time.Now())
	if err != nil {
		writeError(w, refusal.New(refusal.Internal, "the token could not be signed"))
		return
	}
	s.adminAction(r, "token minted", name, slog.String("ttl", ttl.String()),
		slog.Any("publish", req.Publish), slog.Any("subscribe", req.Subscribe))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, map[string]string{"token": tok})
}

// deleteTenant removes the tenant first (new requests are refused), then
// ends its streams by stopping its hubs, whose data is already gone. In
// dev mode every tenant exists, so one with no row is deleted too: its
// topics go all the same.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request, name string) {
	err := s.deps.Tenants.DeleteTenant(r.Context(), name)
	if s.cfg.Dev && errors.Is(err, backlog.ErrNoTenant) {
		err = nil
	}
	if s.refuseAdmin(w, err, "deleted", name) {
		return
	}
	s.deps.Hubs.EndTenant(name)
	s.adminAction(r, "tenant deleted", name)
	w.WriteHeader(http.StatusNoContent)
}
