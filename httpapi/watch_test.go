package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/server"
	"github.com/edgehub/edgehub/sse"
)

const wait = 10 * time.Second

func startServer(t *testing.T, hooks server.Hooks, tweak func(*server.Config)) string {
	_, url := startServerWith(t, hooks, tweak)
	return url
}

func startServerWith(t *testing.T, hooks server.Hooks, tweak func(*server.Config)) (*server.Server, string) {
	return startServerLogged(t, slog.New(slog.NewTextHandler(io.Discard, nil)), hooks, tweak)
}

func startServerLogged(t *testing.T, logger *slog.Logger, hooks server.Hooks, tweak func(*server.Config)) (*server.Server, string) {
	t.Helper()
	cfg := server.Defaults()
	cfg.Dev, cfg.Data = true, t.TempDir()
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := server.New(context.Background(), cfg, logger, hooks)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background())
	})
	return srv, ts.URL
}

func publish(t *testing.T, base, topic, body string) int64 {
	t.Helper()
	resp, err := http.Post(base+"/v1/tenants/t/topics/"+topic+"/notify", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct{ Seq int64 }
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish: %d %v", resp.StatusCode, err)
	}
	return ans.Seq
}

// frames reads a stream's frames into a channel.
func frames(t *testing.T, body io.Reader) <-chan sse.Frame {
	c := make(chan sse.Frame, 1024)
	go func() {
		defer close(c)
		d := sse.NewDecoder(body)
		for {
			f, err := d.Next()
			if err != nil {
				return
			}
			c <- f
		}
	}()
	return c
}

// openFrames opens a stream at base+path, which must answer 200, and
// returns its frames; the stream is closed when the test ends.
func openFrames(t *testing.T, base, path string) <-chan sse.Frame {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %v %v", path, resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return frames(t, resp.Body)
}

func next(t *testing.T, c <-chan sse.Frame) sse.Frame {
	t.Helper()
	select {
	case f, ok := <-c:
		if !ok {
			t.Fatal("stream ended")
		}
		return f
	case <-time.After(wait):
		t.Fatal("no frame")
		panic("unreachable")
	}
}

// The handler is held after its stream is registered and before the first
// byte goes out; an event published then must reach the stream. A stream
// registered only at its first flush, or registered at a head read before
// the publish committed but not put in the live set, would miss it.
func TestEventPublishedBetweenRegistrationAndFirstFlushArrives(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	base := startServer(t, server.Hooks{HTTP: httpapiHooks(func() {
		close(inside)
		<-release
	})}, nil)
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(base + "/v1/tenants/t/topics/x/watch")
		got <- result{resp, err}
	}()
	<-inside
	seq := publish(t, base, "x", `{"while":"held"}`)
	close(release)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()
	fc := frames(t, r.resp.Body)
	hello := next(t, fc)
	if hello.Event != "hello" || hello.Data != `{"head":0,"position":0}` {
		t.Fatalf("hello: %+v", hello)
	}
	ev := next(t, fc)
	if ev.ID != fmt.Sprint(seq) || !strings.Contains(ev.Data, `"data":{"while":"held"}`) {
		t.Fatalf("event: %+v", ev)
	}
}

func httpapiHooks(afterRegister func()) httpapi.Hooks {
	once := false
	return httpapi.Hooks{AfterRegister: func(string, string) {
		if !once {
			once = true
			afterRegister()
		}
	}}
}

// The hub takes a caught-up stream live and pushes an event to it before
// the stream reads the hub's answer: both the answer and the event's
// signal are waiting when it looks. Whichever it sees first, the event
// must be written. Each round holds the stream right after it asked; the
// select between the two is random, so twenty rounds leave a broken
// version about one chance in a million to pass.
func TestEventPushedBeforeGoLiveAnswerIsRead(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	base := startServer(t, server.Hooks{Hub: hub.Hooks{AfterGoLive: func(string, string) {
		inside <- struct{}{}
		<-release
	}}}, func(c *server.Config) { c.RecentEvents = -1 })
	for round := 0; round < 20; round++ {
		topic := fmt.Sprintf("golive-%d", round)
		publish(t, base, topic, `"backlog"`)
		resp, err := http.Get(base + "/v1/tenants/t/topics/" + topic + "/watch?after=0")
		if err != nil {
			t.Fatal(err)
		}
		fc := frames(t, resp.Body)
		<-inside // GoLive is in the hub's mailbox ahead of the next publish
		seq := publish(t, base, topic, `"pushed"`)
		release <- struct{}{}
		next(t, fc) // hello
		if f := next(t, fc); f.ID != "1" {
			t.Fatalf("round %d: got %+v, want event 1", round, f)
		}
		if f := next(t, fc); f.ID != fmt.Sprint(seq) {
			t.Fatalf("round %d: got %+v, want event %d", round, f, seq)
		}
		resp.Body.Close()
	}
}
