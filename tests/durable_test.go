package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	durablestreams "github.com/durable-streams/durable-streams/packages/client-go"

	"github.com/edgehub/edgehub/client"
)

// The Durable Streams protocol's own Go client (its module on the Go
// module proxy, v0.1.0, standard library only) against the real binary,
// and Edgehub's own Go client watching the same streams as native topics
// (dev mode: tenant "streams"): both must see what the protocol's client
// appended, each once, in order, across a kill -9 of the server.

// dsOffset is the offset after event seq.
func dsOffset(seq int) durablestreams.Offset {
	return durablestreams.Offset(fmt.Sprintf("%016d_0000000000000000", seq))
}

// dsReader follows a stream with the protocol's client and keeps every
// chunk's data. The iterator keeps its offset across errors: after one (the
// server went away), Next is called again and resumes from where the
// iterator was, which is how the client is used to ride out an outage.
type dsReader struct {
	mu     sync.Mutex
	chunks [][]byte
	last   durablestreams.Offset
	errs   int
}

func dsFollow(ctx context.Context, s *durablestreams.Stream, mode durablestreams.LiveMode) *dsReader {
	r := &dsReader{}
	it := s.Read(ctx, durablestreams.WithLive(mode), durablestreams.WithReadTimeout(5*time.Second))
	go func() {
		defer it.Close()
		for ctx.Err() == nil {
			c, err := it.Next()
			if err != nil {
				r.mu.Lock()
				r.errs++
				r.mu.Unlock()
				select { // the server is away: try again shortly
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			r.mu.Lock()
			if len(c.Data) > 0 {
				r.chunks = append(r.chunks, c.Data)
			}
			r.last = c.NextOffset
			r.mu.Unlock()
		}
	}()
	return r
}

// items is what a JSON-mode reader got: each chunk is a JSON array.
func (r *dsReader) items(t *testing.T) []map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []map[string]any
	for _, c := range r.chunks {
		var batch []map[string]any
		if err := json.Unmarshal(c, &batch); err != nil {
			t.Fatalf("chunk %q: %v", c, err)
		}
		all = append(all, batch...)
	}
	return all
}

func (r *dsReader) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.chunks, nil)
}

func (r *dsReader) offset() durablestreams.Offset {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// nativeWatch watches streams/<name> with Edgehub's client from its start.
type nativeWatch struct {
	mu     sync.Mutex
	events []client.Event
}

func watchNative(ctx context.Context, base, name string) *nativeWatch {
	w := &nativeWatch{}
	zero := int64(0)
	c := &client.Client{Server: base}
	go func() {
		for e, err := range c.Watch(ctx, "streams", name, client.WatchOptions{After: &zero}) {
			if err != nil {
				return
			}
			w.mu.Lock()
			w.events = append(w.events, e)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *nativeWatch) got() []client.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

// eventually waits, bounded, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dsMsg(n int) map[string]any {
	return map[string]any{"n": float64(n), "text": fmt.Sprintf("message %d", n)}
}

func TestDurableGoClientJSONAcrossKill9(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds := durablestreams.NewClient(durablestreams.WithRetryPolicy(durablestreams.RetryPolicy{
		MaxRetries: 3, InitialDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Multiplier: 2}))
	s := ds.Stream(p.base + "/v1/stream/go-json")
	if err := s.Create(ctx, durablestreams.WithContentType("application/json")); err != nil {
		t.Fatal(err)
	}
	native := watchNative(ctx, p.base, "go-json")

	// One append, then a batch: a JSON array, which the server flattens
	// into one event each. (The client's BatchedStream is not used: in
	// v0.1.0 it sends its POST without a Content-Type, which the protocol
	// answers 400.) Stream-Seq: a writer's sequence must grow.
	res, err := s.AppendJSON(ctx, dsMsg(1), durablestreams.WithSeq("0001"))
	if err != nil {
		t.Fatal(err)
	}
	if res.NextOffset != dsOffset(1) {
		t.Fatalf("after the first append: offset %s, want %s", res.NextOffset, dsOffset(1))
	}
	if _, err := s.AppendJSON(ctx, dsMsg(99), durablestreams.WithSeq("0001")); !errors.Is(err, durablestreams.ErrSeqConflict) {
		t.Fatalf("a repeated Stream-Seq: %v, want ErrSeqConflict", err)
	}
	batch := []any{dsMsg(2), dsMsg(3), dsMsg(4), dsMsg(5), dsMsg(6)}
	if res, err = s.AppendJSON(ctx, batch, durablestreams.WithSeq("0002")); err != nil {
		t.Fatal(err)
	}
	if res.NextOffset != dsOffset(6) {
		t.Fatalf("after the batch: offset %s, want %s", res.NextOffset, dsOffset(6))
	}

	// Catch-up only.
	it := s.Read(ctx)
	var caught []map[string]any
	for {
		c, err := it.Next()
		if errors.Is(err, durablestreams.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var batch []map[string]any
		if err := json.Unmarshal(c.Data, &batch); err != nil {
			t.Fatal(err)
		}
		caught = append(caught, batch...)
		if c.UpToDate {
			break
		}
	}
	it.Close()
	want := func(to int) []map[string]any {
		var w []map[string]any
		for n := 1; n <= to; n++ {
			w = append(w, dsMsg(n))
		}
		return w
	}
	if !slices.EqualFunc(caught, want(6), mapsEqual) {
		t.Fatalf("catch-up: %v", caught)
	}
	if meta, err := s.Head(ctx); err != nil || meta.NextOffset != dsOffset(6) || meta.ContentType != "application/json" {
		t.Fatalf("HEAD: %+v %v", meta, err)
	}

	readers := map[durablestreams.LiveMode]*dsReader{
		durablestreams.LiveModeLongPoll: dsFollow(ctx, s, durablestreams.LiveModeLongPoll),
		durablestreams.LiveModeSSE:      dsFollow(ctx, s, durablestreams.LiveModeSSE),
	}
	caughtUp := func(n int) func() bool {
		return func() bool {
			for _, r := range readers {
				if r.offset() != dsOffset(n) {
					return false
				}
			}
			return len(native.got()) >= n
		}
	}
	eventually(t, "readers at 6", caughtUp(6))
	for n := 7; n <= 9; n++ {
		if _, err := s.AppendJSON(ctx, dsMsg(n)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "readers at 9", caughtUp(9))

	// kill -9 while they follow; again on the same port and data.
	p.kill9()
	_ = startAt(t, binary, nil, dir, strings.TrimPrefix(p.base, "http://"), "--dev")
	for n := 10; n <= 12; n++ {
		if _, err := s.AppendJSON(ctx, dsMsg(n)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "readers at 12 after the restart", caughtUp(12))

	for mode, r := range readers {
		if got := r.items(t); !slices.EqualFunc(got, want(12), mapsEqual) {
			t.Errorf("%s: got %v, want 1..12 once each, in order", mode, got)
		}
		t.Logf("%s: %d read errors across the kill, each retried from the iterator's offset", mode, r.errs)
	}
	events := native.got()
	if len(events) != 12 {
		t.Fatalf("native watcher: %d events, want 12", len(events))
	}
	for i, e := range events {
		var m map[string]any
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(i+1) || e.Type != "message" || !mapsEqual(m, dsMsg(i+1)) {
			t.Errorf("native event %d: seq %d type %s data %s", i, e.Seq, e.Type, e.Data)
		}
	}
}

func TestDurableGoClientBytesAreBase64ForNativeWatchers(t *testing.T) {
	p := start(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := durablestreams.NewClient().Stream(p.base + "/v1/stream/go-bytes")
	if err := s.Create(ctx, durablestreams.WithContentType("application/octet-stream")); err != nil {
		t.Fatal(err)
	}
	native := watchNative(ctx, p.base, "go-bytes")
	// The client's SSE does not decode base64 (v0.1.0), so bytes are read
	// by long-poll, as its LiveModeAuto would choose.
	r := dsFollow(ctx, s, durablestreams.LiveModeLongPoll)
	appends := [][]byte{{0x00, 0x01, 0xff, 0xfe}, []byte("plain text\n"), {0xc3, 0x28, 0x00, 0x0a}, bytes.Repeat([]byte{0x80}, 300)}
	for _, a := range appends {
		if _, err := s.Append(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	all := bytes.Join(appends, nil)
	eventually(t, "the reader at the tail", func() bool { return r.offset() == dsOffset(len(appends)) })
	eventually(t, "the native watcher", func() bool { return len(native.got()) >= len(appends) })
	if got := r.bytes(); !bytes.Equal(got, all) {
		t.Fatalf("long-poll read %x, want %x", got, all)
	}

	// Edgehub's client gets one event per append, its data a JSON string
	// holding the bytes in base64. (client.Event has no field for the
	// envelope's "encoding", so the wire envelope is checked below.)
	for i, e := range native.got() {
		var b64 string
		if err := json.Unmarshal(e.Data, &b64); err != nil {
			t.Fatalf("native event %d: data %s is not a string: %v", i, e.Data, err)
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(i+1) || !bytes.Equal(got, appends[i]) {
			t.Errorf("native event %d: seq %d bytes %x, want seq %d bytes %x", i, e.Seq, got, i+1, appends[i])
		}
	}
	resp, err := http.Get(p.base + "/v1/tenants/streams/topics/go-bytes/events?after=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Events []struct {
			Seq      int64  `json:"seq"`
			Encoding string `json:"encoding"`
			Data     string `json:"data"`
		} `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != len(appends) {
		t.Fatalf("%d envelopes, want %d", len(page.Events), len(appends))
	}
	for i, e := range page.Events {
		if e.Encoding != "base64" || e.Data != base64.StdEncoding.EncodeToString(appends[i]) {
			t.Errorf("envelope %d: encoding %q data %q", i, e.Encoding, e.Data)
		}
	}
}

func mapsEqual(a, b map[string]any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
