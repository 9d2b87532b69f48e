package limits

import (
	"context"
	"errors"
	"testing"
)

// A budget refuses what does not fit (overloaded, with Retry-After), lets
// a request larger than the whole budget run alone, gives bytes back once
// however often release is called, and lets a waiting taker in when they
// come back.
func TestBudget(t *testing.T) {
	b := NewBudget(100, "things")
	r1, refused := b.TryTake(60)
	if refused != nil {
		t.Fatal(refused)
	}
	if _, refused := b.TryTake(50); refused == nil || refused.Code != "overloaded" || refused.RetryAfter <= 0 {
		t.Fatalf("past the budget: %+v", refused)
	}
	r1()
	r1() // a second release gives nothing back twice
	big, refused := b.TryTake(1000)
	if refused != nil {
		t.Fatalf("a request larger than the budget, alone: %+v", refused)
	}
	if _, refused := b.TryTake(1); refused == nil {
		t.Fatal("the budget was given back twice")
	}
	got := make(chan func(), 1)
	go func() {
		rel, err := b.Take(context.Background(), 10)
		if err != nil {
			panic(err)
		}
		got <- rel
	}()
	big()
	(<-got)()
	ctx, cancel := context.WithCancel(context.Background())
	hold, _ := b.TryTake(100)
	cancel()
	if _, err := b.Take(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ends: %v", err)
	}
	hold()
	off := NewBudget(0, "nothing")
	if rel, refused := off.TryTake(1 << 40); refused != nil {
		t.Fatal("a budget of 0 is off")
	} else {
		rel()
	}
}
