package backlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// holdFirstFlush opens a pipelined log whose first flush waits, once it
// has said so on held, until hold is closed; inCommit hears of each
// commit just before its COMMIT.
func holdFirstFlush(t *testing.T) (l *Store, held, hold, inCommit chan struct{}) {
	held, hold, inCommit = make(chan struct{}, 1), make(chan struct{}), make(chan struct{}, 8)
	l = openPipelined(t, func(w *walSync) {
		first := true
		w.beforeFlush = func() {
			if first { // only the first flush is held
				first = false
				held <- struct{}{}
				<-hold
			}
		}
	})
	l.BeforeCommit = func() { inCommit <- struct{}{} }
	return l, held, hold, inCommit
}

// The next commit's statements run while the last one's flush is in
// progress, and the answers still come in commit order, each after the
// flush that covers it.
func TestTheNextCommitRunsWhileTheLastIsFlushed(t *testing.T) {
	l, held, hold, inCommit := holdFirstFlush(t)
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

// While a flush is in progress, the next commit waits until as many
// requests are queued as the flush is to answer: the publishers it answers
// come back only after it, and a commit of fewer would split the
// publishers into two groups that each pay a flush. Once that many are
// queued, the commit runs during the flush.
func TestTheNextCommitWaitsForAsManyAsTheFlushAnswers(t *testing.T) {
	l, held, hold, inCommit := holdFirstFlush(t)
	type counts struct{ queued, unanswered int }
	waits := make(chan counts, 64)
	c := NewCommitter(l, CommitterOptions{WaitingFlush: func(queued, unanswered int) {
		waits <- counts{queued, unanswered}
	}})
	defer c.Close()
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before Close, should the test fail while the flush is held
	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	var answers []<-chan answer
	answers = append(answers, commitAsync(c, l, "x"))
	within(inCommit, "the first commit did not run")
	<-held // one request visible, its flush held
	answers = append(answers, commitAsync(c, l, "x"))
	within(inCommit, "a commit of as many requests as the flush answers waited for it")
	answers = append(answers, commitAsync(c, l, "x")) // 1 queued, 2 unanswered
	for w := (counts{}); w != (counts{1, 2}); {
		select {
		case w = <-waits:
		case <-time.After(10 * time.Second):
			t.Fatal("a commit of 1 request did not wait for a flush of 2")
		}
	}
	select {
	case <-inCommit:
		t.Fatal("a commit of 1 request ran while a flush of 2 was in progress")
	default:
	}
	answers = append(answers, commitAsync(c, l, "x")) // 2 queued, 2 unanswered
	within(inCommit, "two queued requests waited for the flush of two")
	release()
	for i, ch := range answers {
		if a := <-ch; a.err != nil || a.r.First != int64(i+1) {
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

// copyPrefix copies the first n bytes of src (all of it if n < 0) to dst.
func copyPrefix(t *testing.T, src, dst string, n int64) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Error(err)
		return
	}
	if n >= 0 && n < int64(len(data)) {
		data = data[:n]
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Error(err)
	}
}

// Power loss: a disk keeps, of the WAL, what was written before a flush
// began, and may lose the rest. So each flush here first copies the
// database and the WAL as far as it had been written: the disk a power
// cut right after that flush would leave. Every answered publish is in
// the copy of the newest flush before its answer, numbered as answered.
func TestEveryAnsweredCommitSurvivesAPowerCut(t *testing.T) {
	dir := t.TempDir()
	var (
		mu     sync.Mutex
		images []string
		walAt  string
	)
	l := openPipelined(t, func(w *walSync) {
		walAt = w.path
		w.beforeFlush = func() {
			info, err := os.Stat(w.path)
			if err != nil {
				t.Error(err)
				return
			}
			img := filepath.Join(dir, fmt.Sprintf("image-%d", len(images)))
			if err := os.Mkdir(img, 0o700); err != nil {
				t.Error(err)
				return
			}
			copyPrefix(t, strings.TrimSuffix(w.path, "-wal"), filepath.Join(img, "edgehub.db"), -1)
			copyPrefix(t, w.path, filepath.Join(img, "edgehub.db-wal"), info.Size())
			mu.Lock()
			images = append(images, img)
			mu.Unlock()
		}
	})
	if _, err := l.write.Exec(`PRAGMA wal_autocheckpoint = 0`); err != nil {
		t.Fatal(err) // the database file changes only through the WAL here
	}
	c := NewCommitter(l, CommitterOptions{})
	type answered struct {
		topic string
		seq   int64
		image int // images taken before the answer
	}
	var got []answered
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			topic := fmt.Sprintf("t%d", p%2)
			for range 25 {
				done := make(chan struct{})
				c.Commit(one("t", topic), func(r Result, err error) {
					defer close(done)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					got = append(got, answered{topic, r.First, len(images)})
					mu.Unlock()
				})
				<-done
			}
		}()
	}
	wg.Wait()
	c.Close()
	if t.Failed() || walAt == "" {
		return
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opened := map[int]*Store{}
	for _, a := range got {
		if a.image == 0 {
			t.Fatalf("%s seq %d was answered before any flush", a.topic, a.seq)
		}
		img, ok := opened[a.image]
		if !ok {
			var err error
			if img, err = OpenSQLite(context.Background(), images[a.image-1], logger, SyncFull); err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			opened[a.image] = img
		}
		p, err := img.Read(context.Background(), "t", a.topic, a.seq-1, 1, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 1 || p.Events[0].Seq != a.seq {
			t.Fatalf("%s seq %d was answered, and a power cut after the flush before its answer loses it (the disk has %s up to %d)",
				a.topic, a.seq, a.topic, p.Head)
		}
	}
	if len(got) != 100 {
		t.Fatalf("%d of 100 publishes answered", len(got))
	}
}

// A single-event commit to a warm topic writes the pages whose rows it
// changes and no more: the event's row and its entry by tenant position,
// the topic's row and its entry by count (head - trimmed), and the
// tenant's usage row. Naming a column whose value does not change
// (oldest) rewrote its index's entry too, and an insert that ends as an
// update (usage) wrote the AUTOINCREMENT counter: seven pages (plan 056).
func TestAWarmTopicsCommitWritesOnlyThePagesItChanges(t *testing.T) {
	l := openPipelined(t, func(*walSync) {})
	for range 3 {
		commitOne(t, l, one("a", "x"))
	}
	size := func() int64 {
		info, err := os.Stat(l.wal.path)
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	var frame int64 // a WAL frame: a 24-byte header and a page
	if err := l.testQueryRow(`PRAGMA page_size`).Scan(&frame); err != nil {
		t.Fatal(err)
	}
	frame += 24
	before := size()
	commitOne(t, l, one("a", "x"))
	grew := size() - before
	if frames := grew / frame; frames != 5 || grew%frame != 0 {
		t.Fatalf("the commit wrote %d bytes to the WAL: %d pages, want 5", grew, frames)
	}
}
