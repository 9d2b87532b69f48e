package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"
)

// Page is one answer of the read route: events after a position, the
// topic's head, where the next page starts, and the events before the
// first one that retention removed, if any.
type Page struct {
	Events    []Event `json:"events"`
	Head      int64   `json:"head"`
	NextAfter int64   `json:"next_after"`
	Gap       *Gap    `json:"gap,omitempty"`
}

// Last reports whether no page follows: the answer is empty, or its last
// event is the head. A page with fewer events than asked for is not the
// last for that alone: the server bounds an answer's bytes.
func (p Page) Last() bool {
	return len(p.Events) == 0 || p.Events[len(p.Events)-1].Seq >= p.Head
}

// State is a topic's state: the latest data of every key not deleted,
// folding every event up to Seq, the head when it was read.
type State struct {
	Seq   int64                      `json:"seq"`
	State map[string]json.RawMessage `json:"state"`
}

// Events reads one page of tenant/topic: up to limit events (0: the
// server's default of 100; it takes at most 1000) with sequence numbers
// above after.
func (c *Client) Events(ctx context.Context, tenant, topic string, after int64, limit int) (Page, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p Page
	_, err := c.do(ctx, call{method: http.MethodGet, url: c.topicURL(tenant, topic, "events", q),
		bearer: c.Token, what: "read " + tenant + "/" + topic}, &p)
	return p, err
}

// Pages reads tenant/topic from after to its head, one page after the
// other, each from the last one's NextAfter, until a page is the last
// (Page.Last). An error ends it, as the last element.
func (c *Client) Pages(ctx context.Context, tenant, topic string, after int64, limit int) iter.Seq2[Page, error] {
	return func(yield func(Page, error) bool) {
		for {
			p, err := c.Events(ctx, tenant, topic, after, limit)
			if err != nil {
				yield(p, err)
				return
			}
			if !yield(p, nil) || p.Last() {
				return
			}
			after = p.NextAfter
		}
	}
}

// State reads the state of tenant/topic.
func (c *Client) State(ctx context.Context, tenant, topic string) (State, error) {
	var s State
	_, err := c.do(ctx, call{method: http.MethodGet, url: c.topicURL(tenant, topic, "state", nil),
		bearer: c.Token, what: "read the state of " + tenant + "/" + topic}, &s)
	return s, err
}

// Topic is one of a tenant's topics as the topic list gives it: its head,
// its oldest retained sequence (0 when none is), and the streams open on
// it at the answering server.
type Topic struct {
	Topic   string `json:"topic"`
	Head    int64  `json:"head"`
	First   int64  `json:"first"`
	Streams int    `json:"streams"`
}

// TopicPage is one answer of the topic list: topics in byte order of
// their names, and the name the next page starts after.
type TopicPage struct {
	Topics    []Topic `json:"topics"`
	NextAfter string  `json:"next_after"`
}

// Topics reads one page of the tenant's topics that the token may
// subscribe to and that match pattern (* any run of characters; "" is
// every topic), named after after, up to limit (0: the server's default).
func (c *Client) Topics(ctx context.Context, tenant, pattern, after string, limit int) (TopicPage, error) {
	q := url.Values{}
	if pattern != "" {
		q.Set("pattern", pattern)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p TopicPage
	_, err := c.do(ctx, call{method: http.MethodGet, url: c.url("/v1/tenants/"+url.PathEscape(tenant)+"/topics", q),
		bearer: c.Token, what: "list the topics of " + tenant}, &p)
	return p, err
}
