package auth

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Tenant is a tenant with its secrets, as the admin API returns it.
type Tenant struct {
	Name          string `json:"tenant"`
	SigningSecret string `json:"signing_secret"`
	WebhookSecret string `json:"webhook_secret"`
	// ID is the incarnation (never reused); Generation changes with every
	// rotation. A request authorized against one commits only while the
	// tenant still has it.
	ID         int64 `json:"-"`
	Generation int64 `json:"-"`
	// Mercure is what the tenant opened of its Mercure hub beyond what a
	// token allows; read with the row, so every request sees the settings
	// as they are when it is checked.
	Mercure MercureSettings `json:"-"`
}

// MercureSettings are a tenant's choices for its Mercure hub, each off by
// default as in Mercure's own hub: what they open costs the server work on
// behalf of clients that may hold no credential at all.
type MercureSettings struct {
	// Anonymous serves subscribers that present no token (public
	// updates only); off, they are refused as a tenant that does not
	// exist is, so that a stranger learns nothing of the tenant.
	Anonymous bool `json:"anonymous"`
	// Subscriptions announces subscriptions with a token as they start
	// and end, and serves the subscriptions API; off, the API is 404 and
	// nothing is announced.
	Subscriptions bool `json:"subscriptions"`
	// PublishOrigins are the origins, besides the hub's own, whose pages
	// may publish with a token from a cookie: a browser sends the cookie
	// on a cross-site form's POST, so without this list any site could
	// publish in the name of a visitor (cross-site request forgery). "*"
	// allows every origin.
	PublishOrigins []string `json:"publish_origins"`
}

// The bounds of a tenant's publish origins.
const (
	MaxPublishOrigins = 100
	maxOrigin         = 256
)

// ErrInvalidSettings says what is wrong with a tenant's settings.
var ErrInvalidSettings = errors.New("invalid settings")

// Check refuses settings that could never match a browser's Origin: each
// publish origin is "*" or scheme://host[:port], http or https, with
// nothing after the authority, at most MaxPublishOrigins of them.
func (m *MercureSettings) Check() error {
	if len(m.PublishOrigins) > MaxPublishOrigins {
		return fmt.Errorf("%w: at most %d publish origins", ErrInvalidSettings, MaxPublishOrigins)
	}
	for _, o := range m.PublishOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || len(o) > maxOrigin || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#") {
			return fmt.Errorf("%w: publish origin %q is not \"*\" or an origin such as https://app.example.com[:port]", ErrInvalidSettings, o)
		}
	}
	return nil
}

// AllowsPublishFrom says whether a page of origin may publish with a
// cookie's token at a hub that the request reached as host: its own pages
// may (their origin's host is the hub's, whatever the scheme a proxy in
// front ended), and so may the listed origins'.
func (m *MercureSettings) AllowsPublishFrom(origin, host string) bool {
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, host) {
		return true
	}
	return slices.Contains(m.PublishOrigins, "*") || slices.ContainsFunc(m.PublishOrigins, func(o string) bool {
		return strings.EqualFold(o, origin)
	})
}
