// Package client is a Go client of an Edgehub server: publish events and
// batches, watch a topic with reconnects that lose nothing, read pages of
// events and a topic's state, and manage tenants and tokens through the
// admin API. The edgehub command line is built on it.
//
// A Client is safe for concurrent use. Calls that send one request and
// read one answer retry a temporary refusal (a limit's 429, a 503) up to
// Client.Retries times; a publish or a read is also sent again when it got
// no answer (a refused or cut connection). Every publish carries an
// idempotency key, the caller's or one made for the call, so that none of
// its attempts can append the event twice. Watch reconnects until its
// context ends.
package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgehub/edgehub/refusal"
)

// Client talks to one Edgehub server. Its zero value with Server set is
// ready to use.
type Client struct {
	// Server is the base URL, e.g. http://127.0.0.1:8080.
	Server string
	// Token is the bearer token of the tenant routes (publish, watch,
	// events, state); empty for a server in dev mode.
	Token string
	// AdminKey is the bearer key of the admin API's routes.
	AdminKey string
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
	// Retries is how many times a call is sent again, each time after the
	// server's Retry-After or a jittered backoff: after a refusal for now
	// (a 429 other than quota_exceeded, or a 503) and, for a publish or a
	// read, after a failure that left it without an answer (a connection
	// refused while the server restarts, reset or cut before the whole
	// answer, a timeout). Those are safe to repeat: a read changes
	// nothing, and every attempt of a publish carries its idempotency key,
	// so one whose answer was lost after its commit is answered as a
	// duplicate. An admin write is not sent again without an answer, since
	// a repeat would not do what one does (a second rotation, a 404 for a
	// delete that happened). Nothing is sent once the context has ended; 0
	// returns the first failure. Watch does not count: it retries until
	// its context ends.
	Retries int
}

// APIError is a refusal from the server in its error shape: Status is
// the answer's HTTP status, Code and Message its error (Code is
// refusal.Unknown when the answer was not in that shape, as a proxy's
// page is not), RetryAfter the server's Retry-After, when it sent one.
type APIError struct {
	Status     int
	Code       refusal.Code
	Message    string
	RetryAfter time.Duration
	// Reason, for a 401, is which check of the credential this side
	// can tell failed: none given, not a JWT, expired, or (all of those
	// passed) not accepted by the server. The server's answer is the same
	// for all of them, and for a tenant that does not exist.
	Reason string
}

// Temporary reports whether the refusal is one to retry later: a limit
// (429) or a server that could not serve the request now (503). A 429
// stored nothing. A 503 on a publish may have: the server answers it when
// it cannot tell whether its commit took (PostgreSQL lost the connection
// during COMMIT), and a proxy in front answers it when it gave up waiting.
// So a 503 does not mean "not stored", and a publish is retried only with
// the idempotency key of its first attempt, which Publish and PublishBatch
// always send: if the first attempt was stored, the retry appends nothing
// and answers its numbers as a duplicate. A quota is not temporary: room
// comes back only when retention or the tenant frees it, so the caller is
// told at once.
func (e *APIError) Temporary() bool {
	return (e.Status == http.StatusTooManyRequests && e.Code != refusal.QuotaExceeded) ||
		e.Status == http.StatusServiceUnavailable
}

func (e *APIError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%d %s: %s (%s)", e.Status, e.Code, e.Message, e.Reason)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// topicURL is the URL of one of a topic's routes; the names are escaped,
// so a bad one reaches the server, which answers invalid_name.
func (c *Client) topicURL(tenant, topic, route string, q url.Values) string {
	return c.url("/v1/tenants/"+url.PathEscape(tenant)+"/topics/"+url.PathEscape(topic)+"/"+route, q)
}

func (c *Client) url(path string, q url.Values) string {
	u := strings.TrimRight(c.Server, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// call is one request of a request–answer route: its method, URL, body
// and headers, and the credential it carries.
type call struct {
	method, url string
	body        []byte
	header      http.Header
	bearer      string
	admin       bool   // bearer is the admin key, not a token
	what        string // for errors: "publish to acme/orders"
}

// do sends the call, and up to c.Retries times again: after a temporary
// refusal, and, when the call is safe to repeat, after a failure that
// left it without an answer. It decodes a 2xx answer into out (when out
// is not nil). A refusal is an *APIError. Once ctx has ended it sends
// nothing more, and the last attempt's error comes back with ctx's.
func (c *Client) do(ctx context.Context, k call, out any) (int, error) {
	b := backoff{base: 500 * time.Millisecond}
	for attempt := 0; ; attempt++ {
		status, err := c.once(ctx, k, out)
		if err == nil || attempt >= c.Retries {
			return status, err
		}
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr):
			if !apiErr.Temporary() {
				return status, err
			}
		case !k.safe() || !unanswered(err):
			return status, err
		}
		var retryAfter time.Duration
		if apiErr != nil {
			retryAfter = apiErr.RetryAfter
		}
		if serr := sleep(ctx, b.next(retryAfter)); serr != nil {
			return status, fmt.Errorf("%w; not sent again: %w", err, serr)
		}
	}
}

// safe reports whether sending the call twice does what sending it once
// does, so that a call left without an answer may be sent again: a read
// (GET), or a publish, which always carries an idempotency key. It is
// net/http's own rule for replaying a request on a connection that died.
func (k call) safe() bool {
	return k.method == http.MethodGet || k.header.Get("Idempotency-Key") != ""
}

// unanswered reports whether err is a request's failure to get a whole
// answer that a later attempt may not meet: a connection refused (as
// while the server restarts), reset, or closed before the answer was read
// whole, or a timeout. A name that does not resolve, a certificate that is
// not trusted or a URL that makes no request is not: every attempt would
// fail alike.
func unanswered(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTemporary || dns.IsTimeout
	}
	var op *net.OpError
	var ne net.Error
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) && ne.Timeout()
}

// maxAnswer bounds an answer the client reads: the server bounds its
// answers near 1 MiB of event data, so 64 MiB is only a guard against a
// peer that is no Edgehub.
const maxAnswer = 64 << 20

func (c *Client) once(ctx context.Context, k call, out any) (int, error) {
	var body io.Reader
	if k.body != nil {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, k.url, body)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", k.what, err)
	}
	for name, v := range k.header {
		req.Header[name] = v
	}
	if k.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+k.bearer)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", k.what, err)
	}
	defer resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, fmt.Errorf("%s: read the answer: %w", k.what, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, decodeError(resp, b, k.bearer, k.admin)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: answer %.200q: %w", k.what, b, err)
		}
	}
	return resp.StatusCode, nil
}

// decodeError reads a refusal; for a 401, it says which check of the
// credential sent (bearer, the admin key if admin) failed, as far as
// this side can tell.
func decodeError(resp *http.Response, body []byte, bearer string, admin bool) error {
	var e struct {
		Error struct {
			Code    refusal.Code
			Message string
		} `json:"error"`
	}
	a := &APIError{Status: resp.StatusCode, Code: refusal.Unknown, Message: string(bytes.TrimSpace(body))}
	if err := json.Unmarshal(body, &e); err == nil && e.Error.Code != "" {
		a.Code, a.Message = e.Error.Code, e.Error.Message
	}
	a.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	if resp.StatusCode == http.StatusUnauthorized {
		a.Reason = credentialCheck(bearer, admin, time.Now())
	}
	return a
}

// retryAfter reads a Retry-After header in either of its forms, whole
// seconds or an HTTP date; 0 when there is none or it cannot be read.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return max(0, time.Duration(secs)*time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}

// backoff spaces attempts: base, doubled after each failure up to
// maxBackoff (or base, if the server asked for more), never less than the
// server's Retry-After, each with up to 50% jitter so that clients
// refused together do not come back together.
type backoff struct {
	base     time.Duration
	failures int
}

// maxBackoff caps the doubling, so a client comes back within a minute
// of a long outage's end.
const maxBackoff = 30 * time.Second

func (b *backoff) next(retryAfter time.Duration) time.Duration {
	d, ceiling := b.base, max(maxBackoff, b.base)
	for i := 0; i < b.failures && d < ceiling; i++ {
		d *= 2
	}
	b.failures++
	d = max(min(d, ceiling), retryAfter)
	return d + rand.N(d/2+1)
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Ready asks the server whether it is ready to serve (/readyz): nil when
// it answers 200, else its refusal (an *APIError with the code
// not_ready) or why it could not be reached. It is sent once, whatever
// Retries says: a health check wants the answer of now.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.once(ctx, call{method: http.MethodGet, url: c.url("/readyz", nil), what: "ask whether the server is ready"}, nil)
	return err
}

// credentialCheck says what a refused credential is, as far as this side
// can tell: an admin key is only given or not; a token is a JWT or not,
// and expired or not (past the server's 30 s of leeway).
func credentialCheck(bearer string, adminKey bool, now time.Time) string {
	switch {
	case bearer == "" && adminKey:
		return "no admin key was given"
	case bearer == "":
		return "no token was given"
	case adminKey:
		return "the admin key is not the server's"
	}
	parts := strings.Split(bearer, ".")
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if len(parts) != 3 {
		return "the token is not a JWT"
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &claims) != nil {
		return "the token is not a JWT"
	}
	if claims.Exp != nil {
		if exp := time.Unix(int64(*claims.Exp), 0); now.After(exp.Add(30 * time.Second)) {
			return "the token expired at " + exp.UTC().Format(time.RFC3339)
		}
	}
	return "the token is a JWT and unexpired, and the server does not accept it: " +
		"another tenant's or an old secret's, revoked, or of an issuer it does not trust"
}
