package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Durable Streams with credentials (plan 053): a fork reads its source,
// cached reads vary on the credential, and the protocol is served under
// the tenant for any token the tenant accepts.

// dsReq sends one request to url with body (none if empty), as bearer
// (no token if empty), with the headers given, and returns the answer's
// status, headers and whole body.
func dsReq(t *testing.T, method, url, bearer string, header map[string]string, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return dsSend(t, req)
}

// dsSend sends req and returns the answer's status, headers and body.
func dsSend(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// asJSONStream is the Content-Type of a JSON-mode stream's writes.
var asJSONStream = map[string]string{"Content-Type": "application/json"}

// withHeader is header plus k: v, header unchanged.
func withHeader(header map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range header {
		if hk != k {
			out[hk] = hv
		}
	}
	return out
}

// acmeServer starts a server with admin key key (no dev mode) and
// creates the tenant acme, whose secrets it returns.
func acmeServer(t *testing.T, key string, args ...string) (*proc, tenantAnswer) {
	t.Helper()
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", args...)
	var ten tenantAnswer
	p.adminCall(t, key, "PUT", "acme", "", http.StatusCreated, &ten)
	return p, ten
}

// errorCode is the code of a refusal's body.
func errorCode(b []byte) string {
	var e struct{ Error struct{ Code string } }
	json.Unmarshal(b, &e)
	return e.Error.Code
}

// A fork reads its source, so it needs what a direct read of the source
// needs: a token confined to mine* can fork mine-src but not secretdoc,
// and a fork of a source it may not read is answered exactly as one of
// a source that does not exist (no oracle of names), on both routes and
// with both forms of Stream-Forked-From, storing nothing. A webhook
// signature reads nothing, so it forks nothing.
func TestDurableForkNeedsReadOfItsSource(t *testing.T) {
	const key = "admin-key-of-the-durable-fork-test-0123456"
	p, ten := acmeServer(t, key)
	full := p.mintAcme(t, key, `"*"`, `"*"`)
	narrow := p.mintAcme(t, key, `"mine*"`, `"mine*"`)
	legacy, under := p.base+"/v1/stream/", p.base+"/v1/tenants/acme/streams/"
	if st, _, b := dsReq(t, "PUT", legacy+"secretdoc", full, asJSONStream, `{"ssn":"123-45-6789"}`); st != 201 {
		t.Fatalf("create the secret: %d %s", st, b)
	}
	if st, _, b := dsReq(t, "PUT", legacy+"mine-src", narrow, asJSONStream, `{"mine":1}`); st != 201 {
		t.Fatalf("create the narrow token's own: %d %s", st, b)
	}
	directSt, _, direct := dsReq(t, "GET", legacy+"secretdoc?offset=-1", narrow, nil, "")
	if directSt != 403 {
		t.Fatalf("the narrow token reads the secret directly: %d %s", directSt, direct)
	}
	forms := []string{"/v1/stream/%s", "/v1/tenants/acme/streams/%s"}
	n := 0
	for _, route := range []string{legacy, under} {
		for _, form := range forms {
			n++
			target := fmt.Sprintf("mine-copy-%d", n)
			fork := func(source string) (int, []byte) {
				st, _, b := dsReq(t, "PUT", route+target, narrow, withHeader(asJSONStream, "Stream-Forked-From", fmt.Sprintf(form, source)), "")
				return st, b
			}
			secretSt, secret := fork("secretdoc")
			missingSt, missing := fork("nosuchstream")
			if secretSt != 403 || errorCode(secret) != "forbidden" {
				t.Fatalf("%s from %s: the narrow token forks the secret: %d %s", route, form, secretSt, secret)
			}
			if missingSt != secretSt || string(missing) != string(secret) || string(secret) != string(direct) {
				t.Fatalf("%s from %s: an unreadable source answers %d %s, a missing one %d %s, a direct read %s: want all alike",
					route, form, secretSt, secret, missingSt, missing, direct)
			}
			if st, _, b := dsReq(t, "GET", legacy+target+"?offset=-1", full, nil, ""); st != 404 {
				t.Fatalf("a refused fork stored %s: %d %s", target, st, b)
			}
		}
	}
	// A source the token may read forks, in either form, on either route.
	for i, route := range []string{legacy, under} {
		target := fmt.Sprintf("mine-fork-%d", i)
		st, _, b := dsReq(t, "PUT", route+target, narrow, withHeader(asJSONStream, "Stream-Forked-From", fmt.Sprintf(forms[1-i], "mine-src")), "")
		if st != 201 {
			t.Fatalf("fork a readable source on %s: %d %s", route, st, b)
		}
		if st, _, b := dsReq(t, "GET", route+target+"?offset=-1", narrow, nil, ""); st != 200 || string(b) != `[{"mine":1}]` {
			t.Fatalf("read the fork: %d %s", st, b)
		}
	}
	// A webhook signature, good for an append, forks nothing.
	req := signed(t, legacy+"mine-hooked", ten.WebhookSecret, "msg_fork", time.Now(), "")
	req.Method = "PUT"
	req.Header.Set("Edgehub-Tenant", "acme")
	req.Header.Set("Stream-Forked-From", "/v1/stream/mine-src")
	if st, _, b := dsSend(t, req); st != 403 || errorCode(b) != "forbidden" {
		t.Fatalf("a webhook-signed fork: %d %s, want 403 forbidden", st, b)
	}
	// Nothing of the refused forks exists, not even as a topic.
	st, _, b := dsReq(t, "GET", p.base+"/v1/tenants/acme/topics", full, nil, "")
	var list topicList
	if st != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("list topics: %d %s", st, b)
	}
	for _, tp := range list.Topics {
		if strings.HasPrefix(tp.Topic, "mine-copy") || tp.Topic == "mine-hooked" {
			t.Fatalf("a refused fork left the topic %s: %s", tp.Topic, b)
		}
	}
}

// Outside dev mode, a read answer a cache may keep (a catch-up page, its
// 304, a long-poll's data) is private and varies on what picks it: the
// token, and Edgehub-Tenant on the route without a tenant. In dev mode,
// where no credential picks an answer, it is public with no Vary.
func TestDurableCachedReadsVaryOnCredentials(t *testing.T) {
	const key = "admin-key-of-the-durable-vary-test-01234567"
	p, _ := acmeServer(t, key)
	tok := p.mintAcme(t, key, `"*"`, `"*"`)
	for _, c := range []struct{ base, vary string }{
		{p.base + "/v1/stream/", "Authorization, Edgehub-Tenant"},
		{p.base + "/v1/tenants/acme/streams/", "Authorization"},
	} {
		name := "cached" + strconv.Itoa(len(c.vary))
		p.awaitSeries(t, "no stream open", map[string]float64{`edgehub_streams{state="live"}`: 0})
		if st, _, b := dsReq(t, "PUT", c.base+name, tok, asJSONStream, `{"n":1}`); st != 201 {
			t.Fatalf("create: %d %s", st, b)
		}
		varies := func(what string, h http.Header) {
			t.Helper()
			if got := strings.Join(h.Values("Vary"), ", "); !strings.HasPrefix(h.Get("Cache-Control"), "private,") || !strings.HasSuffix(got, c.vary) {
				t.Fatalf("%s on %s: Cache-Control %q, Vary %q; want private, Vary ending in %q", what, c.base, h.Get("Cache-Control"), got, c.vary)
			}
		}
		st, h, b := dsReq(t, "GET", c.base+name+"?offset=-1", tok, nil, "")
		if st != 200 {
			t.Fatalf("catch-up: %d %s", st, b)
		}
		varies("a catch-up page", h)
		st, h, _ = dsReq(t, "GET", c.base+name+"?offset=-1", tok, map[string]string{"If-None-Match": h.Get("ETag")}, "")
		if st != 304 {
			t.Fatalf("revalidate: %d", st)
		}
		varies("its 304", h)
		done := make(chan struct{})
		go func() {
			defer close(done)
			st, h, b = dsReq(t, "GET", c.base+name+"?offset=0000000000000001_0000000000000000&live=long-poll", tok, nil, "")
		}()
		p.awaitSeries(t, "the long-poll registered", map[string]float64{`edgehub_streams{state="live"}`: 1})
		if st, _, b := dsReq(t, "POST", c.base+name, tok, asJSONStream, `{"n":2}`); st != 204 {
			t.Fatalf("append: %d %s", st, b)
		}
		<-done
		if st != 200 || string(b) != `[{"n":2}]` {
			t.Fatalf("long-poll: %d %s", st, b)
		}
		varies("a long-poll's data", h)
	}
	dev := start(t, t.TempDir())
	if st, _, b := dsReq(t, "PUT", dev.base+"/v1/stream/open", "", asJSONStream, `{"n":1}`); st != 201 {
		t.Fatalf("create in dev mode: %d %s", st, b)
	}
	st, h, _ := dsReq(t, "GET", dev.base+"/v1/stream/open?offset=-1", "", nil, "")
	if st != 200 || !strings.HasPrefix(h.Get("Cache-Control"), "public,") || strings.Contains(strings.Join(h.Values("Vary"), ","), "Authorization") {
		t.Fatalf("dev mode: %d Cache-Control %q Vary %q", st, h.Get("Cache-Control"), h.Values("Vary"))
	}
}

// The whole protocol is served under the tenant, which the path names,
// so a registered issuer's token, which names no tenant, creates,
// appends, reads, forks (either form of Stream-Forked-From) and deletes
// there; Location is in the route's form; /v1/stream answers as before:
// it refuses that token and serves an Edgehub-minted token of the
// tenant the same streams. A fork never reaches into another tenant.
func TestDurableStreamsUnderTheTenant(t *testing.T) {
	const key = "admin-key-of-the-durable-tenant-test-012345"
	p, _ := acmeServer(t, key, "--streams-long-poll", "2s")
	secret := strings.Repeat("k", 40)
	p.adminCall(t, key, "PUT", "acme/issuers/app", `{"alg":"HS256","key":"`+secret+`"}`, http.StatusCreated, nil)
	exp := strconv.FormatInt(time.Now().Add(10*time.Minute).Unix(), 10)
	issued := signToken(secret, `{"publish":["*"],"subscribe":["*"],"exp":`+exp+`}`)
	minted := p.mintAcme(t, key, `"*"`, `"*"`)
	under := p.base + "/v1/tenants/acme/streams/"
	st, h, b := dsReq(t, "PUT", under+"doc", issued, asJSONStream, `{"n":1}`)
	if st != 201 || h.Get("Location") != under+"doc" || h.Get("Stream-Next-Offset") != "0000000000000001_0000000000000000" {
		t.Fatalf("create under the tenant: %d %v %s", st, h, b)
	}
	if st, _, b := dsReq(t, "PUT", under+"doc", issued, asJSONStream, ""); st != 200 {
		t.Fatalf("confirm: %d %s", st, b)
	}
	if st, _, b := dsReq(t, "POST", under+"doc", issued, asJSONStream, `[{"n":2},{"n":3}]`); st != 204 {
		t.Fatalf("append: %d %s", st, b)
	}
	if st, h, b := dsReq(t, "GET", under+"doc?offset=-1", issued, nil, ""); st != 200 || string(b) != `[{"n":1},{"n":2},{"n":3}]` ||
		h.Get("Stream-Next-Offset") != "0000000000000003_0000000000000000" || h.Get("Stream-Up-To-Date") != "true" {
		t.Fatalf("read: %d %v %s", st, h, b)
	}
	if st, h, _ := dsReq(t, "HEAD", under+"doc", issued, nil, ""); st != 200 || h.Get("Stream-Next-Offset") != "0000000000000003_0000000000000000" {
		t.Fatalf("HEAD: %d %v", st, h)
	}
	if st, h, _ := dsReq(t, "GET", under+"doc?offset=now&live=long-poll", issued, nil, ""); st != 204 || h.Get("Stream-Next-Offset") != "0000000000000003_0000000000000000" {
		t.Fatalf("long-poll: %d %v", st, h)
	}
	for i, from := range []string{"/v1/tenants/acme/streams/doc", "/v1/stream/doc", "/v1/tenants/ac%6De/streams/d%6Fc"} {
		fork := fmt.Sprintf("fork%d", i)
		st, h, b := dsReq(t, "PUT", under+fork, issued, map[string]string{"Stream-Forked-From": from, "Stream-Fork-Offset": "0000000000000002_0000000000000000"}, "")
		if st != 201 || h.Get("Location") != under+fork {
			t.Fatalf("fork from %s: %d %v %s", from, st, h, b)
		}
		if st, _, b := dsReq(t, "GET", under+fork+"?offset=-1", issued, nil, ""); st != 200 || string(b) != `[{"n":1},{"n":2}]` {
			t.Fatalf("read the fork from %s: %d %s", from, st, b)
		}
	}
	if st, _, b := dsReq(t, "PUT", under+"elsewhere", issued, map[string]string{"Stream-Forked-From": "/v1/tenants/other/streams/doc"}, ""); st != 404 || errorCode(b) != "not_found" {
		t.Fatalf("a fork from another tenant: %d %s", st, b)
	}
	if st, _, b := dsReq(t, "GET", under+"elsewhere?offset=-1", issued, nil, ""); st != 404 {
		t.Fatalf("the refused fork: %d %s", st, b)
	}
	// The route without a tenant is as it was: the issuer's token names
	// no tenant, so it is refused there; a token of acme sees the same
	// stream, and creates at its own form.
	if st, _, b := dsReq(t, "GET", p.base+"/v1/stream/doc?offset=-1", issued, nil, ""); st != 401 || errorCode(b) != "unauthorized" {
		t.Fatalf("the issuer's token on /v1/stream: %d %s", st, b)
	}
	if st, _, b := dsReq(t, "GET", p.base+"/v1/stream/doc?offset=-1", minted, nil, ""); st != 200 || string(b) != `[{"n":1},{"n":2},{"n":3}]` {
		t.Fatalf("acme's token on /v1/stream: %d %s", st, b)
	}
	if st, h, b := dsReq(t, "PUT", p.base+"/v1/stream/old", minted, asJSONStream, ""); st != 201 || h.Get("Location") != p.base+"/v1/stream/old" {
		t.Fatalf("create on /v1/stream: %d %v %s", st, h, b)
	}
	if st, _, b := dsReq(t, "DELETE", under+"old", issued, nil, ""); st != 204 {
		t.Fatalf("delete under the tenant what /v1/stream created: %d %s", st, b)
	}
	if st, _, b := dsReq(t, "GET", p.base+"/v1/stream/old?offset=-1", minted, nil, ""); st != 404 {
		t.Fatalf("the deleted stream on /v1/stream: %d %s", st, b)
	}
	// Names are checked as on every tenant route, before credentials.
	for path, want := range map[string]int{"/v1/tenants/.acme/streams/doc": 400, "/v1/tenants/acme/streams/.doc": 400, "/v1/tenants/nosuch/streams/doc": 401} {
		if st, _, b := dsReq(t, "GET", p.base+path, issued, nil, ""); st != want {
			t.Fatalf("GET %s: %d %s, want %d", path, st, b, want)
		}
	}
}
