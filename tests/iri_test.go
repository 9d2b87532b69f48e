package tests

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/refusal"
)

// iriTopics are topics that the v2 name rules refused and v3 accepts: an
// IRI, reserved characters of paths and queries, spaces and percent signs,
// other scripts, and 1024 bytes of two-byte runes.
var iriTopics = []string{
	"https://example.com/books/1",
	"a b?c=d&e#f%25g/../h",
	"книги/1",
	strings.Repeat("é", 512),
}

// A topic that is any IRI-like string, percent-encoded in the path, is
// one topic through publish, watch (catch-up and live), read, state, the
// tenant read and the topic list, named back exactly as published, and
// kept apart from the topics its escapes decode to parts of.
func TestIRITopicsRoundTrip(t *testing.T) {
	p := start(t, t.TempDir())
	p.publish(t, "https:", `"not the IRI"`) // a prefix of the first IRI's decoded path
	for _, topic := range iriTopics {
		esc := url.PathEscape(topic)
		if st, _, b := do(t, "POST", p.topicURL(esc, "notify")+"?key=k", "", `{"n":1}`); st != 201 {
			t.Fatalf("publish to %q: %d %s", topic, st, b)
		}
		s := p.watch(t, esc, "?after=0", nil)
		s.hello(t)
		if e := s.event(t); e.Seq != 1 {
			t.Fatalf("%q: catch-up event %+v", topic, e)
		}
		p.publish(t, topic, `{"n":2}`) // through the Go client, which escapes the name itself
		if e := s.event(t); e.Seq != 2 || string(e.Data) != `{"n":2}` {
			t.Fatalf("%q: live event %+v", topic, e)
		}
		if st, _, b := do(t, "GET", p.topicURL(esc, "events")+"?after=0", "", ""); st != 200 || !strings.Contains(string(b), `"seq":2`) {
			t.Fatalf("read %q: %d %s", topic, st, b)
		}
		if st, _, b := do(t, "GET", p.topicURL(esc, "state"), "", ""); st != 200 || !strings.Contains(string(b), `"k":{"n":1}`) {
			t.Fatalf("state of %q: %d %s", topic, st, b)
		}
		if st, a, b := p.readTenant(t, "", "topic="+url.QueryEscape(topic)); st != 200 || len(a.Events) != 2 || a.Events[0].Topic != topic {
			t.Fatalf("tenant read of %q: %d %s", topic, st, b)
		}
	}
	_, _, l := p.listTopics(t, "", "limit=1000")
	var listed []string
	for _, x := range l.Topics {
		listed = append(listed, x.Topic)
	}
	if want := []string{"a b?c=d&e#f%25g/../h", "https:", "https://example.com/books/1", strings.Repeat("é", 512), "книги/1"}; strings.Join(listed, "|") != strings.Join(want, "|") {
		b, _ := json.Marshal(listed)
		t.Fatalf("the topic list: %s", b)
	}
}

// Topics that the v3 rules refuse are 400 invalid_name on every topic
// route, and nothing is stored.
func TestTopicNameRulesAreEnforced(t *testing.T) {
	p := start(t, t.TempDir())
	for _, topic := range []string{".hidden", "*", "a\x00b", "a\x1fb", "a\x7fb", "a\u0085b", "a\u200bb", "\ufeffa", "a\u202eb", "\xff", strings.Repeat("é", 512) + "a"} {
		for _, route := range []string{"notify", "watch", "events", "state"} {
			method := "GET"
			if route == "notify" {
				method = "POST"
			}
			st, _, b := do(t, method, p.topicURL(url.PathEscape(topic), route), "", `1`)
			var e struct{ Error struct{ Code refusal.Code } }
			json.Unmarshal(b, &e)
			if st != 400 || e.Error.Code != refusal.InvalidName {
				t.Errorf("%s %q: %d %s", route, topic, st, b)
			}
		}
		if st, _, b := p.readTenant(t, "", "topic="+url.QueryEscape(topic)); st != 400 {
			t.Errorf("tenant read of %q: %d %s", topic, st, b)
		}
	}
	if _, got, _ := p.listTopics(t, "", ""); got != "next=" {
		t.Fatalf("refused names stored topics: %s", got)
	}
}

// A topic whose name holds spaces and slashes crosses between processes
// sharing one PostgreSQL log: the hint that names it arrives whole.
func TestIRITopicsCrossProcesses(t *testing.T) {
	ps, _ := cluster(t, 2)
	topic := "https://example.com/a b/c"
	s := ps[1].watch(t, url.PathEscape(topic), "?after=0", nil)
	s.hello(t)
	ps[0].publish(t, topic, `{"n":1}`)
	if e := s.event(t); e.Seq != 1 {
		t.Fatalf("live event from the other process: %+v", e)
	}
}
