package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
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

// serverURL is --server: a hub's base URL, checked as the command line is
// parsed, so that one without its scheme (127.0.0.1:8080) is a usage
// error that says so rather than a request that fails oddly.
type serverURL string

// Decode reads and checks the URL the flag (or EDGEHUB_SERVER) gives.
func (s *serverURL) Decode(ctx *kong.DecodeContext) error {
	var v string
	if err := ctx.Scan.PopValueInto("url", &v); err != nil {
		return err
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not a hub's URL: give its scheme and host, as in http://127.0.0.1:8080", v)
	}
	*s = serverURL(v)
	return nil
}
