package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every GET route but the streams answers HEAD with the GET's status and
// headers and no body, refusals included; a HEAD of a stream is 405.
func TestHEADAnswersAsGET(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0", "--mercure-tenant", "acme")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	tok := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	if st, _, b := do(t, "POST", p.base+"/v1/tenants/acme/topics/orders/notify?key=k", tok, `{"n":1}`); st != 201 {
		t.Fatalf("publish: %d %s", st, b)
	}
	for _, c := range []struct{ path, bearer string }{
		{"/healthz", ""},
		{"/readyz", ""},
		{"/metrics", ""},
		{"/openapi.yaml", ""},
		{"/v1/tenants/acme/topics/orders/events?after=0", tok},
		{"/v1/tenants/acme/topics/orders/state", tok},
		{"/v1/tenants/acme/topics/orders/events", ""}, // 401
		{"/v1/tenants/acme/events?after=0", tok},
		{"/v1/tenants/acme/topics", tok},
		{"/v1/admin/tenants/acme", "k-123"},
		{"/v1/admin/tenants/ghost", "k-123"}, // 404
		{"/v1/admin/tenants/acme/issuers", "k-123"},
		{"/console", ""},
		{"/console/api/mode", "k-123"},
		{"/.well-known/mercure/subscriptions", tok},
		{"/v1/tenants/acme/.well-known/mercure/subscriptions", ""}, // 401
	} {
		getStatus, get, _ := do(t, http.MethodGet, p.base+c.path, c.bearer, "")
		headStatus, head, body := do(t, http.MethodHead, p.base+c.path, c.bearer, "")
		if headStatus != getStatus || len(body) != 0 {
			t.Errorf("HEAD %s: %d with %d bytes, GET %d", c.path, headStatus, len(body), getStatus)
		}
		for _, h := range []string{"Content-Type", "Cache-Control", "WWW-Authenticate", "Link"} {
			if head.Get(h) != get.Get(h) {
				t.Errorf("HEAD %s: %s %q, GET's %q", c.path, h, head.Get(h), get.Get(h))
			}
		}
	}
	for _, path := range []string{"/v1/tenants/acme/topics/orders/watch", "/v1/tenants/acme/watch", "/.well-known/mercure?match=orders"} {
		if st, _, _ := do(t, http.MethodHead, p.base+path, tok, ""); st != http.StatusMethodNotAllowed {
			t.Errorf("HEAD of the stream %s: %d, want 405", path, st)
		}
	}
}

// edgehub health exits 0 while the hub is ready and 1, saying why,
// when it cannot be reached.
func TestCLIHealth(t *testing.T) {
	p := start(t, t.TempDir())
	if _, stderr, code := cli(t, "", "health", "--server", p.base); code != 0 {
		t.Fatalf("health of a ready hub: exit %d, %s", code, stderr)
	}
	p.kill9()
	if _, stderr, code := cli(t, "", "health", "--server", p.base); code != 1 || !strings.Contains(stderr, "readyz") {
		t.Fatalf("health of a stopped hub: exit %d, %q", code, stderr)
	}
}

// --ca-cert (or EDGEHUB_CA_CERT) makes the client commands trust a hub's
// self-signed certificate; without it they refuse the hub, and a file
// that holds no certificate is a usage error.
func TestCLICACert(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	p := start(t, t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile)
	server := strings.Replace(p.base, "http://", "https://", 1)
	if out, stderr, code := cli(t, "", "publish", "acme/tls", `{"n":1}`, "--server", server, "--ca-cert", certFile); code != 0 || !strings.Contains(out, `"seq":1`) {
		t.Fatalf("publish trusting the hub's certificate: exit %d, %s %s", code, out, stderr)
	}
	if out, stderr, code := cliRun(t, []string{"EDGEHUB_CA_CERT=" + certFile}, nil, "", "events", "acme/tls", "--server", server); code != 0 || !strings.Contains(out, `"seq":1`) {
		t.Fatalf("events trusting it through EDGEHUB_CA_CERT: exit %d, %s %s", code, out, stderr)
	}
	if _, stderr, code := cli(t, "", "health", "--server", server, "--ca-cert", certFile); code != 0 {
		t.Fatalf("health trusting it: exit %d, %s", code, stderr)
	}
	if _, stderr, code := cli(t, "", "publish", "acme/tls", `{"n":2}`, "--server", server); code != 1 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("publish without --ca-cert: exit %d, %q", code, stderr)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, "", "publish", "acme/tls", `{"n":3}`, "--server", server, "--ca-cert", notPEM); code != 2 || !strings.Contains(stderr, "no PEM certificate") {
		t.Fatalf("--ca-cert of a file with no certificate: exit %d, %q", code, stderr)
	}
}
