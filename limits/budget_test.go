package limits

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A budget refuses what does not fit (overloaded, with Retry-After), lets
// a request larger than the whole budget run alone, gives bytes back once
// however often release is called, and lets a waiting taker in when they
// come back.
func TestBudget(t *testing.T) {
	b := NewBudget(100, 0, "things")
	r1, refused := b.TryTake("a", 60)
	if refused != nil {
		t.Fatal(refused)
	}
	if _, refused := b.TryTake("a", 50); refused == nil || refused.Code != "overloaded" || refused.RetryAfter <= 0 {
		t.Fatalf("past the budget: %+v", refused)
	}
	r1()
	r1() // a second release gives nothing back twice
	big, refused := b.TryTake("a", 1000)
	if refused != nil {
		t.Fatalf("a request larger than the budget, alone: %+v", refused)
	}
	if _, refused := b.TryTake("a", 1); refused == nil {
		t.Fatal("the budget was given back twice")
	}
	got := make(chan *Hold, 1)
	go func() {
		h := b.Hold("a")
		if err := h.Wait(context.Background(), 10); err != nil {
			panic(err)
		}
		got <- h
	}()
	big()
	(<-got).Release()
	ctx, cancel := context.WithCancel(context.Background())
	hold, _ := b.TryTake("a", 100)
	cancel()
	if err := b.Hold("a").Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ends: %v", err)
	}
	hold()
	if b.Held() != 0 {
		t.Fatalf("%d bytes held after every release", b.Held())
	}
	off := NewBudget(0, 0, "nothing")
	if rel, refused := off.TryTake("a", 1<<40); refused != nil {
		t.Fatal("a budget of 0 is off")
	} else {
		rel()
	}
}

// One holder takes at most its share: past it, its own requests are
// refused (saying it is this tenant's share) while another holder's still
// fit; a request larger than the share runs alone within it.
func TestBudgetShares(t *testing.T) {
	b := NewBudget(100, 25, "things")
	var hs []*Hold
	for range 5 {
		h := b.Hold("greedy")
		if err := h.Try(5); err != nil {
			t.Fatalf("within the share: %v", err)
		}
		hs = append(hs, h)
	}
	err := b.Hold("greedy").Try(1)
	if err == nil || !strings.Contains(err.Error(), "this tenant") {
		t.Fatalf("past the share: %v", err)
	}
	for i := range 3 {
		if _, refused := b.TryTake(fmt.Sprint("other", i), 25); refused != nil {
			t.Fatalf("another holder's share %d: %v", i, refused)
		}
	}
	if b.Held() != 100 {
		t.Fatalf("held %d, want 100", b.Held())
	}
	for _, h := range hs {
		h.Release()
	}
	if b.Held() != 75 {
		t.Fatalf("after release: budget %d", b.Held())
	}
	// Larger than a share: clamped to it, so it runs alone.
	h := b.Hold("greedy")
	if err := h.Try(1000); err != nil {
		t.Fatalf("a request larger than the share, alone: %v", err)
	}
	if h.Held() != 25 {
		t.Fatalf("clamped to %d, want 25", h.Held())
	}
	// Having taken the whole share, the hold runs alone: it may grow (an
	// answer built in parts), while the holder's others may not.
	if err := h.Try(10); err != nil || h.Held() != 25 {
		t.Fatalf("a hold that runs alone, growing: %v, holds %d", err, h.Held())
	}
	if _, refused := b.TryTake("greedy", 1); refused == nil {
		t.Fatal("another request of the holder beside one that runs alone")
	}
}

// A waiter that waits only for its own holder's share keeps no other
// holder waiting; one that waits for the whole budget keeps later ones
// waiting, so that small takers do not starve it; a waiter whose context
// ends lets the ones behind it in.
func TestBudgetWaitersByHolder(t *testing.T) {
	b := NewBudget(100, 50, "things")
	ctx := context.Background()
	stalled := b.Hold("stalled")
	if err := stalled.Try(50); err != nil {
		t.Fatal(err)
	}
	ownWait := make(chan error, 1)
	go func() { ownWait <- b.Hold("stalled").Wait(ctx, 10) }()
	waitFor(t, b, 1)
	// The other holder gets its bytes at once, waiter or not.
	other := b.Hold("other")
	if err := other.Wait(ctx, 40); err != nil {
		t.Fatal(err)
	}
	// Now one that does not fit in the whole budget (90 held).
	bigWait := make(chan error, 1)
	go func() { bigWait <- b.Hold("third").Wait(ctx, 20) }()
	waitFor(t, b, 2)
	smallCtx, cancelSmall := context.WithCancel(ctx)
	smallWait := make(chan error, 1)
	go func() { smallWait <- b.Hold("fourth").Wait(smallCtx, 5) }()
	waitFor(t, b, 3)
	select {
	case err := <-smallWait:
		t.Fatalf("a small waiter went ahead of a larger one waiting for the budget: %v", err)
	default:
	}
	other.Release() // 50 held: the larger one fits, then the small one
	if err := <-bigWait; err != nil {
		t.Fatal(err)
	}
	if err := <-smallWait; err != nil {
		t.Fatal(err)
	}
	cancelSmall()
	stalled.Release()
	if err := <-ownWait; err != nil {
		t.Fatal(err)
	}
}

// waitFor polls until n takers wait on b (a hang guard, not a timing).
func waitFor(t *testing.T, b *Budget, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.mu.Lock()
		got := b.waiters.Len()
		b.mu.Unlock()
		switch {
		case got == n:
			return
		case got > n:
			t.Fatalf("%d waiters, want %d", got, n)
		case time.Now().After(deadline):
			t.Fatalf("never %d waiters", n)
		}
		runtime.Gosched()
	}
}
