package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

// IdempotencyTTL is how long a publish's idempotency key is remembered:
// the contract's "at least 24 hours", restarts included.
const IdempotencyTTL = 24 * time.Hour

// ageEvery is how many count periods one age period lasts; with a
// one-second period the contract's "at least once a minute" holds.
const ageEvery = 30

// RunRetention applies retention once, now, in order: with withAge the age
// trim and key expiry first, then the count trim, then the purge of
// trimmed rows and of deleted tenants' data. Tests call it to trim at a
// chosen moment; the server's loops (retain) run each duty on its own.
func (s *Server) RunRetention(ctx context.Context, withAge bool) error {
	var errs []error
	if withAge {
		errs = append(errs, s.ageRound(ctx))
	}
	return errors.Join(append(errs, s.countRound(ctx), s.purgeRound(ctx))...)
}

// countRound trims by count; it runs every second in its own loop, so
// removal by count is within the contract's 5 s of the commit that passes
// the limit whatever purging or the age pass is doing. Readers see exactly
// the newest N from then on; the rows go in purgeRound.
func (s *Server) countRound(ctx context.Context) error {
	_, err := s.log.TrimByCount(ctx, s.cfg.RetentionEvents)
	return err
}

// purgeRound deletes trimmed rows and deleted tenants' data; it runs every
// second in its own loop, so a big purge (a deleted tenant's chunks and
// its TRUNCATE checkpoint) never delays count trimming.
func (s *Server) purgeRound(ctx context.Context) error {
	var errs []error
	n, err := s.log.Purge(ctx)
	s.metrics.Trimmed.Add(float64(n))
	if err != nil {
		errs = append(errs, err)
	}
	n, err = s.log.PurgeDoomed(ctx)
	if n > 0 {
		s.logger.Info("removed what deleted tenants left", "rows", n)
	}
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ageRound trims by age and forgets expired keys, the ids of updates
// removed long ago and the revocations of tokens that cannot be alive
// any more; the rows it trims are
// purged by the next purge round.
func (s *Server) ageRound(ctx context.Context) error {
	var errs []error
	if _, err := s.log.TrimByAge(ctx, s.cfg.RetentionAge); err != nil {
		errs = append(errs, err)
	}
	if _, err := s.log.ExpireKeys(ctx, IdempotencyTTL); err != nil {
		errs = append(errs, err)
	}
	// A removed update's id resolves for as long as an event is kept by
	// age, a day at least: long enough for a subscriber that was away
	// to come back to where it was.
	if _, err := s.log.ForgetTrimmedUpdates(ctx, max(IdempotencyTTL, s.cfg.RetentionAge)); err != nil {
		errs = append(errs, err)
	}
	if _, err := s.log.PurgeRevoked(ctx, time.Now()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// retain runs one loop per duty, each in its own goroutine (as etcd's
// watchable store does): the count trim every period, the purge every
// period, the age trim every ageEvery periods, and Mercure's presence
// (its lease, the ends of dead processes' subscribers) every 5 s. A long
// age pass or purge never delays count trimming; they share the writer a
// transaction at a time. It returns, closing s.retained, once ctx ends and every loop has
// stopped.
func (s *Server) retain(ctx context.Context, every time.Duration) {
	defer close(s.retained)
	var wg sync.WaitGroup
	type duty struct {
		name  string
		every time.Duration
		round func(context.Context) error
	}
	duties := []duty{
		{"count retention", every, s.countRound},
		{"purge", every, s.purgeRound},
		{"age retention", every * ageEvery, s.ageRound},
	}
	if s.mercure != nil { // a server of retention alone (its tests) has no subscribers
		duties = append(duties, duty{"Mercure presence", s.mercure.RenewEvery(), s.mercure.Tend})
	}
	for _, duty := range duties {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.repeat(ctx, duty.name, duty.every, duty.round)
		}()
	}
	wg.Wait()
}

// repeat runs round at once and then every period until ctx ends, logging
// its errors.
func (s *Server) repeat(ctx context.Context, name string, every time.Duration, round func(context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := round(ctx); err != nil && ctx.Err() == nil {
			s.logger.Error(name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
