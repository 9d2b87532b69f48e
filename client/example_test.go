package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/edgehub/edgehub/client"
	"github.com/edgehub/edgehub/server"
)

// runServer starts an Edgehub in dev mode (no credentials needed) on a
// loopback port with a temporary data directory, as `edgehub serve --dev`
// would, and returns its URL and how to stop it. adminKey, when given,
// turns the admin API on.
func runServer(adminKey string) (string, func()) {
	dir, err := os.MkdirTemp("", "edgehub-example")
	if err != nil {
		log.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Dev, cfg.Data, cfg.AdminKey = true, dir, adminKey
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		srv.Shutdown(context.Background())
		os.RemoveAll(dir)
	}
}

func ExampleClient_Publish() {
	url, stop := runServer("")
	defer stop()
	ctx := context.Background()
	c := &client.Client{Server: url}

	// Any value that encoding/json encodes is an event's data.
	r, err := c.Publish(ctx, "acme", "orders", map[string]any{"id": 17, "status": "paid"},
		client.PublishOptions{Type: "order.paid", IdempotencyKey: "order-17-paid"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Seq, r.Duplicate)

	// The same idempotency key again appends nothing and answers the
	// original's number: a publish whose answer was lost is safe to send
	// again.
	r, err = c.Publish(ctx, "acme", "orders", map[string]any{"id": 17, "status": "paid"},
		client.PublishOptions{Type: "order.paid", IdempotencyKey: "order-17-paid"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Seq, r.Duplicate)
	// Output:
	// 1 false
	// 1 true
}

func ExampleClient_PublishBatch() {
	url, stop := runServer("")
	defer stop()
	c := &client.Client{Server: url}

	// A batch is committed at once and numbered in order.
	r, err := c.PublishBatch(context.Background(), "acme", "orders",
		[]any{map[string]int{"id": 1}, map[string]int{"id": 2}, map[string]int{"id": 3}}, client.PublishOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d..%d (%d events)\n", r.First, r.Last, r.Count)
	// Output: 1..3 (3 events)
}

func ExampleClient_Watch() {
	url, stop := runServer("")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &client.Client{Server: url}
	for i := 1; i <= 3; i++ {
		if _, err := c.Publish(ctx, "acme", "orders", map[string]int{"id": i}, client.PublishOptions{}); err != nil {
			log.Fatal(err)
		}
	}

	// From after 0, the whole backlog, then live. Watch reconnects by
	// itself when the connection drops and resumes after the last event
	// it saw, so the loop sees each event once.
	after := int64(0)
	for e, err := range c.Watch(ctx, "acme", "orders", client.WatchOptions{
		After:   &after,
		OnHello: func(h client.Hello) { fmt.Println("connected at head", h.Head) },
		OnGap:   func(g client.Gap) { fmt.Printf("events %d..%d were removed by retention\n", g.From, g.To) },
		OnRetry: func(r client.Retry) { fmt.Println("reconnecting in", r.Delay, "after", r.Err) },
	}) {
		if err != nil {
			log.Fatal(err) // the context ended, or the server refused for good
		}
		fmt.Println(e.Seq, e.Type, string(e.Data))
		if e.Seq == 3 {
			break // closes the stream
		}
	}
	// Output:
	// connected at head 3
	// 1 message {"id":1}
	// 2 message {"id":2}
	// 3 message {"id":3}
}

func ExampleClient_Watch_snapshot() {
	url, stop := runServer("")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &client.Client{Server: url}
	// Keyed events make a topic's state: the latest data of each key.
	for _, status := range []string{"paid", "shipped"} {
		if _, err := c.Publish(ctx, "acme", "order-17", status, client.PublishOptions{Key: "status"}); err != nil {
			log.Fatal(err)
		}
	}

	// A snapshot watch starts with the state, then every event after it.
	for e, err := range c.Watch(ctx, "acme", "order-17", client.WatchOptions{
		Snapshot: true,
		OnSnapshot: func(s client.Snapshot) {
			fmt.Println("state at", s.Seq, "status", string(s.State["status"]))
			if _, err := c.Publish(ctx, "acme", "order-17", "delivered", client.PublishOptions{Key: "status"}); err != nil {
				log.Fatal(err)
			}
		},
	}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Seq, e.Key, e.Op, string(e.Data))
		break
	}
	// Output:
	// state at 2 status "shipped"
	// 3 status upsert "delivered"
}

func ExampleClient_Pages() {
	url, stop := runServer("")
	defer stop()
	ctx := context.Background()
	c := &client.Client{Server: url}
	events := make([]any, 250)
	for i := range events {
		events[i] = i
	}
	if _, err := c.PublishBatch(ctx, "acme", "log", events, client.PublishOptions{}); err != nil {
		log.Fatal(err)
	}

	// Pages follows the read route from a position to the head.
	n := 0
	for p, err := range c.Pages(ctx, "acme", "log", 0, 100) {
		if err != nil {
			log.Fatal(err)
		}
		n += len(p.Events)
		fmt.Println("page up to", p.NextAfter, "of", p.Head)
	}
	fmt.Println(n, "events")
	// Output:
	// page up to 100 of 250
	// page up to 200 of 250
	// page up to 250 of 250
	// 250 events
}

func ExampleClient_State() {
	url, stop := runServer("")
	defer stop()
	ctx := context.Background()
	c := &client.Client{Server: url}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.Publish(ctx, "acme", "flags", true, client.PublishOptions{Key: k}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx, "acme", "flags", nil, client.PublishOptions{Key: "b", Op: client.OpDelete}); err != nil {
		log.Fatal(err)
	}

	s, err := c.State(ctx, "acme", "flags")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Seq, len(s.State), string(s.State["a"]), string(s.State["c"]))
	// Output: 4 2 true true
}

func ExampleClient_CreateTenant() {
	url, stop := runServer(strings.Repeat("k", 32))
	defer stop()
	ctx := context.Background()
	admin := &client.Client{Server: url, AdminKey: strings.Repeat("k", 32)}

	t, created, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Name, created, strings.HasPrefix(t.WebhookSecret, "whsec_"))

	// A token for publishers of orders and readers of every topic.
	token, err := admin.MintToken(ctx, "acme", client.TokenRequest{
		Publish: []string{"orders"}, Subscribe: []string{"*"}, TTL: time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	c := &client.Client{Server: url, Token: token}
	r, err := c.Publish(ctx, "acme", "orders", "hello", client.PublishOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Seq)
	// Output:
	// acme true true
	// 1
}
