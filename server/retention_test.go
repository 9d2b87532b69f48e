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

	"edgehub/backlog"
	"edgehub/metrics"
)

// Count trimming and its purge run while an age pass is held in the middle
// of its work: the two duties have their own loops, so a long age pass
// never delays removal by count. (With one loop for both this test never
// gets its purge and hangs until the test timeout.)
func TestAgePassDoesNotDelayCountTrimming(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := backlog.OpenSQLite(ctx, dir, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	evs := func(n int) []backlog.Event {
		e := make([]backlog.Event, n)
		for i := range e {
			e[i] = backlog.Event{Type: "message", Data: []byte(`{}`)}
		}
		return e
	}
	if _, err := l.AppendBatch(ctx, []*backlog.Append{
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
