package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
)

// The bounds of a JWKS fetch and of what is kept of it.
const (
	JWKSTimeout  = 5 * time.Second  // one fetch, connection to last byte
	JWKSMaxBytes = 1 << 20          // a larger answer is refused
	JWKSMinTTL   = time.Minute      // keys are kept at least this long...
	JWKSMaxTTL   = 24 * time.Hour   // ...and at most this long,
	JWKSTTL      = 5 * time.Minute  // or this long when the answer says nothing
	JWKSRefetch  = 30 * time.Second // an unknown kid fetches again, at most this often
	jwksMaxKeys  = 100              // keys read of one set
	jwksMaxSets  = 4096             // sets kept, the least recently used let go
)

// JWKS fetches and keeps the key sets of issuers. Each set is fetched by
// the requests that need it, one fetch at a time, with no lock held that
// another set's requests wait on: one issuer's slow server delays only
// its own tokens.
type JWKS struct {
	client    *http.Client
	allowHTTP bool
	now       func() time.Time
	timeout   time.Duration // JWKSTimeout; shorter in tests of hanging servers

	mu   sync.Mutex
	sets map[string]*keySet
}

// keySet is one issuer's keys as last fetched.
type keySet struct {
	mu       sync.Mutex
	keys     []jwk
	expires  time.Time     // zero before the first good fetch
	fetched  time.Time     // the last fetch's end, good or not
	err      error         // the last fetch's failure, nil after a good one
	fetching chan struct{} // closed when the fetch under way ends
	used     time.Time
}

// jwk is one key of a set: its id, the algorithm it names (empty: any of
// its type's) and the public key.
type jwk struct {
	kid, alg string
	key      any
}

// NewJWKS makes the fetcher; transport nil is http.DefaultTransport's
// kind. Only https URLs are fetched, unless allowHTTP.
func NewJWKS(transport http.RoundTripper, allowHTTP bool) *JWKS {
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &JWKS{
		client: &http.Client{Transport: transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("a JWKS URL that redirects is refused")
			}},
		allowHTTP: allowHTTP, now: time.Now, timeout: JWKSTimeout, sets: map[string]*keySet{},
	}
}

// Forget lets go of the sets kept under ids that start with prefix.
func (j *JWKS) Forget(prefix string) {
	j.mu.Lock()
	for id := range j.sets {
		if strings.HasPrefix(id, prefix) {
			delete(j.sets, id)
		}
	}
	j.mu.Unlock()
}

// set is the set kept under id, made if there is none.
func (j *JWKS) set(id string, now time.Time) *keySet {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.sets[id]
	if s == nil {
		if len(j.sets) >= jwksMaxSets {
			j.evict()
		}
		s = &keySet{}
		j.sets[id] = s
	}
	s.used = now // under j.mu, as evict reads it
	return s
}

// evict lets go of the least recently used set.
func (j *JWKS) evict() {
	var oldest string
	var at time.Time
	for id, s := range j.sets {
		if oldest == "" || s.used.Before(at) {
			oldest, at = id, s.used
		}
	}
	delete(j.sets, oldest)
}

// keys are the keys of the set at rawURL, kept under id, that may verify
// a token with kid (empty: every key). A kid the set lacks fetches it
// again, unless a fetch ended in the last JWKSRefetch; so does a set
// whose keys expired. While the keys cannot be had, the error says why;
// a kid the fresh set lacks is refused as BadSignature.
func (j *JWKS) keys(ctx context.Context, id, rawURL, kid string) ([]jwk, error) {
	s := j.set(id, j.now())
	fetchedHere := false
	for {
		now := j.now()
		s.mu.Lock()
		fresh := now.Before(s.expires)
		found := s.find(kid)
		switch {
		case fresh && len(found) > 0:
			s.mu.Unlock()
			return found, nil
		case fetchedHere || now.Sub(s.fetched) < JWKSRefetch:
			err := s.err
			s.mu.Unlock()
			if err == nil && fresh {
				err = Refuse(BadSignature, "no key with kid %q in the issuer's JWKS", kid)
			} else if err == nil {
				err = errors.New("the issuer's JWKS expired")
			}
			return nil, err
		case s.fetching != nil:
			wait := s.fetching
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		s.fetching = done
		s.mu.Unlock()
		keys, ttl, err := j.fetch(rawURL)
		s.mu.Lock()
		s.fetched, s.fetching, s.err = j.now(), nil, err
		if err == nil {
			s.keys, s.expires = keys, s.fetched.Add(ttl)
		}
		s.mu.Unlock()
		close(done)
		fetchedHere = true
	}
}

// find is the keys of the set that kid names (empty: all). Call with mu.
func (s *keySet) find(kid string) []jwk {
	if kid == "" {
		return s.keys
	}
	for _, k := range s.keys {
		if k.kid == kid {
			return []jwk{k}
		}
	}
	return nil
}

// fetch reads a key set, within its bounds, in a context of its own: the
// request that started it may leave, others wait for it too.
func (j *JWKS) fetch(rawURL string) ([]jwk, time.Duration, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !schemeAllowed(u.Scheme, j.allowHTTP) {
		return nil, 0, fmt.Errorf("the JWKS URL %q is not https (serve --jwks-allow-http allows http)", rawURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch the JWKS: %w", err)
	}
	defer resp.Body.Close() //nolint:errcheck // read whole or refused
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("fetch the JWKS: status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, JWKSMaxBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read the JWKS: %w", err)
	}
	if len(body) > JWKSMaxBytes {
		return nil, 0, fmt.Errorf("the JWKS is over %d bytes", JWKSMaxBytes)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, 0, err
	}
	return keys, cacheTTL(resp.Header, j.now()), nil
}

// parseJWKS reads the public signing keys of a set; a key of a type or
// use it cannot verify with is skipped, not an error.
func parseJWKS(body []byte) ([]jwk, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("the JWKS is not a JSON key set: %w", err)
	}
	var keys []jwk
	for _, m := range set.Keys {
		if len(keys) == jwksMaxKeys {
			break
		}
		if m.USE != "" && m.USE != jwkset.UseSig {
			continue
		}
		m.X5U, m.D, m.P, m.Q, m.DP, m.DQ, m.QI, m.K, m.OTH = "", "", "", "", "", "", "", "", nil // nothing fetched, nothing private
		k, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			continue
		}
		switch k.Key().(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			keys = append(keys, jwk{kid: m.KID, alg: string(m.ALG), key: k.Key()})
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWKS holds no public signing key")
	}
	return keys, nil
}

// cacheTTL is how long an answer's keys are kept: its Cache-Control
// max-age, else its Expires, else JWKSTTL, within JWKSMinTTL..JWKSMaxTTL.
func cacheTTL(h http.Header, now time.Time) time.Duration {
	ttl := JWKSTTL
	found := false
	for _, d := range strings.Split(h.Get("Cache-Control"), ",") {
		name, v, _ := strings.Cut(strings.TrimSpace(d), "=")
		if strings.EqualFold(name, "max-age") {
			if n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64); err == nil && n >= 0 {
				ttl, found = time.Duration(min(n, int64(JWKSMaxTTL/time.Second)))*time.Second, true
			}
		}
	}
	if !found {
		if t, err := http.ParseTime(h.Get("Expires")); err == nil {
			ttl = t.Sub(now)
		}
	}
	return min(max(ttl, JWKSMinTTL), JWKSMaxTTL)
}

// schemeAllowed says whether a JWKS URL of scheme may be fetched.
func schemeAllowed(scheme string, allowHTTP bool) bool {
	return scheme == "https" || allowHTTP && scheme == "http"
}
