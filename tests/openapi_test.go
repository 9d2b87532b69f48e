package tests

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/content"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/responses"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/sse"
)

// docFile is the OpenAPI document the binary embeds and serves.
const docFile = "../httpapi/openapi.yaml"

// Every route, driven through the statuses the document lists for it on
// the real binary (dev mode, the admin key, and servers with tight
// limits), answers as the document says: the status is listed for the
// operation, the Content-Type is one of its media types, the headers it
// requires are there (Retry-After on every 429), the body matches its
// schema, and no header or field is sent that the document does not
// declare (the validator runs in strict mode). Every stream frame matches
// StreamFrame. The document's own schemas refuse the requests they can
// tell are bad, and accept the others. At the end, every status of every
// operation and every error code has been seen, except those no client
// can bring about.
func TestOpenAPIDescribesEveryAnswer(t *testing.T) {
	a := loadAPI(t)
	a.devServer(t)
	a.adminServer(t)
	a.issuerServer(t)
	a.limitServer(t)
	a.readBudgetServer(t)
	a.throttleServer(t)
	a.coverage(t)
}

// What /openapi.yaml answers is the embedded file, byte for byte.
func TestOpenAPIServedIsTheFile(t *testing.T) {
	want, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, t.TempDir())
	resp, err := http.Get(p.base + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("GET /openapi.yaml: %d, %d bytes, not the %d of %s", resp.StatusCode, len(got), len(want), docFile)
	}
}

// api is the document, strict validators of requests and answers, and
// what the test has seen answered.
type api struct {
	doc       *v3.Document
	requests  validator.Validator
	responses validator.Validator
	opts      *config.ValidationOptions
	schemas   schema_validation.SchemaValidator
	frame     *base.Schema
	// seen has "METHOD /template STATUS" of each answer of an operation,
	// the name of each component response that answered (NotFound,
	// MethodNotAllowed), and "code CODE" of each refusal.
	seen map[string]bool
}

func loadAPI(t *testing.T) *api {
	t.Helper()
	b, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	// Strict mode reports every header, parameter and property that the
	// document does not declare, except where any JSON may be (a published
	// body, an event's data and a state's values in answers) and the
	// console's security headers on its refusals, which are every route's
	// refusals. A batch's lines are the string the document says, not JSON.
	// access_token is a security scheme's parameter, which strict mode does
	// not count as declared.
	ndjson := config.WithBodyDecoder("application/x-ndjson", content.TextDecoder())
	a := &api{
		doc: &m.Model,
		requests: validator.NewValidatorFromV3Model(&m.Model, ndjson, config.WithStrictMode(),
			config.WithStrictIgnorePaths("$.query.access_token", "$.body.**")),
		responses: validator.NewValidatorFromV3Model(&m.Model, config.WithStrictMode(),
			config.WithStrictIgnorePaths("$.body.events[*].data.**", "$.body.state.**"),
			config.WithStrictIgnoredHeadersExtra(consoleHeaders...)),
		opts:    config.NewValidationOptions(),
		schemas: schema_validation.NewSchemaValidator(),
		seen:    map[string]bool{},
	}
	a.frame = m.Model.Components.Schemas.GetOrZero("StreamFrame").Schema()
	return a
}

// consoleHeaders are on every answer of a console route; the document
// declares them on its successes.
var consoleHeaders = []string{"Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options"}

// call is one request and the answer the test expects.
type call struct {
	method, path string // path from the server's base, query included
	header       map[string]string
	body         string
	status       int
	code         refusal.Code // the refusal's; empty for a success
	// refused says that the document's own schemas refuse the request (a
	// name, a parameter or a body they describe as bad).
	refused bool
	// own says that a not_found is the operation's answer, not the
	// router's for a path that is no route.
	own bool
}

func (c call) String() string { return c.method + " " + c.path }

func (c call) request(t *testing.T, base string) *http.Request {
	t.Helper()
	var body io.Reader = http.NoBody
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	return req
}

// do sends c, checks the request and the answer against the document and
// returns the answer's body.
func (a *api) do(t *testing.T, base string, c call) []byte {
	t.Helper()
	a.checkRequest(t, c, c.request(t, base))
	resp, err := http.DefaultClient.Do(c.request(t, base))
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	a.checkAnswer(t, c, c.request(t, base), resp, body)
	return body
}

// checkRequest holds the request to the document: it conforms unless the
// call says the document refuses it.
func (a *api) checkRequest(t *testing.T, c call, req *http.Request) {
	t.Helper()
	ok, errs := a.requests.ValidateHttpRequestSync(req)
	switch {
	case c.refused && ok:
		t.Errorf("%s: the document accepts this request, which the server refuses with %s", c, c.code)
	case !c.refused && !ok:
		t.Errorf("%s: the document refuses the request:%s", c, describe(errs))
	}
}

// checkAnswer holds an answer to the document: the operation's response
// for its status, or, for a path or method no operation has, the
// NotFound or MethodNotAllowed response.
func (a *api) checkAnswer(t *testing.T, c call, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != c.status {
		t.Errorf("%s: status %d, want %d: %.300s", c, resp.StatusCode, c.status, body)
	}
	if c.code != "" {
		var e struct{ Error struct{ Code refusal.Code } }
		if json.Unmarshal(body, &e) != nil || e.Error.Code != c.code {
			t.Errorf("%s: want code %s, got %.300s", c, c.code, body)
		}
		a.seen["code "+string(e.Error.Code)] = true
	}
	switch {
	case c.code == refusal.NotFound && !c.own, c.code == refusal.MethodNotAllowed:
		a.checkComponent(t, c, req, resp, body)
		return
	}
	item, _, template := paths.FindPath(req, a.doc, a.opts)
	if item == nil {
		t.Errorf("%s: no path of the document", c)
		return
	}
	a.seen[fmt.Sprintf("%s %s %d", req.Method, template, resp.StatusCode)] = true
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, errs := a.responses.ValidateHttpResponse(req, resp); !ok {
		t.Errorf("%s: the answer (%d %s %v) is not the document's:%s", c, resp.StatusCode, body, resp.Header, describe(errs))
	}
}

// checkComponent holds an answer to the response of components that
// stands for every route (NotFound) or method (MethodNotAllowed).
func (a *api) checkComponent(t *testing.T, c call, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	name := map[refusal.Code]string{refusal.NotFound: "NotFound", refusal.MethodNotAllowed: "MethodNotAllowed"}[c.code]
	a.seen[name] = true
	r := a.doc.Components.Responses.GetOrZero(name)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	media := r.Content.GetOrZero(mt)
	if media == nil {
		t.Errorf("%s: Content-Type %q is not one of %s's", c, mt, name)
		return
	}
	if ok, errs := a.schemas.ValidateSchemaBytesWithVersion(media.Schema.Schema(), body, 3.1); !ok {
		t.Errorf("%s: the body %s is not %s's:%s", c, body, name, describe(errs))
	}
	if ok, errs := responses.ValidateResponseHeaders(req, resp, r.Headers, req.URL.Path, strconv.Itoa(resp.StatusCode), config.WithStrictMode()); !ok {
		t.Errorf("%s: the headers %v are not %s's:%s", c, resp.Header, name, describe(errs))
	}
}

// docStream is an open watch whose frames are held to StreamFrame.
type docStream struct {
	resp *http.Response
	dec  *sse.Decoder
}

// watchStream opens a watch that the document describes and checks its
// request and the start of its answer (status, headers).
func (a *api) watchStream(t *testing.T, base string, c call) *docStream {
	t.Helper()
	c.method, c.status = http.MethodGet, http.StatusOK
	a.checkRequest(t, c, c.request(t, base))
	resp, err := http.DefaultClient.Do(c.request(t, base))
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", c, resp.StatusCode, b)
	}
	head := *resp
	head.Body = http.NoBody // the body is the frames, checked one by one
	a.checkAnswer(t, c, c.request(t, base), &head, nil)
	return &docStream{resp: resp, dec: sse.NewDecoder(resp.Body)}
}

// next reads the stream's next frame and holds it to StreamFrame.
func (a *api) next(t *testing.T, s *docStream) sse.Frame {
	t.Helper()
	f, err := s.dec.Next()
	if err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	var data any
	if err := json.Unmarshal([]byte(f.Data), &data); err != nil {
		t.Fatalf("frame data is not JSON: %+v", f)
	}
	frame := map[string]any{"event": f.Event, "data": data}
	if f.IDSet {
		frame["id"] = f.ID
	}
	if ok, errs := a.schemas.ValidateSchemaObjectWithVersion(a.frame, frame, 3.1); !ok {
		t.Errorf("the frame %+v is no StreamFrame:%s", f, describe(errs))
	}
	return f
}

// frames reads frames until one of event type want, and returns their
// event types in order.
func (a *api) frames(t *testing.T, s *docStream, want string) []string {
	t.Helper()
	var got []string
	for {
		f := a.next(t, s)
		got = append(got, f.Event)
		if f.Event == want {
			return got
		}
	}
}

func describe[E error](errs []E) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n\t" + e.Error())
	}
	return b.String()
}

// topicPath is the path of a route of tenant/topic.
func topicPath(tenant, topic, route string) string {
	return "/v1/tenants/" + tenant + "/topics/" + topic + "/" + route
}

var (
	asJSON   = map[string]string{"Content-Type": "application/json"}
	asNDJSON = map[string]string{"Content-Type": "application/x-ndjson"}
)

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// devServer drives publish, watch, events, state and the operations
// routes in dev mode, and the admin API without an admin key.
func (a *api) devServer(t *testing.T) {
	p := start(t, t.TempDir(), "--retention-events", "3")
	b := p.base
	a.waitReady(t, b)
	for _, c := range []call{
		{method: "GET", path: "/healthz", status: 200},
		{method: "GET", path: "/metrics", status: 200},
		{method: "GET", path: "/openapi.yaml", status: 200},

		{method: "POST", path: topicPath("acme", "one", "notify"), header: with(asJSON, "Idempotency-Key", "k1"), body: `{"n":1}`, status: 201},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: with(asJSON, "Idempotency-Key", "k1"), body: `{"n":1}`, status: 200},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: with(asJSON, "Idempotency-Key", "k1"), body: `{"n":2}`, status: 422, code: refusal.IdempotencyKeyReused},
		{method: "POST", path: topicPath("acme", "batch", "notify"), header: with(asNDJSON, "Idempotency-Key", "b1"), body: "{\"n\":1}\n{\"n\":2}\r\n\n3", status: 201},
		{method: "POST", path: topicPath("acme", "batch", "notify"), header: with(asNDJSON, "Idempotency-Key", "b1"), body: "{\"n\":1}\n{\"n\":2}\r\n\n3", status: 200},
		{method: "POST", path: topicPath("acme", "typed", "notify") + "?type=order.created", header: asJSON, body: `{"id":1}`, status: 201},
		{method: "POST", path: topicPath("acme", "typed", "notify"), header: with(asJSON, "Event-Type", "order.paid", "webhook-id", "msg_1"), body: `{"id":1}`, status: 201},
		{method: "POST", path: topicPath("acme", "kv", "notify") + "?key=sensor-1", header: asJSON, body: `{"c":21.5}`, status: 201},
		{method: "POST", path: topicPath("acme", "kv", "notify"), header: with(asJSON, "Event-Key", "sensor-2"), body: `{"c":19}`, status: 201},
		{method: "POST", path: topicPath("acme", "kv", "notify") + "?key=sensor-2&op=delete", status: 201},

		{method: "GET", path: "/.well-known/mercure", status: 404, code: refusal.NotFound, own: true},
		{method: "POST", path: "/.well-known/mercure", header: asForm, body: "topic=x", status: 404, code: refusal.NotFound, own: true},
		{method: "GET", path: "/.well-known/mercure/subscriptions", status: 404, code: refusal.NotFound, own: true},
		{method: "POST", path: mercureHub, header: asForm, body: "topic=https%3A%2F%2Fexample.com%2Fbooks%2F1&data=x", status: 200},
		{method: "POST", path: mercureHub, header: with(asForm, "Idempotency-Key", "m1"), body: "topic=t&data=1", status: 200},
		{method: "POST", path: mercureHub, header: with(asForm, "Idempotency-Key", "m1"), body: "topic=t&data=1", status: 200},
		{method: "POST", path: mercureHub, header: with(asForm, "Idempotency-Key", "m1"), body: "topic=t&data=2", status: 422, code: refusal.IdempotencyKeyReused},
		{method: "POST", path: mercureHub, header: asForm, body: "data=x", status: 400, code: refusal.InvalidBody},
		{method: "POST", path: mercureHub, header: asForm, body: "topic=%2A", status: 400, code: refusal.InvalidName},
		{method: "POST", path: mercureHub, header: asForm, body: "topic=t&type=mercure", status: 400, code: refusal.InvalidType},
		{method: "POST", path: mercureHub, header: asForm, body: "topic=t&data=" + strings.Repeat("x", 1<<20), status: 413, code: refusal.TooLarge},
		{method: "GET", path: mercureHub, status: 400, code: refusal.InvalidSelector},
		{method: "GET", path: mercureHub + "?match_regexp=.*", status: 400, code: refusal.InvalidSelector, refused: true},
		{method: "POST", path: topicPath(".acme", "one", "notify"), header: asJSON, body: `1`, status: 400, code: refusal.InvalidName, refused: true},
		{method: "POST", path: topicPath("acme", "one", "notify") + "?key=a%20b", header: asJSON, body: `1`, status: 400, code: refusal.InvalidName, refused: true},
		{method: "POST", path: topicPath("acme", "one", "notify") + "?type=hello", header: asJSON, body: `1`, status: 400, code: refusal.InvalidType, refused: true},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: asJSON, body: `{"n":`, status: 400, code: refusal.InvalidJSON, refused: true},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: asJSON, status: 400, code: refusal.InvalidJSON},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: asNDJSON, body: "\n \n", status: 400, code: refusal.InvalidJSON},
		{method: "POST", path: topicPath("acme", "one", "notify") + "?key=k&op=remove", header: asJSON, body: `1`, status: 400, code: refusal.InvalidOp, refused: true},
		{method: "POST", path: topicPath("acme", "one", "notify") + "?op=delete", header: asJSON, body: `1`, status: 400, code: refusal.InvalidOp},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: with(asJSON, "Idempotency-Key", "a b"), body: `1`, status: 400, code: refusal.InvalidIdempotencyKey, refused: true},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: asJSON, body: `"` + strings.Repeat("x", 1<<20) + `"`, status: 413, code: refusal.TooLarge},
		{method: "POST", path: topicPath("acme", "one", "notify"), header: asNDJSON, body: strings.Repeat("1\n", 10001), status: 413, code: refusal.TooLarge},

		{method: "GET", path: topicPath("acme", "one", "events") + "?after=0", status: 200},
		{method: "GET", path: topicPath("acme", "batch", "events") + "?after=1&limit=1", status: 200},
		{method: "GET", path: topicPath("acme", "none", "events"), status: 200},
		{method: "GET", path: topicPath("acme", "one", "events") + "?after=x", status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: topicPath("acme", "one", "events") + "?limit=0", status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: topicPath("acme", "o/ne", "events"), status: 404, code: refusal.NotFound, refused: true},
		{method: "GET", path: "/v1/tenants/acme/events?after=0", status: 200},
		{method: "GET", path: "/v1/tenants/acme/events?topic=one&pattern=b*&limit=1", status: 200},
		{method: "GET", path: "/v1/tenants/acme/events?pattern=", status: 400, code: refusal.InvalidSelector},
		{method: "GET", path: "/v1/tenants/acme/events?topic=" + strings.Repeat("x", 1025), status: 400, code: refusal.InvalidSelector},
		{method: "GET", path: "/v1/tenants/acme/events?after=-1", status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: "/v1/tenants/acme/watch?pattern=", status: 400, code: refusal.InvalidSelector},
		{method: "GET", path: "/v1/tenants/acme/watch?after=-1", status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: "/v1/tenants/acme/watch?topic=.x", status: 400, code: refusal.InvalidName},
		{method: "GET", path: "/v1/tenants/.acme/events", status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/tenants/acme/topics", status: 200},
		{method: "GET", path: "/v1/tenants/acme/topics?pattern=o*&after=a&limit=1", status: 200},
		{method: "GET", path: "/v1/tenants/acme/topics?pattern=", status: 400, code: refusal.InvalidSelector, refused: true},
		{method: "GET", path: "/v1/tenants/acme/topics?after=" + strings.Repeat("x", 1025), status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/tenants/acme/topics?limit=x", status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: topicPath("acme", "~one", "state"), status: 200},
		{method: "GET", path: topicPath("acme", "kv", "state"), status: 200},
		{method: "GET", path: topicPath("acme", ".kv", "state"), status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: topicPath("acme", "one", "watch") + "?after=-1", status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: topicPath("acme", "one", "watch"), header: map[string]string{"Last-Event-ID": "x"}, status: 400, code: refusal.InvalidPosition, refused: true},
		{method: "GET", path: topicPath(".acme", "one", "watch"), status: 400, code: refusal.InvalidName, refused: true},

		{method: "PUT", path: "/v1/admin/tenants/acme", status: 401, code: refusal.Unauthorized, refused: true},

		{method: "GET", path: "/console", status: 200},
		{method: "GET", path: "/console/console.js", status: 200},
		{method: "GET", path: "/console/console.css", status: 200},
		{method: "GET", path: "/console/favicon.svg", status: 200},
		{method: "GET", path: "/console/api/mode", status: 200},
		{method: "GET", path: "/console/api/topics/acme/one", status: 200},
		{method: "GET", path: "/console/api/topics/acme/.one", status: 400, code: refusal.InvalidName, refused: true},

		{method: "GET", path: "/", status: 404, code: refusal.NotFound, refused: true},
		{method: "GET", path: "/v1/tenants/acme/topics/one/notify/", status: 404, code: refusal.NotFound, refused: true},
		{method: "GET", path: topicPath("acme", "one", "subscribe"), status: 404, code: refusal.NotFound, refused: true},
		{method: "GET", path: topicPath("acme", "one", "notify"), status: 405, code: refusal.MethodNotAllowed, refused: true},
		{method: "DELETE", path: topicPath("acme", "one", "watch"), status: 405, code: refusal.MethodNotAllowed, refused: true},
		{method: "POST", path: "/healthz", status: 405, code: refusal.MethodNotAllowed, refused: true},
		{method: "PATCH", path: "/v1/admin/tenants/acme", status: 405, code: refusal.MethodNotAllowed, refused: true},
	} {
		a.do(t, b, c)
	}
	a.invalidBody(t, b)

	// The document answers 304 to its own ETag.
	resp, err := http.Get(b + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	a.do(t, b, call{method: "GET", path: "/openapi.yaml", header: map[string]string{"If-None-Match": resp.Header.Get("ETag")}, status: 304})

	// Streams: live, from a position (after, Last-Event-ID), a snapshot,
	// and a gap where retention removed events.
	live := a.watchStream(t, b, call{path: topicPath("acme", "live", "watch")})
	a.frames(t, live, "hello")
	a.do(t, b, call{method: "POST", path: topicPath("acme", "live", "notify") + "?key=k", header: asJSON, body: `{"on":true}`, status: 201})
	a.frames(t, live, "message")
	if got := a.frames(t, a.watchStream(t, b, call{path: topicPath("acme", "batch", "watch") + "?after=0"}), "message"); len(got) != 2 {
		t.Errorf("after=0: frames %v, want hello and an event", got)
	}
	s := a.watchStream(t, b, call{path: topicPath("acme", "batch", "watch") + "?after=0", header: map[string]string{"Last-Event-ID": "2"}})
	a.frames(t, s, "hello")
	if f := a.next(t, s); f.ID != "3" {
		t.Errorf("Last-Event-ID 2: the first event is %+v, want seq 3", f)
	}
	if got := a.frames(t, a.watchStream(t, b, call{path: topicPath("acme", "kv", "watch") + "?snapshot=1"}), "snapshot"); len(got) != 2 {
		t.Errorf("snapshot=1: frames %v, want hello and snapshot", got)
	}
	for i := 0; i < 5; i++ {
		a.do(t, b, call{method: "POST", path: topicPath("acme", "trimmed", "notify"), header: asJSON, body: strconv.Itoa(i), status: 201})
	}
	pollUntil(t, "retention removed events 1 and 2", func() bool {
		body := a.do(t, b, call{method: "GET", path: topicPath("acme", "trimmed", "events") + "?after=0", status: 200})
		return bytes.Contains(body, []byte(`"gap":{"from":1,"to":2}`))
	})
	if got := a.frames(t, a.watchStream(t, b, call{path: topicPath("acme", "trimmed", "watch") + "?after=0"}), "message"); strings.Join(got, " ") != "hello gap message" {
		t.Errorf("after=0 past retention: frames %v, want hello, gap, event", got)
	}
}

// waitReady polls /readyz until it is 200; each answer, 503 included, is
// held to the document.
func (a *api) waitReady(t *testing.T, base string) {
	t.Helper()
	pollUntil(t, "ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c := call{method: "GET", path: "/readyz", status: resp.StatusCode}
		if resp.StatusCode != http.StatusOK {
			c.status, c.code = http.StatusServiceUnavailable, refusal.NotReady
		}
		a.checkAnswer(t, c, c.request(t, base), resp, body)
		return resp.StatusCode == http.StatusOK
	})
}

// pollUntil polls cond until it holds; the deadline is a hang guard.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %v", what, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// invalidBody sends a publish whose chunked body is malformed: the server
// cannot read it and answers 400 invalid_body.
func (a *api) invalidBody(t *testing.T, base string) {
	t.Helper()
	c := call{method: "POST", path: topicPath("acme", "one", "notify"), header: asJSON, status: 400, code: refusal.InvalidBody}
	conn := dialSmall(t, base)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: edgehub\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", c.path)
	req := c.request(t, base)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	body, _ := io.ReadAll(resp.Body)
	a.checkAnswer(t, c, req, resp, body)
}

func dialSmall(t *testing.T, base string) io.ReadWriter {
	t.Helper()
	conn, err := smallBufferDialer(4096).Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// tenantBody is the admin API's tenant.
type tenantBody struct {
	Tenant        string `json:"tenant"`
	SigningSecret string `json:"signing_secret"`
	WebhookSecret string `json:"webhook_secret"`
}

// adminServer drives the admin API and the credentials of the tenant
// routes: tokens, access_token and webhook signatures.
func (a *api) adminServer(t *testing.T) {
	const key = "k-openapi-0123456789abcdef0123456789"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	b := p.base
	admin := map[string]string{"Authorization": "Bearer " + key}
	adminJSON := with(admin, "Content-Type", "application/json")
	for _, c := range []call{
		{method: "PUT", path: "/v1/admin/tenants/acme", status: 401, code: refusal.Unauthorized, refused: true},
		{method: "PUT", path: "/v1/admin/tenants/acme", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "PUT", path: "/v1/admin/tenants/.acme", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/admin/tenants/acme", header: map[string]string{"Authorization": "Basic " + key}, status: 401, code: refusal.Unauthorized, refused: true},
		{method: "DELETE", path: "/v1/admin/tenants/acme", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "POST", path: "/v1/admin/tenants/acme/rotate", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/v1/admin/tenants/.acme", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "DELETE", path: "/v1/admin/tenants/a%20b", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "POST", path: "/v1/admin/tenants/.acme/rotate", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "POST", path: "/v1/admin/tenants/.acme/tokens", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "PUT", path: "/v1/admin/tenants/acme", header: admin, status: 201},
		{method: "PUT", path: "/v1/admin/tenants/acme", header: admin, status: 200},
		{method: "GET", path: "/v1/admin/tenants/acme", header: admin, status: 200},
		{method: "GET", path: "/v1/admin/tenants/ghost", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: admin, status: 201},
		{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: adminJSON, body: `{"publish":`, status: 400, code: refusal.InvalidJSON, refused: true},
		{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: adminJSON, body: `{"ttl":"soon"}`, status: 400, code: refusal.InvalidTTL},
		{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: adminJSON, body: `{"ttl":"48h"}`, status: 400, code: refusal.InvalidTTL},
		{method: "POST", path: "/v1/admin/tenants/ghost/tokens", header: adminJSON, body: `{}`, status: 404, code: refusal.UnknownTenant},
		{method: "PUT", path: "/v1/admin/tenants/spin", header: admin, status: 201},
		{method: "POST", path: "/v1/admin/tenants/spin/rotate", header: admin, status: 200},
		{method: "POST", path: "/v1/admin/tenants/ghost/rotate", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "PUT", path: "/v1/admin/tenants/doomed", header: admin, status: 201},
		{method: "DELETE", path: "/v1/admin/tenants/doomed", header: admin, status: 204},
		{method: "DELETE", path: "/v1/admin/tenants/doomed", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "GET", path: "/console/api/mode", status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/console/api/mode", header: admin, status: 200},
		{method: "GET", path: "/console/api/topics/acme/orders", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/console/api/topics/ghost/orders", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "GET", path: "/console/api/topics/acme/orders", header: admin, status: 200},
	} {
		a.do(t, b, c)
	}
	var ten tenantBody
	if err := json.Unmarshal(a.do(t, b, call{method: "GET", path: "/v1/admin/tenants/acme", header: admin, status: 200}), &ten); err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	body := a.do(t, b, call{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: adminJSON,
		body: `{"publish":["orders"],"subscribe":["orders"],"ttl":"10m"}`, status: 201})
	if err := json.Unmarshal(body, &tok); err != nil {
		t.Fatal(err)
	}
	bearer := map[string]string{"Authorization": "Bearer " + tok.Token}
	bad := map[string]string{"Authorization": "Bearer not-a-token"}
	for _, route := range []string{"notify", "events", "state", "watch"} {
		method, h := "GET", map[string]string{}
		if route == "notify" {
			method, h = "POST", asJSON
		}
		// access_token is a credential of the stream alone; elsewhere it
		// is as if absent.
		viaQuery := call{path: topicPath("acme", "refunds", route) + "?access_token=" + tok.Token, header: h, status: 401, code: refusal.Unauthorized}
		if route == "watch" {
			viaQuery.status, viaQuery.code = 403, refusal.Forbidden
		}
		for _, c := range []call{
			{path: topicPath("acme", "orders", route), header: h, status: 401, code: refusal.Unauthorized},
			{path: topicPath("acme", "orders", route), header: with(h, "Authorization", bad["Authorization"]), status: 401, code: refusal.Unauthorized},
			{path: topicPath("ghost", "orders", route), header: with(h, "Authorization", bearer["Authorization"]), status: 401, code: refusal.Unauthorized},
			{path: topicPath("acme", "refunds", route), header: with(h, "Authorization", bearer["Authorization"]), status: 403, code: refusal.Forbidden},
			viaQuery,
		} {
			c.method = method
			if method == "POST" {
				c.body = `{"n":1}`
			}
			a.do(t, b, c)
		}
	}
	a.do(t, b, call{method: "POST", path: topicPath("acme", "orders", "notify"), header: with(asJSON, "Authorization", bearer["Authorization"]), body: `{"n":1}`, status: 201})
	a.do(t, b, call{method: "POST", path: topicPath("acme", "orders", "notify"), header: with(asJSON, "Authorization", bearer["Authorization"]), body: `{"n":2}`, status: 201})
	a.do(t, b, call{method: "GET", path: topicPath("acme", "orders", "events") + "?after=0", header: bearer, status: 200})
	a.do(t, b, call{method: "POST", path: mercureHub, header: asForm, body: "topic=orders", status: 401, code: refusal.Unauthorized})
	a.do(t, b, call{method: "GET", path: "/v1/tenants/ghost/.well-known/mercure?match=orders", status: 401, code: refusal.Unauthorized})
	a.do(t, b, call{method: "GET", path: mercureHub + "?match=orders", header: bad, status: 401, code: refusal.Unauthorized})
	a.do(t, b, call{method: "POST", path: mercureHub, header: with(asForm, "Authorization", bearer["Authorization"]), body: "topic=refunds", status: 403, code: refusal.Forbidden})
	for _, c := range []call{
		{path: "/v1/tenants/acme/events?pattern=*", header: bearer, status: 200},
		{path: "/v1/tenants/acme/events", status: 401, code: refusal.Unauthorized},
		{path: "/v1/tenants/acme/events?topic=refunds", header: bearer, status: 403, code: refusal.Forbidden},
		{path: "/v1/tenants/acme/topics", header: bearer, status: 200},
		{path: "/v1/tenants/acme/topics", status: 401, code: refusal.Unauthorized},
		{path: "/v1/tenants/acme/watch", status: 401, code: refusal.Unauthorized},
		{path: "/v1/tenants/acme/watch?topic=refunds", header: bearer, status: 403, code: refusal.Forbidden},
	} {
		c.method = "GET"
		a.do(t, b, c)
	}
	a.do(t, b, call{method: "GET", path: topicPath("acme", "orders", "state"), header: bearer, status: 200})
	s := a.watchStream(t, b, call{path: topicPath("acme", "orders", "watch") + "?after=1&access_token=" + tok.Token})
	a.frames(t, s, "message")
	// A Mercure subscription resumed after the first update: the second,
	// in Mercure's frames (not the native ones StreamFrame describes).
	a.do(t, b, call{method: "PUT", path: "/v1/admin/tenants/acme/mercure", header: adminJSON, body: `{"subscriptions":true}`, status: 200})
	ms := a.watchStream(t, b, call{path: mercureHub + "?match=orders", header: with(bearer, "Last-Event-ID", "#1")})
	if f, err := ms.dec.Next(); err != nil || f.ID != "#2" || f.Data != `{"n":2}` {
		t.Fatalf("the Mercure stream's first update: %+v %v", f, err)
	}
	ts := a.watchStream(t, b, call{path: "/v1/tenants/acme/watch?pattern=ord*&after=0&access_token=" + tok.Token})
	a.frames(t, ts, "hello")
	a.mercureSubscriptions(t, b, adminJSON, bearer)

	// Standard Webhooks: a signed publish; one whose Idempotency-Key is not
	// its webhook-id; one signed with another secret.
	signed := func(id, body, secret string) map[string]string {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			t.Fatal(err)
		}
		m := hmac.New(sha256.New, k)
		m.Write([]byte(id + "." + ts + "." + body))
		return with(asJSON, "webhook-id", id, "webhook-timestamp", ts, "webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	a.do(t, b, call{method: "POST", path: topicPath("acme", "orders", "notify"), header: signed("msg_1", `{"n":3}`, ten.WebhookSecret), body: `{"n":3}`, status: 201})
	a.do(t, b, call{method: "POST", path: topicPath("acme", "orders", "notify"), header: with(signed("msg_2", `{"n":4}`, ten.WebhookSecret), "Idempotency-Key", "other"),
		body: `{"n":4}`, status: 400, code: refusal.InvalidIdempotencyKey})
	a.do(t, b, call{method: "POST", path: topicPath("acme", "orders", "notify"), header: signed("msg_3", `{"n":5}`, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another secret"))),
		body: `{"n":5}`, status: 401, code: refusal.Unauthorized})
}

// issuerServer drives the admin routes of token issuers and revocation,
// on a server of its own: its refused keys would otherwise spend the
// admin throttle of adminServer's address.
func (a *api) issuerServer(t *testing.T) {
	const key = "k-openapi-issuers-0123456789abcdef01234"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	b := p.base
	admin := map[string]string{"Authorization": "Bearer " + key}
	adminJSON := with(admin, "Content-Type", "application/json")
	a.do(t, b, call{method: "PUT", path: "/v1/admin/tenants/acme", header: admin, status: 201})
	for _, c := range []call{
		{method: "GET", path: "/v1/admin/tenants/acme/usage", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/v1/admin/tenants/.acme/usage", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/admin/tenants/ghost/usage", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "GET", path: "/v1/admin/tenants/acme/usage", header: admin, status: 200},
		{method: "GET", path: "/v1/admin/tenants", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/v1/admin/tenants?after=.x", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/admin/tenants?limit=2", header: admin, status: 200},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/v1/admin/tenants/.acme/issuers", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/admin/tenants/ghost/issuers", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers", header: admin, status: 200},
		{method: "PUT", path: "/v1/admin/tenants/acme/issuers/idp", header: map[string]string{"Authorization": "Bearer nope", "Content-Type": "application/json"}, body: hsIssuer, status: 401, code: refusal.Unauthorized},
		{method: "PUT", path: "/v1/admin/tenants/acme/issuers/.idp", header: adminJSON, body: hsIssuer, status: 400, code: refusal.InvalidName, refused: true},
		{method: "PUT", path: "/v1/admin/tenants/acme/issuers/idp", header: adminJSON, body: `{"alg":"HS256","key":"short"}`, status: 400, code: refusal.InvalidIssuer},
		{method: "PUT", path: "/v1/admin/tenants/ghost/issuers/idp", header: adminJSON, body: hsIssuer, status: 404, code: refusal.UnknownTenant},
		{method: "PUT", path: "/v1/admin/tenants/acme/issuers/idp", header: adminJSON, body: hsIssuer, status: 201},
		{method: "PUT", path: "/v1/admin/tenants/acme/issuers/idp", header: adminJSON, body: esIssuer(t), status: 200},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers/idp", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers/.idp", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers/nobody", header: admin, status: 404, code: refusal.UnknownIssuer},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers/idp", header: admin, status: 200},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers", header: admin, status: 200},
		{method: "DELETE", path: "/v1/admin/tenants/acme/issuers/idp", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "DELETE", path: "/v1/admin/tenants/acme/issuers/.idp", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "DELETE", path: "/v1/admin/tenants/acme/issuers/idp", header: admin, status: 204},
		{method: "DELETE", path: "/v1/admin/tenants/acme/issuers/idp", header: admin, status: 404, code: refusal.UnknownIssuer},
		{method: "DELETE", path: "/v1/admin/tenants/acme/tokens/j-1", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "DELETE", path: "/v1/admin/tenants/.acme/tokens/j-1", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "DELETE", path: "/v1/admin/tenants/ghost/tokens/j-1", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "DELETE", path: "/v1/admin/tenants/acme/tokens/j-1", header: admin, status: 204},
		{method: "GET", path: "/v1/admin/tenants/acme/mercure", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized},
		{method: "GET", path: "/v1/admin/tenants/.acme/mercure", header: admin, status: 400, code: refusal.InvalidName, refused: true},
		{method: "GET", path: "/v1/admin/tenants/ghost/mercure", header: admin, status: 404, code: refusal.UnknownTenant},
		{method: "GET", path: "/v1/admin/tenants/acme/mercure", header: admin, status: 200},
		{method: "PUT", path: "/v1/admin/tenants/acme/mercure", header: map[string]string{"Authorization": "Bearer nope", "Content-Type": "application/json"}, body: `{}`, status: 401, code: refusal.Unauthorized},
		{method: "PUT", path: "/v1/admin/tenants/.acme/mercure", header: adminJSON, body: `{}`, status: 400, code: refusal.InvalidName, refused: true},
		{method: "PUT", path: "/v1/admin/tenants/acme/mercure", header: adminJSON, body: `{"publish_origins":["https://x.example/path"]}`, status: 400, code: refusal.InvalidSettings},
		{method: "PUT", path: "/v1/admin/tenants/ghost/mercure", header: adminJSON, body: `{"anonymous":true}`, status: 404, code: refusal.UnknownTenant},
		{method: "PUT", path: "/v1/admin/tenants/acme/mercure", header: adminJSON, body: `{"anonymous":true,"publish_origins":["https://app.example"]}`, status: 200},
	} {
		a.do(t, b, c)
	}
}

// mercureSubscriptions drives the subscriptions API of mercureHub, where
// a subscription with match=orders is open, with a token minted under
// admin and one (bearer) that grants only orders.
func (a *api) mercureSubscriptions(t *testing.T, b string, admin, bearer map[string]string) {
	t.Helper()
	var tok struct{ Token string }
	if err := json.Unmarshal(a.do(t, b, call{method: "POST", path: "/v1/admin/tenants/acme/tokens", header: admin,
		body: `{"subscribe":["/.well-known/mercure/subscriptions*"],"ttl":"10m"}`, status: 201}), &tok); err != nil {
		t.Fatal(err)
	}
	lister := map[string]string{"Authorization": "Bearer " + tok.Token}
	list := mercureHub + "/subscriptions"
	var subs struct {
		Subscriptions []struct{ ID string }
	}
	if err := json.Unmarshal(a.do(t, b, call{method: "GET", path: list + "/exact/orders", header: lister, status: 200}), &subs); err != nil || len(subs.Subscriptions) != 1 {
		t.Fatalf("the subscriptions of match=orders: %+v %v", subs, err)
	}
	for _, c := range []call{
		{path: list, header: lister, status: 200},
		{path: "/v1/tenants/acme" + subs.Subscriptions[0].ID, header: lister, status: 200},
		{path: list + "/exact/orders/urn:uuid:none", header: lister, status: 404, code: refusal.NotFound, own: true},
		{path: "/v1/tenants/.acme/.well-known/mercure/subscriptions", header: lister, status: 400, code: refusal.InvalidName, refused: true},
		{path: list + "/regex/orders", header: lister, status: 404, code: refusal.NotFound, own: true}, // 0.x: a topic's one subscription
		{path: list + "/orders", header: lister, status: 200},                                          // 0.x: a topic's subscriptions
		{path: list + "/regex/orders/x", header: lister, status: 400, code: refusal.InvalidSelector},
	} {
		c.method = "GET"
		a.do(t, b, c)
	}
	for _, path := range []string{list, list + "/orders", list + "/exact/orders", list + "/exact/orders/x"} {
		a.do(t, b, call{method: "GET", path: path, status: 401, code: refusal.Unauthorized})
		a.do(t, b, call{method: "GET", path: path, header: bearer, status: 403, code: refusal.Forbidden})
	}
	// Off (the tenant's setting), the API is not there.
	a.do(t, b, call{method: "PUT", path: "/v1/admin/tenants/acme/mercure", header: admin, body: `{"subscriptions":false}`, status: 200})
	for _, path := range []string{list, list + "/orders", list + "/exact/orders"} {
		a.do(t, b, call{method: "GET", path: path, header: lister, status: 404, code: refusal.NotFound, own: true})
	}
}

// mercureHub is the Mercure hub of tenant acme, and asForm the content
// type of its publishes.
const mercureHub = "/v1/tenants/acme/.well-known/mercure"

var asForm = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

// hsIssuer registers an issuer by an HS secret, which answers never show.
const hsIssuer = `{"issuer":"https://idp.test","audience":"edgehub","alg":"HS256","key":"0123456789abcdef0123456789abcdef"}`

// esIssuer registers an issuer by an ES256 public key, which answers show.
func esIssuer(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]string{"issuer": "https://idp.test", "alg": "ES256",
		"key": string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// limitServer drives the limits that refuse with 429 and Retry-After: the
// publish rate, the tenant's stored bytes and its open streams.
func (a *api) limitServer(t *testing.T) {
	p := start(t, t.TempDir(), "--publish-rate", "0.001", "--publish-burst", "1", "--max-tenant-bytes", "64", "--max-tenant-streams", "1")
	b := p.base
	for _, c := range []call{
		{method: "POST", path: topicPath("rate", "t", "notify"), header: asJSON, body: `1`, status: 201},
		{method: "POST", path: topicPath("rate", "t", "notify"), header: asJSON, body: `2`, status: 429, code: refusal.RateLimited},
		{method: "POST", path: "/v1/tenants/rate/.well-known/mercure", header: asForm, body: "topic=t", status: 429, code: refusal.RateLimited},
		{method: "POST", path: topicPath("quota", "t", "notify"), header: asJSON, body: `"` + strings.Repeat("x", 100) + `"`, status: 429, code: refusal.QuotaExceeded},
	} {
		a.do(t, b, c)
	}
	s := a.watchStream(t, b, call{path: topicPath("streams", "t", "watch")})
	a.frames(t, s, "hello")
	a.do(t, b, call{method: "GET", path: topicPath("streams", "u", "watch"), status: 429, code: refusal.TooManyStreams})
	a.do(t, b, call{method: "GET", path: "/v1/tenants/streams/watch", status: 429, code: refusal.TooManyStreams})
	// With a token: an anonymous subscriber has caps of its own.
	a.do(t, b, call{method: "GET", path: "/v1/tenants/streams/.well-known/mercure?match=*", header: map[string]string{"Authorization": "Bearer dev"},
		status: 429, code: refusal.TooManyStreams})
}

// throttleServer drives the throttle of refused admin keys: once the
// client's address has spent them (one here, refilling once in 1000 s),
// every admin and console API route is 429 rate_limited, the right key
// included.
func (a *api) throttleServer(t *testing.T) {
	const key = "k-openapi-throttle-0123456789abcdef0123"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--admin-failure-burst", "1", "--admin-failure-rate", "0.001")
	b := p.base
	admin := map[string]string{"Authorization": "Bearer " + key}
	a.do(t, b, call{method: "GET", path: "/v1/admin/tenants/acme", header: map[string]string{"Authorization": "Bearer nope"}, status: 401, code: refusal.Unauthorized})
	for _, c := range []call{
		{method: "PUT", path: "/v1/admin/tenants/acme"},
		{method: "GET", path: "/v1/admin/tenants/acme"},
		{method: "DELETE", path: "/v1/admin/tenants/acme"},
		{method: "POST", path: "/v1/admin/tenants/acme/rotate"},
		{method: "POST", path: "/v1/admin/tenants/acme/tokens"},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers"},
		{method: "GET", path: "/v1/admin/tenants/acme/usage"},
		{method: "GET", path: "/v1/admin/tenants"},
		{method: "PUT", path: "/v1/admin/tenants/acme/issuers/idp", header: map[string]string{"Content-Type": "application/json"}, body: hsIssuer},
		{method: "GET", path: "/v1/admin/tenants/acme/issuers/idp"},
		{method: "DELETE", path: "/v1/admin/tenants/acme/issuers/idp"},
		{method: "DELETE", path: "/v1/admin/tenants/acme/tokens/j-1"},
		{method: "GET", path: "/console/api/mode"},
		{method: "GET", path: "/console/api/topics/acme/orders"},
		{method: "GET", path: "/v1/admin/tenants/acme/mercure"},
		{method: "PUT", path: "/v1/admin/tenants/acme/mercure", header: map[string]string{"Content-Type": "application/json"}, body: `{}`},
	} {
		c.header, c.status, c.code = with(c.header, "Authorization", admin["Authorization"]), 429, refusal.RateLimited
		a.do(t, b, c)
	}
}

// readBudgetServer holds the whole read budget with a snapshot stream
// whose client does not read (a state larger than the socket buffers
// cannot all be written), so that reads are refused with 429 overloaded.
func (a *api) readBudgetServer(t *testing.T) {
	p := start(t, t.TempDir(), "--max-read-bytes", "1", "--max-body", "8388608")
	b := p.base
	a.do(t, b, call{method: "POST", path: topicPath("acme", "big", "notify") + "?key=k", header: asJSON, body: `"` + strings.Repeat("x", 6<<20) + `"`, status: 201})
	p.rawWatch(t, "big", "?snapshot=1", 4096) // answered: the snapshot's bytes are held until it is written
	for _, c := range []call{
		{method: "GET", path: topicPath("acme", "big", "events"), status: 429, code: refusal.Overloaded},
		{method: "GET", path: "/v1/tenants/acme/events", status: 429, code: refusal.Overloaded},
		{method: "GET", path: "/v1/tenants/acme/topics", status: 429, code: refusal.Overloaded},
		{method: "GET", path: topicPath("acme", "big", "state"), status: 429, code: refusal.Overloaded},
		{method: "GET", path: topicPath("acme", "big", "watch") + "?snapshot=1", status: 429, code: refusal.Overloaded},
	} {
		a.do(t, b, c)
	}
}

// unreachable are the statuses and codes that no client can bring about
// from outside: a handler's panic (500 internal) and a backlog that fails
// (503 unavailable) or is not up yet (not_ready, seen only if /readyz is
// asked before it is).
var unreachable = map[string]bool{"500": true, "503": true, "internal": true, "unavailable": true, "not_ready": true}

// durableCodes are Durable Streams' own codes, which its conformance
// suite brings about (scripts/durable-conformance).
var durableCodes = map[string]bool{"invalid_header": true, "conflict": true, "gone": true}

// coverage fails for every status of every operation, and every error
// code, that the document lists and no answer had.
func (a *api) coverage(t *testing.T) {
	for path, item := range a.doc.Paths.PathItems.FromOldest() {
		if strings.HasPrefix(path, "/v1/stream/") || strings.HasSuffix(path, "/streams/{name}") {
			// Durable Streams' answers are the protocol's own conformance
			// suite's to bring about (scripts/durable-conformance), not
			// this walk's.
			continue
		}
		for method, op := range item.GetOperations().FromOldest() {
			for status := range op.Responses.Codes.KeysFromOldest() {
				key := fmt.Sprintf("%s %s %s", strings.ToUpper(method), path, status)
				if !a.seen[key] && !unreachable[status] {
					t.Errorf("no answer was %s", key)
				}
			}
		}
	}
	for _, n := range a.doc.Components.Schemas.GetOrZero("ErrorCode").Schema().Enum {
		if !a.seen["code "+n.Value] && !unreachable[n.Value] && !durableCodes[n.Value] {
			t.Errorf("no refusal had the code %s", n.Value)
		}
	}
	for _, name := range []string{"NotFound", "MethodNotAllowed"} {
		if !a.seen[name] {
			t.Errorf("no answer was %s", name)
		}
	}
}
