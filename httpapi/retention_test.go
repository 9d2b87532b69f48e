package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/server"
)

func publishN(t *testing.T, base, topic string, n int) {
	t.Helper()
	body := strings.Repeat("{\"n\":1}\n", n)
	resp, err := http.Post(base+"/v1/tenants/t/topics/"+topic+"/notify", "application/x-ndjson", strings.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish batch: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Retention trims while a stream is between two catch-up pages: the stream
// gets exactly one gap frame naming what it lost, then every retained
// event in order, then live events. The read API reports the same gap.
func TestTrimDuringCatchUpGivesExactlyOneGap(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	first := true
	srv, base := startServerWith(t, server.Hooks{ManualTicks: true, Hub: hub.Hooks{BetweenPages: func(string, string) {
		if first {
			first = false
			close(inside)
			<-release
		}
	}}}, func(c *server.Config) { c.PageSize, c.RetentionEvents = 10, 50 })
	publishN(t, base, "x", 120)
	resp, err := http.Get(base + "/v1/tenants/t/topics/x/watch?after=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fc := frames(t, resp.Body)
	<-inside // the stream has written 1..10 and is about to read on
	if err := srv.RunRetention(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	close(release)
	if f := next(t, fc); f.Event != "hello" {
		t.Fatalf("want hello, got %+v", f)
	}
	for want := 1; want <= 10; want++ {
		if f := next(t, fc); f.ID != fmt.Sprint(want) {
			t.Fatalf("got %+v, want event %d", f, want)
		}
	}
	if f := next(t, fc); f.Event != "gap" || f.ID != "70" || f.Data != `{"from":11,"to":70}` {
		t.Fatalf("want one gap 11..70, got %+v", f)
	}
	for want := 71; want <= 120; want++ {
		if f := next(t, fc); f.Event != "message" || f.ID != fmt.Sprint(want) {
			t.Fatalf("got %+v, want event %d", f, want)
		}
	}
	seq := publish(t, base, "x", `"live"`)
	if f := next(t, fc); f.Event != "message" || f.ID != fmt.Sprint(seq) {
		t.Fatalf("got %+v, want live event %d", f, seq)
	}

	status, b := do(t, base, call{method: "GET", path: "/v1/tenants/t/topics/x/events?after=10&limit=5"})
	var ans struct {
		Events []struct{ Seq int64 }
		Gap    *struct{ From, To int64 }
		Head   int64
		Next   int64 `json:"next_after"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || status != 200 {
		t.Fatalf("read: %d %s", status, b)
	}
	if ans.Gap == nil || ans.Gap.From != 11 || ans.Gap.To != 70 || len(ans.Events) != 5 || ans.Events[0].Seq != 71 || ans.Next != 75 || ans.Head != 121 {
		t.Fatalf("read after trim: %s", b)
	}
	status, b = do(t, base, call{method: "GET", path: "/v1/tenants/t/topics/x/events?after=71&limit=5"})
	if status != 200 || strings.Contains(string(b), `"gap"`) {
		t.Fatalf("read past the trim point reports a gap: %s", b)
	}
}

// An event committed after the snapshot's state was read and before the
// stream registered must follow the snapshot: the stream's position is the
// snapshot's sequence, not the hub's head at registration.
func TestEventBetweenSnapshotAndRegistrationFollowsSnapshot(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	base := startServer(t, server.Hooks{Hub: hub.Hooks{AfterSnapshot: func(string, string) {
		close(inside)
		<-release
	}}}, nil)
	do(t, base, call{method: "POST", path: "/v1/tenants/t/topics/x/notify?key=a", body: `1`})
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(base + "/v1/tenants/t/topics/x/watch?snapshot=1")
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	<-inside
	do(t, base, call{method: "POST", path: "/v1/tenants/t/topics/x/notify?key=b", body: `2`})
	close(release)
	resp := <-got
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	fc := frames(t, resp.Body)
	if f := next(t, fc); f.Event != "hello" || f.Data != `{"head":2,"position":1}` {
		t.Fatalf("hello: %+v", f)
	}
	if f := next(t, fc); f.Event != "snapshot" || f.ID != "1" || f.Data != `{"seq":1,"state":{"a":1}}` {
		t.Fatalf("snapshot: %+v", f)
	}
	if f := next(t, fc); f.ID != "2" || !strings.Contains(f.Data, `"key":"b","op":"upsert","data":2`) {
		t.Fatalf("event after snapshot: %+v", f)
	}
}
