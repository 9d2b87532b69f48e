package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/client"
)

// publishKeyed upserts or deletes a key and returns the sequence number.
func (p *proc) publishKeyed(t *testing.T, topic, key, op, body string) int64 {
	t.Helper()
	r, err := p.client().Publish(context.Background(), "acme", topic, []byte(body), client.PublishOptions{Key: key, Op: op})
	if err != nil {
		t.Errorf("publish %s %s: %v", op, key, err)
		return 0
	}
	return r.Seq
}

// fold computes a topic's state from its events, as a client would.
func fold(events []envelope, through int64) map[string]json.RawMessage {
	st := map[string]json.RawMessage{}
	for _, e := range events {
		if e.Seq > through {
			break
		}
		switch e.Op {
		case "upsert":
			st[e.Key] = e.Data
		case "delete":
			delete(st, e.Key)
		}
	}
	return st
}

func normalize(t *testing.T, m map[string]json.RawMessage) map[string]any {
	t.Helper()
	out := map[string]any{}
	for k, v := range m {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			t.Fatal(err)
		}
		out[k] = x
	}
	return out
}

// Snapshots taken while four publishers upsert and delete keys each equal
// the fold of events 1..S read back from the log, and each stream goes on
// at S+1 with no hole or duplicate.
func TestSnapshotUnderLoadEqualsFoldAndContinuesAtNext(t *testing.T) {
	p := start(t, t.TempDir())
	const publishers, perPublisher, keys, snapshots = 4, 150, 12, 8
	seed := testSeed(t)
	var wg sync.WaitGroup
	for w := 0; w < publishers; w++ {
		rnd := newRand(seed, 1+uint64(w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perPublisher; i++ {
				key := fmt.Sprintf("k%d", rnd.IntN(keys))
				if rnd.IntN(4) == 0 {
					p.publishKeyed(t, "state", key, "delete", "")
				} else {
					p.publishKeyed(t, "state", key, "", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
				}
			}
		}()
	}
	streams := make([]*stream, 0, snapshots)
	rnd := newRand(seed, 0)
	for i := 0; i < snapshots; i++ {
		streams = append(streams, p.watch(t, "state", "?snapshot=1", nil))
		time.Sleep(time.Duration(rnd.IntN(20)) * time.Millisecond) // spread the snapshots over the run
	}
	wg.Wait()
	total := int64(publishers * perPublisher)
	events, head := p.readAll(t, "state")
	if head != total {
		t.Fatalf("head %d, want %d", head, total)
	}
	for i, s := range streams {
		_, pos := s.hello(t)
		f := s.next(t)
		var snap struct {
			Seq   int64
			State map[string]json.RawMessage
		}
		if f.Event != "snapshot" || json.Unmarshal([]byte(f.Data), &snap) != nil || f.ID != fmt.Sprint(snap.Seq) || snap.Seq != pos {
			t.Fatalf("stream %d: want snapshot at position %d, got %+v", i, pos, f)
		}
		if got, want := normalize(t, snap.State), normalize(t, fold(events, snap.Seq)); !reflect.DeepEqual(got, want) {
			t.Fatalf("stream %d: snapshot at %d is %v, fold of the log is %v", i, snap.Seq, got, want)
		}
		for want := snap.Seq + 1; want <= total; want++ {
			if e := s.event(t); e.Seq != want {
				t.Fatalf("stream %d after snapshot %d: got %d, want %d", i, snap.Seq, e.Seq, want)
			}
		}
	}
}

// A reconnect carries a position, so it gets no snapshot: only the events
// after it.
func TestReconnectWithLastEventIDSkipsSnapshot(t *testing.T) {
	p := start(t, t.TempDir())
	for i := 0; i < 5; i++ {
		p.publishKeyed(t, "re", fmt.Sprintf("k%d", i), "", `1`)
	}
	s := p.watch(t, "re", "?snapshot=1", map[string]string{"Last-Event-ID": "3"})
	if _, pos := s.hello(t); pos != 3 {
		t.Fatalf("position %d", pos)
	}
	if e := s.event(t); e.Seq != 4 || e.Key != "k3" || e.Op != "upsert" {
		t.Fatalf("got %+v, want event 4", e)
	}
}

// State, like events, survives kill -9: it is written in the same
// transaction.
func TestStateSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	p.publishKeyed(t, "kv", "a", "", `{"v":1}`)
	p.publishKeyed(t, "kv", "b", "", `2`)
	p.publishKeyed(t, "kv", "a", "", `{"v":3}`)
	p.publishKeyed(t, "kv", "b", "delete", ``)
	want := p.getState(t, "kv")
	if want != `{"seq":4,"state":{"a":{"v":3}}}` {
		t.Fatalf("state before kill: %s", want)
	}
	p.kill9()
	p2 := start(t, dir)
	if got := p2.getState(t, "kv"); got != want {
		t.Fatalf("state after kill -9: %s, want %s", got, want)
	}
	s := p2.watch(t, "kv", "?snapshot=1", nil)
	s.hello(t)
	if f := s.next(t); f.Event != "snapshot" || f.Data != want || f.ID != "4" {
		t.Fatalf("snapshot after restart: %+v", f)
	}
}

func (p *proc) getState(t *testing.T, topic string) string {
	t.Helper()
	resp, err := http.Get(p.topicURL(topic, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("state: %d %s", resp.StatusCode, b)
	}
	return string(b[:len(b)-1])
}

// Count retention runs by itself, within seconds of the commit that goes
// over the limit, and leaves exactly the newest N.
func TestCountRetentionRunsByItself(t *testing.T) {
	p := start(t, t.TempDir(), "--retention-events", "10")
	p.publishBatch(t, "ret", 0, 35, 0)
	deadline := time.Now().Add(wait)
	for {
		events, head := p.readAll(t, "ret")
		if len(events) == 10 && events[0].Seq == 26 && head == 35 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not trim: %d events from %d", len(events), events[0].Seq)
		}
		time.Sleep(50 * time.Millisecond) // polling until the background trim has run
	}
}
