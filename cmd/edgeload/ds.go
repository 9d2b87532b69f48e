package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dsServer is a target that serves the Durable Streams protocol at
// /v1/stream/{name}: Edgehub (dev mode, tenant "streams") and the
// protocol's reference server. The ds-* scenarios run on these only.
type dsServer interface {
	// DSAddr is the host:port to send the next request to.
	DSAddr() string
}

func isDSScenario(s string) bool { return strings.HasPrefix(s, "ds-") }

func dsURL(t dsServer, name string) string {
	return "http://" + t.DSAddr() + "/v1/stream/" + url.PathEscape(name)
}

// dsDo sends one request and returns the answer, or an error for a status
// outside 2xx.
func dsDo(ctx context.Context, method, u, contentType string, body []byte) (http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := poster.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close() //nolint:errcheck // what can fail is the read, checked below
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, nil, fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.Header, b, nil
}

// dsCreate creates the JSON stream name.
func dsCreate(ctx context.Context, t dsServer, name string) error {
	_, _, err := dsDo(ctx, http.MethodPut, dsURL(t, name), "application/json", nil)
	return err
}

// dsAppend appends one JSON message and returns the Stream-Next-Offset
// the server answered with.
func dsAppend(ctx context.Context, t dsServer, name string, msg []byte) (string, error) {
	h, _, err := dsDo(ctx, http.MethodPost, dsURL(t, name), "application/json", msg)
	if err != nil {
		return "", err
	}
	off := h.Get("Stream-Next-Offset")
	if off == "" {
		return "", errors.New("append answered without Stream-Next-Offset")
	}
	return off, nil
}

// dsReadAll reads the whole stream from the start by catch-up reads (no
// live mode), page after page until the server says it is up to date,
// and returns the counters of the payloads in the order it read them.
func dsReadAll(ctx context.Context, t dsServer, name string) ([]int64, error) {
	var ns []int64
	offset := "-1"
	for range 100000 {
		h, b, err := dsDo(ctx, http.MethodGet, dsURL(t, name)+"?offset="+url.QueryEscape(offset), "", nil)
		if err != nil {
			return ns, err
		}
		ns = appendCounters(ns, b)
		next := h.Get("Stream-Next-Offset")
		if h.Get("Stream-Up-To-Date") == "true" || next == "" || next == offset {
			return ns, nil
		}
		offset = next
	}
	return ns, errors.New("the stream did not end")
}

// appendCounters adds the counter of every payload in b (a JSON array of
// messages, or a data line of one) to ns.
func appendCounters(ns []int64, b []byte) []int64 {
	for {
		i := bytes.Index(b, []byte(`{"n":`))
		if i < 0 {
			return ns
		}
		n, _, ok := parsePayload(b[i:])
		if !ok {
			return append(ns, 0) // counts as unexpected
		}
		ns = append(ns, n)
		b = b[i+len(`{"n":`):]
	}
}

// dsWatch is a target whose watches are Durable Streams SSE reads, so
// that the fan-out machinery (openWatchers, drain, settle) reads DS
// streams: from offset -1, ready at the first control event, a delivery
// for each message of each data event. A read the server ends (Edgehub
// ends each after --streams-sse-life) is resumed from the last control
// event's streamNextOffset, as the protocol's clients do.
type dsWatch struct {
	Target
	ds         dsServer
	reconnects atomic.Int64
}

func (w *dsWatch) Watch(ctx context.Context, name string, _ bool, ready func(), deliver func(Delivery) error) error {
	offset := "-1"
	for {
		path := "/v1/stream/" + url.PathEscape(name) + "?offset=" + url.QueryEscape(offset) + "&live=sse"
		err := watchLoop(ctx, w.ds.DSAddr(), path, func(event, data []byte) error {
			switch string(event) {
			case "control":
				off, ok := stringField(data, `"streamNextOffset":"`)
				if !ok {
					return fmt.Errorf("control event without streamNextOffset: %s", data)
				}
				offset = off
				ready()
				return nil
			case "data":
				at := time.Now().UnixNano()
				for b := data; ; {
					i := bytes.Index(b, []byte(`{"n":`))
					if i < 0 {
						break
					}
					n, sent, ok := parsePayload(b[i:])
					if !ok {
						return fmt.Errorf("unreadable message in %.200q", data)
					}
					if err := deliver(Delivery{N: n, Sent: sent, At: at}); err != nil {
						return err
					}
					b = b[i+len(`{"n":`):]
				}
				return nil
			}
			return nil
		})
		if !errors.Is(err, errStreamEnded) || ctx.Err() != nil {
			return err
		}
		w.reconnects.Add(1)
	}
}

// stringField reads the JSON string after key (such as `"offset":"`),
// which holds no escapes.
func stringField(b []byte, key string) (string, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return "", false
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// dsWarm creates a stream of its own and appends a few messages to it,
// so that a scenario does not time the first connection and stream.
func dsWarm(ctx context.Context, t dsServer) error {
	if err := dsCreate(ctx, t, "ds-warmup"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for i := range 20 {
		if _, err := dsAppend(ctx, t, "ds-warmup", payload(int64(i+1), "")); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// dsPad makes a message about 100 bytes.
var dsPad = strings.Repeat("x", 60)

// dsAppenders appends n JSON messages of about 100 bytes to one stream
// from c concurrent appenders, each waiting for its answer before it
// sends the next: appends a second and answer latency. Then it checks
// the answers (each a distinct Stream-Next-Offset, rising with one
// appender) and reads the stream back: every message once, and each
// appender's messages in the order it sent them.
func dsAppenders(ctx context.Context, target Target, c, n int) (*result, error) {
	t, ok := target.(dsServer)
	if !ok {
		return nil, fmt.Errorf("%s does not serve Durable Streams", target.Name())
	}
	if err := dsWarm(ctx, t); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("ds-append-%d", c)
	if err := dsCreate(ctx, t, name); err != nil {
		return nil, err
	}
	lat := make([][]int64, c)
	offs := make([][]string, c)
	writer := make([]int32, n+1) // the appender of each counter
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && failed.Load() == nil; i = next.Add(1) {
				writer[i] = int32(w)
				t0 := time.Now()
				off, err := dsAppend(ctx, t, name, payload(i, dsPad))
				if err != nil {
					failed.Store(&err)
					return
				}
				lat[w] = append(lat[w], int64(time.Since(t0)))
				offs[w] = append(offs[w], off)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	el := time.Since(start)
	r := newResult()
	r.metrics["appends_per_s"] = float64(n) / el.Seconds()
	r.latencies("", slices.Concat(lat...))
	checkOffsets(r.violations, offs)
	ns, err := dsReadAll(ctx, t, name)
	if err != nil {
		return r, fmt.Errorf("reading the stream back: %w", err)
	}
	checkReadBack(r.violations, ns, writer, int64(n))
	return r, nil
}

// checkOffsets holds the offsets the appends were answered with to one
// each, distinct, and rising (as strings: offsets sort) for each
// appender, whose appends wait for each other.
func checkOffsets(v violations, offs [][]string) {
	seen := map[string]bool{}
	for _, w := range offs {
		for i, o := range w {
			if seen[o] {
				v.add("answer_duplicate", 1)
			}
			seen[o] = true
			if i > 0 && o <= w[i-1] {
				v.add("answer_out_of_order", 1)
			}
		}
	}
}

// checkReadBack holds the counters read back to 1..n once each, each
// appender's (writer[n]) rising.
func checkReadBack(v violations, ns []int64, writer []int32, n int64) {
	tr := newTracker(n, false)
	last := map[int32]int64{}
	for _, x := range ns {
		tr.add(Delivery{N: x})
		if x < 1 || x > n {
			continue
		}
		w := writer[x]
		if x < last[w] {
			v.add("readback_out_of_order", 1)
		}
		last[w] = max(last[w], x)
	}
	v.add("readback_missing", tr.want-tr.got)
	v.add("readback_duplicate", tr.dup)
	v.add("readback_unexpected", tr.unknown)
}

// dsSSE opens readers SSE reads of one JSON stream from offset -1, then
// appends for d from one appender that sends rate messages a second on a
// fixed schedule, each once the previous one is answered (as fanout
// publishes): the latency from just before each append to its receipt at
// every reader, the appender's achieved rate, deliveries a second, and
// whether every reader got every message once, in order.
func dsSSE(ctx context.Context, target Target, readers, rate int, d time.Duration) (*result, error) {
	t, ok := target.(dsServer)
	if !ok {
		return nil, fmt.Errorf("%s does not serve Durable Streams", target.Name())
	}
	if err := dsWarm(ctx, t); err != nil {
		return nil, err
	}
	const name = "ds-sse"
	if err := dsCreate(ctx, t, name); err != nil {
		return nil, err
	}
	capacity := max(int64(d.Seconds()*float64(rate)), 1)
	var done sync.WaitGroup
	defer done.Wait() // after cancel, which is deferred later and so runs first
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dw := &dsWatch{Target: target, ds: t}
	opened := time.Now()
	ws, err := openWatchers(wctx, dw, readers, func(int) string { return name }, true, capacity, false, &done)
	if err != nil {
		return nil, err
	}
	openSeconds := time.Since(opened).Seconds()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var appended int64
	for appended < capacity && time.Since(start) < d {
		if wait := time.Until(start.Add(time.Duration(appended) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dsAppend(ctx, t, name, payload(appended+1, dsPad)); err != nil {
			return nil, err
		}
		appended++
	}
	appending := time.Since(start)
	drain(ctx, ws, appended, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // a duplicate after the last message still counts
	r := newResult()
	settle(r, ws, appended, cancel, &done)
	var last int64
	deliveries := 0
	for _, w := range ws {
		deliveries += int(w.track.got)
		last = max(last, w.last)
	}
	r.metrics["append_rate"] = float64(appended) / appending.Seconds()
	if last > 0 {
		r.metrics["deliveries_per_s"] = float64(deliveries) / (float64(last-start.UnixNano()) / 1e9)
	}
	r.metrics["open_s"] = openSeconds
	r.metrics["sse_reconnects"] = float64(dw.reconnects.Load())
	return r, nil
}
