package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// metricsText is the server's /metrics.
func (p *proc) metricsText(t *testing.T) string {
	t.Helper()
	_, _, b := do(t, http.MethodGet, p.base+"/metrics", "", "")
	return string(b)
}

// Requests are counted by route pattern and status, refusals by code, and
// the route label stays one series for any number of unknown paths.
func TestRequestsAreCountedByRouteAndStatus(t *testing.T) {
	p := start(t, t.TempDir())
	p.publish(t, "x", `1`)
	for _, body := range []string{`{`, `nope`} {
		resp, err := http.Post(p.topicURL("x", "notify"), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := range 50 {
		resp, err := http.Get(p.base + "/no/such/" + strings.Repeat("x", i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	m := p.metricsText(t)
	for _, want := range []string{
		`edgehub_http_requests_total{route="POST /v1/tenants/:tenant/topics/:topic/notify",status="201"} 1`,
		`edgehub_http_requests_total{route="POST /v1/tenants/:tenant/topics/:topic/notify",status="400"} 2`,
		`edgehub_http_requests_total{route="unmatched",status="404"} 50`,
		`edgehub_refusals_total{code="invalid_json"} 2`,
		`edgehub_refusals_total{code="not_found"} 50`,
		`edgehub_http_request_duration_seconds_count{route="POST /v1/tenants/:tenant/topics/:topic/notify"} 3`,
		`go_build_info{`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := strings.Count(m, `edgehub_http_requests_total{route="unmatched"`); n != 1 {
		t.Errorf("%d series for unmatched routes, want 1", n)
	}
}

// The access log has a line per request, in JSON with --log-format json,
// with the path but never the query string or a header: a token in
// either does not reach the log. Refused credentials are at warn, and
// logged without --access-log too.
func TestAccessLogKeepsNoSecrets(t *testing.T) {
	t.Run("access log", func(t *testing.T) { accessLogKeepsNoSecrets(t, "--access-log") })
	t.Run("refusals only", func(t *testing.T) { accessLogKeepsNoSecrets(t) })
}

func accessLogKeepsNoSecrets(t *testing.T, args ...string) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=admin-key-for-the-log-test-0123456789"}, t.TempDir(), "127.0.0.1:0",
		append([]string{"--log-format", "json"}, args...)...)
	req, _ := http.NewRequest("GET", p.base+"/v1/tenants/acme/topics/x/events?access_token=SECRET-IN-QUERY", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a bad token in the query: %v %v", resp, err)
	}
	req, _ = http.NewRequest("POST", p.base+"/v1/tenants/acme/topics/x/notify", strings.NewReader(`1`))
	req.Header.Set("Authorization", "Bearer SECRET-IN-HEADER")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a bad token in the header: %v %v", resp, err)
	}
	type line struct {
		Level, Msg, Route, Path, Code string
		Status                        int
	}
	// awaitRequests polls the log (read from the server's stderr) until it
	// has want request lines, and returns them.
	awaitRequests := func(want int) []line {
		for deadline := time.Now().Add(wait); ; {
			var requests []line
			for _, l := range strings.Split(p.logText(), "\n") {
				var v line
				if json.Unmarshal([]byte(l), &v) == nil && v.Msg == "request" {
					requests = append(requests, v)
				}
			}
			if len(requests) >= want {
				return requests
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d access log lines, want %d:\n%s", len(requests), want, p.logText())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	awaitRequests(2)
	if resp, err := http.Get(p.base + "/healthz?access_token=SECRET-IN-QUERY"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	want := 2
	if len(args) > 0 {
		want = 3 // the 200 too
	}
	requests := awaitRequests(want)
	if strings.Contains(p.logText(), "SECRET-IN") {
		t.Fatalf("a token reached the log:\n%s", p.logText())
	}
	for _, v := range requests[:2] {
		if v.Level != "WARN" || v.Status != 401 || v.Code != "unauthorized" || strings.Contains(v.Path, "?") || !strings.Contains(v.Route, " /v1/tenants/:tenant/topics/:topic/") {
			t.Fatalf("access log line %+v: want a warning with status 401, code unauthorized, the route and the bare path", v)
		}
	}
}
