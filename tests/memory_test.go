package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/edgehub/edgehub/client"
)

// rssMiB is the resident memory of process pid, from /proc.
func rssMiB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// queued is how many bytes wait unread in conn's receive queue: more than
// none means the server has started to answer.
func queued(t *testing.T, conn net.Conn) int {
	t.Helper()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || errno != 0 {
		t.Fatalf("read the receive queue: %v %v", err, errno)
	}
	return int(n)
}

// stall sends a GET for path on a connection with a small receive buffer
// and never reads the answer.
func (p *proc) stall(t *testing.T, path string) net.Conn {
	t.Helper()
	conn, err := smallBufferDialer(4096).Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: edgehub\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Hundreds of clients ask for /events, /state and watch answers on topics
// of tens of megabytes, of several tenants (so that the server-wide
// budgets bind, not a tenant's share), and never read them. The server's
// resident memory grows by at most 256 MiB with the default flags (issue
// 20's bound), and by at most --max-read-bytes plus the fixed overhead of
// docs/operations.md with a smaller budget; it keeps serving meanwhile: a
// publish and a watch on another topic work.
func TestMemoryBoundedWithStalledReaders(t *testing.T) {
	for _, c := range []struct {
		name     string
		env      []string
		boundMiB float64
	}{
		{"defaults", nil, 256},
		{"64 MiB read budget", []string{"EDGEHUB_MAX_READ_BYTES=67108864"}, 64 + 128},
	} {
		t.Run(c.name, func(t *testing.T) { stalledReaders(t, c.env, c.boundMiB) })
	}
}

func stalledReaders(t *testing.T, env []string, boundMiB float64) {
	const (
		tenants  = 4
		perKind  = 100 // readers of each kind, spread over the tenants
		events   = 32  // of eventLen, per topic: 16 MiB topics and states
		eventLen = 512 << 10
		// abortMiB stops a server without the bounds before it takes the
		// machine with it.
		abortMiB = 3072
	)
	p := startAt(t, plainBinary, env, t.TempDir(), "127.0.0.1:0", "--dev")
	pid := p.cmd.Process.Pid
	ctx := context.Background()
	c := p.client()
	pad := `"` + strings.Repeat("x", eventLen-2) + `"`
	for n := range tenants {
		tenant := fmt.Sprintf("t%d", n)
		for i := 0; i < events; i++ {
			if _, err := c.Publish(ctx, tenant, "big", []byte(pad), client.PublishOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Publish(ctx, tenant, "kv", []byte(pad), client.PublishOptions{Key: fmt.Sprintf("k%02d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := rssMiB(t, pid)
	peak := base
	measure := func(what string) {
		rss := rssMiB(t, pid)
		peak = max(peak, rss)
		t.Logf("%-40s RSS %6.0f MiB (+%.0f)", what, rss, rss-base)
		if rss-base > abortMiB {
			t.Fatalf("RSS grew by %.0f MiB: stopping before the machine runs out", rss-base)
		}
	}
	measure(fmt.Sprintf("after %d MiB of events and state", tenants*2*events*eventLen>>20))
	// Each wave waits until every one of its clients has bytes queued:
	// its answer (or refusal, or a stream's hello) has begun, so the server
	// holds whatever it holds for it.
	var all []net.Conn
	for _, path := range []string{"big/events?after=0&limit=1000", "kv/state", "big/watch?after=0", "kv/watch?snapshot=1"} {
		for done := 0; done < perKind; done += 50 {
			conns := make([]net.Conn, 50)
			for i := range conns {
				conns[i] = p.stall(t, fmt.Sprintf("/v1/tenants/t%d/topics/%s", (done+i)%tenants, path))
			}
			deadline := time.Now().Add(wait)
			for _, conn := range conns {
				for queued(t, conn) == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("%s: a stalled client got no answer", path)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			all = append(all, conns...)
			measure(fmt.Sprintf("%d stalled %s", done+50, path))
		}
	}
	// The server still publishes and streams.
	s := p.watch(t, "other", "", nil)
	s.hello(t)
	seq := p.publish(t, "other", `{"still":"serving"}`)
	if e := s.event(t); e.Seq != seq {
		t.Fatalf("watch on another topic got %d, want %d", e.Seq, seq)
	}
	measure("publish and watch on another topic")
	t.Logf("peak: %.0f MiB over a baseline of %.0f MiB with %d stalled clients", peak-base, base, len(all))
	if peak-base > boundMiB {
		t.Fatalf("stalled readers grew RSS by %.0f MiB; want at most %.0f", peak-base, boundMiB)
	}
}

// Streams set their own write deadline at every flush, so the server's
// WriteTimeout backstop does not end them: over HTTP/2 and HTTP/1.1, a
// stream outlives several write timeouts (counted in heartbeats, not
// measured) and still gets what is published.
func TestTLSStreamsOutliveTheWriteTimeout(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	p := start(t, t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile, "--write-timeout", "500ms", "--heartbeat", "100ms")
	p.base = strings.Replace(p.base, "http://", "https://", 1)
	for _, proto := range []string{"HTTP/2.0", "HTTP/1.1"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
		if proto == "HTTP/1.1" {
			tr.ForceAttemptHTTP2, tr.TLSNextProto = false, map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		hc := &http.Client{Transport: tr}
		topic := "outlive" + proto[5:6]
		resp, err := hc.Get(p.topicURL(topic, "watch"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Proto != proto {
			t.Fatalf("got %s, want %s", resp.Proto, proto)
		}
		lines := bufio.NewScanner(resp.Body)
		// 20 heartbeats 100 ms apart: four write timeouts.
		for pings := 0; pings < 20; {
			if !lines.Scan() {
				t.Fatalf("%s: the stream ended after %d heartbeats: %v", proto, pings, lines.Err())
			}
			if lines.Text() == ": ping" {
				pings++
			}
		}
		c := &client.Client{Server: p.base, HTTP: hc}
		if _, err := c.Publish(context.Background(), "acme", topic, []byte(`"late"`), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		for lines.Scan() && lines.Text() != "id: 1" {
		}
		if lines.Err() != nil || lines.Text() != "id: 1" {
			t.Fatalf("%s: the event did not arrive: %v", proto, lines.Err())
		}
	}
}

// Idle streams are most of a hub's streams, and what each holds bounds
// how many one machine serves: 5000 streams that have their hello and
// then sit hold at most idleStreamKiB each of the memory the Go runtime
// has in use (heap spans and goroutine stacks), read after a collection.
// The runtime's own count, not the process's resident size: resident
// size also counts freed pages the runtime has yet to hand back, and
// moved between 9.8 and 14.8 KiB a stream from run to run of the same
// binary. Parked streams hold no goroutine (plans/055-parked-streams.md):
// 2.5 KiB each as built, against 8.5 to 9.7 when each had one. The
// streams are raw connections, so the test process holds nothing per
// stream but a socket.
func TestIdleStreamsHoldLittleEach(t *testing.T) {
	const (
		streams       = 5000
		idleStreamKiB = 4
	)
	pprofAddr := freeAddr(t)
	p := startAt(t, plainBinary, nil, t.TempDir(), "127.0.0.1:0", "--dev", "--max-streams", "0", "--max-tenant-streams", "0", "--pprof-addr", pprofAddr)
	// held is the server's heap in use plus its goroutine stacks, in KiB,
	// after a collection, as the runtime's statistics in pprof's heap
	// profile give them.
	held := func() float64 {
		t.Helper()
		st, _, b := do(t, "GET", "http://"+pprofAddr+"/debug/pprof/heap?gc=1&debug=1", "", "")
		if st != 200 {
			t.Fatalf("a collection through pprof: %d %s", st, b)
		}
		var heap, stack, stackSys float64
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
				fmt.Sscan(v, &heap)
			}
			if v, ok := strings.CutPrefix(line, "# Stack = "); ok {
				fmt.Sscanf(v, "%g / %g", &stack, &stackSys)
			}
		}
		if heap == 0 || stack == 0 {
			t.Fatalf("no HeapInuse or Stack in the heap profile:\n%.2000s", b)
		}
		return (heap + stack) / 1024
	}
	addr := strings.TrimPrefix(p.base, "http://")
	// One stream first, so that the hub and the server's first-use
	// allocations are in the baseline.
	open := func(i int) net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := fmt.Fprintf(conn, "GET /v1/tenants/acme/topics/idle-%d/watch HTTP/1.1\r\nHost: edgehub\r\n\r\n", i%10); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	helloed := func(conns []net.Conn) {
		deadline := time.Now().Add(wait)
		for _, conn := range conns {
			for queued(t, conn) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("a stream got no hello")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	var warm []net.Conn
	for i := range 10 {
		warm = append(warm, open(i))
	}
	helloed(warm)
	base := held()
	conns := make([]net.Conn, 0, streams)
	for i := range streams {
		conns = append(conns, open(i))
	}
	helloed(conns)
	got := (held() - base) / streams
	t.Logf("%d idle streams: %.1f KiB held each", streams, got)
	if got > idleStreamKiB {
		t.Fatalf("an idle stream holds %.1f KiB; want at most %d", got, idleStreamKiB)
	}
}

// Serve sets the runtime's heap limit from the budgets by default (their
// sum, a quarter of --max-read-bytes more for anonymous streams'
// selectors, 16 KiB per stream of --max-streams and --max-anonymous-streams
// and 64 MiB), as docs/operations.md says; --memory-limit sets another,
// and GOMEMLIMIT in the environment wins over auto.
func TestHeapLimitFollowsTheBudgets(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"defaults", nil, nil, fmt.Sprint(256<<20 + 64<<20 + 128<<20 + 64<<20 + (10000+5000)*16<<10 + 64<<20)},
		{"smaller budgets", nil, []string{"--max-read-bytes", "1000", "--max-publish-bytes", "2000", "--max-recent-bytes", "3000", "--max-streams", "1",
			"--max-anonymous-streams", "2"}, fmt.Sprint(6250 + 3*16<<10 + 64<<20)},
		{"given", nil, []string{"--memory-limit", "123456789"}, "123456789"},
		{"GOMEMLIMIT", []string{"GOMEMLIMIT=1GiB"}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startAt(t, binary, c.env, t.TempDir(), "127.0.0.1:0", append([]string{"--dev"}, c.args...)...)
			log := p.logText()
			got := ""
			if i := strings.Index(log, "msg=\"heap limit set\" bytes="); i >= 0 {
				got = strings.Fields(log[i+len("msg=\"heap limit set\" bytes="):])[0]
			}
			if got != c.want {
				t.Fatalf("heap limit %q, want %q:\n%s", got, c.want, log)
			}
		})
	}
}
