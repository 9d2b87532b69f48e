package mercure_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehub/edgehub/mercure"
	"github.com/edgehub/edgehub/server"
	"github.com/edgehub/edgehub/sse"
)

// doc is a subscription as its events and the API describe it.
type doc struct {
	ID     string `json:"id"`
	Match  string `json:"match"`
	Active bool   `json:"active"`
}

var cursorOf = regexp.MustCompile(`last-event-id="([^"]+)"`)

// A subscriber held just before the commit of its start and just before
// that of its end: a list read there and the subscription events after
// its cursor together tell what happened. The list shows the
// subscription or an event after the cursor announces it; the list
// leaves it out or an event after the cursor ends it. Adding the
// subscription's row before its start's commit, or removing it before
// its end's, fails it.
func TestSubscriptionListsAgreeWithTheirEvents(t *testing.T) {
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{}) // once each per window
	hold := func(string) {
		if armed.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
	}
	hub := presenceServer(t, mercure.Hooks{BeforeAnnounce: hold, BeforeTellEnd: hold})
	// list reads the API: the subscription of match=orders, if listed,
	// and the cursor.
	list := func() (listed bool, cursor string) {
		resp, err := get(context.Background(), hub+"/subscriptions/exact/orders")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Subscriptions []doc }
		m := cursorOf.FindStringSubmatch(resp.Header.Get("Link"))
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || m == nil {
			t.Fatalf("the list: %d %v %q", resp.StatusCode, err, resp.Header.Get("Link"))
		}
		return len(body.Subscriptions) == 1, m[1]
	}
	// told says whether a subscription event after cursor says that the
	// subscription of match=orders became active (or ended); it waits 5 s
	// for one, which only a broken hub needs.
	told := func(cursor string, active bool) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := get(ctx, hub+"?match_urlpattern="+url.QueryEscape("/.well-known/mercure/subscriptions/*")+
			"&last_event_id="+url.QueryEscape(cursor))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		dec := sse.NewDecoder(resp.Body)
		for {
			f, err := dec.Next()
			if err != nil {
				return false
			}
			var d doc
			if json.Unmarshal([]byte(f.Data), &d) == nil && d.Match == "orders" && d.Active == active {
				return true
			}
		}
	}

	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	opened := make(chan *http.Response, 1)
	armed.Store(true)
	go func() {
		resp, err := get(ctx, hub+"?match=orders")
		if err != nil {
			resp = nil
		}
		opened <- resp
	}()
	<-held // listed; its start not yet committed
	listed, cursor := list()
	release <- struct{}{}
	resp := <-opened
	if resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the subscription did not open: %+v", resp)
	}
	if !listed && !told(cursor, true) {
		t.Fatalf("started inside the window: not listed, and no event after the cursor %s says so", cursor)
	}

	armed.Store(true)
	leave()
	resp.Body.Close()
	<-held // unlisted; its end not yet committed
	listed, cursor = list()
	release <- struct{}{}
	if listed && !told(cursor, false) {
		t.Fatalf("ended inside the window: listed, and no event after the cursor %s says it ended", cursor)
	}
}

// presenceServer serves, in dev mode, the tenant acme with active
// subscriptions on, and returns its hub URL.
func presenceServer(t *testing.T, hooks mercure.Hooks) string {
	t.Helper()
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.AdminKey = true, t.TempDir(), strings.Repeat("k", 32)
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{Mercure: hooks})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background())
	})
	for _, put := range []struct{ path, body string }{{"", ""}, {"/mercure", `{"subscriptions": true}`}} {
		req, _ := http.NewRequest(http.MethodPut, ts.URL+"/v1/admin/tenants/acme"+put.path, strings.NewReader(put.body))
		req.Header.Set("Authorization", "Bearer "+cfg.AdminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("PUT tenant%s: %v %v", put.path, resp, err)
		}
		resp.Body.Close()
	}
	return ts.URL + "/v1/tenants/acme/.well-known/mercure"
}

// get asks u with a token (dev mode: any grants everything).
func get(ctx context.Context, u string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer dev")
	return http.DefaultClient.Do(req)
}

// A subscriber that leaves while its start is being committed is not
// left listed: the start lands all the same, and so does its end. Held
// just before the start's commit, its client gone meanwhile, it is gone
// from the list after. Waiting for the start with the client's request
// fails it (the end is never told).
func TestASubscriberThatLeavesDuringItsStartIsEnded(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	hub := presenceServer(t, mercure.Hooks{BeforeAnnounce: func(string) {
		if once.CompareAndSwap(false, true) {
			held <- struct{}{}
			<-release
		}
	}})
	ctx, leave := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := get(ctx, hub+"?match=orders"); err == nil {
			resp.Body.Close()
		}
	}()
	<-held
	leave()
	<-done // the client has gone
	close(release)
	// Its start is committed, and its end after it; then it is unlisted.
	deadline := time.Now().Add(10 * time.Second)
	events := strings.Replace(hub, ".well-known/mercure", "events", 1) + "?after=0&topic=" + url.QueryEscape("/.well-known/mercure/subscriptions")
	for {
		resp, err := get(context.Background(), events)
		if err != nil {
			t.Fatal(err)
		}
		var read struct{ Events []struct{ Data doc } }
		err = json.NewDecoder(resp.Body).Decode(&read)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(read.Events) == 2 && read.Events[0].Data.Active && !read.Events[1].Data.Active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a subscriber gone during its start: its announcements are %+v, want its start and its end", read.Events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := get(context.Background(), hub+"/subscriptions/exact/orders")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Subscriptions []doc }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Subscriptions) != 0 {
		t.Fatalf("a subscriber gone during its start is still listed: %+v %v", body.Subscriptions, err)
	}
}
