package backlog

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/auth"
)

// One single-event transaction at a time: the cost of a commit (and its
// fsync) with no grouping.
func BenchmarkAppendOneEventPerCommit(b *testing.B) {
	l := openTest(b)
	req := []*Publish{{Tenant: "a", Topic: "x", Events: events(1)}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.CommitBatch(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A batch of 1000 events in one commit, as an NDJSON publish makes it;
// reported per event.
func BenchmarkCommitBatchOf1000(b *testing.B) {
	l := openTest(b)
	req := []*Publish{{Tenant: "a", Topic: "x", Batch: true, Events: events(1000)}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.CommitBatch(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}

// Many concurrent single-event publishes through the committer, which
// groups them: the events/s that grouping buys.
func BenchmarkCommitterConcurrentSingles(b *testing.B) {
	l := openTest(b)
	c := NewCommitter(l, CommitterOptions{})
	defer c.Close()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var wg sync.WaitGroup
		for pb.Next() {
			wg.Add(1)
			c.Commit(&Publish{Tenant: "a", Topic: "x", Events: events(1)}, func(_ Result, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
			wg.Wait()
		}
	})
}

// Reading pages of 1000 events, as a catching-up stream does.
func BenchmarkReadPage(b *testing.B) {
	l := openTest(b)
	if _, err := l.CommitBatch(b.Context(), []*Publish{{Tenant: "a", Topic: "x", Events: events(10000)}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := l.Read(b.Context(), "a", "x", int64(i%9)*1000, 1000, 4<<20)
		if err != nil || len(p.Events) != 1000 {
			b.Fatal(err, len(p.Events))
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}

// One retention pass (count, age, purge, key expiry) over 100 000 topics
// with nothing to remove: its cost must not grow with the topics (at
// 151c2fe the age pass alone took 2.9 s at this size).
func BenchmarkRetentionPassOverIdleTopics(b *testing.B) {
	l := openTest(b)
	ctx := b.Context()
	for c := range 10 {
		reqs := make([]*Publish, 10000)
		for i := range reqs {
			reqs[i] = &Publish{Tenant: "a", Topic: fmt.Sprintf("t%d-%d", c, i), Events: events(1)}
		}
		if _, err := l.CommitBatch(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n, err := l.TrimByCount(ctx, 1000); err != nil || n != 0 {
			b.Fatal(n, err)
		}
		if n, err := l.TrimByAge(ctx, time.Hour); err != nil || n != 0 {
			b.Fatal(n, err)
		}
		if n, err := l.Purge(ctx); err != nil || n != 0 {
			b.Fatal(n, err)
		}
		if _, err := l.ExpireKeys(ctx, 24*time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/pass")
}

// Deleting a tenant of 400 000 events, and purging them, while another
// tenant commits one event at a time: reports the longest of those
// commits (at 151c2fe every publisher stalled 1.8 s at this size).
func BenchmarkDeleteLargeTenantWhilePublishing(b *testing.B) {
	ctx := b.Context()
	var worst time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l := openTest(b)
		if _, _, err := l.CreateTenant(ctx, "big"); err != nil {
			b.Fatal(err)
		}
		for range 40 {
			if _, err := l.CommitBatch(ctx, []*Publish{{Tenant: "big", Topic: "x", Events: events(10000)}}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := l.CommitBatch(ctx, []*Publish{{Tenant: "other", Topic: "x", Events: events(1)}}); err != nil {
					b.Error(err)
					return
				}
				worst = max(worst, time.Since(start))
			}
		}()
		if err := l.DeleteTenant(ctx, "big"); err != nil {
			b.Fatal(err)
		}
		if _, err := l.PurgeDoomed(ctx); err != nil {
			b.Fatal(err)
		}
		close(stop)
		<-done
		var left int
		if err := l.testQueryRow(`SELECT count(*) FROM events`).Scan(&left); err != nil || left == 0 {
			b.Fatalf("events left %d (%v): the other tenant's commits should be all", left, err)
		}
		var bigLeft int
		if err := l.testQueryRow(`SELECT count(*) FROM events e JOIN doomed_topics d ON d.id = e.topic_id`).Scan(&bigLeft); err != nil || bigLeft != 0 {
			b.Fatalf("the deleted tenant's events left: %d (%v)", bigLeft, err)
		}
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "ms-worst-commit")
}

// What a token check reads besides the tenant: whether its jti is
// revoked (a tenant with 10000 revocations; the token is not among them)
// and the tenant's issuers (16, the most it may have), as concurrent
// requests read them.
func BenchmarkTokenLookups(b *testing.B) {
	l := openTest(b)
	ctx := b.Context()
	mustTenant(b, l, "acme")
	for i := range MaxIssuers {
		if _, _, err := l.PutIssuer(ctx, "acme", auth.Issuer{Name: fmt.Sprintf("idp%02d", i), JWKSURL: "https://idp.test/jwks"}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 10000 {
		if err := l.Revoke(ctx, "acme", fmt.Sprintf("jti-%d", i), time.Now().Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("revoked", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if revoked, err := l.Revoked(ctx, "acme", "not-revoked"); err != nil || revoked {
					b.Fatal(revoked, err)
				}
			}
		})
	})
	b.Run("issuers", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if list, err := l.Issuers(ctx, "acme"); err != nil || len(list) != MaxIssuers {
					b.Fatal(len(list), err)
				}
			}
		})
	})
}
