package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgehub/edgehub/client"
)

// adminConn is how the admin commands reach the hub: the same variable
// as serve's admin key, so one shell (or one --config file) holds both.
type adminConn struct {
	Server   serverURL `default:"http://127.0.0.1:8080" env:"EDGEHUB_SERVER" help:"Base URL of the hub."`
	AdminKey string    `name:"admin-key" env:"EDGEHUB_ADMIN_KEY" placeholder:"KEY" help:"The admin API's bearer key (rather from EDGEHUB_ADMIN_KEY or --config: every local user can read a command line)."`
	CACert   caCert    `name:"ca-cert" env:"EDGEHUB_CA_CERT" placeholder:"FILE" help:"PEM certificates to trust besides the system's (a private CA, a self-signed hub)."`
}

func (a *adminConn) client() *client.Client {
	return &client.Client{Server: string(a.Server), AdminKey: a.AdminKey, Retries: cliRetries, HTTP: a.CACert.httpClient()}
}

type tenantCmd struct {
	List    tenantListCmd    `cmd:"" help:"List the tenants, one a line, by name (no secrets)."`
	Create  tenantCreateCmd  `cmd:"" help:"Create a tenant (or show it, if it exists) and print it with its secrets."`
	Get     tenantGetCmd     `cmd:"" help:"Print a tenant with its secrets."`
	Rotate  tenantRotateCmd  `cmd:"" help:"Replace a tenant's secrets, end its streams and print it with the new ones."`
	Delete  tenantDeleteCmd  `cmd:"" help:"Delete a tenant with all its data and end its streams."`
	Usage   tenantUsageCmd   `cmd:"" help:"Print what a tenant holds (stored bytes, topics, events, open streams) beside each limit."`
	Issuer  issuerCmd        `cmd:"" help:"Register, list or delete the token issuers a tenant trusts (an identity provider, an app that signs its own tokens)."`
	Mercure tenantMercureCmd `cmd:"" help:"Print a tenant's Mercure settings, after changing those the flags name (anonymous subscribers, active subscriptions, publish origins)."`
}

type tenantListCmd struct {
	adminConn
	After string `placeholder:"NAME" help:"Start after this tenant name."`
	All   bool   `help:"Follow the pages to the last tenant, not only the first 100."`
}

// Run prints one tenant a line, {"tenant", "created"}.
func (t *tenantListCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	c := t.client()
	return printPages(t.After, t.All, func(after string) ([]client.TenantEntry, string, error) {
		p, err := c.Tenants(ctx, after, 0)
		return p.Tenants, p.NextAfter, err
	})
}

// tenantArg is what every tenant command takes.
type tenantArg struct {
	adminConn
	Tenant string `arg:"" help:"The tenant's name."`
}

type tenantCreateCmd struct{ tenantArg }

func (c *tenantCreateCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	t, created, err := c.client().CreateTenant(ctx, c.Tenant)
	if err != nil {
		return err
	}
	if !created {
		notice("tenant %s exists; its secrets are unchanged", c.Tenant)
	}
	return printJSON(t)
}

type tenantGetCmd struct{ tenantArg }

func (c *tenantGetCmd) Run() error { return c.print((*client.Client).Tenant) }

type tenantRotateCmd struct{ tenantArg }

func (c *tenantRotateCmd) Run() error { return c.print((*client.Client).RotateTenant) }

// print makes an admin call that answers the tenant, and prints it.
func (a *tenantArg) print(call func(*client.Client, context.Context, string) (client.Tenant, error)) error {
	ctx, stop := signalled()
	defer stop()
	t, err := call(a.client(), ctx, a.Tenant)
	if err != nil {
		return err
	}
	return printJSON(t)
}

type tenantUsageCmd struct{ tenantArg }

func (c *tenantUsageCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	u, err := c.client().Usage(ctx, c.Tenant)
	if err != nil {
		return err
	}
	return printJSON(u)
}

type tenantDeleteCmd struct{ tenantArg }

func (c *tenantDeleteCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	if err := c.client().DeleteTenant(ctx, c.Tenant); err != nil {
		return err
	}
	notice("deleted tenant %s", c.Tenant)
	return nil
}

type tokenCmd struct {
	Mint   tokenMintCmd   `cmd:"" default:"withargs" help:"Mint a token of a tenant and print it (the default: edgehub token TENANT ...)."`
	Revoke tokenRevokeCmd `cmd:"" help:"Revoke a token of a tenant, by its jti or the token itself: refused from then on, its streams ended."`
}

type tokenMintCmd struct {
	tenantArg
	Publish   []string      `placeholder:"PATTERN" help:"Topics the token may publish to (* matches any run of characters); repeat or separate with commas."`
	Subscribe []string      `placeholder:"PATTERN" help:"Topics the token may watch and read."`
	TTL       time.Duration `name:"ttl" help:"How long the token lasts (0: the server's default, 1h)."`
}

// Validate refuses a token that would allow nothing, which is a slip.
func (c *tokenMintCmd) Validate() error {
	if len(c.Publish) == 0 && len(c.Subscribe) == 0 {
		return errors.New("a token that allows nothing: give --publish or --subscribe")
	}
	return nil
}

func (c *tokenMintCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	token, err := c.client().MintToken(ctx, c.Tenant, client.TokenRequest{Publish: c.Publish, Subscribe: c.Subscribe, TTL: c.TTL})
	if err != nil {
		return err
	}
	_, err = fmt.Println(token)
	return err
}
