package tests

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/refusal"
)

// The binary without --dev: the admin key comes from EDGEHUB_ADMIN_KEY, a
// tenant and a token come from the admin API, the CLI client publishes
// and watches with the token, and without it the same calls are refused.
func TestProductionModeEndToEnd(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	_, _, b := do(t, "POST", p.base+"/v1/admin/tenants/acme/tokens", "k-123", `{"publish":["orders"],"subscribe":["orders"],"ttl":"10m"}`)
	var tok struct{ Token string }
	json.Unmarshal(b, &tok)

	anon := &client.Client{Server: p.base}
	if _, err := anon.Publish(context.Background(), "acme", "orders", []byte(`1`), client.PublishOptions{}); !isAPIError(err, 401, "unauthorized") {
		t.Fatalf("anonymous publish: %v", err)
	}
	c := &client.Client{Server: p.base, Token: tok.Token}
	if _, err := c.Publish(context.Background(), "acme", "orders", []byte(`{"n":1}`), client.PublishOptions{}); err != nil {
		t.Fatalf("publish with token: %v", err)
	}
	if _, err := c.Publish(context.Background(), "acme", "refunds", []byte(`1`), client.PublishOptions{}); !isAPIError(err, 403, "forbidden") {
		t.Fatalf("publish outside the token: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := int64(0)
	for e, err := range c.Watch(ctx, "acme", "orders", client.WatchOptions{After: &after}) {
		if err != nil || string(e.Data) != `{"n":1}` {
			t.Fatalf("watch with token: %+v %v", e, err)
		}
		break
	}
}

func isAPIError(err error, status int, code refusal.Code) bool {
	ae, ok := err.(*client.APIError)
	return ok && ae.Status == status && ae.Code == code
}

// The admin key read from --admin-key-file works and raises no warning;
// given on the command line it works but is warned about, since every
// local user can read a process's arguments.
func TestAdminKeyFromAFileAndTheCommandLine(t *testing.T) {
	key := strings.Repeat("k", 40)
	file := t.TempDir() + "/admin-key"
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	put := func(p *proc) int {
		st, _, _ := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, "")
		return st
	}
	fromFile := startAt(t, binary, nil, t.TempDir(), "127.0.0.1:0", "--admin-key-file", file)
	if status := put(fromFile); status != 201 {
		t.Fatalf("admin key from a file: %d", status)
	}
	if strings.Contains(fromFile.logText(), "command line") {
		t.Fatalf("a key from a file was warned about: %s", fromFile.logText())
	}
	onArgv := startAt(t, binary, nil, t.TempDir(), "127.0.0.1:0", "--admin-key", key)
	if status := put(onArgv); status != 201 {
		t.Fatalf("admin key on the command line: %d", status)
	}
	if !strings.Contains(onArgv.logText(), "given on the command line") {
		t.Fatalf("no warning for a key on the command line: %s", onArgv.logText())
	}
}

// Refused admin keys are throttled per client address: past the burst,
// on the admin API and the console's alike, every request of the address
// is 429 rate_limited with Retry-After, the right key's too, until its
// bucket refills; another address is not affected, and its right keys
// spend nothing.
func TestAdminKeyGuessesAreThrottled(t *testing.T) {
	const key = "admin-key-of-the-throttle-test-0123456789"
	const burst = 3 // and one more refused key every 5 s
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0",
		"--admin-failure-burst", strconv.Itoa(burst), "--admin-failure-rate", "0.2")
	guesser, other := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")
	admin, console := p.base+"/v1/admin/tenants/acme", p.base+"/console/api/mode"
	throttled := func(what string, status int, h http.Header, b []byte) {
		t.Helper()
		retry, err := strconv.Atoi(h.Get("Retry-After"))
		var e struct{ Error struct{ Code refusal.Code } }
		json.Unmarshal(b, &e)
		if status != http.StatusTooManyRequests || e.Error.Code != refusal.RateLimited || err != nil || retry < 1 || retry > 5 {
			t.Fatalf("%s: %d %s, Retry-After %q; want 429 rate_limited within 5 s", what, status, b, h.Get("Retry-After"))
		}
	}
	refused := 0
	for ; ; refused++ {
		url := admin
		if refused%2 == 1 {
			url = console
		}
		status, h, b := doWith(t, guesser, http.MethodGet, url, "guess-"+strconv.Itoa(refused), "")
		if status == http.StatusTooManyRequests {
			throttled("the wrong key past the burst", status, h, b)
			break
		}
		if status != http.StatusUnauthorized || refused > 10*burst {
			t.Fatalf("wrong key %d: %d %s, want 401 within the burst, then 429", refused+1, status, b)
		}
	}
	if refused < burst {
		t.Fatalf("throttled after %d refused keys, within the burst of %d", refused, burst)
	}
	status, h, b := doWith(t, guesser, http.MethodPut, admin, key, "")
	throttled("the right key on the admin API, throttled", status, h, b)
	status, h, b = doWith(t, guesser, http.MethodGet, console, key, "")
	throttled("the right key on the console API, throttled", status, h, b)

	for i := range 2 * burst {
		if status, _, b := doWith(t, other, http.MethodGet, console, key, ""); status != http.StatusOK {
			t.Fatalf("another address's right key %d: %d %s, want 200", i+1, status, b)
		}
	}
	if status, _, b := doWith(t, other, http.MethodPut, admin, "wrong", ""); status != http.StatusUnauthorized {
		t.Fatalf("another address's wrong key after its right ones: %d %s, want 401", status, b)
	}
	pollUntil(t, "let in once its bucket refilled", func() bool {
		status, _, b := doWith(t, guesser, http.MethodPut, admin, key, "")
		if status != http.StatusCreated && status != http.StatusTooManyRequests {
			t.Fatalf("the right key while the bucket refills: %d %s", status, b)
		}
		return status == http.StatusCreated
	})
}

// A flood of refused admin keys, from many addresses, writes a few
// warnings, not one each: at most 10 at once, then one a second, each
// with the number of refusals since the last one (unlogged), which add
// up to every refusal; no request line is a warning for them.
func TestAdminKeyRefusalsAreSampledInTheLog(t *testing.T) {
	const key = "admin-key-of-the-sampled-log-test-0123456789"
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--log-format", "json")
	sent := 0
	refuse := func(ip string) {
		t.Helper()
		status, _, b := doWith(t, clientFrom(t, ip), http.MethodGet, p.base+"/v1/admin/tenants/acme", "guess-"+strconv.Itoa(sent), "")
		if status != http.StatusUnauthorized {
			t.Fatalf("a wrong key from %s: %d %s, want 401", ip, status, b)
		}
		sent++
	}
	began := time.Now()
	for a := range 30 {
		for range 10 { // each address within its burst
			refuse("127.0.1." + strconv.Itoa(a+1))
		}
	}
	// The refusals held back are told by the next line that is written:
	// refuse, from fresh addresses, until one is, and every refusal is
	// counted.
	counted := func() (lines, warnings, total int) {
		for _, l := range p.logLines(t) {
			if l["level"] == "WARN" {
				warnings++
			}
			if l["msg"] != "admin key refused" {
				continue
			}
			n, _ := l["unlogged"].(float64)
			if l["level"] != "WARN" || l["reason"] != "not the admin key" || l["client"] == nil || l["path"] != "/v1/admin/tenants/acme" {
				t.Fatalf("a refusal's line: %v", l)
			}
			lines++
			total += 1 + int(n)
		}
		return lines, warnings, total
	}
	pollUntil(t, "every refusal counted in the log", func() bool {
		refuse("127.0.2." + strconv.Itoa(sent%250+1))
		_, _, total := counted()
		return total == sent
	})
	took := time.Since(began)
	lines, warnings, _ := counted()
	if most := 10 + int(took.Seconds()) + 1; lines > most {
		t.Fatalf("%d refusals in %v wrote %d lines, want at most %d", sent, took, lines, most)
	}
	if warnings != lines || 10*warnings > sent {
		t.Fatalf("%d refusals wrote %d warnings, %d of them the refusals' lines; want those alone, and far fewer than the refusals:\n%s",
			sent, warnings, lines, p.logText())
	}
}

// signToken makes an HS256 token of claims, a JSON object written as is
// (a date as a string, say, which no JSON encoder of a date writes).
func signToken(secret, claims string) string {
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(unsigned))
	return unsigned + "." + enc.EncodeToString(m.Sum(nil))
}

// Tokens are read as they are written: an exp or nbf that is not a JSON
// number is 401, and so is an aud that does not hold the server's
// audience (by default the URL's tenant, else --token-audience); a token
// without aud is accepted. ?access_token= is a credential of the stream
// alone: on notify, events and state it is as if absent.
func TestTokensAreReadStrictly(t *testing.T) {
	const key = "admin-key-of-the-strict-token-test-0123456789"
	exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	nbf := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	claims := func(extra string) string {
		return `{"tenant":"acme","publish":["*"],"subscribe":["*"],"exp":` + exp + extra + `}`
	}
	for _, c := range []struct {
		audience string // --token-audience
		want     map[string]int
	}{
		{"", map[string]int{
			claims(``): 200, claims(`,"nbf":` + nbf): 200,
			`{"tenant":"acme","subscribe":["*"],"exp":"` + exp + `"}`: 401,
			claims(`,"nbf":"` + nbf + `"`):                            401,
			claims(`,"aud":"acme"`):                                   200,
			claims(`,"aud":["billing","acme"]`):                       200,
			claims(`,"aud":"beta"`):                                   401,
			claims(`,"aud":"hub.example"`):                            401,
		}},
		{"hub.example", map[string]int{
			claims(``):                     200,
			claims(`,"aud":"hub.example"`): 200,
			claims(`,"aud":"acme"`):        401,
		}},
	} {
		args := []string{}
		if c.audience != "" {
			args = append(args, "--token-audience", c.audience)
		}
		p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", args...)
		var ten tenantAnswer
		p.adminCall(t, key, "PUT", "acme", "", http.StatusCreated, &ten)
		for cl, want := range c.want {
			if status, _, b := do(t, "GET", p.topicURL("orders", "events"), signToken(ten.SigningSecret, cl), ""); status != want {
				t.Errorf("--token-audience %q, claims %s: %d %s, want %d", c.audience, cl, status, b, want)
			}
		}
		if c.audience != "" {
			continue
		}
		tok := signToken(ten.SigningSecret, claims(``))
		for _, r := range []struct{ method, route string }{{"POST", "notify"}, {"GET", "events"}, {"GET", "state"}} {
			if status, _, b := do(t, r.method, p.topicURL("orders", r.route)+"?access_token="+tok, "", "1"); status != http.StatusUnauthorized {
				t.Errorf("%s with ?access_token=: %d %s, want 401", r.route, status, b)
			}
		}
		resp, err := http.Get(p.topicURL("orders", "watch") + "?access_token=" + tok)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("watch with ?access_token=: %d, want 200", resp.StatusCode)
		}
	}
}
