package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// Ops of a keyed event (PublishOptions.Op): an upsert sets the key's state
// to the event's data, a delete removes the key.
const (
	OpUpsert = "upsert"
	OpDelete = "delete"
)

// PublishOptions are what a publish says besides its data. All are
// optional.
type PublishOptions struct {
	// Type is the event's type; the server's default is "message".
	Type string
	// Key makes the event an upsert (or with Op a delete) of that key of
	// the topic's state.
	Key string
	// Op is OpUpsert (the default with a Key) or OpDelete.
	Op string
	// IdempotencyKey makes a repeat of the same publish append nothing
	// and answer the original's numbers with Duplicate set, so a publish
	// whose answer was lost can be sent again safely.
	IdempotencyKey string
}

// PublishResult is the answer to one event: its sequence number, and
// whether it was a repeat of an earlier publish with the same idempotency
// key (then nothing was appended and Seq is the original's).
type PublishResult struct {
	Seq       int64 `json:"seq"`
	Duplicate bool  `json:"duplicate"`
}

// BatchResult is the answer to a batch: the numbers of its first and last
// events (a batch is numbered in order, with no hole) and how many it had.
type BatchResult struct {
	First     int64 `json:"first"`
	Last      int64 `json:"last"`
	Count     int64 `json:"count"`
	Duplicate bool  `json:"duplicate"`
}

// Publish appends one event to tenant/topic and returns its number once
// the server has committed it. data is encoded with encoding/json, except
// a json.RawMessage or a []byte, which is sent as it is and must be one
// JSON value. A refusal is an *APIError.
func (c *Client) Publish(ctx context.Context, tenant, topic string, data any, o PublishOptions) (PublishResult, error) {
	body, err := encode(data)
	if err != nil {
		return PublishResult{}, fmt.Errorf("publish to %s/%s: %w", tenant, topic, err)
	}
	var r PublishResult
	_, err = c.do(ctx, c.publishCall(tenant, topic, body, "application/json", o), &r)
	return r, err
}

// PublishBatch appends events to tenant/topic in one atomic commit,
// numbered in order; the options apply to every event. Each event is
// encoded as Publish encodes its data.
func (c *Client) PublishBatch(ctx context.Context, tenant, topic string, events []any, o PublishOptions) (BatchResult, error) {
	var body bytes.Buffer
	for i, e := range events {
		line, err := encode(e)
		if err == nil {
			// One line each: a raw value spread over lines is put on one,
			// and one that is not a single JSON value is refused here,
			// since the server could not tell it from several lines.
			err = json.Compact(&body, line)
		}
		if err != nil {
			return BatchResult{}, fmt.Errorf("publish to %s/%s: event %d of the batch: %w", tenant, topic, i, err)
		}
		body.WriteByte('\n')
	}
	var r BatchResult
	_, err := c.do(ctx, c.publishCall(tenant, topic, body.Bytes(), "application/x-ndjson", o), &r)
	return r, err
}

// encode is data's JSON: raw bytes as they are, anything else marshalled.
func encode(data any) ([]byte, error) {
	switch d := data.(type) {
	case json.RawMessage:
		return d, nil
	case []byte:
		return d, nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("encode the event: %w", err)
	}
	return b, nil
}

func (c *Client) publishCall(tenant, topic string, body []byte, contentType string, o PublishOptions) call {
	q := url.Values{}
	for k, v := range map[string]string{"type": o.Type, "key": o.Key, "op": o.Op} {
		if v != "" {
			q.Set(k, v)
		}
	}
	h := http.Header{"Content-Type": {contentType}}
	if o.IdempotencyKey != "" {
		h.Set("Idempotency-Key", o.IdempotencyKey)
	}
	return call{
		method: http.MethodPost, url: c.topicURL(tenant, topic, "notify", q), body: body,
		header: h, bearer: c.Token, what: "publish to " + tenant + "/" + topic,
	}
}
