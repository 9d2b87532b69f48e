package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// MercureSettings are a tenant's Mercure settings, each off by default:
// subscribers without a token, active subscriptions (their events and
// API), and the origins whose pages may publish with a cookie's token.
type MercureSettings struct {
	Anonymous      bool     `json:"anonymous"`
	Subscriptions  bool     `json:"subscriptions"`
	PublishOrigins []string `json:"publish_origins"`
}

// MercureChange names the settings to change; nil fields stay as they
// are.
type MercureChange struct {
	Anonymous      *bool     `json:"anonymous,omitempty"`
	Subscriptions  *bool     `json:"subscriptions,omitempty"`
	PublishOrigins *[]string `json:"publish_origins,omitempty"`
}

// MercureSettings reads the tenant's Mercure settings.
func (c *Client) MercureSettings(ctx context.Context, tenant string) (MercureSettings, error) {
	var m MercureSettings
	_, err := c.do(ctx, c.adminCall(http.MethodGet, tenant, "/mercure", nil, "read the Mercure settings of"), &m)
	return m, err
}

// SetMercureSettings changes the settings ch names and returns them all.
func (c *Client) SetMercureSettings(ctx context.Context, tenant string, ch MercureChange) (MercureSettings, error) {
	var m MercureSettings
	body, err := json.Marshal(ch)
	if err != nil {
		return m, fmt.Errorf("change the Mercure settings of %s: %w", tenant, err)
	}
	_, err = c.do(ctx, c.adminCall(http.MethodPut, tenant, "/mercure", body, "change the Mercure settings of"), &m)
	return m, err
}
