package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/edgehub/edgehub/client"
)

type issuerCmd struct {
	Add    issuerAddCmd    `cmd:"" help:"Register an issuer (or replace the one of that name, ending the streams its tokens opened) and print it."`
	List   issuerListCmd   `cmd:"" help:"Print a tenant's issuers (HS secrets left out)."`
	Delete issuerDeleteCmd `cmd:"" help:"Delete an issuer: its tokens are refused from then on, and their streams end."`
}

type issuerAddCmd struct {
	tenantArg
	Name       string   `arg:"" help:"The issuer's name (the rules of a tenant's)."`
	Issuer     string   `placeholder:"ISS" help:"The iss its tokens carry (none: tokens without iss)."`
	Audience   string   `placeholder:"AUD" help:"What its tokens' aud must hold (none: not checked)."`
	JWKSURL    string   `name:"jwks-url" placeholder:"URL" help:"Where its keys are published (a JWKS, over https)."`
	Alg        string   `placeholder:"ALG" help:"The algorithm of --key-file's key (HS256, RS256, ES256, EdDSA, ...)."`
	KeyFile    string   `name:"key-file" type:"existingfile" placeholder:"FILE" help:"Its PEM public key, or the HS secret."`
	MaxTTL     string   `name:"max-ttl" placeholder:"D" help:"How far ahead its tokens' exp may lie, a duration (0s: no cap; none: the server's --max-token-ttl)."`
	RequireExp bool     `name:"require-exp" negatable:"" default:"true" help:"Refuse its tokens without exp (--no-require-exp accepts them: they end only by revocation)."`
	Actions    []string `placeholder:"ACTION" help:"What its tokens may grant: publish,subscribe (the default) or subscribe (a subscriber's key that never publishes)."`
}

// Validate asks for one way to the issuer's keys.
func (c *issuerAddCmd) Validate() error {
	if (c.JWKSURL == "") == (c.KeyFile == "" && c.Alg == "") {
		return errors.New("give --jwks-url, or --alg and --key-file")
	}
	if c.JWKSURL == "" && (c.Alg == "" || c.KeyFile == "") {
		return errors.New("--alg and --key-file go together")
	}
	return nil
}

func (c *issuerAddCmd) Run() error {
	is := client.Issuer{Name: c.Name, Issuer: c.Issuer, Audience: c.Audience, JWKSURL: c.JWKSURL, Alg: c.Alg,
		MaxTTL: c.MaxTTL, RequireExp: &c.RequireExp, Actions: c.Actions}
	if c.KeyFile != "" {
		key, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return fmt.Errorf("read the key: %w", err)
		}
		is.Key = strings.TrimRight(string(key), "\r\n") // a secret's file ends with a newline
	}
	ctx, stop := signalled()
	defer stop()
	out, created, err := c.client().PutIssuer(ctx, c.Tenant, is)
	if err != nil {
		return err
	}
	if !created {
		notice("issuer %s of %s replaced: the streams its tokens opened ended", c.Name, c.Tenant)
	}
	return printJSON(out)
}

type issuerListCmd struct{ tenantArg }

func (c *issuerListCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	list, err := c.client().Issuers(ctx, c.Tenant)
	if err != nil {
		return err
	}
	return printJSON(map[string][]client.Issuer{"issuers": list})
}

type issuerDeleteCmd struct {
	tenantArg
	Name string `arg:"" help:"The issuer's name."`
}

func (c *issuerDeleteCmd) Run() error {
	ctx, stop := signalled()
	defer stop()
	if err := c.client().DeleteIssuer(ctx, c.Tenant, c.Name); err != nil {
		return err
	}
	notice("deleted issuer %s of %s", c.Name, c.Tenant)
	return nil
}

type tokenRevokeCmd struct {
	tenantArg
	Token string `arg:"" help:"The token's jti, or the token itself (its jti is read from it)."`
}

func (c *tokenRevokeCmd) Run() error {
	jti, err := jtiOf(c.Token)
	if err != nil {
		return err
	}
	ctx, stop := signalled()
	defer stop()
	if err := c.client().RevokeToken(ctx, c.Tenant, jti); err != nil {
		return err
	}
	notice("revoked token %s of %s", jti, c.Tenant)
	return nil
}

// jtiOf is s if it is a jti, or the jti claim of s if it is a JWT (read,
// not verified: the server knows which tokens it minted).
func jtiOf(s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return s, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		JTI string `json:"jti"`
	}
	if err != nil || json.Unmarshal(b, &claims) != nil || claims.JTI == "" {
		return "", errors.New("that token carries no jti to revoke it by")
	}
	return claims.JTI, nil
}
