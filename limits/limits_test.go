package limits

import (
	"fmt"
	"testing"
	"time"
)

// The publish rate refuses past the burst, says when to come back, and
// recovers as the bucket refills.
func TestPublishRateRefusesAndRecovers(t *testing.T) {
	l := New(Config{PublishRate: 2, PublishBurst: 2})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2 {
		if l.Publish("a", now) != nil {
			t.Fatalf("publish %d refused within the burst", i+1)
		}
	}
	r := l.Publish("a", now)
	if r == nil || r.Code != "rate_limited" || r.RetryAfter <= 0 || r.RetryAfter > time.Second {
		t.Fatalf("third publish: %+v", r)
	}
	if l.Publish("b", now) != nil {
		t.Fatal("another tenant was limited")
	}
	if l.Publish("a", now.Add(r.RetryAfter)) != nil {
		t.Fatal("not recovered after Retry-After")
	}
}

// Limiters of idle tenants are forgotten once there are many, without
// giving a busy tenant a fresh bucket.
func TestIdleLimitersArePruned(t *testing.T) {
	l := New(Config{PublishRate: 1, PublishBurst: 1})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.Publish("busy", now)
	for i := 0; i < 5000; i++ {
		l.Publish(fmt.Sprintf("t%d", i), now)
	}
	later := now.Add(500 * time.Millisecond) // buckets of 1/s are half full
	if l.Publish("busy", later) == nil {
		t.Fatal("busy tenant not limited")
	}
	now = now.Add(time.Hour) // every bucket so far is full again
	for i := 0; i < 4*minPrune; i++ {
		l.Publish(fmt.Sprintf("u%d", i), now)
	}
	for k := range l.limiters {
		if k[0] != 'u' {
			t.Fatalf("idle limiter %s kept among %d", k, len(l.limiters))
		}
	}
}

// Stream slots are per tenant and in all, and come back when released,
// once each.
func TestStreamSlots(t *testing.T) {
	l := New(Config{MaxStreams: 3, MaxTenantStreams: 2})
	r1, _ := l.OpenStream("a")
	l.OpenStream("a")
	if _, refused := l.OpenStream("a"); refused == nil {
		t.Fatal("third stream of a tenant allowed")
	}
	l.OpenStream("b")
	if _, refused := l.OpenStream("c"); refused == nil {
		t.Fatal("fourth stream in all allowed")
	}
	r1()
	r1()
	if _, refused := l.OpenStream("c"); refused != nil {
		t.Fatal("released slot not usable")
	}
	if _, refused := l.OpenStream("c"); refused == nil {
		t.Fatal("a double release freed two slots")
	}
}

// Streams without a token have their own caps, per tenant, per client
// address and in all, and never count against the token streams' caps:
// with every anonymous slot taken, a tenant's token stream still opens;
// a released slot opens again.
func TestAnonymousStreamsHaveTheirOwnCaps(t *testing.T) {
	l := New(Config{MaxStreams: 2, MaxTenantStreams: 1, MaxAnonymousStreams: 5, MaxTenantAnonymousStreams: 3, MaxClientAnonymousStreams: 2})
	open := func(tenant, client string) (func(), string) {
		release, refused := l.OpenAnonymousStream(tenant, client)
		if refused != nil {
			if refused.Code != "too_many_streams" || refused.RetryAfter <= 0 {
				t.Fatalf("refusal %+v", refused)
			}
			return nil, refused.Message
		}
		return release, ""
	}
	first, _ := open("a", "10.0.0.1")
	open("a", "10.0.0.1")
	if _, msg := open("a", "10.0.0.1"); msg == "" {
		t.Fatal("a third stream of one address opened past its cap of 2")
	}
	open("a", "10.0.0.2")
	if _, msg := open("a", "10.0.0.3"); msg == "" {
		t.Fatal("a fourth anonymous stream of the tenant opened past its cap of 3")
	}
	open("b", "10.0.0.3")
	open("b", "10.0.0.4")
	if _, msg := open("c", "10.0.0.5"); msg == "" {
		t.Fatal("a sixth anonymous stream opened past the cap of 5 in all")
	}
	for _, tenant := range []string{"a", "b"} {
		if _, refused := l.OpenStream(tenant); refused != nil {
			t.Fatalf("tenant %s's token stream refused while the anonymous caps are full: %v", tenant, refused)
		}
	}
	first()
	first() // twice is once
	if _, msg := open("a", "10.0.0.1"); msg != "" {
		t.Fatalf("a released slot did not open again: %s", msg)
	}
	if _, msg := open("c", "10.0.0.5"); msg == "" {
		t.Fatal("the second release of one slot freed another")
	}
}
