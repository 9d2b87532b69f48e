package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Tenant is a tenant with its secrets: tokens for its routes are signed
// with SigningSecret (the bytes of the string), webhook signatures made
// with WebhookSecret. Keep both as you keep passwords.
type Tenant struct {
	Name          string `json:"tenant"`
	SigningSecret string `json:"signing_secret"`
	WebhookSecret string `json:"webhook_secret"`
}

// TokenRequest is what a minted token allows: topic patterns to publish
// to and to subscribe to (watch, events, state), where * matches any run
// of characters, and how long it lasts (0: the server's default, 1h).
type TokenRequest struct {
	Publish   []string
	Subscribe []string
	TTL       time.Duration
}

func (c *Client) adminCall(method, tenant, route string, body []byte, what string) call {
	path := "/v1/admin/tenants/" + url.PathEscape(tenant) + route
	k := call{method: method, url: c.url(path, nil), body: body, bearer: c.AdminKey, admin: true, what: what + " " + tenant}
	if body != nil {
		k.header = http.Header{"Content-Type": {"application/json"}}
	}
	return k
}

// TenantEntry is one tenant of the admin API's list: its name and when it
// was created, never its secrets (Tenant reads those).
type TenantEntry struct {
	Name    string    `json:"tenant"`
	Created time.Time `json:"created"`
}

// TenantPage is one answer of the tenant list: tenants in byte order of
// their names, and the name the next page starts after.
type TenantPage struct {
	Tenants   []TenantEntry `json:"tenants"`
	NextAfter string        `json:"next_after"`
}

// Tenants reads one page of the tenants the admin API created, named
// after after, up to limit (0: the server's default, 100). An answer with
// no tenants is the end.
func (c *Client) Tenants(ctx context.Context, after string, limit int) (TenantPage, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p TenantPage
	_, err := c.do(ctx, call{method: http.MethodGet, url: c.url("/v1/admin/tenants", q), bearer: c.AdminKey, admin: true,
		what: "list the tenants"}, &p)
	return p, err
}

// CreateTenant creates the tenant, or returns it as it is if it exists;
// created says which.
func (c *Client) CreateTenant(ctx context.Context, name string) (t Tenant, created bool, err error) {
	status, err := c.do(ctx, c.adminCall(http.MethodPut, name, "", nil, "create tenant"), &t)
	return t, status == http.StatusCreated, err
}

// Tenant returns the tenant; one that does not exist is an *APIError with
// code unknown_tenant.
func (c *Client) Tenant(ctx context.Context, name string) (Tenant, error) {
	var t Tenant
	_, err := c.do(ctx, c.adminCall(http.MethodGet, name, "", nil, "get tenant"), &t)
	return t, err
}

// RotateTenant replaces both of the tenant's secrets and returns the new
// ones. Tokens and webhook signatures made with the old ones are refused
// from then on, and the tenant's open streams end.
func (c *Client) RotateTenant(ctx context.Context, name string) (Tenant, error) {
	var t Tenant
	_, err := c.do(ctx, c.adminCall(http.MethodPost, name, "/rotate", nil, "rotate tenant"), &t)
	return t, err
}

// DeleteTenant removes the tenant and all its data and ends its streams.
func (c *Client) DeleteTenant(ctx context.Context, name string) error {
	_, err := c.do(ctx, c.adminCall(http.MethodDelete, name, "", nil, "delete tenant"), nil)
	return err
}

// MintToken returns a token of the tenant that allows what r says.
func (c *Client) MintToken(ctx context.Context, tenant string, r TokenRequest) (string, error) {
	req := struct {
		Publish   []string `json:"publish"`
		Subscribe []string `json:"subscribe"`
		TTL       string   `json:"ttl,omitempty"`
	}{Publish: append([]string{}, r.Publish...), Subscribe: append([]string{}, r.Subscribe...)} // [] rather than null
	if r.TTL != 0 {
		req.TTL = r.TTL.String()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("mint a token of %s: %w", tenant, err)
	}
	var ans struct {
		Token string `json:"token"`
	}
	_, err = c.do(ctx, c.adminCall(http.MethodPost, tenant, "/tokens", body, "mint a token of"), &ans)
	return ans.Token, err
}

// Issuer is a token issuer a tenant trusts besides its signing secret:
// its tokens (iss Issuer, aud holding Audience when it is set) are
// checked with the keys of JWKSURL, or with Key for Alg (a PEM public
// key, or an HS secret, which no answer holds).
type Issuer struct {
	Name     string `json:"name,omitempty"`
	Issuer   string `json:"issuer,omitempty"`
	Audience string `json:"audience,omitempty"`
	JWKSURL  string `json:"jwks_url,omitempty"`
	Alg      string `json:"alg,omitempty"`
	Key      string `json:"key,omitempty"`
	// MaxTTL caps how far ahead its tokens' exp may lie, a Go duration
	// ("0s": no cap); empty, the server's --max-token-ttl.
	MaxTTL string `json:"max_ttl,omitempty"`
	// RequireExp, false, accepts its tokens without exp; nil in a
	// registration is true, and an answer always says.
	RequireExp *bool `json:"require_exp,omitempty"`
	// Actions are what its tokens may grant: ["publish", "subscribe"]
	// (nil in a registration) or ["subscribe"].
	Actions []string `json:"actions,omitempty"`
}

// PutIssuer registers the issuer under its Name, or replaces the one of
// that name (ending the streams its tokens opened); created says which.
func (c *Client) PutIssuer(ctx context.Context, tenant string, is Issuer) (out Issuer, created bool, err error) {
	named := is.Name
	is.Name = "" // the path names it
	body, err := json.Marshal(is)
	if err != nil {
		return out, false, fmt.Errorf("register issuer %s of %s: %w", named, tenant, err)
	}
	status, err := c.do(ctx, c.adminCall(http.MethodPut, tenant, "/issuers/"+url.PathEscape(named), body, "register issuer "+named+" of"), &out)
	return out, status == http.StatusCreated, err
}

// Issuers lists the tenant's issuers, in name order.
func (c *Client) Issuers(ctx context.Context, tenant string) ([]Issuer, error) {
	var ans struct {
		Issuers []Issuer `json:"issuers"`
	}
	_, err := c.do(ctx, c.adminCall(http.MethodGet, tenant, "/issuers", nil, "list the issuers of"), &ans)
	return ans.Issuers, err
}

// DeleteIssuer removes the issuer: its tokens are refused from then on,
// and the streams they opened end.
func (c *Client) DeleteIssuer(ctx context.Context, tenant, name string) error {
	_, err := c.do(ctx, c.adminCall(http.MethodDelete, tenant, "/issuers/"+url.PathEscape(name), nil, "delete issuer "+name+" of"), nil)
	return err
}

// RevokeToken revokes every token of the tenant whose jti is jti until
// it expires: refused from then on, and the streams it opened end.
func (c *Client) RevokeToken(ctx context.Context, tenant, jti string) error {
	_, err := c.do(ctx, c.adminCall(http.MethodDelete, tenant, "/tokens/"+url.PathEscape(jti), nil, "revoke token "+jti+" of"), nil)
	return err
}

// Used is one of a tenant's measures beside its limit (0: none).
type Used struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
}

// Usage is what a tenant holds beside its limits: stored bytes (as the
// quota counts them), topics, retained events (beside retention's count
// per topic) and streams open at the answering server.
type Usage struct {
	Tenant      string `json:"tenant"`
	StoredBytes Used   `json:"stored_bytes"`
	Topics      Used   `json:"topics"`
	Events      struct {
		Used          int64 `json:"used"`
		LimitPerTopic int64 `json:"limit_per_topic"`
	} `json:"events"`
	Streams Used `json:"streams"`
}

// Usage reads what the tenant holds beside its limits.
func (c *Client) Usage(ctx context.Context, tenant string) (Usage, error) {
	var u Usage
	_, err := c.do(ctx, c.adminCall(http.MethodGet, tenant, "/usage", nil, "read the usage of"), &u)
	return u, err
}
