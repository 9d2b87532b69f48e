package main

import "github.com/edgehub/edgehub/client"

// tenantMercureCmd reads or changes a tenant's Mercure settings.
type tenantMercureCmd struct {
	tenantArg
	Anonymous        *bool    `negatable:"" help:"Serve subscribers that present no token (public updates only); --no-anonymous refuses them (the default)."`
	Subscriptions    *bool    `negatable:"" help:"Announce subscriptions with a token as they start and end and serve the subscriptions API; --no-subscriptions turns them off (the default)."`
	PublishOrigin    []string `name:"publish-origin" placeholder:"ORIGIN" help:"An origin (https://app.example.com) whose pages may publish with a token from a cookie, besides the hub's own; repeat for several. Replaces the list."`
	NoPublishOrigins bool     `name:"no-publish-origins" help:"Empty the list of publish origins: only the hub's own pages may publish with a cookie."`
}

// Run prints the settings, after changing those the flags name.
func (c *tenantMercureCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	ch := client.MercureChange{Anonymous: c.Anonymous, Subscriptions: c.Subscriptions}
	switch {
	case c.NoPublishOrigins:
		ch.PublishOrigins = &[]string{}
	case len(c.PublishOrigin) > 0:
		ch.PublishOrigins = &c.PublishOrigin
	}
	var (
		m   client.MercureSettings
		err error
	)
	if ch == (client.MercureChange{}) {
		m, err = c.client().MercureSettings(ctx, c.Tenant)
	} else {
		m, err = c.client().SetMercureSettings(ctx, c.Tenant, ch)
	}
	if err != nil {
		return err
	}
	return printJSON(m)
}
