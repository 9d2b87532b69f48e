package backlog

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/pgtest"
)

// Two processes commit to one topic on one database: while the first
// one's transaction holds its numbered events open, the second's commit
// waits behind it (queued, not aborted and run again), nothing of either
// is visible, and once the first commits the second's events are
// numbered after the first's.
func TestAHeldCommitOrdersAnotherProcesssBehindIt(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("the scale-out store: runs with EDGEHUB_TEST_STORE=postgres (scripts/test)")
	}
	ctx := context.Background()
	url := pgtest.Database(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() *Store {
		l, err := OpenPostgres(ctx, url, logger)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := open(), open()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.BeforeCommit = func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	type outcome struct {
		rs  []Result
		err error
	}
	commit := func(l *Store, n int) chan outcome {
		c := make(chan outcome, 1)
		go func() {
			rs, err := l.CommitBatch(ctx, []*Publish{{Tenant: "a", Topic: "x", Events: events(n)}})
			c <- outcome{rs, err}
		}()
		return c
	}
	first := commit(a, 2)
	<-entered
	second := commit(b, 1)
	// The second commit is inside its window once its backend waits for a
	// lock that the first holds.
	for deadline := time.Now().Add(time.Minute); ; {
		var waiting int
		if err := a.read.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case o := <-second:
			t.Fatalf("the second commit finished while the first held its numbers: %+v %v", o.rs, o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second commit never waited behind the first")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p, err := b.Read(ctx, "a", "x", 0, 10, 1<<20); err != nil || p.Head != 0 || len(p.Events) != 0 {
		t.Fatalf("while the first commit is held, a reader sees head %d and %d events (%v)", p.Head, len(p.Events), err)
	}
	close(release)
	fo, so := <-first, <-second
	if fo.err != nil || so.err != nil {
		t.Fatalf("commits: %v, %v", fo.err, so.err)
	}
	if fo.rs[0].First != 1 || fo.rs[0].Last != 2 || so.rs[0].First != 3 || so.rs[0].Last != 3 {
		t.Fatalf("the first commit got %d..%d and the second %d..%d, want 1..2 and 3..3",
			fo.rs[0].First, fo.rs[0].Last, so.rs[0].First, so.rs[0].Last)
	}
	if n := b.Retries(); n != 0 {
		t.Fatalf("the second commit ran %d more times: it raced the first instead of queueing behind it", n)
	}
	p, err := a.Read(ctx, "a", "x", 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range p.Events {
		seqs = append(seqs, e.Seq)
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) || p.Head != 3 {
		t.Fatalf("the log holds %v with head %d, want [1 2 3]", seqs, p.Head)
	}
}
