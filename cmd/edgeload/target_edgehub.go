package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// edgehub is the hub of this repository, run in dev mode on its own data
// directory, with the limits that would refuse the benchmark's load (the
// publish rate, stream and topic caps) turned off. With a Postgres
// cluster it runs procs processes sharing a fresh database on it, and
// spreads publishes and watches over them in turn, as a load balancer
// would.
type edgehub struct {
	name    string
	bin     string
	args    []string // extra serve flags; later flags win
	cluster string   // a Postgres cluster's URL; empty for SQLite
	procs   int      // processes on the cluster's database
	db      *database
	running []*process
	addrs   []string
	next    atomic.Uint64
}

var (
	edgehubListening = regexp.MustCompile(`msg=listening addr=(\S+)`)
	hubsActive       = regexp.MustCompile(`(?m)^edgehub_hubs_active (\S+)$`)
)

func (e *edgehub) Name() string           { return e.name }
func (e *edgehub) Supports(s string) bool { return !isMercureScenario(s) }

// PID is the first process's: memory is reported per process.
func (e *edgehub) PID() int { return e.running[0].pid() }

func (e *edgehub) Start(ctx context.Context, dir string) error {
	args := []string{"serve", "--dev", "--addr", "127.0.0.1:0",
		"--publish-rate", "0", "--max-streams", "0", "--max-tenant-streams", "0", "--max-tenant-topics", "0",
		// One load generator is one client address: the caps on streams
		// without a token (edgehub-mercure's subscribers) are lifted as
		// the others are.
		"--max-anonymous-streams", "0", "--max-tenant-anonymous-streams", "0", "--max-client-anonymous-streams", "0",
		"--idle-after", "3s"}
	if e.cluster != "" {
		db, err := createDatabase(ctx, e.cluster)
		if err != nil {
			return err
		}
		e.db = db
		args = append(args, "--store", db.url)
	}
	e.running, e.addrs = nil, nil
	for i := range max(1, e.procs) {
		pdir := filepath.Join(dir, fmt.Sprint("p", i))
		if err := os.MkdirAll(pdir, 0o700); err != nil {
			return errors.Join(err, e.Stop())
		}
		p, addr, err := startProcess(ctx, pdir, e.bin, edgehubListening,
			append(append(slices.Clone(args), "--data", filepath.Join(pdir, "data")), e.args...)...)
		if err != nil {
			return errors.Join(err, e.Stop())
		}
		e.running, e.addrs = append(e.running, p), append(e.addrs, addr)
	}
	return nil
}

func (e *edgehub) Stop() error {
	var errs []error
	for _, p := range e.running {
		errs = append(errs, p.stop())
	}
	if e.db != nil {
		errs = append(errs, e.db.drop())
		e.db = nil
	}
	return errors.Join(errs...)
}

// addr is the next process's address, in turn.
func (e *edgehub) addr() string {
	return e.addrs[int(e.next.Add(1)%uint64(len(e.addrs)))]
}

// DSAddr is where the next Durable Streams request goes: the dev mode's
// streams, of tenant "streams", at /v1/stream/{name}.
func (e *edgehub) DSAddr() string { return e.addr() }

func (e *edgehub) url(topic, route string) string {
	return "http://" + e.addr() + "/v1/tenants/bench/topics/" + topic + "/" + route
}

func (e *edgehub) Publish(ctx context.Context, topic string, data []byte) (int64, error) {
	return e.publish(ctx, e.url(topic, "notify"), data)
}

// Procs is how many processes serve the hub.
func (e *edgehub) Procs() int { return len(e.addrs) }

// PublishTenant publishes to a tenant's topic on process proc: in dev
// mode every tenant exists.
func (e *edgehub) PublishTenant(ctx context.Context, proc int, tenant, topic string, data []byte) (int64, error) {
	return e.publish(ctx, "http://"+e.addrs[proc]+"/v1/tenants/"+tenant+"/topics/"+topic+"/notify", data)
}

func (e *edgehub) publish(ctx context.Context, u string, data []byte) (int64, error) {
	b, err := post(ctx, u, "application/json", nil, data)
	if err != nil {
		return 0, err
	}
	seq, ok := intField(b, `"seq":`)
	if !ok {
		return 0, fmt.Errorf("publish answer without seq: %s", b)
	}
	return seq, nil
}

func (e *edgehub) PublishBatch(ctx context.Context, topic string, data [][]byte) ([]int64, error) {
	body := bytes.Join(data, []byte("\n"))
	b, err := post(ctx, e.url(topic, "notify"), "application/x-ndjson", nil, body)
	if err != nil {
		return nil, err
	}
	first, ok1 := intField(b, `"first":`)
	last, ok2 := intField(b, `"last":`)
	if !ok1 || !ok2 || last-first+1 != int64(len(data)) {
		return nil, fmt.Errorf("batch of %d answered %s", len(data), b)
	}
	pos := make([]int64, len(data))
	for i := range pos {
		pos[i] = first + int64(i)
	}
	return pos, nil
}

func (e *edgehub) Watch(ctx context.Context, topic string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	path := "/v1/tenants/bench/topics/" + topic + "/watch"
	if fromStart {
		path += "?after=0"
	}
	return watchLoop(ctx, e.addr(), path, func(event, data []byte) error {
		switch string(event) {
		case "hello":
			ready()
			return nil
		case "gap":
			return fmt.Errorf("gap frame %s", data)
		}
		at := time.Now().UnixNano()
		seq, ok := intField(data, `{"seq":`)
		n, sent, ok2 := parsePayload(data)
		if !ok || !ok2 {
			return fmt.Errorf("unreadable event %q", data)
		}
		return deliver(Delivery{Pos: seq, N: n, Sent: sent, At: at})
	})
}

// WatchTenant opens one tenant stream of the bench tenant with query (its
// selectors), live from now, and calls ready once it is registered; any
// event it is sent is an error (tenant-idle's streams select none).
func (e *edgehub) WatchTenant(ctx context.Context, query string, ready func()) error {
	return watchLoop(ctx, e.addr(), "/v1/tenants/bench/watch?"+query, func(event, data []byte) error {
		if string(event) == "hello" {
			ready()
			return nil
		}
		return fmt.Errorf("an idle tenant stream was sent %s %s", event, data)
	})
}

// HubsActive reads edgehub_hubs_active from the first process's /metrics.
func (e *edgehub) HubsActive(ctx context.Context) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.addrs[0]+"/metrics", nil)
	resp, err := poster.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close() //nolint:errcheck // a failed read shows as a missing series
	b, _ := io.ReadAll(resp.Body)
	m := hubsActive.FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no edgehub_hubs_active in /metrics")
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// database is a fresh database on a Postgres cluster, for one run of a
// target.
type database struct {
	cluster, name, url string
}

func createDatabase(ctx context.Context, cluster string) (*database, error) {
	u, err := url.Parse(cluster)
	if err != nil {
		return nil, fmt.Errorf("--postgres: %w", err)
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	d := &database{cluster: cluster, name: "edgeload_" + hex.EncodeToString(b)}
	if err := d.admin(ctx, "CREATE DATABASE "+d.name); err != nil {
		return nil, err
	}
	u.Path = "/" + d.name
	d.url = u.String()
	return d, nil
}

func (d *database) drop() error {
	return d.admin(context.Background(), "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)")
}

func (d *database) admin(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, d.cluster)
	if err != nil {
		return fmt.Errorf("connect to --postgres: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx)) //nolint:errcheck // an administrative connection
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}
