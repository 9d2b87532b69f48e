package tests

import (
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// How streams end (plan 053): at their token's end, of every kind; and a
// long-poll that the server ends answers as its timeout does, never a
// bare 200.

// dsAnswer is a long-poll's answer, and when it came.
type dsAnswer struct {
	status int
	header http.Header
	body   []byte
	at     time.Time
}

// longPoll sends a Durable Streams long-poll of url from the offset
// after seq, as bearer (none if empty), and hands its answer over once
// it comes.
func longPoll(t *testing.T, url string, seq int, bearer string) <-chan dsAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s?offset=%016d_0000000000000000&live=long-poll", url, seq), nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	out := make(chan dsAnswer, 1)
	go func() {
		var a dsAnswer
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			a.status, a.header = resp.StatusCode, resp.Header
			a.body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		a.at = time.Now()
		out <- a
	}()
	return out
}

// upToDate fails unless a is a long-poll's answer with nothing new, as
// its timeout gives it: 204, Stream-Next-Offset the request's offset
// (after seq), up to date, and a cursor.
func (a dsAnswer) upToDate(t *testing.T, what string, seq int) {
	t.Helper()
	want := fmt.Sprintf("%016d_0000000000000000", seq)
	if a.status != http.StatusNoContent || a.header.Get("Stream-Next-Offset") != want ||
		a.header.Get("Stream-Up-To-Date") != "true" || a.header.Get("Stream-Cursor") == "" {
		t.Fatalf("%s: the long-poll answered %d %v %q; want 204, Stream-Next-Offset %s, Stream-Up-To-Date and a cursor",
			what, a.status, a.header, a.body, want)
	}
}

// awaitLongPoll waits until the long-poll of a server with no other
// stream is registered with its hub: from then on, ending it is the
// server's doing, not a race with its start.
func (p *proc) awaitLongPoll(t *testing.T) {
	t.Helper()
	p.awaitSeries(t, "the long-poll registered", map[string]float64{`edgehub_streams{state="live"}`: 1})
}

// Every stream, a native topic watch, a native tenant watch, a Durable
// Streams SSE read and a long-poll, opened with a token signed with the
// tenant's secret whose exp is past but within the leeway, ends at exp
// plus the leeway: not before, and well within 15 s after; the long-poll
// then answers as its timeout does. A token past exp plus the leeway is
// refused 401 on each, never opened.
func TestStreamsEndWhenTheirTokenExpires(t *testing.T) {
	const key = "admin-key-of-the-stream-expiry-test-0123456"
	p, ten := acmeServer(t, key, "--streams-long-poll", "5m", "--streams-sse-life", "5m")
	full := p.mintAcme(t, key, `"*"`, `"*"`)
	ds := p.base + "/v1/stream/ds"
	if st, _, b := dsReq(t, "PUT", ds, full, asJSONStream, `{"n":1}`); st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	sign := func(exp int64) string {
		return signToken(ten.SigningSecret, fmt.Sprintf(`{"tenant":"acme","publish":["*"],"subscribe":["*"],"exp":%d}`, exp))
	}
	const leeway = 30 * time.Second
	sse := map[string]string{
		"a topic watch":  p.topicURL("orders", "watch"),
		"a tenant watch": p.base + "/v1/tenants/acme/watch",
		"a Durable SSE":  ds + "?offset=0000000000000001_0000000000000000&live=sse",
	}
	gone := sign(time.Now().Add(-leeway - 30*time.Second).Unix())
	for what, url := range sse {
		if st, _, b := dsReq(t, "GET", url, gone, nil, ""); st != 401 || errorCode(b) != "unauthorized" {
			t.Fatalf("%s with a token past exp and leeway: %d %s", what, st, b)
		}
	}
	if a := <-longPoll(t, ds, 1, gone); a.status != 401 || errorCode(a.body) != "unauthorized" {
		t.Fatalf("a long-poll with a token past exp and leeway: %d %s", a.status, a.body)
	}

	exp := time.Now().Add(-leeway + 8*time.Second).Unix()
	endsAt := time.Unix(exp, 0).Add(leeway)
	tok := sign(exp)
	auth := map[string]string{"Authorization": "Bearer " + tok}
	ended := map[string]chan time.Time{}
	for what, url := range sse {
		s := openStream(t, url, auth)
		end := make(chan time.Time, 1)
		ended[what] = end
		go func() {
			for range s.frames { // until the server ends it
			}
			end <- time.Now()
		}()
	}
	poll := longPoll(t, ds, 1, tok)
	check := func(what string, at time.Time) {
		t.Helper()
		if at.Before(endsAt) || at.After(endsAt.Add(15*time.Second)) {
			t.Fatalf("%s ended at %s, %v from exp plus the leeway; want at it, within 15 s", what, at.Format(time.RFC3339Nano), at.Sub(endsAt))
		}
		t.Logf("%s ended %v after exp plus the leeway", what, at.Sub(endsAt))
	}
	for what, c := range ended {
		select {
		case at := <-c:
			check(what, at)
		case <-time.After(time.Until(endsAt.Add(time.Minute))):
			t.Fatalf("%s is still open a minute after exp plus the leeway", what)
		}
	}
	a := <-poll
	check("the long-poll", a.at)
	a.upToDate(t, "ended by its token's end", 1)
}

// A long-poll open when the server gets SIGTERM answers as its timeout
// does, and the server exits 0.
func TestDurableLongPollEndedBySIGTERM(t *testing.T) {
	p := start(t, t.TempDir(), "--streams-long-poll", "5m")
	ds := p.base + "/v1/stream/lp"
	if st, _, b := dsReq(t, "PUT", ds, "", asJSONStream, `{"a":1}`); st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	poll := longPoll(t, ds, 1, "")
	p.awaitLongPoll(t)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	(<-poll).upToDate(t, "SIGTERM", 1)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("the server exited with %v", p.err)
		}
	case <-time.After(wait):
		t.Fatal("the server did not exit")
	}
}

// A long-poll whose hub ends its subscription, as every hub does when
// the PostgreSQL listener reconnects, answers as its timeout does.
func TestDurableLongPollEndedByListenerCut(t *testing.T) {
	ps, url := cluster(t, 1, "--streams-long-poll", "5m")
	p := ps[0]
	ds := p.base + "/v1/stream/lp"
	if st, _, b := dsReq(t, "PUT", ds, "", asJSONStream, `{"a":1}`); st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	poll := longPoll(t, ds, 1, "")
	p.awaitLongPoll(t)
	if n := cutListeners(t, adminConn(t, url)); n == 0 {
		t.Fatal("no listener to cut")
	}
	(<-poll).upToDate(t, "the listener cut", 1)
}

// A long-poll whose token is revoked while it waits answers as its
// timeout does, and the client's next ask is 401.
func TestDurableLongPollEndedByRevocation(t *testing.T) {
	const key = "admin-key-of-the-long-poll-revoke-test-0123"
	p, _ := acmeServer(t, key, "--streams-long-poll", "5m")
	tok := p.mintAcme(t, key, `"*"`, `"*"`)
	ds := p.base + "/v1/tenants/acme/streams/lp"
	if st, _, b := dsReq(t, "PUT", ds, tok, asJSONStream, `{"a":1}`); st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	poll := longPoll(t, ds, 1, tok)
	p.awaitLongPoll(t)
	p.adminCall(t, key, "DELETE", "acme/tokens/"+jtiOf(t, tok), "", http.StatusNoContent, nil)
	(<-poll).upToDate(t, "its token revoked", 1)
	if a := <-longPoll(t, ds, 1, tok); a.status != 401 {
		t.Fatalf("the revoked token asks again: %d %s", a.status, a.body)
	}
}
