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
	"net/http"
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
	// Subscriptions turns on the protocol's active subscriptions: an
	// event when a subscription starts or ends, and the API that lists
	// them. Each costs a commit, so a hub with no use for them may save it.
	Subscriptions bool `name:"mercure-subscriptions" negatable:"" default:"true" env:"EDGEHUB_MERCURE_SUBSCRIPTIONS" help:"Publish Mercure subscription events when a subscription starts or ends, and serve the subscriptions API under the hub URL."`
}

// Protocol is the Mercure protocol, mounted on the Gate.
type Protocol struct {
	cfg    Config
	hooks  Hooks
	g      *httpapi.Gate
	active active
}

// Hooks let in-process tests hold a subscriber inside the windows of its
// subscriptions' bookkeeping.
type Hooks struct {
	// BeforeAnnounce runs once a subscriber's subscriptions are listed and
	// before their start is committed; BeforeTellEnd once they are
	// unlisted and before their end is.
	BeforeAnnounce, BeforeTellEnd func(tenant string)
}

// New is the protocol with its configuration.
func New(cfg Config, hooks Hooks) *Protocol { return &Protocol{cfg: cfg, hooks: hooks} }

// Path is a hub's path below its tenant's, and the well-known one.
const Path = "/.well-known/mercure"

// The cookies a browser's client presents its token in: 0.x's name,
// which the contract names, and the current revision's.
var cookieNames = []string{"mercureAuthorization", "__Secure-mercure_access_token"}

// Mount registers the hub's routes.
func (p *Protocol) Mount(g *httpapi.Gate) {
	p.g = g
	prefixes := []string{"/v1/tenants/:tenant"}
	if p.cfg.Tenant != "" {
		prefixes = append(prefixes, "")
	}
	for _, prefix := range prefixes {
		g.Handle(http.MethodPost, prefix+Path, p.hub(p.publish))
		g.HandleStream(prefix+Path, p.hub(p.subscribe))
		if p.cfg.Subscriptions {
			for _, api := range []string{"", "/:type/:match", "/:type/:match/:subscriber"} {
				g.Handle(http.MethodGet, prefix+subscriptionsPath+api, p.hub(p.subscriptions))
			}
		}
	}
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

// withToken moves the token of a request that has no Authorization
// header into one: from 0.x's authorization query parameter, else from a
// cookie (cookieNames, in order): the protocol's order of preference.
func withToken(r *http.Request) *http.Request {
	if r.Header.Get("Authorization") != "" {
		return r
	}
	raw := r.URL.Query().Get("authorization")
	for _, name := range cookieNames {
		if c, err := r.Cookie(name); raw == "" && err == nil && c.Value != "" {
			raw = c.Value
			break
		}
	}
	if raw == "" {
		return r
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(raw))
	return r
}

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
