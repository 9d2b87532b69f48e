package backlog

import (
	"sync"
	"testing"
)

// One single-event transaction at a time: the cost of a commit (and its
// fsync) with no grouping.
func BenchmarkAppendOneEventPerCommit(b *testing.B) {
	l := openTest(b)
	req := []*Append{{Tenant: "a", Topic: "x", Events: events(1)}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.AppendBatch(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
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
			c.Submit(&Append{Tenant: "a", Topic: "x", Events: events(1)}, func(_ Result, err error) {
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
	if _, err := l.AppendBatch(b.Context(), []*Append{{Tenant: "a", Topic: "x", Events: events(10000)}}); err != nil {
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
