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
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.AdminKey = true, t.TempDir(), strings.Repeat("k", 32)
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		server.Hooks{Mercure: mercure.Hooks{BeforeAnnounce: hold, BeforeTellEnd: hold}})
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
	hub := ts.URL + "/v1/tenants/acme/.well-known/mercure"
	get := func(ctx context.Context, u string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer dev") // dev mode: any token grants everything
		return http.DefaultClient.Do(req)
	}
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
