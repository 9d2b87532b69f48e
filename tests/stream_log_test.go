package tests

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// streamEnd is a stream's access-log line.
type streamEnd struct {
	Msg, Route, Path, Reason, Took string
	Bytes, Events, Position        int64
}

// streamEnds is the stream lines logged so far.
func (p *proc) streamEnds() []streamEnd {
	var ends []streamEnd
	for _, l := range strings.Split(p.logText(), "\n") {
		var v streamEnd
		if json.Unmarshal([]byte(l), &v) == nil && v.Msg == "stream ended" {
			ends = append(ends, v)
		}
	}
	return ends
}

// awaitStreamEnds polls the server's log until it has n stream lines.
func (p *proc) awaitStreamEnds(t *testing.T, n int) []streamEnd {
	t.Helper()
	for deadline := time.Now().Add(wait); ; {
		ends := p.streamEnds()
		if len(ends) >= n {
			return ends
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d stream lines, want %d:\n%s", len(ends), n, p.logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With --access-log, a stream that ends logs a line with how long it
// lasted (with its unit), the bytes and events it wrote, its position and
// why it ended: the client left, a client that read nothing for
// --write-timeout, the server stopping.
func TestStreamEndIsLogged(t *testing.T) {
	p := start(t, t.TempDir(), "--access-log", "--log-format", "json", "--write-timeout", "300ms")
	left := p.watch(t, "orders", "", nil)
	left.hello(t)
	p.publish(t, "orders", `"a"`)
	p.publish(t, "orders", `"b"`)
	left.event(t)
	left.event(t)
	left.close()
	ends := p.awaitStreamEnds(t, 1)
	e := ends[0]
	if e.Reason != "client_left" || e.Events != 2 || e.Position != 2 || e.Bytes < 100 || e.Path != "/v1/tenants/acme/topics/orders/watch" ||
		!strings.Contains(e.Route, "/watch") {
		t.Fatalf("the line of a stream its client left: %+v", e)
	}
	if _, err := time.ParseDuration(e.Took); err != nil {
		t.Fatalf("took %q has no unit: %v", e.Took, err)
	}

	// A client that never reads: its socket buffers fill, the next write
	// waits past --write-timeout.
	p.rawWatch(t, "stuck", "", 4096)
	big := `"` + strings.Repeat("x", 60000) + `"`
	for i := 0; i < 400; i++ {
		p.publish(t, "stuck", big)
		if len(p.streamEnds()) > 1 {
			break
		}
	}
	if e := p.awaitStreamEnds(t, 2)[1]; e.Reason != "write_timeout" || e.Bytes < 60000 || e.Events < 1 {
		t.Fatalf("the line of a stream whose client read nothing: %+v", e)
	}

	live := p.watch(t, "orders", "?after=2", nil)
	live.hello(t)
	p.cmd.Process.Signal(syscall.SIGTERM)
	live.ended(t)
	<-p.exited
	if e := p.awaitStreamEnds(t, 3)[2]; e.Reason != "shutdown" || e.Events != 0 || e.Position != 2 {
		t.Fatalf("the line of a stream the server ended to stop: %+v", e)
	}
}

// A revoked token's stream, and a tenant stream whose tenant is deleted,
// say so; without --access-log no stream line is written.
func TestStreamEndSaysRevokedOrEnded(t *testing.T) {
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=k-123"}, t.TempDir(), "127.0.0.1:0", "--access-log", "--log-format", "json")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	tok := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	other := p.mintAcme(t, "k-123", `"*"`, `"*"`)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	revoked := p.watch(t, "orders", "", auth(tok))
	revoked.hello(t)
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/acme/tokens/"+jtiOf(t, tok), "k-123", ""); st != 204 {
		t.Fatalf("revoke: %d %s", st, b)
	}
	revoked.ended(t)
	if e := p.awaitStreamEnds(t, 1)[0]; e.Reason != "revoked" {
		t.Fatalf("the line of a revoked token's stream: %+v", e)
	}
	tenant := p.watchTenant(t, "pattern=*", auth(other))
	tenant.next(t)
	if st, _, b := do(t, "DELETE", p.base+"/v1/admin/tenants/acme", "k-123", ""); st != 204 {
		t.Fatalf("delete the tenant: %d %s", st, b)
	}
	tenant.ended(t)
	if e := p.awaitStreamEnds(t, 2)[1]; e.Reason != "ended" || e.Path != "/v1/tenants/acme/watch" {
		t.Fatalf("the line of a deleted tenant's stream: %+v", e)
	}

	quiet := start(t, t.TempDir(), "--log-format", "json")
	s := quiet.watch(t, "orders", "", nil)
	s.hello(t)
	s.close()
	quiet.watch(t, "orders", "", nil).hello(t) // the first has ended once this one is served
	if got := quiet.streamEnds(); len(got) != 0 {
		t.Fatalf("stream lines without --access-log: %+v", got)
	}
}
