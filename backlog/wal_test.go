package backlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/edgehub/edgehub/pgtest"
)

// openPipelined opens a fresh SQLite log in its durable mode, whose WAL
// the store flushes itself; set sets its test hooks before anything runs.
func openPipelined(t *testing.T, set func(w *walSync)) *Store {
	t.Helper()
	if pgtest.Enabled() {
		t.Skip("the WAL flush is SQLite's")
	}
	l := openTest(t)
	if l.wal == nil {
		t.Fatal("the durable SQLite log does not flush its WAL itself")
	}
	set(l.wal)
	return l
}

type answer struct {
	r       Result
	err     error
	durable int64 // the flushed generation when the answer came
}

func commitAsync(c *Committer, l *Store, topic string) <-chan answer {
	ch := make(chan answer, 1)
	c.Commit(one("t", topic), func(r Result, err error) {
		ch <- answer{r, err, l.wal.durable.Load()}
	})
	return ch
}

// A commit made visible and not yet flushed is served by no read: the read
// waits for the flush, then serves it; and its publisher is answered only
// once the flush that covers it is done.
func TestAReadWaitsForTheFlushOfWhatItSees(t *testing.T) {
	held, hold := make(chan struct{}, 1), make(chan struct{})
	waiting := make(chan struct{}, 1)
	l := openPipelined(t, func(w *walSync) {
		w.beforeFlush = func() { held <- struct{}{}; <-hold }
		w.waiting = func() { poke(waiting) }
	})
	c := NewCommitter(l, CommitterOptions{})
	defer c.Close()
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before Close, should the test fail while the flush is held
	answered := commitAsync(c, l, "x")
	<-held // committed, visible to other connections, not flushed
	read := make(chan Page, 1)
	go func() {
		p, err := l.Read(context.Background(), "t", "x", 0, 10, 1<<20)
		if err != nil {
			t.Error(err)
		}
		read <- p
	}()
	select {
	case <-waiting:
	case p := <-read:
		t.Fatalf("a read served %d events of a commit before its flush", len(p.Events))
	}
	select {
	case a := <-answered:
		t.Fatalf("a commit was answered before its flush: %+v", a)
	default:
	}
	release()
	if p := <-read; len(p.Events) != 1 || p.Events[0].Seq != 1 {
		t.Fatalf("after the flush the read got %+v, want seq 1", p.Events)
	}
	if a := <-answered; a.err != nil || a.r.First != 1 || a.durable < 1 {
		t.Fatalf("answer %+v", a)
	}
}

// The next commit's statements run while the last one's flush is in
// progress, and the answers still come in commit order, each after the
// flush that covers it.
func TestTheNextCommitRunsWhileTheLastIsFlushed(t *testing.T) {
	held, hold := make(chan struct{}, 2), make(chan struct{})
	l := openPipelined(t, func(w *walSync) {
		first := true
		w.beforeFlush = func() {
			if first { // only the first flush is held
				first = false
				held <- struct{}{}
				<-hold
			}
		}
	})
	inCommit := make(chan struct{}, 2)
	l.BeforeCommit = func() { inCommit <- struct{}{} }
	c := NewCommitter(l, CommitterOptions{})
	defer c.Close()
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before Close, should the test fail while the flush is held
	first := commitAsync(c, l, "x")
	<-inCommit
	<-held
	second := commitAsync(c, l, "x")
	select {
	case <-inCommit:
	case <-time.After(10 * time.Second):
		t.Fatal("the next commit waited for the last one's flush")
	}
	release()
	for i, ch := range []<-chan answer{first, second} {
		a := <-ch
		if a.err != nil || a.r.First != int64(i+1) || a.durable < int64(i+1) {
			t.Fatalf("answer %d: %+v", i+1, a)
		}
	}
}

// A flush that fails answers the commits it was to cover with
// ErrNotDurable, never with success, and so does every later commit and
// read: what is visible may not be on the disk.
func TestAFailedFlushFailsCommitsAndReads(t *testing.T) {
	l := openPipelined(t, func(w *walSync) {})
	commitOne(t, l, one("t", "x"))
	// A pipe cannot be flushed: fdatasync fails on it.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	l.wal.mu.Lock()
	l.wal.f.Close()
	l.wal.f, l.wal.path = r, fmt.Sprintf("/proc/self/fd/%d", r.Fd())
	l.wal.mu.Unlock()
	c := NewCommitter(l, CommitterOptions{})
	defer c.Close()
	if a := <-commitAsync(c, l, "x"); !errors.Is(a.err, ErrNotDurable) {
		t.Fatalf("a commit whose flush failed was answered %+v", a)
	}
	if _, err := l.Read(context.Background(), "t", "x", 0, 10, 1<<20); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("a read after a failed flush: %v", err)
	}
	if a := <-commitAsync(c, l, "y"); !errors.Is(a.err, ErrNotDurable) {
		t.Fatalf("a commit after a failed flush was answered %+v", a)
	}
}
