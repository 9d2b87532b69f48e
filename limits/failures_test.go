package limits

import (
	"fmt"
	"testing"
	"time"
)

// An address that has spent its failures is refused, with when to come
// back, until its bucket holds one again; admitted requests that pass
// spend nothing; another address is not affected.
func TestFailuresThrottleAnAddressUntilItRefills(t *testing.T) {
	f := NewFailures(1, 3)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		if r := f.Admit("10.0.0.1", now); r != nil {
			t.Fatalf("admission %d without a failure refused: %+v", i+1, r)
		}
	}
	for i := range 3 {
		if r := f.Admit("10.0.0.1", now); r != nil {
			t.Fatalf("failure %d refused within the burst: %+v", i+1, r)
		}
		f.Failed("10.0.0.1", now)
	}
	r := f.Admit("10.0.0.1", now)
	if r == nil || r.Code != "rate_limited" || r.RetryAfter != time.Second {
		t.Fatalf("after the burst: %+v, want rate_limited with RetryAfter 1s", r)
	}
	if r := f.Admit("10.0.0.2", now); r != nil {
		t.Fatalf("another address was refused: %+v", r)
	}
	if r := f.Admit("10.0.0.1", now.Add(999*time.Millisecond)); r == nil {
		t.Fatal("admitted before the bucket held a failure again")
	}
	if r := f.Admit("10.0.0.1", now.Add(time.Second)); r != nil {
		t.Fatalf("refused once the bucket refilled: %+v", r)
	}
}

// Failures admitted together, as on parallel connections, all count:
// the bucket goes below empty and the address waits for every one.
func TestParallelFailuresAllCount(t *testing.T) {
	f := NewFailures(2, 3)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 7 {
		if f.Admit("a", now) != nil {
			t.Fatal("refused before any failure")
		}
	}
	for range 7 {
		f.Failed("a", now)
	}
	// 3 in the bucket, 7 spent: 4 below, and one more is needed, at 2 a second.
	r := f.Admit("a", now)
	if r == nil {
		t.Fatal("admitted after 7 parallel failures on a burst of 3")
	}
	if r.RetryAfter != 2500*time.Millisecond {
		t.Fatalf("after 7 parallel failures on a burst of 3: RetryAfter %v, want 2.5s", r.RetryAfter)
	}
}

// A rate of 0 turns the throttle off.
func TestFailuresOff(t *testing.T) {
	f := NewFailures(0, 0)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 1000 {
		f.Failed("a", now)
	}
	if r := f.Admit("a", now); r != nil {
		t.Fatalf("refused with the throttle off: %+v", r)
	}
}

// The buckets of addresses that stopped failing are forgotten once there
// are many, and a throttled address keeps its empty bucket.
func TestFailureBucketsArePruned(t *testing.T) {
	f := NewFailures(1, 1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Failed("busy", now)
	for i := range 5000 {
		f.Failed(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
	}
	if f.Admit("busy", now.Add(500*time.Millisecond)) == nil {
		t.Fatal("the throttled address was forgotten")
	}
	now = now.Add(time.Hour) // every bucket so far is full again
	for i := range 4 * minPrune {
		f.Failed(fmt.Sprintf("u%d", i), now)
	}
	for k := range f.limiters {
		if k[0] != 'u' {
			t.Fatalf("the bucket of %s kept among %d", k, len(f.limiters))
		}
	}
}
