package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
)

// selfSigned writes a throwaway certificate for 127.0.0.1 and its key into
// dir and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// With --tls-cert and --tls-key the hub serves HTTPS and HTTP/2: many
// streams share one connection, and each gets what is published.
func TestTLSServesHTTP2Streams(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	p := start(t, t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile)
	p.base = strings.Replace(p.base, "http://", "https://", 1)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	c := &client.Client{Server: p.base, HTTP: hc}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	const streams = 10
	got := make(chan string, streams)
	opened := make(chan string, streams)
	for i := 0; i < streams; i++ {
		go func() {
			for e := range c.Watch(ctx, "acme", "tls", client.WatchOptions{
				OnHello: func(h client.Hello) { opened <- fmt.Sprint(h.Position) },
			}) {
				got <- string(e.Data)
				break
			}
		}()
	}
	for i := 0; i < streams; i++ {
		select {
		case <-opened:
		case <-ctx.Done():
			t.Fatalf("only %d of %d streams opened", i, streams)
		}
	}
	if _, err := c.Publish(ctx, "acme", "tls", []byte(`{"over":"tls"}`), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < streams; i++ {
		select {
		case d := <-got:
			if d != `{"over":"tls"}` {
				t.Fatalf("stream got %s", d)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d streams got the event", i, streams)
		}
	}
	resp, err := hc.Get(p.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", resp.Proto)
	}
}
