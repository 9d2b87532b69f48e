package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client talks to one Edgehub server.
type Client struct {
	Server string // base URL, e.g. http://127.0.0.1:8080
	Token  string
	HTTP   *http.Client
}

// APIError is a refusal from the server in the contract's error shape.
type APIError struct {
	Status  int
	Code    string
	Message string
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
// is an *APIError.
func (c *Client) Publish(ctx context.Context, tenant, topic string, body []byte, o PublishOptions) (json.RawMessage, error) {
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
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read publish answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(resp.StatusCode, b)
	}
	return b, nil
}

func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

func decodeError(status int, body []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		return &APIError{Status: status, Code: "unknown", Message: string(bytes.TrimSpace(body))}
	}
	return &APIError{Status: status, Code: e.Error.Code, Message: e.Error.Message}
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
// server refuses. It resumes from the last id after a dropped connection
// when asked to.
func (c *Client) Watch(ctx context.Context, tenant, topic string, o WatchOptions, on func(Frame) error) error {
	lastID := o.LastEventID
	retry := 2 * time.Second
	for {
		err := c.watchOnce(ctx, tenant, topic, o, lastID, func(f Frame) error {
			switch {
			case f.IDSet:
				lastID = f.ID
			case f.Event == "hello" && lastID == "":
				// A live stream that has seen no event yet resumes from
				// where it started, not from a later head.
				var h struct{ Position int64 }
				if json.Unmarshal([]byte(f.Data), &h) == nil {
					lastID = strconv.FormatInt(h.Position, 10)
				}
			}
			return on(f)
		}, &retry)
		var apiErr *APIError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &apiErr), errors.Is(err, errStop):
			return err
		case !o.Reconnect:
			return err
		}
		if o.Notice != nil {
			o.Notice(fmt.Sprintf("connection lost (%v); resuming after %q in %s", err, lastID, retry))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}

// errStop marks an error from the caller's callback, which ends Watch.
var errStop = errors.New("stopped by caller")

func (c *Client) watchOnce(ctx context.Context, tenant, topic string, o WatchOptions, lastID string, on func(Frame) error, retry *time.Duration) error {
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
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return decodeError(resp.StatusCode, b)
	}
	d := NewDecoder(resp.Body)
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
