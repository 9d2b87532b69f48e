package client

import (
	"bytes"
	"context"
	"crypto/rand"
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
	// whose answer was lost can be sent again safely. Left empty, the
	// call makes a random key of its own and sends it with each of its
	// attempts, so that its retries cannot append twice; a key of the
	// caller's (an order's id, a webhook's id) also makes a publish sent
	// again by a later call, or a later run of the program, safe.
	IdempotencyKey string
}

// withKey is o with an idempotency key: the caller's, or else a new one
// of 26 random base32 characters (130 bits, within the server's 256
// printable characters), so that no two calls share one by chance.
func (o PublishOptions) withKey() PublishOptions {
	if o.IdempotencyKey == "" {
		o.IdempotencyKey = rand.Text()
	}
	return o
}

// PublishResult is the answer to one event: its sequence number, and
// whether it was a repeat of an earlier publish with the same idempotency
// key (then nothing was appended and Seq is the original's).
type PublishResult struct {
	Seq       int64 `json:"seq"`
	Duplicate bool  `json:"duplicate"`
	// IdempotencyKey is the key the publish was sent with: the caller's,
	// or the one the call made. It is set when the publish failed too,
	// for a caller to log or keep: a publish that got a 503 or no answer
	// may be stored, and sending the same data with the same options and
	// this key appends it at most once. It is the client's, not part of
	// the server's answer, so it is not encoded.
	IdempotencyKey string `json:"-"`
}

// BatchResult is the answer to a batch: the numbers of its first and last
// events (a batch is numbered in order, with no hole) and how many it had.
type BatchResult struct {
	First     int64 `json:"first"`
	Last      int64 `json:"last"`
	Count     int64 `json:"count"`
	Duplicate bool  `json:"duplicate"`
	// IdempotencyKey is the key the batch was sent with, as in
	// PublishResult.
	IdempotencyKey string `json:"-"`
}

// Publish appends one event to tenant/topic and returns its number once
// the server has committed it. data is encoded with encoding/json, except
// a json.RawMessage or a []byte, which is sent as it is and must be one
// JSON value. A refusal is an *APIError.
//
// Every attempt of the call carries one idempotency key (the options'
// or a random one), so a 503 or a lost answer is retried (Client.Retries)
// without the risk of a second event. When the call fails for another
// reason than a refusal of the request itself (a 4xx other than 429), the
// event may be stored all the same; publishing it again with the same
// options and the result's IdempotencyKey stores it once either way.
func (c *Client) Publish(ctx context.Context, tenant, topic string, data any, o PublishOptions) (PublishResult, error) {
	body, err := encode(data)
	if err != nil {
		return PublishResult{}, fmt.Errorf("publish to %s/%s: %w", tenant, topic, err)
	}
	o = o.withKey()
	var r PublishResult
	_, err = c.do(ctx, c.publishCall(tenant, topic, body, "application/json", o), &r)
	r.IdempotencyKey = o.IdempotencyKey
	return r, err
}

// PublishBatch appends events to tenant/topic in one atomic commit,
// numbered in order; the options apply to every event. Each event is
// encoded as Publish encodes its data, and the batch has one idempotency
// key, as a publish has.
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
	o = o.withKey()
	var r BatchResult
	_, err := c.do(ctx, c.publishCall(tenant, topic, body.Bytes(), "application/x-ndjson", o), &r)
	r.IdempotencyKey = o.IdempotencyKey
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
	h := http.Header{"Content-Type": {contentType}, "Idempotency-Key": {o.IdempotencyKey}}
	return call{
		method: http.MethodPost, url: c.topicURL(tenant, topic, "notify", q), body: body,
		header: h, bearer: c.Token, what: "publish to " + tenant + "/" + topic,
	}
}
