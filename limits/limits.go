// Package limits keeps any one client from exhausting the hub: caps on open
// streams, per tenant and in all, and on anonymous ones (Mercure's
// subscribers without a token) apart, per tenant, per client address and
// in all; a publish rate per tenant; and a rate of refused admin keys per
// client address.
package limits

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/edgehub/edgehub/refusal"
)

// Config holds the limits; zero disables one. Its tags are flags of
// edgehub serve (server.Config embeds it), with their EDGEHUB_ variables
// and defaults.
type Config struct {
	MaxStreams       int `default:"10000" env:"EDGEHUB_MAX_STREAMS" help:"Open streams in all; more are 429."`
	MaxTenantStreams int `default:"1000" env:"EDGEHUB_MAX_TENANT_STREAMS" help:"Open streams per tenant; more are 429."`
	// The anonymous caps count streams that came with no token (Mercure's
	// anonymous subscribers) apart from the caps above, which they never
	// count against: strangers cannot take the slots a tenant's token
	// streams need, and one client address cannot take all of theirs.
	MaxAnonymousStreams       int     `default:"5000" env:"EDGEHUB_MAX_ANONYMOUS_STREAMS" help:"Open streams without a token (Mercure's anonymous subscribers) in all, apart from --max-streams; more are 429."`
	MaxTenantAnonymousStreams int     `default:"1000" env:"EDGEHUB_MAX_TENANT_ANONYMOUS_STREAMS" help:"Open streams without a token per tenant, apart from --max-tenant-streams; more are 429."`
	MaxClientAnonymousStreams int     `default:"250" env:"EDGEHUB_MAX_CLIENT_ANONYMOUS_STREAMS" help:"Open streams without a token from one client address (the connection's peer), over all tenants; more are 429."`
	PublishRate               float64 `default:"5000" env:"EDGEHUB_PUBLISH_RATE" help:"Publish requests per second per tenant; more are 429."`
	PublishBurst              int     `default:"10000" env:"EDGEHUB_PUBLISH_BURST" help:"Publish requests a tenant may make at once above the rate."`
	// AdminFailureRate and AdminFailureBurst throttle refused admin keys
	// per client address (Failures): past the burst, every admin request
	// of the address is 429 until its bucket refills.
	AdminFailureRate  float64 `default:"1" env:"EDGEHUB_ADMIN_FAILURE_RATE" help:"Refused admin keys per second a client address may make once its burst is spent; past it each admin and console API request of the address is 429, the right key's too (0: no throttle)."`
	AdminFailureBurst int     `default:"10" env:"EDGEHUB_ADMIN_FAILURE_BURST" help:"Refused admin keys a client address may make at once, before the rate applies."`
}

// Limits counts what is open and what was spent.
type Limits struct {
	cfg Config

	mu       sync.Mutex
	streams  int
	tenants  map[string]int
	anon     anonymous
	limiters map[string]*rate.Limiter
	pruneAt  int
}

// anonymous counts the open streams without a token, in all, by tenant
// and by client address; each map holds only what is open.
type anonymous struct {
	streams int
	tenants map[string]int
	clients map[string]int
}

// minPrune is the number of rate limiters kept before the first prune.
const minPrune = 1024

// New makes the limits.
func New(cfg Config) *Limits {
	if cfg.PublishBurst <= 0 {
		cfg.PublishBurst = max(1, int(math.Ceil(cfg.PublishRate)))
	}
	return &Limits{cfg: cfg, tenants: map[string]int{}, limiters: map[string]*rate.Limiter{}, pruneAt: minPrune,
		anon: anonymous{tenants: map[string]int{}, clients: map[string]int{}}}
}

// OpenStream takes a stream slot of tenant; release gives it back. A
// refusal, like every refusal by a limit, is a *refusal.Error that says
// which limit was hit and, in RetryAfter, when to try again.
func (l *Limits) OpenStream(tenant string) (release func(), refused *refusal.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.MaxStreams > 0 && l.streams >= l.cfg.MaxStreams {
		return nil, &refusal.Error{Code: refusal.TooManyStreams, Message: "the server has as many open streams as it allows", RetryAfter: 5 * time.Second}
	}
	if l.cfg.MaxTenantStreams > 0 && l.tenants[tenant] >= l.cfg.MaxTenantStreams {
		return nil, &refusal.Error{Code: refusal.TooManyStreams, Message: "this tenant has as many open streams as it may", RetryAfter: 5 * time.Second}
	}
	l.streams++
	l.tenants[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.streams--
			if l.tenants[tenant]--; l.tenants[tenant] == 0 {
				delete(l.tenants, tenant)
			}
		})
	}, nil
}

// OpenAnonymousStream takes a slot of tenant's for a stream without a
// token from the client address client, under the anonymous caps alone;
// release gives it back.
func (l *Limits) OpenAnonymousStream(tenant, client string) (release func(), refused *refusal.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := &l.anon
	switch {
	case l.cfg.MaxAnonymousStreams > 0 && a.streams >= l.cfg.MaxAnonymousStreams:
		return nil, &refusal.Error{Code: refusal.TooManyStreams, Message: "the server has as many open streams without a token as it allows", RetryAfter: 5 * time.Second}
	case l.cfg.MaxTenantAnonymousStreams > 0 && a.tenants[tenant] >= l.cfg.MaxTenantAnonymousStreams:
		return nil, &refusal.Error{Code: refusal.TooManyStreams, Message: "this tenant has as many open streams without a token as it may", RetryAfter: 5 * time.Second}
	case l.cfg.MaxClientAnonymousStreams > 0 && a.clients[client] >= l.cfg.MaxClientAnonymousStreams:
		return nil, &refusal.Error{Code: refusal.TooManyStreams, Message: "this client address has as many open streams without a token as it may", RetryAfter: 5 * time.Second}
	}
	a.streams++
	a.tenants[tenant]++
	a.clients[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			a.streams--
			if a.tenants[tenant]--; a.tenants[tenant] == 0 {
				delete(a.tenants, tenant)
			}
			if a.clients[client]--; a.clients[client] == 0 {
				delete(a.clients, client)
			}
		})
	}, nil
}

// TenantStreams is how many streams tenant has open, and how many it may
// (0: no cap).
func (l *Limits) TenantStreams(tenant string) (open, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tenants[tenant], l.cfg.MaxTenantStreams
}

// Publish spends one publish of tenant's rate.
func (l *Limits) Publish(tenant string, now time.Time) *refusal.Error {
	if l.cfg.PublishRate <= 0 {
		return nil
	}
	l.mu.Lock()
	lim := l.limiters[tenant]
	if lim == nil {
		if len(l.limiters) >= l.pruneAt {
			l.prune(now)
		}
		lim = rate.NewLimiter(rate.Limit(l.cfg.PublishRate), l.cfg.PublishBurst)
		l.limiters[tenant] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &refusal.Error{Code: refusal.RateLimited, Message: "this tenant publishes faster than it may", RetryAfter: d}
	}
	return nil
}

// prune drops the limiters whose bucket is full again: a full bucket is
// what a new limiter starts with, so forgetting it changes nothing, and
// the map stays as small as the set of recently busy tenants (in dev mode
// any name is a tenant).
func (l *Limits) prune(now time.Time) {
	for t, lim := range l.limiters {
		if lim.TokensAt(now) >= float64(l.cfg.PublishBurst) {
			delete(l.limiters, t)
		}
	}
	l.pruneAt = max(minPrune, 2*len(l.limiters))
}
