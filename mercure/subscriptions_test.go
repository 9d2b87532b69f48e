package mercure

import (
	"strconv"
	"testing"
)

// An answer of the subscriptions API holds at most maxListed
// subscriptions, the first in id order, however many are open.
func TestSubscriptionListsAreBounded(t *testing.T) {
	var a active
	subs := make([]subscription, maxListed+10)
	for i := range subs {
		subs[i] = subscription{ID: subscriptionID("exact", "t"+strconv.Itoa(i), "s")}
	}
	a.add("acme", subs)
	got := a.list("acme", subscriptionsPath+"/")
	if len(got) != maxListed || cap(got) != maxListed || got[0].ID > got[1].ID {
		t.Fatalf("listed %d (capacity %d), want the first %d", len(got), cap(got), maxListed)
	}
	a.remove("acme", subs)
	if got := a.list("acme", ""); len(got) != 0 || len(a.byTenant) != 0 {
		t.Fatalf("after removing them all, %d listed and %d tenants held", len(got), len(a.byTenant))
	}
}
