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
