package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"edgehub/client"
	"edgehub/server"
)

// A live watch that has seen no event yet and loses its connection resumes
// from the position its hello gave, so an event published while it was
// away is not lost.
func TestWatchResumesFromHelloPositionBeforeAnyEvent(t *testing.T) {
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.Retry = true, t.TempDir(), 10*time.Millisecond
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Shutdown(context.Background()) //nolint:errcheck // teardown
	}()
	c := &client.Client{Server: ts.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hellos := 0
	var got []string
	err = c.Watch(ctx, "t", "x", client.WatchOptions{
		Reconnect: true,
		// Runs after the drop and before the reconnect: the event is
		// committed while the watcher is away.
		Notice: func(string) {
			if _, err := c.Publish(ctx, "t", "x", []byte(`"while away"`), client.PublishOptions{}); err != nil {
				t.Error(err)
			}
		},
	}, func(f client.Frame) error {
		switch f.Event {
		case "hello":
			if hellos++; hellos == 1 {
				ts.CloseClientConnections() // drop the first connection
			}
		case "message":
			got = append(got, f.ID)
			return io.EOF
		}
		return nil
	})
	if len(got) != 1 || got[0] != "1" {
		t.Fatalf("got %v (%v), want event 1", got, err)
	}
}
