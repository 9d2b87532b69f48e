package hub

import (
	"slices"
	"sync"
	"testing"
)

// A hub retired while its publish is being committed (the tenant was
// rotated or deleted: Router.EndTenant; the listener came back:
// Router.EndAll) is replaced by a new hub that reads its head before the
// commit lands. This process's own hints are not for it, and no other
// commit or head check comes: the new hub still hears of the commit, from
// the old one, and pushes it to its live streams.
func TestACommitOfARetiredHubReachesTheHubAfterIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(r *Router)
	}{
		{"EndTenant", func(r *Router) { r.EndTenant("t") }},
		{"EndAll", (*Router).EndAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.publish(`"first"`)
			release := make(chan struct{})
			h.gate.hold.Store(&release)
			pub := h.sendPublish(`"in flight"`)
			tc.end(h.hubs)
			st := newStream(1 << 20)
			if j := recv(t, h.sendWatch(st), "watch"); j.err != nil || j.head != 1 || !j.live {
				t.Fatalf("a watch on the new hub: %+v; want live at head 1, read before the commit in flight", j)
			}
			close(release)
			if r := recv(t, pub, "publish in flight"); r.err != nil || r.result.First != 2 {
				t.Fatalf("publish in flight: %+v", r)
			}
			if got := pushed(t, st, 1); !slices.Equal(got, []int64{2}) {
				t.Fatalf("the new hub's live stream got %v, want [2]", got)
			}
		})
	}
}

// An own commit that lands while the hub reads a range another process
// committed, and that does not follow it (a third commit, whose hint is
// lost, lies between), is not left waiting by the read's answer, which
// knew nothing of either: the hub reads on, and its live stream gets all
// three pushed, in order, with no other hint and no head check.
func TestAnOwnCommitDuringARangeReadIsNotLeftBehind(t *testing.T) {
	h := newHarness(t)
	st := newStream(1 << 20)
	recv(t, h.sendWatch(st), "watch")
	read, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := func() {
		once.Do(func() {
			close(read)
			<-release
		})
	}
	h.afterRead.Store(&f)
	h.commitElsewhere(1)
	h.hubs.Remote("t", "x", 1, 1)
	recv(t, read, "the hub's read of 1") // it has read the log at head 1
	h.commitElsewhere(1)                 // 2, whose hint is lost
	if rep := recv(t, h.sendPublish(`"here"`), "publish"); rep.err != nil || rep.result.First != 3 {
		t.Fatalf("publish: %+v", rep)
	}
	// The read's answer reaches the hub after the commit's turn.
	close(release)
	if got := pushed(t, st, 3); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("the live stream got %v, want [1 2 3]", got)
	}
}
