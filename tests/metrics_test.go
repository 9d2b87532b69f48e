package tests

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/pgtest"
	"github.com/edgehub/edgehub/sse"
)

// series reads every series of /metrics, keyed as /metrics writes it:
// its name and labels.
func (p *proc) series(t *testing.T) map[string]float64 {
	t.Helper()
	all := map[string]float64{}
	for _, line := range strings.Split(p.metricsText(t), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		all[line[:i]] = v
	}
	return all
}

// value reads one series of /metrics, which must be there.
func (p *proc) value(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := p.series(t)[series]
	if !ok {
		t.Fatalf("/metrics has no %s", series)
	}
	return v
}

// awaitSeries polls /metrics until every series in want has its value.
func (p *proc) awaitSeries(t *testing.T, what string, want map[string]float64) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; {
		got := p.series(t)
		same := true
		for s, v := range want {
			if got[s] != v {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			have := map[string]float64{}
			for s := range want {
				have[s] = got[s]
			}
			t.Fatalf("%s: /metrics has %v, want %v", what, have, want)
		}
		time.Sleep(10 * time.Millisecond) // the server's series follow its goroutines
	}
}

const (
	live       = `edgehub_streams{state="live"}`
	catchingUp = `edgehub_streams{state="catching_up"}`
)

// The gauges of streams live and catching up follow a stream whose client
// stops reading: live, demoted to catching up once its queue is full,
// live again once its client has read everything; and both return to 0
// when streams end, because their clients leave or because the server
// ends them (the tenant is deleted).
func TestStreamGaugesFollowADemotedStream(t *testing.T) {
	const key = "admin-key-of-the-gauges-test-0123456789"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--dev", "--stream-buffer", "4096")
	conn, resp := p.rawWatch(t, "g", "", 4096)
	p.awaitSeries(t, "a stream at the head", map[string]float64{live: 1, catchingUp: 0})
	// The client reads nothing. Each commit of 50 KB overflows the queue
	// of 4 KiB and demotes the stream, which catches up until the
	// connection's buffers are full (they hold at most 4 MiB, the
	// kernel's largest send buffer, and 4 KiB). After 6 MB it is stuck
	// writing, and the last commit leaves it catching up.
	const sent = 6000
	for i := 0; i < sent; i += 50 {
		p.publishBatch(t, "g", i, 50, 1000)
	}
	if p.value(t, "edgehub_stream_demotions_total") == 0 {
		t.Fatal("the stream was never demoted")
	}
	p.awaitSeries(t, "the stalled stream demoted", map[string]float64{live: 0, catchingUp: 1})
	conn.SetReadDeadline(time.Now().Add(wait))
	d := sse.NewDecoder(resp.Body)
	for last := ""; last != strconv.Itoa(sent); {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("the stalled stream after %s: %v", last, err)
		}
		last = f.ID
	}
	p.awaitSeries(t, "the stream caught up", map[string]float64{live: 1, catchingUp: 0})
	other := p.watch(t, "g", "", nil)
	other.hello(t)
	p.awaitSeries(t, "a second stream", map[string]float64{live: 2, catchingUp: 0})
	conn.Close()
	p.awaitSeries(t, "the first client gone", map[string]float64{live: 1, catchingUp: 0, "edgehub_streams_open": 1})
	req, _ := http.NewRequest(http.MethodDelete, p.base+"/v1/admin/tenants/acme", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusNoContent {
		t.Fatalf("delete the tenant: %v %v", r, err)
	}
	p.awaitSeries(t, "the tenant's streams ended", map[string]float64{live: 0, catchingUp: 0, "edgehub_streams_open": 0})
}

// Hubs with nothing to do are passivated after --idle-after, each counted
// once.
func TestIdleHubsArePassivatedAndCounted(t *testing.T) {
	p := start(t, t.TempDir(), "--idle-after", "1s")
	for _, topic := range []string{"a", "b", "c"} {
		p.publish(t, topic, `1`)
	}
	p.awaitSeries(t, "three idle hubs", map[string]float64{"edgehub_hubs_active": 0, "edgehub_hubs_passivated_total": 3})
}

// The commit-to-delivery lag is observed once per flush of events pushed
// to a live stream as they were committed, and not for events the stream
// got as it joined (here from the hub's recent commits).
func TestDeliveryLagObservesLiveFlushesOnly(t *testing.T) {
	p := start(t, t.TempDir())
	for i := 1; i <= 5; i++ {
		p.publish(t, "lag", strconv.Itoa(i))
	}
	s := p.watch(t, "lag", "?after=0", nil)
	s.hello(t)
	for i := 1; i <= 5; i++ {
		s.event(t)
	}
	p.publish(t, "lag", `6`)
	if e := s.event(t); e.Seq != 6 {
		t.Fatalf("got %d, want 6", e.Seq)
	}
	// The stream's flushes are observed in order: once the last one is,
	// the others would have been.
	p.awaitSeries(t, "one live flush", map[string]float64{
		"edgehub_delivery_lag_seconds_count":             1,
		`edgehub_delivery_lag_seconds_bucket{le="+Inf"}`: 1,
	})
}

// Publishes are counted by result and by their events (1, or a batch's),
// and the events and events per commit are those appended: a duplicate
// appends none.
func TestPublishesAreCountedByResultAndSize(t *testing.T) {
	p := start(t, t.TempDir())
	c := p.client()
	ctx := context.Background()
	if _, err := c.Publish(ctx, "acme", "p", 1, client.PublishOptions{IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, "acme", "p", []any{1, 2, 3}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "acme", "p", 1, client.PublishOptions{IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	p.awaitSeries(t, "two publishes appended and one duplicate", map[string]float64{
		`edgehub_publishes_total{result="appended"}`:  2,
		`edgehub_publishes_total{result="duplicate"}`: 1,
		"edgehub_publish_batch_events_count":          3,
		"edgehub_publish_batch_events_sum":            5,
		`edgehub_publish_batch_events_bucket{le="1"}`: 2,
		"edgehub_events_published_total":              4,
		"edgehub_commit_events_sum":                   4,
	})
}

// seriesLines counts the series of /metrics.
func (p *proc) seriesLines(t *testing.T) int {
	t.Helper()
	return len(p.series(t))
}

// exercise uses tenant/topic as clients do: publishes (one event, a batch,
// a duplicate), a stream that gets an event, a read, a state read, a
// refused publish and an unknown route.
func (p *proc) exercise(t *testing.T, tenant, topic string) {
	t.Helper()
	c, ctx := p.client(), context.Background()
	if _, err := c.Publish(ctx, tenant, topic, 1, client.PublishOptions{IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, tenant, topic, []any{1, 2}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, tenant, topic, 1, client.PublishOptions{IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	path := p.base + "/v1/tenants/" + tenant + "/topics/" + topic
	resp, err := http.Get(path + "/watch")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s/%s: %v %v", tenant, topic, resp, err)
	}
	d := sse.NewDecoder(resp.Body)
	if f, err := d.Next(); err != nil || f.Event != "hello" {
		t.Fatalf("watch %s/%s: %+v %v", tenant, topic, f, err)
	}
	if _, err := c.Publish(ctx, tenant, topic, "live", client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if f, err := d.Next(); err != nil || f.Event != "message" {
		t.Fatalf("watch %s/%s: %+v %v", tenant, topic, f, err)
	}
	resp.Body.Close()
	for _, get := range []string{path + "/events?after=0", path + "/state", path + "/nothing"} {
		resp, err := http.Get(get)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err = http.Post(path+"/notify", "application/json", strings.NewReader(`{`))
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad publish: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Tenants and topics are no labels: after one of each has made every
// series there is, 200 topics of 20 tenants used the same way add none,
// and their names appear nowhere in /metrics.
func TestTenantsAndTopicsAddNoSeries(t *testing.T) {
	p := start(t, t.TempDir())
	p.exercise(t, "acme", "warm")
	p.seriesLines(t) // the first scrape makes the series of /metrics itself
	before := p.seriesLines(t)
	for i := range 200 {
		p.exercise(t, fmt.Sprintf("tenant-%02d", i%20), fmt.Sprintf("topic-%03d", i))
	}
	// Every stream has ended: its gauges are as they were.
	p.awaitSeries(t, "the streams ended", map[string]float64{live: 0, catchingUp: 0, "edgehub_streams_open": 0})
	text := p.metricsText(t)
	if after := p.seriesLines(t); after != before {
		t.Fatalf("200 topics of 20 tenants took /metrics from %d series to %d:\n%s", before, after, text)
	}
	for _, name := range []string{"tenant-", "topic-", "warm", "acme"} {
		if strings.Contains(text, name) {
			t.Fatalf("/metrics names %q:\n%s", name, text)
		}
	}
}

// The dashboard in docs/ is one Grafana imports (a uid, a title, a
// Prometheus data source variable, panels on it), and every series that
// its panels and variables query is one the server exports, histograms'
// _bucket, _sum and _count included: renaming a series without the
// dashboard fails here. It also shows every series the issue asks for.
func TestDashboardQueriesExportedSeries(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct{ Expr string }
	type source struct{ Type, UID string }
	type panel struct {
		Title      string
		Datasource source
		Targets    []target
		Panels     []json.RawMessage // a row's
	}
	var d struct {
		UID, Title string
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
		Panels []panel
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("the dashboard needs a uid, a title and panels: %q %q %d", d.UID, d.Title, len(d.Panels))
	}
	exprs := map[string]string{} // query: where it is
	for _, v := range d.Templating.List {
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q.Query) != nil {
			json.Unmarshal(v.Query, &q)
		}
		switch {
		case v.Type == "datasource" && q.Query != "prometheus":
			t.Errorf("variable %s: a data source of type %q, want prometheus", v.Name, q.Query)
		case v.Type == "query":
			exprs[q.Query] = "variable " + v.Name
		}
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name, Type string
		Query      json.RawMessage
	}) bool {
		return v.Type == "datasource" && v.Name == "datasource"
	}) {
		t.Error("the dashboard has no datasource variable")
	}
	panels := d.Panels
	for len(panels) > 0 {
		pn := panels[0]
		panels = panels[1:]
		for _, raw := range pn.Panels {
			var inner panel
			if err := json.Unmarshal(raw, &inner); err != nil {
				t.Fatal(err)
			}
			panels = append(panels, inner)
		}
		if len(pn.Panels) > 0 {
			continue
		}
		if pn.Datasource.Type != "prometheus" || pn.Datasource.UID != "${datasource}" || len(pn.Targets) == 0 {
			t.Errorf("panel %q: data source %+v, %d queries; want the datasource variable's and some", pn.Title, pn.Datasource, len(pn.Targets))
		}
		for _, tg := range pn.Targets {
			exprs[tg.Expr] = "panel " + pn.Title
		}
	}

	p := start(t, t.TempDir())
	if resp, err := http.Get(p.base + "/nothing"); err == nil { // a request and a refusal
		resp.Body.Close()
	}
	p.metricsText(t)
	types := map[string]string{}
	for _, line := range strings.Split(p.metricsText(t), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	exported := func(name string) bool {
		if types[name] != "" {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && (types[base] == "histogram" || types[base] == "summary" && suffix != "_bucket") {
				return true
			}
		}
		return false
	}
	used := map[string]bool{}
	for expr, where := range exprs {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no series", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exported(n) {
				t.Errorf("%s: %q queries %s, which the server does not export", where, expr, n)
			}
		}
	}
	for _, want := range []string{
		"edgehub_publishes_total", "edgehub_events_published_total", "edgehub_commit_duration_seconds_bucket",
		"edgehub_commit_events_sum", "edgehub_publish_batch_events_bucket", "edgehub_streams", "edgehub_deliveries_total",
		"edgehub_delivery_lag_seconds_bucket", "edgehub_stream_demotions_total", "edgehub_gaps_total",
		"edgehub_refusals_total", "edgehub_http_requests_total", "edgehub_hubs_active", "edgehub_hubs_passivated_total",
	} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promWords    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
	labelValues  = regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,`)
)

// metricNames are the series a PromQL expression (or a label_values
// variable query) selects: what is left once strings, label matchers,
// ranges, grouping clauses, functions, keywords and numbers are gone.
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	expr = promStrings.ReplaceAllString(expr, " ")
	expr = promMatchers.ReplaceAllString(expr, " ")
	expr = promGrouping.ReplaceAllString(expr, " ")
	var names []string
	for _, m := range promWords.FindAllStringSubmatch(expr, -1) {
		if m[1] == "" && !promKeywords[m[0]] {
			names = append(names, m[0])
		}
	}
	return names
}

// logLines parses the server's stderr, in --log-format json, failing on a
// line that is not JSON.
func (p *proc) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.logText()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line that is not JSON: %q", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}

// awaitLog polls the server's log until it has a line with each message
// of msgs, and returns the first line of each.
func (p *proc) awaitLog(t *testing.T, msgs ...string) map[string]map[string]any {
	t.Helper()
	for deadline := time.Now().Add(wait); ; {
		found := map[string]map[string]any{}
		for _, l := range p.logLines(t) {
			if m, _ := l["msg"].(string); slices.Contains(msgs, m) && found[m] == nil {
				found[m] = l
			}
		}
		if len(found) == len(msgs) {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log has %d of the lines %q:\n%s", len(found), msgs, p.logText())
		}
		time.Sleep(10 * time.Millisecond) // the log is read from the server's stderr
	}
}

// adminCall calls the admin API with key and decodes the answer into v
// (unless nil), failing unless it has status want.
func (p *proc) adminCall(t *testing.T, key, method, path, body string, want int, v any) {
	t.Helper()
	req, _ := http.NewRequest(method, p.base+"/v1/admin/tenants/"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
}

type tenantAnswer struct {
	SigningSecret string `json:"signing_secret"`
	WebhookSecret string `json:"webhook_secret"`
}

// Admin actions are logged at info with the tenant and the client, a
// token's lifetime and patterns too; no secret, token or admin key is.
func TestAdminActionsAreLoggedWithoutSecrets(t *testing.T) {
	const key = "admin-key-of-the-admin-log-test-0123456789"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--log-format", "json")
	var created, rotated tenantAnswer
	var tok struct{ Token string }
	p.adminCall(t, key, "PUT", "acme", "", http.StatusCreated, &created)
	p.adminCall(t, key, "POST", "acme/tokens", `{"publish":["orders"],"subscribe":["orders.*"],"ttl":"10m"}`, http.StatusCreated, &tok)
	p.adminCall(t, key, "POST", "acme/rotate", "", http.StatusOK, &rotated)
	p.adminCall(t, key, "DELETE", "acme", "", http.StatusNoContent, nil)
	lines := p.awaitLog(t, "tenant created", "token minted", "tenant rotated", "tenant deleted")
	for msg, l := range lines {
		if l["level"] != "INFO" || l["tenant"] != "acme" || l["client"] == "" || l["client"] == nil {
			t.Errorf("%s: %v, want INFO with the tenant and the client", msg, l)
		}
	}
	if l := lines["token minted"]; l["ttl"] != "10m0s" || fmt.Sprint(l["publish"]) != "[orders]" || fmt.Sprint(l["subscribe"]) != "[orders.*]" {
		t.Errorf("token minted: %v, want its ttl and patterns", l)
	}
	text := p.logText()
	for _, secret := range []string{key, created.SigningSecret, created.WebhookSecret, rotated.SigningSecret, rotated.WebhookSecret,
		strings.TrimPrefix(created.WebhookSecret, "whsec_"), tok.Token, tok.Token[strings.LastIndexByte(tok.Token, '.')+1:]} {
		if secret == "" || strings.Contains(text, secret) {
			t.Fatalf("a secret (%q) is in the log, or missing from an answer:\n%s", secret, text)
		}
	}
}

// signed is a notify request with a Standard Webhooks signature made with
// secret at ts.
func signed(t *testing.T, url, secret, id string, ts time.Time, body string) *http.Request {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	stamp := strconv.FormatInt(ts.Unix(), 10)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", stamp)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(auth.Sign(k, id, stamp, []byte(body))))
	return req
}

// Refused credentials say why in a warning (via a token, a webhook
// signature or none), without the access log and without the
// credentials; a webhook-id replayed on another topic is a warning too.
func TestSecurityEventsAreWarnings(t *testing.T) {
	const key = "admin-key-of-the-security-log-test-0123456789"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--log-format", "json")
	var ten tenantAnswer
	p.adminCall(t, key, "PUT", "acme", "", http.StatusCreated, &ten)
	do := func(req *http.Request, want int) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d", req.Method, req.URL.Path, resp.StatusCode, want)
		}
	}
	url := p.topicURL("orders", "notify")
	stale := signed(t, url, ten.WebhookSecret, "msg_stale", time.Now().Add(-time.Hour), `1`)
	do(stale, http.StatusUnauthorized)
	forged := signed(t, url, "whsec_"+base64.StdEncoding.EncodeToString([]byte("not the tenant's secret")), "msg_forged", time.Now(), `1`)
	do(forged, http.StatusUnauthorized)
	bearer, _ := http.NewRequest(http.MethodGet, p.topicURL("orders", "events"), nil)
	bearer.Header.Set("Authorization", "Bearer not.a.token")
	do(bearer, http.StatusUnauthorized)
	anonymous, _ := http.NewRequest(http.MethodGet, p.topicURL("orders", "events"), nil)
	do(anonymous, http.StatusUnauthorized)
	unknown, _ := http.NewRequest(http.MethodGet, p.base+"/v1/tenants/nobody/topics/x/events", nil)
	unknown.Header.Set("Authorization", "Bearer not.a.token")
	do(unknown, http.StatusUnauthorized)
	do(signed(t, url, ten.WebhookSecret, "msg_once", time.Now(), `{"n":1}`), http.StatusCreated)
	do(signed(t, p.topicURL("refunds", "notify"), ten.WebhookSecret, "msg_once", time.Now(), `{"n":1}`), http.StatusUnprocessableEntity)

	type refusal struct{ via, tenant, reason string }
	want := []refusal{
		{"webhook", "acme", "webhook-timestamp is more than 5m0s off"},
		{"webhook", "acme", "no webhook signature matches"},
		{"token", "acme", "token is malformed"},
		{"none", "acme", "no token and no webhook signature"},
		{"token", "nobody", "unknown tenant"},
	}
	for deadline := time.Now().Add(wait); ; {
		var got []refusal
		replayed := false
		for _, l := range p.logLines(t) {
			switch {
			case l["msg"] == "credentials refused" && l["level"] == "WARN" && l["client"] != nil:
				got = append(got, refusal{fmt.Sprint(l["via"]), fmt.Sprint(l["tenant"]), fmt.Sprint(l["reason"])})
			case l["msg"] == "request" && l["code"] == "idempotency_key_reused":
				replayed = l["level"] == "WARN"
			}
		}
		matched := len(got) == len(want)
		for i := 0; matched && i < len(want); i++ {
			matched = got[i].via == want[i].via && got[i].tenant == want[i].tenant && strings.Contains(got[i].reason, want[i].reason)
		}
		if matched && replayed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals logged %+v, want %+v; the replay at warn: %v\n%s", got, want, replayed, p.logText())
		}
		time.Sleep(10 * time.Millisecond) // the log is read from the server's stderr
	}
	text := p.logText()
	for _, secret := range []string{ten.WebhookSecret, ten.SigningSecret, stale.Header.Get("webhook-signature"), "not.a.token"} {
		if strings.Contains(text, secret) {
			t.Fatalf("a credential (%q) is in the log:\n%s", secret, text)
		}
	}
}

// Startup says which backlog it opened and the schema's version after
// migrating, through the one JSON logger, protoactor's lines included.
// On a data directory whose last server was killed, it says that the
// backlog recovered; after a clean stop, it does not.
func TestStartupIsLogged(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "--log-format", "json")
	lines := p.awaitLog(t, "backlog migrated", "backlog open", "actor system started", "listening")
	if v, _ := lines["backlog migrated"]["version"].(float64); v < 1 {
		t.Errorf("backlog migrated: %v, want the schema's version", lines["backlog migrated"])
	}
	if s := lines["backlog open"]["store"]; s != "sqlite" && s != "postgres" {
		t.Errorf("backlog open: %v, want the store", lines["backlog open"])
	}
	if c := lines["actor system started"]["component"]; c != "actors" {
		t.Errorf("protoactor's line %v is not the actors component's", lines["actor system started"])
	}
	if pgtest.Enabled() {
		return // no data directory: the rest is SQLite's
	}
	const unclean = "the last server on this data directory did not stop cleanly (killed, crashed or without power): the backlog recovered what it had committed from its write-ahead log"
	p.publish(t, "x", `1`)
	p.kill9()
	p = start(t, dir, "--log-format", "json")
	if l := p.awaitLog(t, unclean)[unclean]; l["level"] != "WARN" || l["pid"] == nil {
		t.Errorf("after kill -9: %v, want a warning with the last server's pid", l)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	p = start(t, dir, "--log-format", "json")
	p.awaitLog(t, "listening")
	if strings.Contains(p.logText(), unclean) {
		t.Fatalf("after a clean stop the server says the last did not stop cleanly:\n%s", p.logText())
	}
}

// On a shared log, the listener says when it listens, when it lost its
// connection (once, however many attempts to get it back fail) and when
// it is back, after how long.
func TestListenerLossIsLogged(t *testing.T) {
	ps, url := cluster(t, 1, "--log-format", "json")
	p := ps[0]
	p.awaitLog(t, "listening for other processes' commits")
	admin := adminConn(t, url)
	ctx := context.Background()
	var db string
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	clusterConn := adminConn(t, os.Getenv("EDGEHUB_TEST_POSTGRES"))
	if _, err := clusterConn.Exec(ctx, `ALTER DATABASE `+db+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if cutListeners(t, admin) != 1 {
		t.Fatal("want the listener cut")
	}
	const lost, retry = "not listening for other processes' commits: lost the connection to the shared log; not ready until it is back",
		"lost the hint listener's connection; listening again"
	count := func(msg string) int {
		n := 0
		for _, l := range p.logLines(t) {
			if l["msg"] == msg {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(wait); count(retry) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the listener did not try again:\n%s", p.logText())
		}
		time.Sleep(10 * time.Millisecond) // the listener tries every 200ms
	}
	if n := count(lost); n != 1 {
		t.Fatalf("the loss was logged %d times, want once:\n%s", n, p.logText())
	}
	if _, err := clusterConn.Exec(ctx, `ALTER DATABASE `+db+` ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
	const back = "listening for other processes' commits again; ending every stream, since what was missed may have ended a tenant"
	if l := p.awaitLog(t, back)[back]; l["level"] != "WARN" || l["down"] == nil {
		t.Fatalf("the listener's return: %v, want a warning with the time down", l)
	}
}

// In JSON logs a duration carries its unit, as in text ones: the access
// log's took is "1.5ms", not a bare number of nanoseconds.
func TestJSONLogDurationsCarryTheirUnit(t *testing.T) {
	p := start(t, t.TempDir(), "--log-format", "json", "--access-log")
	p.publish(t, "orders", `{"n":1}`)
	line := p.awaitLog(t, "request")["request"]
	took, ok := line["took"].(string)
	if !ok {
		t.Fatalf("took is %T %v, not a string with its unit", line["took"], line["took"])
	}
	if _, err := time.ParseDuration(took); err != nil {
		t.Fatalf("took %q: %v", took, err)
	}
}
