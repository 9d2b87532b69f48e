package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/pgtest"
)

// cluster starts n processes (dev mode, each with its own data directory)
// sharing one fresh Postgres database, whose URL it returns too. Their
// hubs never check their heads: what crosses between them crosses by
// hints, or these tests fail.
func cluster(t *testing.T, n int, args ...string) ([]*proc, string) {
	t.Helper()
	url := pgtest.Database(t)
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = start(t, t.TempDir(), append([]string{"--store", url, "--head-check", "0"}, args...)...)
	}
	return ps, url
}

// upTo reads a stream's events until seq last, failing on a gap, a hole,
// a duplicate or a reordering, and returns their data by seq, from
// after+1.
func (s *stream) upTo(t *testing.T, after, last int64) map[int64]string {
	t.Helper()
	got := map[int64]string{}
	for next := after + 1; next <= last; next++ {
		e := s.event(t)
		if e.Seq != next {
			t.Fatalf("stream after %d: got seq %d, want %d", after, e.Seq, next)
		}
		got[e.Seq] = string(e.Data)
	}
	return got
}

// publishSpread publishes n events per publisher to topic, each publisher
// going round the processes, and returns every answer's data by seq; once
// half are answered it calls half (in its own goroutine).
func publishSpread(t *testing.T, ps []*proc, topic string, publishers, n int, half func(answered int64)) map[int64]string {
	t.Helper()
	var mu sync.Mutex
	answered := map[int64]string{}
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < publishers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				body := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				seq, err := ps[(w+i)%len(ps)].tryPublish(topic, body)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := answered[seq]; dup {
					t.Errorf("seq %d answered twice: %s and %s", seq, prev, body)
				}
				answered[seq] = body
				count := int64(len(answered))
				mu.Unlock()
				if count == int64(publishers*n/2) && half != nil {
					once.Do(func() { go half(count) })
				}
			}
		}()
	}
	wg.Wait()
	return answered
}

// Publishers spread over three processes on one database make one
// sequence with no hole and no duplicate; watchers on every process, live
// from the start or opened at random positions while publishing goes on,
// each get exactly their range with the same data; a watcher that
// reconnects to another process with Last-Event-ID continues with no hole
// or duplicate.
func TestThreeProcessesShareOneSequence(t *testing.T) {
	ps, _ := cluster(t, 3)
	const publishers, each = 6, 40
	const total = publishers * each
	type watcher struct {
		s     *stream
		after int64
	}
	var mu sync.Mutex
	var watchers []watcher
	for _, p := range ps {
		s := p.watch(t, "x", "?after=0", nil)
		s.hello(t)
		watchers = append(watchers, watcher{s, 0})
	}
	opened := make(chan struct{})
	answered := publishSpread(t, ps, "x", publishers, each, func(n int64) {
		defer close(opened)
		for _, p := range ps {
			after := rand.Int64N(n + 1)
			s := p.watch(t, "x", fmt.Sprintf("?after=%d", after), nil)
			mu.Lock()
			watchers = append(watchers, watcher{s, after})
			mu.Unlock()
		}
	})
	<-opened
	if len(answered) != total {
		t.Fatalf("%d events answered, want %d", len(answered), total)
	}
	for seq := int64(1); seq <= total; seq++ {
		if _, ok := answered[seq]; !ok {
			t.Fatalf("no publish was answered with seq %d: the sequence has a hole", seq)
		}
	}
	for i, w := range watchers {
		if i >= len(ps) {
			w.s.hello(t)
		}
		got := w.s.upTo(t, w.after, total)
		for seq, data := range got {
			if data != answered[seq] {
				t.Fatalf("watcher %d: seq %d holds %s, answered %s", i, seq, data, answered[seq])
			}
		}
	}
	// A reconnect to another process, as behind a load balancer.
	first := ps[0].watch(t, "x", "?after=0", nil)
	first.hello(t)
	first.upTo(t, 0, total/2)
	first.close()
	second := ps[1].watch(t, "x", "", map[string]string{"Last-Event-ID": fmt.Sprint(total / 2)})
	if _, position := second.hello(t); position != total/2 {
		t.Fatalf("the reconnect starts at %d, want %d", position, total/2)
	}
	second.upTo(t, total/2, total)
	if seq := ps[2].publish(t, "x", `"next"`); seq != total+1 {
		t.Fatalf("the next publish got %d, want %d", seq, total+1)
	}
	if e := second.event(t); e.Seq != total+1 {
		t.Fatalf("the reconnected watcher got %d, want %d", e.Seq, total+1)
	}
}

// kill -9 of one of three processes while publishers run on all: no
// answered event is lost, a watcher of the killed process resumes on
// another with Last-Event-ID, and the next publish continues at head+1.
func TestKill9OfOneProcessOfThree(t *testing.T) {
	ps, _ := cluster(t, 3)
	victim := ps[0]
	w := victim.watch(t, "crash", "?after=0", nil)
	w.hello(t)
	const publishers, killAfter, stopAfter = 6, 300, 600
	var mu sync.Mutex
	answered := map[int64]string{}
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				target := ps[(p+i)%len(ps)]
				body := fmt.Sprintf(`{"p":%d,"i":%d}`, p, i)
				seq, err := target.tryPublish("crash", body)
				if err != nil {
					select {
					case <-killed:
						if target == victim {
							continue // never answered: the next goes to another process
						}
					default:
					}
					t.Errorf("publish to a live process: %v", err)
					return
				}
				mu.Lock()
				answered[seq] = body
				n := len(answered)
				mu.Unlock()
				if n >= killAfter {
					once.Do(func() {
						close(killed)
						victim.kill9()
					})
				}
				if n >= stopAfter {
					return
				}
			}
		}()
	}
	// The victim's watcher reads until its stream breaks.
	var last int64
	for f := range w.frames {
		var e envelope
		if f.Event == "message" && json.Unmarshal([]byte(f.Data), &e) == nil {
			if e.Seq != last+1 {
				t.Fatalf("the victim's watcher got %d after %d", e.Seq, last)
			}
			last = e.Seq
		}
	}
	wg.Wait()
	events, head := ps[1].readAnswered(t, "crash", answered)
	resumed := ps[2].watch(t, "crash", "", map[string]string{"Last-Event-ID": fmt.Sprint(last)})
	resumed.hello(t)
	got := resumed.upTo(t, last, head)
	for seq, data := range got {
		if data != string(events[seq-1].Data) {
			t.Fatalf("the resumed watcher got %s at %d, stored %s", data, seq, events[seq-1].Data)
		}
	}
	if seq := ps[1].publish(t, "crash", `"after the kill"`); seq != head+1 {
		t.Fatalf("the next publish got %d, want %d", seq, head+1)
	}
	t.Logf("%d answered, %d stored; the victim's watcher had %d when it was cut", len(answered), head, last)
}

// adminConn connects to the test's database as an operator would.
func adminConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// cutListeners terminates the hint listeners' backends and returns how
// many it cut.
func cutListeners(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, backlog.ListenerName).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// follow reads topic on p from after through last with the client, which
// reconnects with Last-Event-ID whenever its stream ends, as EventSource
// does. It fails on a gap, a hole, a duplicate or a reordering, calls
// each(seq) after each event, and returns the events' data by seq and how
// many streams it opened.
func follow(t *testing.T, p *proc, topic string, after, last int64, each func(seq int64)) (map[int64]string, int) {
	t.Helper()
	got := map[int64]string{}
	streams, pos := 0, after
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for e, err := range p.client().Watch(ctx, "acme", topic, client.WatchOptions{After: &after,
		OnHello: func(client.Hello) { streams++ },
		OnGap:   func(g client.Gap) { t.Errorf("after %d: gap %+v", pos, g); cancel() },
	}) {
		switch {
		case err != nil:
			t.Fatalf("following %s stopped after %d: %v", topic, pos, err)
		case e.Type != "message" || e.Seq != pos+1:
			t.Fatalf("after %d: got %+v", pos, e)
		}
		pos = e.Seq
		got[pos] = string(e.Data)
		if each != nil {
			each(pos)
		}
		if pos == last {
			break
		}
	}
	return got, streams
}

// Listener connections cut again and again under load lose nothing: the
// watcher of a process that only watches gets every event published on
// another, in order, once, reconnecting as EventSource does when a cut
// ends its stream.
func TestACutListenerLosesNothing(t *testing.T) {
	ps, url := cluster(t, 2, "--retry", "100ms") // the client's reconnects wait what the server says
	admin := adminConn(t, url)
	const n = 600
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			if _, err := ps[0].tryPublish("x", fmt.Sprintf(`{"i":%d}`, i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	cuts := 0
	got, streams := follow(t, ps[1], "x", 0, n, func(seq int64) {
		if seq%100 == 50 {
			cuts += cutListeners(t, admin)
		}
	})
	<-done
	for seq := int64(1); seq <= n; seq++ {
		if got[seq] != fmt.Sprintf(`{"i":%d}`, seq-1) {
			t.Fatalf("seq %d holds %s", seq, got[seq])
		}
	}
	if cuts == 0 {
		t.Fatal("no listener was cut")
	}
	t.Logf("%d listener connections cut while %d events went across on %d streams", cuts, n, streams)
}

// readyz answers the reason it is not ready: on a shared log the listener
// must be listening, or the process could miss other processes' commits.
func readyz(t *testing.T, p *proc) (int, string) {
	t.Helper()
	resp, err := http.Get(p.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string }
	}
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error.Message
}

// A process whose listener is down says it is not ready. Once it listens
// again it ends its streams (what it missed may have ended a tenant), and
// a reconnect with Last-Event-ID gets what was committed meanwhile.
func TestReadyOnlyWhileListening(t *testing.T) {
	ps, url := cluster(t, 2, "--retry", "100ms")
	admin := adminConn(t, url)
	if code, msg := readyz(t, ps[1]); code != 200 {
		t.Fatalf("a started process: readyz %d %s", code, msg)
	}
	w := ps[1].watch(t, "x", "?after=0", nil)
	w.hello(t)
	ps[0].publish(t, "x", `1`)
	w.upTo(t, 0, 1)
	ctx := context.Background()
	var db string
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	// A database's connections are switched off from another database's.
	cluster := adminConn(t, os.Getenv("EDGEHUB_TEST_POSTGRES"))
	if _, err := cluster.Exec(ctx, `ALTER DATABASE `+db+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if cutListeners(t, admin) != 2 {
		t.Fatal("want both processes' listeners cut")
	}
	for deadline := time.Now().Add(wait); ; {
		code, msg := readyz(t, ps[1])
		if code == 503 && strings.Contains(msg, "listening") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with its listener down, readyz says %d %s", code, msg)
		}
		time.Sleep(10 * time.Millisecond) // the listener notices its cut on its own
	}
	// ps[0] commits on a connection it already holds; ps[1] cannot hear it.
	ps[0].publish(t, "x", `2`)
	if _, err := cluster.Exec(ctx, `ALTER DATABASE `+db+` ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
	select {
	case f, ok := <-w.frames:
		if ok {
			t.Fatalf("the stream went on after its process listened again: %+v", f)
		}
	case <-time.After(wait):
		t.Fatal("the stream did not end once its process listened again")
	}
	for deadline := time.Now().Add(wait); ; {
		if code, _ := readyz(t, ps[1]); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not become ready again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, _ := follow(t, ps[1], "x", 1, 2, nil)
	if got[2] != `2` {
		t.Fatalf("the reconnect got %q at 2", got[2])
	}
}

// Deleting a tenant on one process ends its streams on the others, and so
// does rotating its secrets; the streams' reconnects are then refused.
func TestTenantEndsOnEveryProcess(t *testing.T) {
	url := pgtest.Database(t)
	const key = "scale-out-admin-key-0123456789abcdef"
	var ps []*proc
	for range 2 {
		ps = append(ps, startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0", "--store", url))
	}
	admin := func(p *proc, method, path, body string) (int, []byte) {
		st, _, b := do(t, method, p.base+"/v1/admin/tenants/"+path, key, body)
		return st, b
	}
	for _, c := range []struct {
		tenant, method, path string
		want                 int
	}{{"gone", "DELETE", "gone", 204}, {"rotated", "POST", "rotated/rotate", 200}} {
		if st, _ := admin(ps[0], "PUT", c.tenant, ""); st != 201 {
			t.Fatalf("create %s on the first process: %d", c.tenant, st)
		}
		st, b := admin(ps[1], "POST", c.tenant+"/tokens", `{"subscribe":["x"],"ttl":"10m"}`)
		var tok struct{ Token string }
		json.Unmarshal(b, &tok)
		if tok.Token == "" {
			t.Fatalf("no token for %s from the second process: %d", c.tenant, st)
		}
		req, _ := http.NewRequest("GET", ps[1].base+"/v1/tenants/"+c.tenant+"/topics/x/watch", nil)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		sresp, err := http.DefaultClient.Do(req)
		if err != nil || sresp.StatusCode != 200 {
			t.Fatalf("watch %s on the second process: %v %v", c.tenant, sresp, err)
		}
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			buf := make([]byte, 4096)
			for {
				if _, err := sresp.Body.Read(buf); err != nil {
					return
				}
			}
		}()
		if st, _ := admin(ps[0], c.method, c.path, ""); st != c.want {
			t.Fatalf("%s %s on the first process: %d", c.method, c.path, st)
		}
		select {
		case <-ended:
		case <-time.After(wait):
			t.Fatalf("the stream of %s on the second process did not end", c.tenant)
		}
		sresp.Body.Close()
		again, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if again.StatusCode != 401 {
			t.Fatalf("the reconnect of %s's stream with the old token: %d, want 401", c.tenant, again.StatusCode)
		}
	}
}

// What no Edgehub sends on the hint channel (another program's notices,
// or names that are not names) is skipped: the listener stays, so the
// streams go on and the process stays ready.
func TestAForeignHintIsSkipped(t *testing.T) {
	ps, url := cluster(t, 2)
	admin := adminConn(t, url)
	w := ps[1].watch(t, "x", "?after=0", nil)
	w.hello(t)
	for _, payload := range []string{"hello", "c other acme x 1", "c other acme x one 2", "t other ../etc", "c other acme ../x 1 1"} {
		if _, err := admin.Exec(context.Background(), `SELECT pg_notify('edgehub', $1)`, payload); err != nil {
			t.Fatal(err)
		}
	}
	ps[0].publish(t, "x", `1`)
	w.upTo(t, 0, 1)
	if code, msg := readyz(t, ps[1]); code != 200 {
		t.Fatalf("after foreign hints: readyz %d %s", code, msg)
	}
}
