package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// edgehubMercure is this repository's hub spoken to in the Mercure
// protocol, as a Mercure app would: the edgehub target's server, serving
// its bench tenant at /.well-known/mercure (--mercure-tenant), with
// active subscriptions on (their default); publishes are forms and
// subscribers anonymous, as for the mercure target, so that the two run
// the same requests. Positions are the tenant's, shared by every topic,
// so publishes answer none to check.
type edgehubMercure struct {
	hub *edgehub // not embedded: none of its native APIs is this target's
}

func newEdgehubMercure(bin string, args []string) *edgehubMercure {
	return &edgehubMercure{&edgehub{name: "edgehub-mercure", bin: bin, args: append([]string{"--mercure-tenant", "bench"}, args...)}}
}

func (e *edgehubMercure) Name() string                                { return e.hub.Name() }
func (e *edgehubMercure) Supports(s string) bool                      { return mercureSupports(s) }
func (e *edgehubMercure) Start(ctx context.Context, dir string) error { return e.hub.Start(ctx, dir) }
func (e *edgehubMercure) Stop() error                                 { return e.hub.Stop() }
func (e *edgehubMercure) PID() int                                    { return e.hub.PID() }

// Publish posts one public update; the answer is its id, #<position>.
func (e *edgehubMercure) Publish(ctx context.Context, topic string, data []byte) (int64, error) {
	id, err := mercurePublish(ctx, e.hub.addr(), "", topic, data)
	if err == nil && !strings.HasPrefix(id, "#") {
		err = fmt.Errorf("publish answered %.200q, not an update id", id)
	}
	return 0, err
}

func (e *edgehubMercure) PublishBatch(context.Context, string, [][]byte) ([]int64, error) {
	return nil, errNoBatch
}

// Watch subscribes to topic, registered with the tenant's hub before the
// answer's head is sent.
func (e *edgehubMercure) Watch(ctx context.Context, topic string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	return e.WatchQuery(ctx, "match="+url.QueryEscape(topic), fromStart, ready, deliver)
}

// WatchQuery subscribes with the selectors of query.
func (e *edgehubMercure) WatchQuery(ctx context.Context, query string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	_, err := mercureWatch(ctx, e.hub.addr(), query, fromStart, ready, deliver)
	return err
}
