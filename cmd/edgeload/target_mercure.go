package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// mercure is a Mercure hub (the Caddy build of github.com/dunglas/mercure,
// `caddy/mercure` in its repository) that the user supplies, run with
// its bolt transport: every update is stored in a bolt file, committed
// (and so fsync'd) before the publish is answered, which makes it the
// durable peer. Subscribers are anonymous; publishers present an OAuth
// 2.0 JWT access token (RFC 9068: typ at+jwt, iss, aud, and an
// authorization_details entry granting publish on every topic), HS256
// with a key chosen for each start. Publishing is a form POST to
// /.well-known/mercure, answered with the update's id (a urn:uuid); a
// watch is a GET there with ?match=TOPIC, from the start of the history
// with last_event_id=earliest. Mercure has no batch API, so the batch
// scenario leaves it out and catchup publishes one by one.
type mercure struct {
	bin   string
	proc  *process
	addr  string
	token string // the publishers' Bearer token
}

// mercureIssuer is the iss of the publishers' tokens, which the hub
// trusts with the key of its start.
const mercureIssuer = "https://edgeload.invalid"

func (m *mercure) Name() string           { return "mercure" }
func (m *mercure) Supports(s string) bool { return mercureSupports(s) }

// mercureSupports says which scenarios a Mercure-protocol target runs:
// all but those of an API the protocol lacks (batches, tenant streams,
// Durable Streams).
func mercureSupports(s string) bool {
	return !isDSScenario(s) && s != "batch" && s != "tenant-idle"
}
func (m *mercure) PID() int { return m.proc.pid() }

// mercureCaddyfile is the hub's configuration: one loopback site, no
// HTTPS and no admin API, errors only in the log (as Centrifugo's), and
// the mercure handler with a bolt file in the run's directory. The
// resource identifier, which a token's aud must hold, is pinned to the
// hub's URL rather than derived from each request's Host.
func mercureCaddyfile(port int, boltFile, key string) string {
	hub := fmt.Sprintf("http://127.0.0.1:%d", port)
	return fmt.Sprintf(`{
	auto_https off
	admin off
	persist_config off
	grace_period 2s
	log {
		level ERROR
	}
}

%s {
	mercure {
		transport bolt {
			path %s
		}
		issuer %s {
			publisher {
				jwt %s HS256
			}
		}
		resource_identifier %s/.well-known/mercure
		anonymous
	}
	respond /healthz 200
	respond 404
}
`, hub, strconv.Quote(boltFile), mercureIssuer, key, hub)
}

// mercureToken is a publisher's access token for the hub at hubURL
// (its resource identifier), signed with key.
func mercureToken(hubURL string, key []byte) (string, error) {
	now := time.Now()
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iss":       mercureIssuer,
		"sub":       "edgeload",
		"client_id": "edgeload",
		"aud":       hubURL,
		"iat":       now.Unix(),
		"exp":       now.Add(24 * time.Hour).Unix(),
		"jti":       "edgeload-" + strconv.FormatInt(now.UnixNano(), 36),
		"authorization_details": []any{map[string]any{
			"type":    "https://mercure.rocks/authorization-detail",
			"actions": []string{"publish"},
			"topics":  []any{map[string]string{"match": "*"}},
		}},
	})
	t.Header["typ"] = "at+jwt"
	return t.SignedString(key)
}

func (m *mercure) Start(ctx context.Context, dir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	key := hex.EncodeToString(b)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(mercureCaddyfile(port, filepath.Join(dir, "mercure.db"), key)), 0o600); err != nil {
		return err
	}
	m.addr = "127.0.0.1:" + strconv.Itoa(port)
	if m.token, err = mercureToken("http://"+m.addr+"/.well-known/mercure", []byte(key)); err != nil {
		return err
	}
	// Caddy keeps its own state (certificates, locks, autosave) under the
	// XDG directories: the run's, not the user's.
	env := []string{"XDG_DATA_HOME=" + filepath.Join(dir, "caddy-data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "caddy-config")}
	p, _, err := startProcessEnv(ctx, dir, env, m.bin, nil, "run", "--config", file, "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	m.proc = p
	if err := waitReady(ctx, p, "http://"+m.addr+"/healthz"); err != nil {
		p.stop() //nolint:errcheck // it did not get ready; the error says why
		return err
	}
	return nil
}

func (m *mercure) Stop() error {
	return m.proc.stop()
}

// Publish posts one public update; the answer is its id, a urn:uuid, and
// no position.
func (m *mercure) Publish(ctx context.Context, topic string, data []byte) (int64, error) {
	id, err := mercurePublish(ctx, m.addr, m.token, topic, data)
	if err == nil && !strings.HasPrefix(id, "urn:uuid:") {
		err = fmt.Errorf("publish answered %.200q, not an update id", id)
	}
	return 0, err
}

func (m *mercure) PublishBatch(context.Context, string, [][]byte) ([]int64, error) {
	return nil, errNoBatch
}

// Watch subscribes anonymously to topic. The hub answers once the
// subscriber is registered with its transport (and, from the start, once
// the history is queued for it), so the response head is the sign that it
// is subscribed.
func (m *mercure) Watch(ctx context.Context, topic string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	return m.WatchQuery(ctx, "match="+url.QueryEscape(topic), fromStart, ready, deliver)
}

// WatchQuery subscribes anonymously with the selectors of query.
func (m *mercure) WatchQuery(ctx context.Context, query string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	got, err := mercureWatch(ctx, m.addr, query, fromStart, ready, deliver)
	if fromStart && errors.Is(err, errStreamEnded) {
		// The bolt transport queues a subscriber's history for it before
		// its stream begins, in a queue of 1000 updates, and drops a
		// subscriber whose history does not fit: the stream then ends
		// after those.
		return fmt.Errorf("%w after %d updates read from the start (Mercure queues a history for its subscriber, "+
			"at most 1000 updates, before the stream begins, and ends a stream whose history does not fit)", err, got)
	}
	return err
}

// mercurePublish posts an update of topic whose data is data to the
// Mercure hub at addr's /.well-known/mercure, with token unless it is
// empty, and returns the update's id.
func mercurePublish(ctx context.Context, addr, token, topic string, data []byte) (string, error) {
	form := url.Values{"topic": {topic}, "data": {string(data)}}
	var h http.Header
	if token != "" {
		h = http.Header{"Authorization": {"Bearer " + token}}
	}
	b, err := post(ctx, "http://"+addr+"/.well-known/mercure", "application/x-www-form-urlencoded", h, []byte(form.Encode()))
	return string(b), err
}

// mercureWatch subscribes anonymously at the Mercure hub at addr with the
// selectors of query, from the start of the history (earliest) or live,
// calls ready once the answer's head came, and deliver for each update,
// whose data is a payload; it returns how many it delivered.
func mercureWatch(ctx context.Context, addr, query string, fromStart bool, ready func(), deliver func(Delivery) error) (int64, error) {
	path := "/.well-known/mercure?" + query
	if fromStart {
		path += "&last_event_id=earliest"
	}
	var got int64
	err := watchLoopOpened(ctx, addr, path, ready, func(_, data []byte) error {
		at := time.Now().UnixNano()
		n, sent, ok := parsePayload(data)
		if !ok {
			return fmt.Errorf("unreadable update %q", data)
		}
		got++
		return deliver(Delivery{N: n, Sent: sent, At: at})
	})
	return got, err
}
