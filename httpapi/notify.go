package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/notify"
	"github.com/edgehub/edgehub/refusal"
)

type singleAnswer struct {
	Seq       int64 `json:"seq"`
	Duplicate bool  `json:"duplicate"`
}

type batchAnswer struct {
	First     int64 `json:"first"`
	Last      int64 `json:"last"`
	Count     int64 `json:"count"`
	Duplicate bool  `json:"duplicate"`
}

// quotaRetry is the Retry-After of a quota refusal: retention or the
// tenant's own deletes free room on the scale of minutes, not seconds.
const quotaRetry = time.Minute

// notify commits a publish and answers only once it is durable.
func (s *Server) notify(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	meta, perr := notify.ParseNames(r)
	if perr != nil {
		writeError(w, perr)
		return
	}
	// The body is held, with its copies, until its commit is answered: its
	// bytes come from a server-wide budget before it is read. A body read
	// to check a webhook signature comes from a budget of its own, and
	// must arrive within the header timeout: clients that have shown no
	// credentials yet can then neither hold much nor starve the
	// publishers that have.
	release := func() {}
	defer func() { release() }()
	takeBody := func(budget *limits.Budget) *refusal.Error {
		n := s.cfg.MaxBody
		if r.ContentLength >= 0 {
			n = min(n, r.ContentLength)
		}
		rel, refused := budget.TryTake(n)
		if refused != nil {
			return refused
		}
		release = rel
		return nil
	}
	readBody := func() ([]byte, *refusal.Error) {
		if s.hooks.BeforeBody != nil {
			s.hooks.BeforeBody(tenant, topic)
		}
		return notify.ReadBody(r, s.cfg.MaxBody)
	}
	readSigned := func() ([]byte, *refusal.Error) {
		if aerr := takeBody(s.deps.UnsignedBodies); aerr != nil {
			return nil, aerr
		}
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.UnsignedBodyTimeout)) //nolint:errcheck // without one, ReadTimeout bounds it
		return readBody()
	}
	ten, body, signed, aerr := s.authorizePublish(r, tenant, topic, readSigned)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if l := s.deps.Limits.Publish(tenant, time.Now()); l != nil {
		writeError(w, l)
		return
	}
	if body == nil {
		if aerr := takeBody(s.deps.PublishBodies); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	if perr := notify.ParseOptions(r, &meta, signed); perr != nil {
		writeError(w, perr)
		return
	}
	if body == nil {
		if body, aerr = readBody(); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	req, perr := notify.Build(tenant, topic, meta, body)
	if perr != nil {
		writeError(w, perr)
		return
	}
	req.RequireTenant, req.Generation = !s.cfg.Dev, ten.Generation
	pub := s.deps.Hubs.Publish(req)
	if s.hooks.AwaitingCommit != nil {
		s.hooks.AwaitingCommit(tenant, topic)
	}
	res, err := pub.Wait(r.Context())
	switch {
	case r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
		// The client left; the commit goes on (a retry with its key is
		// answered from it) and holds the body until then, so its bytes
		// stay taken until the hub answers, which it always does.
		held := release
		release = func() {}
		go func() {
			if res, err := pub.Wait(context.Background()); err == nil {
				s.countPublish(res)
			}
			held()
		}()
		if s.hooks.PublisherLeft != nil {
			s.hooks.PublisherLeft(tenant, topic)
		}
		return
	case errors.Is(err, hub.ErrUnavailable):
		s.deps.Logger.Error("commit failed", "tenant", tenant, "topic", topic, "err", err)
		writeError(w, refusal.New(refusal.Unavailable, "the event could not be committed; retry with the same idempotency key"))
		return
	case errors.Is(err, backlog.ErrNoTenant):
		writeError(w, unauthorized())
		return
	case errors.Is(err, backlog.ErrKeyReused):
		writeError(w, refusal.New(refusal.IdempotencyKeyReused,
			"this idempotency key was used for a different request (a webhook-id: on any topic of the tenant)"))
		return
	case errors.Is(err, backlog.ErrQuota):
		writeError(w, &refusal.Error{Code: refusal.QuotaExceeded, Message: err.Error(), RetryAfter: quotaRetry})
		return
	case err != nil:
		writeError(w, refusal.New(refusal.Internal, "%v", err))
		return
	}
	s.countPublish(res)
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	if res.Batch {
		writeJSON(w, status, batchAnswer{First: res.First, Last: res.Last, Count: res.Last - res.First + 1, Duplicate: res.Duplicate})
		return
	}
	writeJSON(w, status, singleAnswer{Seq: res.First, Duplicate: res.Duplicate})
}

// countPublish counts a publish that got its result, by outcome and by
// its events (1, or the batch's); the events themselves are counted as
// their commit appends them.
func (s *Server) countPublish(res backlog.Result) {
	m := s.deps.Metrics
	if res.Duplicate {
		m.Duplicates.Inc()
	} else {
		m.Appended.Inc()
	}
	m.PublishBatch.Observe(float64(res.Last - res.First + 1))
}
