package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/edgehub/edgehub/auth"
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

// admitted is a publish let in: its tenant as the credentials check saw
// it, its body, and what gives back the budgets the body holds, to be
// called once its commit is answered.
type admitted struct {
	tenant  auth.Tenant
	body    []byte
	release func()
}

// admitPublish checks a publish's credentials and rate, runs options
// (the checks of the protocol's own headers, given how the request got
// in), and reads its body. The body is held, with its copies, until its
// commit is answered: its bytes come from the tenant's share of a
// server-wide budget as they arrive, and it must arrive within the body
// timeout, so that slow uploads hold little, not for long, and only of
// their own tenant's share. A body read to check a webhook signature
// (from a client that has shown no credentials yet) comes from a budget
// of its own, shared by tenant and by client address: clients that know
// only a tenant's name can neither hold much nor starve the publishers
// that have credentials, nor other tenants' webhooks. release is set
// even on a refusal.
func (s *Server) admitPublish(w http.ResponseWriter, r *http.Request, tenant, topic string,
	options func(via notify.Credentials) *refusal.Error) (ad admitted, aerr *refusal.Error) {
	var holds []*limits.Hold
	ad.release = func() {
		for _, h := range holds {
			h.Release()
		}
	}
	readBody := func(budgets ...*limits.Hold) ([]byte, *refusal.Error) {
		holds = append(holds, budgets...)
		return s.readBody(w, r, tenant, topic, budgets...)
	}
	readSigned := func() ([]byte, *refusal.Error) {
		return readBody(s.deps.UnsignedBodies.Hold(tenant), s.deps.UnsignedByClient.Hold(clientHost(r)))
	}
	ten, body, via, aerr := s.authorizePublish(r, tenant, topic, readSigned)
	if aerr != nil {
		return ad, aerr
	}
	if l := s.deps.Limits.Publish(tenant, time.Now()); l != nil {
		return ad, l
	}
	if aerr := options(via); aerr != nil {
		return ad, aerr
	}
	if body == nil {
		if body, aerr = readBody(s.deps.PublishBodies.Hold(tenant)); aerr != nil {
			return ad, aerr
		}
	}
	ad.tenant, ad.body = ten, body
	return ad, nil
}

// readBody reads a publish's body within --max-body and --body-timeout,
// each chunk taken from budgets first; topic is the request's, for the
// hook ("" when the body names it).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, tenant, topic string, budgets ...*limits.Hold) ([]byte, *refusal.Error) {
	if s.hooks.BeforeBody != nil {
		s.hooks.BeforeBody(tenant, topic)
	}
	if s.cfg.BodyTimeout > 0 {
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) //nolint:errcheck // without one, ReadTimeout bounds it
	}
	return notify.ReadBody(r, s.cfg.MaxBody, func(n int64) *refusal.Error {
		for _, h := range budgets {
			if err := h.Try(n); err != nil {
				return err.(*refusal.Error)
			}
		}
		return nil
	})
}

// notify commits a publish and answers only once it is durable.
func (s *Server) notify(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	meta, perr := notify.ParseNames(r)
	if perr != nil {
		writeError(w, perr)
		return
	}
	ad, aerr := s.admitPublish(w, r, tenant, topic, func(via notify.Credentials) *refusal.Error {
		return notify.ParseOptions(r, &meta, via)
	})
	defer func() { ad.release() }()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ten, body := ad.tenant, ad.body
	req, perr := notify.Build(tenant, topic, meta, body)
	if perr != nil {
		writeError(w, perr)
		return
	}
	res, ok := s.commit(w, r, req, ten, &ad)
	if !ok {
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

// commit hands req, admitted as ad for tenant ten, to its hub and waits
// for the commit. It answers the refusals every publish can meet (the
// tenant gone, an idempotency key reused, a quota, the backlog down) and
// reports false; if the client leaves first, the commit goes on and
// holds the body until it is answered.
func (s *Server) commit(w http.ResponseWriter, r *http.Request, req *backlog.Publish, ten auth.Tenant, ad *admitted) (backlog.Result, bool) {
	tenant, topic := req.Tenant, req.Topic
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
		held := ad.release
		ad.release = func() {}
		go func() {
			if res, err := pub.Wait(context.Background()); err == nil {
				s.countPublish(res)
			}
			held()
		}()
		if s.hooks.PublisherLeft != nil {
			s.hooks.PublisherLeft(tenant, topic)
		}
		return res, false
	case err != nil:
		writeError(w, s.commitRefusal(err, tenant, topic))
		return res, false
	}
	return res, true
}

// commitRefusal is what a client is answered when its commit failed with
// err.
func (s *Server) commitRefusal(err error, tenant, topic string) *refusal.Error {
	switch {
	case errors.Is(err, hub.ErrUnavailable):
		s.deps.Logger.Error("commit failed", "tenant", tenant, "topic", topic, "err", err)
		return refusal.New(refusal.Unavailable, "the event could not be committed; retry with the same idempotency key")
	case errors.Is(err, backlog.ErrNoTenant):
		return fromAuth(errRevoked)
	case errors.Is(err, backlog.ErrKeyReused):
		return refusal.New(refusal.IdempotencyKeyReused,
			"this idempotency key was used for a different request (a webhook-id: on any topic of the tenant)")
	case errors.Is(err, backlog.ErrQuota):
		return &refusal.Error{Code: refusal.QuotaExceeded, Message: err.Error(), RetryAfter: quotaRetry}
	default:
		return refusal.New(refusal.Internal, "%v", err)
	}
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
