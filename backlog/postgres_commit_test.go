package backlog

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/pgtest"
)

// turns counts round trips on a connection: a write that follows a read
// (or is the connection's first) is the client's next turn to speak.
type turns struct {
	net.Conn
	n    *atomic.Int64
	mu   sync.Mutex
	read bool
	used bool
}

func (c *turns) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.read || !c.used {
		c.n.Add(1)
	}
	c.read, c.used = false, true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *turns) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.read = true
	c.mu.Unlock()
	return n, err
}

// openCounted opens a Postgres store whose write connections count their
// round trips into n.
func openCounted(t *testing.T, url string, n *atomic.Int64) *Store {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := openPostgres(context.Background(), url, logger, func(c *pgx.ConnConfig) {
		dial := c.DialFunc
		c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &turns{Conn: conn, n: n}, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// roundTripCases are commits of each kind, each after one like it (so
// that what a connection prepares once is prepared): name, the commit.
func roundTripCases() []struct {
	name string
	reqs func(i int) []*Publish
} {
	keyed := func(n int, key string) []event.Event {
		evs := events(n)
		for i := range evs {
			evs[i].Key, evs[i].Op = key, event.OpUpsert
		}
		return evs
	}
	itoa := func(i int) string { return string(rune('a' + i%26)) }
	return []struct {
		name string
		reqs func(i int) []*Publish
	}{
		{"one event", func(int) []*Publish { return []*Publish{{Tenant: "a", Topic: "x", Events: events(1)}} }},
		{"one event, new topic", func(i int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "new" + itoa(i) + itoa(i/26), Events: events(1)}}
		}},
		{"idempotency key", func(i int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "k" + itoa(i) + itoa(i/26), IdemHash: []byte{1}}}
		}},
		{"repeat of an idempotency key", func(int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "ka", IdemHash: []byte{1}}}
		}},
		{"webhook-id", func(i int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1), IdemKey: "w" + itoa(i) + itoa(i/26), IdemHash: []byte{1}, TenantWideKey: true}}
		}},
		{"keyed upsert", func(int) []*Publish { return []*Publish{{Tenant: "a", Topic: "x", Events: keyed(1, "k")}} }},
		{"batch of 100", func(int) []*Publish { return []*Publish{{Tenant: "a", Topic: "x", Batch: true, Events: events(100)}} }},
		{"16 requests on 4 topics, keys", func(i int) []*Publish {
			reqs := make([]*Publish, 16)
			for j := range reqs {
				reqs[j] = &Publish{Tenant: "a", Topic: "g" + itoa(j%4), Events: events(1),
					IdemKey: "g" + itoa(i) + itoa(i/26) + itoa(j), IdemHash: []byte{1}}
			}
			return reqs
		}},
		{"2 tenants", func(int) []*Publish {
			return []*Publish{{Tenant: "a", Topic: "x", Events: events(1)}, {Tenant: "b", Topic: "x", Events: events(1)}}
		}},
	}
}

// How many round trips each kind of commit takes on Postgres.
func TestRoundTripsPerCommit(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	var n atomic.Int64
	l := openCounted(t, pgtest.Database(t), &n)
	ctx := context.Background()
	for _, c := range roundTripCases() {
		// Warm every pooled connection up: each prepares its statements
		// once.
		for i := 0; i < 8; i++ {
			if _, err := l.CommitBatch(ctx, c.reqs(i)); err != nil {
				t.Fatal(err)
			}
		}
		n.Store(0)
		if _, err := l.CommitBatch(ctx, c.reqs(8)); err != nil {
			t.Fatal(err)
		}
		t.Logf("%-32s %d round trips", c.name, n.Load())
	}
}
