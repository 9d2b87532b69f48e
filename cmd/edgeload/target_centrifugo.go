package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// centrifugo is the Centrifugo v6 binary the user supplies, with its
// in-memory engine. Publishers use its server HTTP API (/api/publish,
// /api/batch); watchers its unidirectional SSE transport
// (/connection/uni_sse) in insecure client mode, where the connect
// request's subs subscribe the stream server-side. Every channel keeps a
// history (as Edgehub keeps a backlog) with recovery forced on, so a
// stream that connects with recover from offset 0 gets the whole history
// in its connect push, then live publications.
type centrifugo struct {
	bin  string
	proc *process
	addr string
}

const (
	centrifugoAPIKey  = "edgeload-bench"
	centrifugoHistory = 1000000
)

func (c *centrifugo) Name() string { return "centrifugo" }
func (c *centrifugo) Supports(s string) bool {
	return !isDSScenario(s) && !isMercureScenario(s) && s != "tenant-idle"
}
func (c *centrifugo) PID() int { return c.proc.pid() }

// centrifugoConfig is the configuration file (v6 key names). History is
// per channel: 1,000,000 publications for an hour, like Edgehub's default
// retention of 1,000,000 events; a recovery may return all of it (0 would
// mean the default of 300, not "no limit"), and a connection's queue may
// hold a whole recovered history.
func centrifugoConfig(port int) map[string]any {
	return map[string]any{
		"http_server": map[string]any{"address": "127.0.0.1", "port": port},
		"log":         map[string]any{"level": "error"},
		"engine":      map[string]any{"type": "memory"},
		"client": map[string]any{
			"insecure":                       true,
			"recovery_max_publication_limit": centrifugoHistory,
			"history_max_publication_limit":  centrifugoHistory,
			"queue_max_size":                 1 << 30,
		},
		"http_api":    map[string]any{"key": centrifugoAPIKey},
		"uni_sse":     map[string]any{"enabled": true},
		"health":      map[string]any{"enabled": true},
		"usage_stats": map[string]any{"disabled": true},
		"channel": map[string]any{"without_namespace": map[string]any{
			"history_size":   centrifugoHistory,
			"history_ttl":    "1h",
			"force_recovery": true,
		}},
	}
}

func (c *centrifugo) Start(ctx context.Context, dir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	cfg, err := json.MarshalIndent(centrifugoConfig(port), "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "centrifugo.json")
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		return err
	}
	p, _, err := startProcess(ctx, dir, c.bin, nil, "--config", file)
	if err != nil {
		return err
	}
	c.proc, c.addr = p, "127.0.0.1:"+strconv.Itoa(port)
	if err := waitReady(ctx, p, "http://"+c.addr+"/health"); err != nil {
		p.stop() //nolint:errcheck // it did not get ready; the error says why
		return err
	}
	return nil
}

func (c *centrifugo) Stop() error {
	return c.proc.stop()
}

var centrifugoHeader = http.Header{"X-Api-Key": {centrifugoAPIKey}}

type centrifugoPublish struct {
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

type centrifugoError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (c *centrifugo) Publish(ctx context.Context, topic string, data []byte) (int64, error) {
	body, err := json.Marshal(centrifugoPublish{Channel: topic, Data: data})
	if err != nil {
		return 0, err
	}
	b, err := post(ctx, "http://"+c.addr+"/api/publish", "application/json", centrifugoHeader, body)
	if err != nil {
		return 0, err
	}
	var a struct {
		Error  *centrifugoError
		Result struct{ Offset int64 }
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return 0, err
	}
	if a.Error != nil {
		return 0, fmt.Errorf("publish: %d %s", a.Error.Code, a.Error.Message)
	}
	return a.Result.Offset, nil
}

// PublishBatch sends the publishes as one /api/batch request, which runs
// its commands in order (it is not atomic).
func (c *centrifugo) PublishBatch(ctx context.Context, topic string, data [][]byte) ([]int64, error) {
	type command struct {
		Publish centrifugoPublish `json:"publish"`
	}
	cmds := make([]command, len(data))
	for i, d := range data {
		cmds[i].Publish = centrifugoPublish{Channel: topic, Data: d}
	}
	body, err := json.Marshal(map[string]any{"commands": cmds})
	if err != nil {
		return nil, err
	}
	b, err := post(ctx, "http://"+c.addr+"/api/batch", "application/json", centrifugoHeader, body)
	if err != nil {
		return nil, err
	}
	var a struct {
		Error   *centrifugoError
		Replies []struct {
			Error   *centrifugoError
			Publish struct{ Offset int64 }
		}
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	if a.Error != nil {
		return nil, fmt.Errorf("batch: %d %s", a.Error.Code, a.Error.Message)
	}
	if len(a.Replies) != len(data) {
		return nil, fmt.Errorf("batch of %d answered %d replies", len(data), len(a.Replies))
	}
	pos := make([]int64, len(data))
	for i, r := range a.Replies {
		if r.Error != nil {
			return nil, fmt.Errorf("batch command %d: %d %s", i, r.Error.Code, r.Error.Message)
		}
		pos[i] = r.Publish.Offset
	}
	return pos, nil
}

// Watch connects with the channel in the connect request's subs: with
// recover from offset 0 (and no epoch, which means the current one) for
// the whole history, or without recover to be live from now. The connect
// push comes once the subscription is in place, holding the recovered
// publications; each later publication is a push of its own.
func (c *centrifugo) Watch(ctx context.Context, topic string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	sub := map[string]any{}
	if fromStart {
		sub = map[string]any{"recover": true, "offset": 0}
	}
	connect, err := json.Marshal(map[string]any{"subs": map[string]any{topic: sub}})
	if err != nil {
		return err
	}
	path := "/connection/uni_sse?cf_connect=" + url.QueryEscape(string(connect))
	return watchLoop(ctx, c.addr, path, func(_, data []byte) error {
		switch {
		case bytes.HasPrefix(data, []byte(`{"channel":`)):
			at := time.Now().UnixNano()
			if !bytes.Contains(data, []byte(`"pub":`)) {
				return nil // join, leave and the like
			}
			n, sent, ok := parsePayload(data)
			if !ok {
				return fmt.Errorf("unreadable publication %q", data)
			}
			off, _ := intField(data, `"offset":`)
			return deliver(Delivery{Pos: off, N: n, Sent: sent, At: at})
		case bytes.HasPrefix(data, []byte(`{"connect":`)):
			return c.connected(data, topic, fromStart, ready, deliver)
		case bytes.Equal(data, []byte(`{}`)):
			return nil // ping
		}
		return fmt.Errorf("centrifugo sent %.300s", data)
	})
}

func (c *centrifugo) connected(data []byte, topic string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	at := time.Now().UnixNano()
	var push struct {
		Connect struct {
			Subs map[string]struct {
				Recovered    bool
				Publications []struct {
					Data   json.RawMessage
					Offset int64
				}
			}
		}
	}
	if err := json.Unmarshal(data, &push); err != nil {
		return fmt.Errorf("connect push: %w", err)
	}
	sub, ok := push.Connect.Subs[topic]
	if !ok {
		return fmt.Errorf("connected without a subscription to %s: %.300s", topic, data)
	}
	ready()
	if fromStart && !sub.Recovered {
		return fmt.Errorf("connected from offset 0 but not recovered")
	}
	for _, p := range sub.Publications {
		n, sent, ok := parsePayload(p.Data)
		if !ok {
			return fmt.Errorf("unreadable recovered publication %q", p.Data)
		}
		if err := deliver(Delivery{Pos: p.Offset, N: n, Sent: sent, At: at}); err != nil {
			return err
		}
	}
	return nil
}
