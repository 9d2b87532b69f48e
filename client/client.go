// Package client is the Go side of Edgehub's wire: the publish and watch
// calls that the command line (and the black-box tests) make. Watch reads
// its stream with package sse's strict decoder.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/sse"
)

// Client talks to one Edgehub server.
type Client struct {
	Server string // base URL, e.g. http://127.0.0.1:8080
	Token  string
	HTTP   *http.Client
	// Retries is how many times Publish retries a temporary refusal
	// (429, 503) before it returns it; 0 returns it at once.
	Retries int
}

// APIError is a refusal from the server in the contract's error shape:
// Status is the answer's HTTP status, Code and Message its error (Code is
// refusal.Unknown when the answer was not in that shape), RetryAfter the
// server's Retry-After, when it sent one.
type APIError struct {
	Status     int
	Code       refusal.Code
	Message    string
	RetryAfter time.Duration
}

// Temporary reports whether the refusal is one to retry later: a limit
// (429) or a server that could not serve the request now (503). Neither
// stored anything, so retrying them is safe. A quota is not: room comes
// back only when retention or the tenant frees it, so the caller is told
// at once.
func (e *APIError) Temporary() bool {
	return (e.Status == http.StatusTooManyRequests && e.Code != refusal.QuotaExceeded) ||
		e.Status == http.StatusServiceUnavailable
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) topicURL(tenant, topic, route string, q url.Values) string {
	u := c.Server + "/v1/tenants/" + url.PathEscape(tenant) + "/topics/" + url.PathEscape(topic) + "/" + route
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// PublishOptions are a publish's type, key, op and idempotency key; Batch
// sends the body as NDJSON.
type PublishOptions struct {
	Type, Key, Op, IdempotencyKey string
	Batch                         bool
}

// Publish posts body and returns the server's answer as it came. A refusal
// is an *APIError. A temporary refusal (429, 503) is retried up to
// c.Retries times, after the server's Retry-After or a jittered backoff.
func (c *Client) Publish(ctx context.Context, tenant, topic string, body []byte, o PublishOptions) (json.RawMessage, error) {
	b := backoff{}
	for attempt := 0; ; attempt++ {
		ans, err := c.publishOnce(ctx, tenant, topic, body, o)
		var apiErr *APIError
		if err == nil || !errors.As(err, &apiErr) || !apiErr.Temporary() || attempt >= c.Retries {
			return ans, err
		}
		if err := b.wait(ctx, apiErr.RetryAfter); err != nil {
			return nil, err
		}
	}
}

func (c *Client) publishOnce(ctx context.Context, tenant, topic string, body []byte, o PublishOptions) (json.RawMessage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"type": o.Type, "key": o.Key, "op": o.Op} {
		if v != "" {
			q.Set(k, v)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.topicURL(tenant, topic, "notify", q), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build publish request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.Batch {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	if o.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", o.IdempotencyKey)
	}
	c.authorize(req)
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("publish to %s/%s: %w", tenant, topic, err)
	}
	defer resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read publish answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(resp, b)
	}
	return b, nil
}

func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

func decodeError(resp *http.Response, body []byte) error {
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
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
		a.RetryAfter = time.Duration(secs) * time.Second
	}
	return a
}

// backoff spaces retries: the server's Retry-After when it gave one, else
// an exponential delay from 500 ms to 30 s, each with up to 50% jitter so
// that clients refused together do not come back together.
type backoff struct {
	next time.Duration
}

func (b *backoff) wait(ctx context.Context, retryAfter time.Duration) error {
	if b.next == 0 {
		b.next = 500 * time.Millisecond
	}
	d := b.next
	b.next = min(2*b.next, 30*time.Second)
	if retryAfter > 0 {
		d = retryAfter
	}
	d += rand.N(d/2 + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WatchOptions say where a watch starts. With neither After nor LastEventID
// it starts live from now.
type WatchOptions struct {
	After       int64
	HasAfter    bool
	LastEventID string
	Snapshot    bool
	// Notice, when set, hears about connections dropped and resumed.
	Notice func(string)
	// Reconnect resumes after a dropped connection with Last-Event-ID, as
	// a browser does; without it Watch returns when the stream ends.
	Reconnect bool
}

// Watch streams frames to on until ctx ends, on returns an error, or the
// server refuses for good. It resumes from the last id after a dropped
// connection when asked to, and then also retries temporary refusals (429,
// 503) after the server's Retry-After or a jittered backoff.
//
// The hello frame's id is the stream's position, so a stream that drops
// before its first event resumes where it started. A snapshot stream is
// the exception: until its snapshot frame has arrived, it resumes with no
// position, so that the server sends the snapshot again; resuming from
// hello's position would skip the state for good.
func (c *Client) Watch(ctx context.Context, tenant, topic string, o WatchOptions, on func(sse.Frame) error) error {
	lastID := o.LastEventID
	needSnapshot := o.Snapshot && !o.HasAfter && lastID == ""
	retry := 2 * time.Second
	b := backoff{}
	for {
		err := c.watchOnce(ctx, tenant, topic, o, lastID, func(f sse.Frame) error {
			switch {
			case f.Event == "snapshot":
				needSnapshot = false
				lastID = f.ID
			case f.IDSet && (!needSnapshot || f.Event != "hello"):
				lastID = f.ID
			}
			if f.Event != "hello" {
				b = backoff{} // the stream delivers again: back off afresh next time
			}
			return on(f)
		}, &retry)
		var apiErr *APIError
		temporary := errors.As(err, &apiErr) && apiErr.Temporary()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errStop), apiErr != nil && !temporary:
			return err
		case !o.Reconnect:
			return err
		}
		if temporary {
			if o.Notice != nil {
				o.Notice(fmt.Sprintf("refused (%v); retrying", err))
			}
			if err := b.wait(ctx, apiErr.RetryAfter); err != nil {
				return err
			}
			continue
		}
		if o.Notice != nil {
			o.Notice(fmt.Sprintf("connection lost (%v); resuming after %q in %s", err, lastID, retry))
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// errStop marks an error from the caller's callback, which ends Watch.
var errStop = errors.New("stopped by caller")

func (c *Client) watchOnce(ctx context.Context, tenant, topic string, o WatchOptions, lastID string, on func(sse.Frame) error, retry *time.Duration) error {
	q := url.Values{}
	if o.HasAfter {
		q.Set("after", strconv.FormatInt(o.After, 10))
	}
	if o.Snapshot {
		q.Set("snapshot", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.topicURL(tenant, topic, "watch", q), nil)
	if err != nil {
		return fmt.Errorf("build watch request: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	c.authorize(req)
	resp, err := c.http().Do(req)
	if err != nil {
		return fmt.Errorf("watch %s/%s: %w", tenant, topic, err)
	}
	defer resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return decodeError(resp, b)
	}
	d := sse.NewDecoder(resp.Body)
	for {
		f, err := d.Next()
		if d.Retry > 0 {
			*retry = time.Duration(d.Retry) * time.Millisecond
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("server ended the stream")
			}
			return fmt.Errorf("read stream: %w", err)
		}
		if err := on(f); err != nil {
			return fmt.Errorf("%w: %w", errStop, err)
		}
	}
}
