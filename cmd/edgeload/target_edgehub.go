package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// edgehub is the hub of this repository, run in dev mode on its own data
// directory, with the limits that would refuse the benchmark's load (the
// publish rate, stream and topic caps) turned off.
type edgehub struct {
	bin  string
	args []string // extra serve flags; later flags win
	proc *process
	addr string
}

var (
	edgehubListening = regexp.MustCompile(`msg=listening addr=(\S+)`)
	hubsActive       = regexp.MustCompile(`(?m)^edgehub_hubs_active (\S+)$`)
)

func (e *edgehub) Name() string         { return "edgehub" }
func (e *edgehub) Supports(string) bool { return true }
func (e *edgehub) PID() int             { return e.proc.pid() }

func (e *edgehub) Start(ctx context.Context, dir string) error {
	args := append([]string{"serve", "--dev", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--publish-rate", "0", "--max-streams", "0", "--max-tenant-streams", "0", "--max-tenant-topics", "0",
		"--idle-after", "3s"}, e.args...)
	p, addr, err := startProcess(ctx, dir, e.bin, edgehubListening, args...)
	if err != nil {
		return err
	}
	e.proc, e.addr = p, addr
	return nil
}

func (e *edgehub) Stop() error {
	return e.proc.stop()
}

func (e *edgehub) url(topic, route string) string {
	return "http://" + e.addr + "/v1/tenants/bench/topics/" + topic + "/" + route
}

func (e *edgehub) Publish(ctx context.Context, topic string, data []byte) (int64, error) {
	b, err := post(ctx, e.url(topic, "notify"), "application/json", nil, data)
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
	return watchLoop(ctx, e.addr, path, func(event, data []byte) error {
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

// HubsActive reads edgehub_hubs_active from /metrics.
func (e *edgehub) HubsActive(ctx context.Context) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.addr+"/metrics", nil)
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
