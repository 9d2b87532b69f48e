package main

import (
	"context"
	"time"

	"github.com/edgehub/edgehub/client"
)

// healthCmd is a container's health check: exit 0 when the hub answers
// /readyz with 200, else 1 with the reason on stderr.
type healthCmd struct {
	Server  serverURL     `default:"http://127.0.0.1:8080" env:"EDGEHUB_SERVER" help:"Base URL of the hub."`
	CACert  caCert        `name:"ca-cert" env:"EDGEHUB_CA_CERT" placeholder:"FILE" help:"PEM certificates to trust besides the system's (a private CA, a self-signed hub)."`
	Timeout time.Duration `default:"5s" help:"How long to wait for the answer."`
}

func (h *healthCmd) Run() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	return (&client.Client{Server: string(h.Server), HTTP: h.CACert.httpClient()}).Ready(ctx)
}
