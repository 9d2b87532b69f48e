package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The mercure-* scenarios speak the Mercure protocol, with subscriptions
// of several selectors: they run on the targets that speak it (mercure,
// edgehub-mercure).
func isMercureScenario(s string) bool { return strings.HasPrefix(s, "mercure-") }

// selectorWatcher is a target whose stream selects by several
// selectors: query is a Mercure subscription's query string.
type selectorWatcher interface {
	WatchQuery(ctx context.Context, query string, fromStart bool, ready func(), deliver func(Delivery) error) error
}

// bySelectors is a selectorWatcher's Target whose Watch takes a
// subscription's query where a topic goes, so that openWatchers opens
// subscriptions.
type bySelectors struct {
	Target
	sw selectorWatcher
}

func (b bySelectors) Watch(ctx context.Context, query string, fromStart bool, ready func(), deliver func(Delivery) error) error {
	return b.sw.WatchQuery(ctx, query, fromStart, ready, deliver)
}

// selectors is t as a bySelectors, or an error if it has no subscriptions
// of several selectors.
func selectors(t Target) (bySelectors, error) {
	sw, ok := t.(selectorWatcher)
	if !ok {
		return bySelectors{}, fmt.Errorf("%s has no subscriptions of several selectors", t.Name())
	}
	return bySelectors{t, sw}, nil
}

// mercureFanoutTopic is where mercure-fanout publishes; two of each
// subscriber's three selectors match it, so a hub must deliver each
// update once however many of them match.
const mercureFanoutTopic = "https://bench.invalid/fan/1"

// mercureFanout is fanout over subscriptions of three selectors each:
// the topic, a topic of the subscriber's own that gets nothing, and a URL
// pattern that matches the topic too.
func mercureFanout(ctx context.Context, t Target, watchers, rate int, d time.Duration) (*result, error) {
	bs, err := selectors(t)
	if err != nil {
		return nil, err
	}
	queryOf := func(i int) string {
		return url.Values{"match": {mercureFanoutTopic, fmt.Sprintf("https://bench.invalid/other/%d", i)},
			"match_urlpattern": {"https://bench.invalid/fan/:id"}}.Encode()
	}
	return fanoutOn(ctx, bs, mercureFanoutTopic, queryOf, watchers, rate, d, false)
}

// resumeTopics is how many topics mercure-resume publishes over.
const resumeTopics = 10

// mercureResume publishes k updates over resumeTopics topics, one
// publisher a topic (update n to topic (n-1) mod 10, so that each
// topic's updates are in counter order), then times one subscriber of
// all ten that resumes from the start: updates a second, and whether it
// got every update once, each topic's in order.
func mercureResume(ctx context.Context, t Target, k int) (*result, error) {
	bs, err := selectors(t)
	if err != nil {
		return nil, err
	}
	k -= k % resumeTopics
	topic := func(j int) string { return fmt.Sprintf("https://bench.invalid/resume/%d", j) }
	pad := strings.Repeat("x", 60)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for j := range resumeTopics {
		wg.Go(func() {
			for n := j + 1; n <= k && failed.Load() == nil; n += resumeTopics {
				if _, err := t.Publish(ctx, topic(j), payload(int64(n), pad)); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	q := url.Values{}
	for j := range resumeTopics {
		q.Add("match", topic(j))
	}
	per := make([]*tracker, resumeTopics)
	for j := range per {
		per[j] = newTracker(int64(k/resumeTopics), false)
	}
	var got atomic.Int64
	var last int64
	start := time.Now()
	err = bs.sw.WatchQuery(ctx, q.Encode(), true, func() {}, func(d Delivery) error {
		last = d.At
		if d.N < 1 || d.N > int64(k) {
			per[0].add(Delivery{N: -1})
		} else {
			// The n-th update of its topic, in that topic's order.
			per[(d.N-1)%resumeTopics].add(Delivery{N: (d.N-1)/resumeTopics + 1})
		}
		if got.Add(1) == int64(k) {
			return errDone
		}
		return nil
	})
	r := newResult()
	for _, tr := range per {
		r.violations.addTracker(tr)
	}
	var have int64
	for _, tr := range per {
		have += tr.got
	}
	r.metrics["complete"] = map[bool]float64{true: 1}[have == int64(k)]
	if last > 0 {
		r.metrics["seconds"] = float64(last-start.UnixNano()) / 1e9
		r.metrics["events_per_s"] = float64(have) / r.metrics["seconds"]
	}
	if err != nil && !errors.Is(err, errDone) {
		return r, err
	}
	return r, nil
}
