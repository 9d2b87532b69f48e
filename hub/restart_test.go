package hub

import (
	"slices"
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
