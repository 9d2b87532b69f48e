package httpapi_test

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/server"
)

// leftPublisher starts a server (its data in a directory of the test's,
// its config tweaked by tweak) and publishes body (as contentType, unless
// empty) to t/x with a client that leaves while another writer holds the
// database, so that the commit waits. It returns once the handler has
// seen its client leave, with the server's URL and release, which lets
// the commit go.
func leftPublisher(t *testing.T, tweak func(*server.Config), contentType, body string) (base string, release func()) {
	t.Helper()
	awaiting, left := make(chan struct{}, 1), make(chan struct{}, 1)
	dir := t.TempDir()
	base = startServer(t, server.Hooks{HTTP: httpapi.Hooks{
		AwaitingCommit: func(string, string) { signal(awaiting) },
		PublisherLeft:  func(string, string) { signal(left) },
	}}, func(c *server.Config) {
		c.Data = dir
		tweak(c)
	})
	// Another writer holds the database, so the commit waits.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "edgehub.db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	lock, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/tenants/t/topics/x/notify", strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, awaiting, "the publish to reach its hub")
	cancel()
	waitFor(t, left, "the handler to see its client leave")
	return base, func() {
		t.Helper()
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}

// A publish whose client left before its commit was answered is counted
// all the same once the commit is done: by result and size, and its
// events as appended.
func TestALeftPublisherIsCounted(t *testing.T) {
	base, release := leftPublisher(t, func(*server.Config) {}, "application/x-ndjson", "1\n2\n")
	release()
	want := []string{
		`edgehub_publishes_total{result="appended"} 1`,
		"edgehub_publish_batch_events_sum 2",
		"edgehub_events_published_total 2",
	}
	for deadline := time.Now().Add(wait); ; {
		_, b := do(t, base, call{method: "GET", path: "/metrics"})
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(b), "\n"+w+"\n") {
				missing = w
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s once the left publisher's commit is done:\n%s", missing, b)
		}
		time.Sleep(10 * time.Millisecond) // the commit goes on without its publisher
	}
}
