package server

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/metrics"
)

// Count trimming and its purge run while an age pass is held in the middle
// of its work: the two duties have their own loops, so a long age pass
// never delays removal by count. (With one loop for both this test never
// gets its purge and hangs until the test timeout.)
func TestAgePassDoesNotDelayCountTrimming(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, logger := openLog(t, dir)
	if _, err := l.CommitBatch(ctx, []*backlog.Publish{
		{Tenant: "a", Topic: "old", Events: evs(1)},
		{Tenant: "a", Topic: "busy", Events: evs(30)},
	}); err != nil {
		t.Fatal(err)
	}
	// Make a/old old enough for the age pass to take it up (commit times
	// are the real clock's).
	side, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "edgehub.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	if _, err := side.Exec(`UPDATE topics SET oldest = 1 WHERE topic = 'old'`); err != nil {
		t.Fatal(err)
	}
	side.Close()

	agePass, release, purged := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var ageOnce, purgeOnce sync.Once
	l.BeforeRetentionTx = func(duty string) {
		switch duty {
		case "age":
			ageOnce.Do(func() {
				close(agePass)
				<-release
			})
		case "purge":
			purgeOnce.Do(func() { close(purged) })
		}
	}
	s := &Server{cfg: Config{RetentionEvents: 10, RetentionAge: time.Hour}, log: l, logger: logger,
		metrics: metrics.New(), retained: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	go s.retain(rctx, time.Millisecond)
	<-agePass // the age pass holds its first chunk
	<-purged  // and count trimming has still come to its purge
	p, err := l.Read(ctx, "a", "busy", 0, 100, 1<<20)
	if err != nil || p.Trimmed != 20 || len(p.Events) != 10 {
		t.Fatalf("busy: trimmed %d, %d events, %v", p.Trimmed, len(p.Events), err)
	}
	close(release)
	cancel()
	<-s.retained
}

// Count trimming happens while the purge is held in the middle of its
// work (before one of its write transactions): count trimming has its own
// loop, so purging many topics or a deleted tenant never delays removal by
// count past the contract's 5 s. The commit that passes the limit comes
// after the purge is held; the count trim must follow it. (With count
// trimming and purging in one loop the count hook never fires again and
// the test fails at its deadline.)
func TestPurgeDoesNotDelayCountTrimming(t *testing.T) {
	ctx := context.Background()
	l, logger := openLog(t, t.TempDir())
	// a/old is over the limit: the count loop trims it, and the purge loop
	// then has rows to delete and calls the hook.
	if _, err := l.CommitBatch(ctx, []*backlog.Publish{{Tenant: "a", Topic: "old", Events: evs(30)}}); err != nil {
		t.Fatal(err)
	}

	purging, release := make(chan struct{}), make(chan struct{})
	counted := make(chan struct{}, 1)
	var purgeOnce sync.Once
	l.BeforeRetentionTx = func(duty string) {
		switch duty {
		case "purge":
			purgeOnce.Do(func() {
				close(purging)
				<-release
			})
		case "count":
			select {
			case counted <- struct{}{}:
			default:
			}
		}
	}
	s := &Server{cfg: Config{RetentionEvents: 10, RetentionAge: time.Hour}, log: l, logger: logger,
		metrics: metrics.New(), retained: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	go s.retain(rctx, time.Millisecond)
	var releaseOnce sync.Once
	defer func() {
		releaseOnce.Do(func() { close(release) })
		cancel()
		<-s.retained
	}()
	<-purging // the purge is held before its first write transaction

	if _, err := l.CommitBatch(ctx, []*backlog.Publish{{Tenant: "a", Topic: "busy", Events: evs(30)}}); err != nil {
		t.Fatal(err)
	}
	// Each count hook call comes after the previous count trim has ended,
	// so once the calls go on, a trim that started after the commit has
	// run. The deadline is the contract's.
	deadline := time.After(5 * time.Second)
	for {
		p, err := l.Read(ctx, "a", "busy", 0, 100, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if p.Trimmed == 20 && len(p.Events) == 10 && p.Events[0].Seq == 21 {
			break
		}
		select {
		case <-counted:
		case <-deadline:
			t.Fatalf("busy not trimmed by count within 5 s while the purge was held: trimmed %d, %d events", p.Trimmed, len(p.Events))
		}
	}
	releaseOnce.Do(func() { close(release) })
}

func openLog(t *testing.T, dir string) (*backlog.Store, *slog.Logger) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := backlog.OpenSQLite(context.Background(), dir, logger, backlog.SyncFull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, logger
}

func evs(n int) []event.Event {
	e := make([]event.Event, n)
	for i := range e {
		e[i] = event.Event{Type: "message", Data: []byte(`{}`)}
	}
	return e
}
