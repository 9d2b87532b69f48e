// Package mercure serves the Mercure protocol (mercure.rocks) over
// Edgehub's hubs, beside the native API (plan 041): each tenant is a
// Mercure hub at /v1/tenants/{tenant}/.well-known/mercure, and one tenant
// may also be served at /.well-known/mercure, where Mercure's clients
// look by default. An update is a durable event of its canonical topic,
// so native streams see it too. Credentials, limits, budgets and the
// error shape are the native API's, through httpapi.Gate; the package
// holds no actors and no SQL.
package mercure

import (
	"context"
	"net/http"
	"regexp"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
)

// Config is the protocol's part of the command line (server.Config
// embeds it).
type Config struct {
	// Tenant is served at /.well-known/mercure too; empty: only under
	// each tenant's path.
	Tenant string `name:"mercure-tenant" env:"EDGEHUB_MERCURE_TENANT" help:"Tenant also served as the Mercure hub at /.well-known/mercure, where Mercure clients look by default (it may be created after the server starts)."`
	// Subscriptions lets tenants turn on the protocol's active
	// subscriptions (their Mercure setting "subscriptions", off by
	// default): an event when a subscription starts or ends, and the API
	// that lists them. Off here, no tenant has them, whatever it set.
	Subscriptions bool `name:"mercure-subscriptions" negatable:"" default:"true" env:"EDGEHUB_MERCURE_SUBSCRIPTIONS" help:"Let tenants turn on Mercure's active subscriptions (their setting \"subscriptions\", off by default): subscription events and the subscriptions API. --no-mercure-subscriptions turns them off for every tenant."`
}

// Protocol is the Mercure protocol, mounted on the Gate.
type Protocol struct {
	cfg      Config
	hooks    Hooks
	g        *httpapi.Gate
	presence presence
}

// Hooks let in-process tests hold a subscriber inside the windows of its
// subscriptions' bookkeeping.
type Hooks struct {
	// BeforeAnnounce runs before a subscriber's start is committed, and
	// BeforeTellEnd before its end is.
	BeforeAnnounce, BeforeTellEnd func(tenant string)
}

// New is the protocol with its configuration.
func New(cfg Config, hooks Hooks) *Protocol {
	return &Protocol{cfg: cfg, hooks: hooks, presence: newPresence()}
}

// Path is a hub's path below its tenant's, and the well-known one.
const Path = "/.well-known/mercure"

// The cookies a browser's client presents its token in: 0.x's name,
// which the contract names, and the current revision's.
var cookieNames = []string{"mercureAuthorization", "__Secure-mercure_access_token"}

// Mount registers the hub's routes. The pages of the origins
// --cors-origins lists may call them with their cookies, where browsers
// keep Mercure's token. Without --mercure-tenant, the well-known path,
// where Mercure's clients look by default, answers where the hubs are.
func (p *Protocol) Mount(g *httpapi.Gate) {
	p.g = g
	g.AllowCredentials(isHubPath)
	prefixes := []string{"/v1/tenants/:tenant"}
	if p.cfg.Tenant != "" {
		prefixes = append(prefixes, "")
	} else {
		g.Handle(http.MethodGet, Path, p.noDefaultHub)
		g.Handle(http.MethodPost, Path, p.noDefaultHub)
		g.Handle(http.MethodGet, subscriptionsPath, p.noDefaultHub)
	}
	for _, prefix := range prefixes {
		g.Handle(http.MethodPost, prefix+Path, p.hub(p.publish))
		g.HandleStream(prefix+Path, p.hub(p.subscribe))
		if p.cfg.Subscriptions {
			for _, api := range []string{"", "/:type", "/:type/:match", "/:type/:match/:subscriber"} {
				g.Handle(http.MethodGet, prefix+subscriptionsPath+api, p.hub(p.subscriptions))
			}
		}
	}
}

// hubPaths are the Mercure routes, as their escaped paths are: a
// tenant's hub or the well-known one, and the subscriptions API below
// either (a tenant's name holds no '/'; an escaped topic in another route's
// path holds none either).
var hubPaths = regexp.MustCompile(`^(/v1/tenants/[^/]+)?/\.well-known/mercure(/subscriptions(/[^/]+){0,3})?$`)

// isHubPath says whether path, escaped, is a Mercure route's.
func isHubPath(path string) bool { return hubPaths.MatchString(path) }

// noDefaultHub answers the well-known path of a server that serves no
// tenant there: 404, saying where the hubs are and how to serve one here.
func (p *Protocol) noDefaultHub(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	p.g.WriteError(w, refusal.New(refusal.NotFound,
		"no Mercure hub here: each tenant's hub is at /v1/tenants/{tenant}%s; start the server with --mercure-tenant NAME (EDGEHUB_MERCURE_TENANT) to serve one tenant at %s too", Path, Path))
}

type hubHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, tenant string)

// hub finds the tenant of the request (its path's, or the configured
// one) and hands h a request whose token, wherever the protocol lets the
// client put it, is in the Authorization header, where the Gate looks.
func (p *Protocol) hub(h hubHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		tenant := ps.ByName("tenant")
		if tenant == "" {
			tenant = p.cfg.Tenant
		}
		if !names.Valid(tenant) {
			p.g.WriteError(w, refusal.New(refusal.InvalidName, "tenant names are 1 to %d of A-Z a-z 0-9 . _ : ~ - and do not start with '.'", names.MaxName))
			return
		}
		h(w, withToken(r), ps, tenant)
	}
}

// fromCookie marks, in a request's context, a token that came from a
// cookie, which a browser sends whichever site made the request.
type fromCookie struct{}

// withToken moves the token of a request that has no Authorization
// header into one: from 0.x's authorization query parameter, else from a
// cookie (cookieNames, in order): the protocol's order of preference. A
// cookie's is marked (byCookie).
func withToken(r *http.Request) *http.Request {
	if r.Header.Get("Authorization") != "" {
		return r
	}
	raw, cookie := r.URL.Query().Get("authorization"), false
	for _, name := range cookieNames {
		if c, err := r.Cookie(name); raw == "" && err == nil && c.Value != "" {
			raw, cookie = c.Value, true
			break
		}
	}
	if raw == "" {
		return r
	}
	ctx := r.Context()
	if cookie {
		ctx = context.WithValue(ctx, fromCookie{}, true)
	}
	r = r.Clone(ctx)
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(raw))
	return r
}

// byCookie says whether r's token came from a cookie.
func byCookie(r *http.Request) bool { return r.Context().Value(fromCookie{}) != nil }

// bearerError is the RFC 6750 challenge of a refused credential, its
// error_description the refusal's message (which check failed), in the
// characters RFC 6750 allows there (printable ASCII but '"' and '\'; any
// other is left out): with no error code when the request presented no
// credential (RFC 6750 3.1).
func bearerError(w http.ResponseWriter, r *http.Request, e *refusal.Error) {
	challenge := `Bearer realm="mercure"`
	switch {
	case e.Code == refusal.Unauthorized && r.Header.Get("Authorization") == "":
	case e.Code == refusal.Unauthorized:
		challenge += `, error="invalid_token"`
	case e.Code == refusal.Forbidden:
		challenge += `, error="insufficient_scope"`
	default:
		return
	}
	description := strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return -1
		}
		return c
	}, e.Message)
	w.Header().Set("WWW-Authenticate", challenge+`, error_description="`+description+`"`)
}
