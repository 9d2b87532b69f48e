package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/refusal"
)

// Announce commits what a protocol tells of its streams on a client's
// behalf (Mercure's subscription events) for the tenant it was authorized
// for: it costs the tenant what publishes cost, publishes of its rate
// (one each for this commit and those ahead that it pays for now) and
// stored bytes, so that a client cannot make the server write for free.
// The rate's refusal, a *refusal.Error, comes before anything is
// committed; a commit's error is the log's (Refusal says what to answer).
func (g *Gate) Announce(ctx context.Context, req *backlog.Publish, publishes int) (backlog.Result, error) {
	s := g.s
	now := time.Now()
	for range publishes {
		if l := s.deps.Limits.Publish(req.Tenant, now); l != nil {
			return backlog.Result{}, l
		}
	}
	res, err := s.deps.Hubs.Publish(req).Wait(ctx)
	if err == nil {
		s.countPublish(res)
	}
	return res, err
}

// Refusal is what a client is answered for err, an error of Announce's
// or of a commit's of tenant/topic.
func (g *Gate) Refusal(err error, tenant, topic string) *refusal.Error {
	if re := (*refusal.Error)(nil); errors.As(err, &re) {
		return re
	}
	return g.s.commitRefusal(err, tenant, topic)
}
