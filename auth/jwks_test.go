package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
)

// keyServer is an issuer's JWKS over TLS: the kids it serves, the
// headers it answers with, and how many fetches it has had.
type keyServer struct {
	*httptest.Server
	fetches atomic.Int64

	mu      sync.Mutex
	kids    []string
	headers http.Header
}

func newKeyServer(t *testing.T, kids ...string) *keyServer {
	t.Helper()
	ks := &keyServer{kids: kids, headers: http.Header{}}
	ks.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ks.fetches.Add(1)
		ks.mu.Lock()
		kids, headers := ks.kids, ks.headers.Clone()
		ks.mu.Unlock()
		for k, v := range headers {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(jwksOf(t, kids...))
	}))
	t.Cleanup(ks.Close)
	return ks
}

// serve replaces what the server answers from now on.
func (ks *keyServer) serve(headers http.Header, kids ...string) {
	ks.mu.Lock()
	ks.kids, ks.headers = kids, headers
	ks.mu.Unlock()
}

// jwksOf is a key set of fresh ES256 public keys with those kids.
func jwksOf(t *testing.T, kids ...string) []byte {
	t.Helper()
	set := jwkset.JWKSMarshal{}
	for _, kid := range kids {
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Error(err)
			return nil
		}
		k, err := jwkset.NewJWKFromKey(&priv.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgES256, USE: jwkset.UseSig}})
		if err != nil {
			t.Error(err)
			return nil
		}
		set.Keys = append(set.Keys, k.Marshal())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Error(err)
	}
	return b
}

// clock is a time the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// fetcher is a JWKS trusting srv's certificate, on c's time.
func fetcher(srv *httptest.Server, c *clock) *JWKS {
	j := NewJWKS(srv.Client().Transport, false)
	j.now = c.Now
	return j
}

// Keys are kept as long as the answer's caching headers say, within one
// minute and one day, and fetched again once that has passed.
func TestJWKSKeepsKeysAsItsHeadersSay(t *testing.T) {
	inTwoHours := tokenNow.Add(2 * time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name    string
		headers http.Header
		kept    time.Duration
	}{
		{"max-age", http.Header{"Cache-Control": {"public, max-age=600"}}, 10 * time.Minute},
		{"max-age below the floor", http.Header{"Cache-Control": {"max-age=5"}}, JWKSMinTTL},
		{"max-age above the ceiling", http.Header{"Cache-Control": {"max-age=999999999"}}, JWKSMaxTTL},
		{"expires", http.Header{"Expires": {inTwoHours}}, 2 * time.Hour},
		{"max-age over expires", http.Header{"Cache-Control": {"max-age=120"}, "Expires": {inTwoHours}}, 2 * time.Minute},
		{"nothing", http.Header{}, JWKSTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := newKeyServer(t, "k1")
			ks.serve(tc.headers, "k1")
			c := &clock{now: tokenNow}
			j := fetcher(ks.Server, c)
			ctx := context.Background()
			if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k1"); err != nil {
				t.Fatal(err)
			}
			c.Add(tc.kept - time.Second)
			if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k1"); err != nil || ks.fetches.Load() != 1 {
				t.Fatalf("within %v: %v, %d fetches, want the kept keys and 1", tc.kept, err, ks.fetches.Load())
			}
			c.Add(2 * time.Second)
			if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k1"); err != nil || ks.fetches.Load() != 2 {
				t.Fatalf("after %v: %v, %d fetches, want a second fetch", tc.kept, err, ks.fetches.Load())
			}
		})
	}
}

// A kid the kept set lacks fetches the set again at once, but not twice
// within 30 s: a stream of tokens with made-up kids costs the issuer one
// fetch per 30 s.
func TestJWKSUnknownKidFetchesAtMostEvery30s(t *testing.T) {
	ks := newKeyServer(t, "k1")
	c := &clock{now: tokenNow}
	j := fetcher(ks.Server, c)
	ctx := context.Background()
	if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k1"); err != nil {
		t.Fatal(err)
	}
	ks.serve(http.Header{}, "k1", "k2") // the issuer rotates in k2
	c.Add(JWKSRefetch - time.Second)
	for range 100 {
		if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k2"); err == nil || !strings.Contains(err.Error(), "no key with kid") {
			t.Fatalf("k2 within %v of the fetch: %v, want no such kid", JWKSRefetch, err)
		}
	}
	if n := ks.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches within %v, want 1", n, JWKSRefetch)
	}
	c.Add(2 * time.Second)
	if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k2"); err != nil {
		t.Fatalf("k2 after %v: %v", JWKSRefetch, err)
	}
	if _, err := j.keys(ctx, "acme/idp/1", ks.URL, "k1"); err != nil || ks.fetches.Load() != 2 {
		t.Fatalf("k1 after the refetch: %v, %d fetches, want 2", err, ks.fetches.Load())
	}
}

// A JWKS that hangs, redirects, answers more than 1 MiB, is not JSON,
// holds no public signing key or is plain http yields no keys, and says
// why; while its keys cannot be had, nothing is kept.
func TestJWKSRefusesBadServers(t *testing.T) {
	hang := make(chan struct{})
	var redirected atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/hang", func(http.ResponseWriter, *http.Request) { <-hang })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/keys", http.StatusFound) })
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) { redirected.Add(1); _, _ = w.Write(jwksOf(t, "k1")) })
	var sent atomic.Int64
	mux.HandleFunc("/huge", func(w http.ResponseWriter, _ *http.Request) {
		chunk := []byte(`{"keys":[` + strings.Repeat(" ", 64<<10))
		for range 100 << 20 / len(chunk) { // 100 MiB, if it were all read
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
			chunk = []byte(strings.Repeat(" ", 64<<10))
		}
	})
	mux.HandleFunc("/text", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) })
	mux.HandleFunc("/private", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0","alg":"HS256","kid":"k1"}]}`))
	})
	mux.HandleFunc("/missing", http.NotFound)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) }) // before Close, which waits for the handler
	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)

	for _, tc := range []struct{ url, says string }{
		{srv.URL + "/hang", "deadline exceeded"},
		{srv.URL + "/redirect", "redirects is refused"},
		{srv.URL + "/huge", "over 1048576 bytes"},
		{srv.URL + "/text", "not a JSON key set"},
		{srv.URL + "/private", "no public signing key"},
		{srv.URL + "/missing", "status 404"},
		{plain.URL + "/keys", "not https"},
	} {
		c := &clock{now: tokenNow}
		j := fetcher(srv, c)
		j.timeout = 200 * time.Millisecond
		_, err := j.keys(context.Background(), "acme/idp/1", tc.url, "k1")
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.url, err, tc.says)
		}
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
	if n := sent.Load(); n > 8<<20 {
		t.Errorf("the huge answer had %d bytes written before the fetch gave up, want about 1 MiB and the socket buffers", n)
	}
}

// Fetches of one set are one at a time, and those waiting share its
// result; while one issuer's server hangs, another's keys are fetched and
// used, and a waiter whose request ends leaves at once.
func TestJWKSOneSlowIssuerDelaysNoOther(t *testing.T) {
	entered, release := make(chan struct{}, 2), make(chan struct{})
	var slowFetches atomic.Int64
	slow := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		slowFetches.Add(1)
		entered <- struct{}{}
		<-release
		_, _ = w.Write(jwksOf(t, "k1"))
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	fast := newKeyServer(t, "k1")
	c := &clock{now: tokenNow}
	j := NewJWKS(slow.Client().Transport, false) // both test servers share one CA
	j.now = c.Now

	results := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := j.keys(context.Background(), "slow/idp/1", slow.URL, "k1")
			results <- err
		}()
	}
	<-entered // one fetch is inside the slow server; the other caller waits on it

	if _, err := j.keys(context.Background(), "fast/idp/1", fast.URL, "k1"); err != nil {
		t.Fatalf("the fast issuer while the slow one hangs: %v", err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := j.keys(gone, "slow/idp/1", slow.URL, "k1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose request ended: %v, want context.Canceled", err)
	}
	close(release)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("the slow issuer's callers: %v", err)
		}
	}
	if n := slowFetches.Load(); n != 1 {
		t.Fatalf("the slow issuer had %d fetches for two callers, want 1", n)
	}
}
