package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"

	"github.com/alecthomas/kong"
)

// caCert is --ca-cert: PEM certificates that a client command trusts
// besides the system's (a private CA, a self-signed server). The file is
// read as the command line is parsed, so that a missing or malformed one
// is a usage error, not a TLS failure later.
type caCert struct {
	pool *x509.CertPool
}

// Decode reads the file the flag (or EDGEHUB_CA_CERT) names.
func (c *caCert) Decode(ctx *kong.DecodeContext) error {
	var path string
	if err := ctx.Scan.PopValueInto("file", &path); err != nil {
		return err
	}
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the CA certificates: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system pool here: the file's alone
	}
	if !pool.AppendCertsFromPEM(pemBytes) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	c.pool = pool
	return nil
}

// httpClient is an HTTP client that trusts them, or nil (the default
// client) when the flag is not given.
func (c *caCert) httpClient() *http.Client {
	if c.pool == nil {
		return nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: c.pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}
}
