package server

import (
	"context"
	"errors"
	"time"
)

// IdempotencyTTL is how long a publish's idempotency key is remembered:
// the contract's "at least 24 hours", restarts included.
const IdempotencyTTL = 24 * time.Hour

// ageEvery is how many retention rounds pass between age checks; with a
// one-second round the contract's "at least once a minute" holds.
const ageEvery = 30

// RunRetention applies retention once: count trimming, then (withAge) age
// trimming and key expiry, then the purge of trimmed rows. It runs in its
// own goroutine, never in a hub, and tests call it to trim at a chosen
// moment.
func (s *Server) RunRetention(ctx context.Context, withAge bool) error {
	var errs []error
	if _, err := s.log.TrimByCount(ctx, s.cfg.RetentionEvents); err != nil {
		errs = append(errs, err)
	}
	if withAge {
		if _, err := s.log.TrimByAge(ctx, s.cfg.RetentionAge); err != nil {
			errs = append(errs, err)
		}
		if _, err := s.log.ExpireKeys(ctx, IdempotencyTTL); err != nil {
			errs = append(errs, err)
		}
	}
	n, err := s.log.Purge(ctx)
	s.metrics.Trimmed.Add(float64(n))
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// retain runs retention every round until ctx ends.
func (s *Server) retain(ctx context.Context, every time.Duration) {
	defer close(s.retained)
	t := time.NewTicker(every)
	defer t.Stop()
	for round := 0; ; round++ {
		if err := s.RunRetention(ctx, round%ageEvery == 0); err != nil && ctx.Err() == nil {
			s.logger.Error("retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
