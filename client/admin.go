package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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
	k := call{method: method, url: c.url(path, nil), body: body, bearer: c.AdminKey, what: what + " " + tenant}
	if body != nil {
		k.header = http.Header{"Content-Type": {"application/json"}}
	}
	return k
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
