package backlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// ErrNotDurable answers every commit and read once a flush of the
// write-ahead log has failed: what SQLite already made visible may not be
// on the disk, and after a failed fsync the kernel may have dropped the
// pages it could not write, so nothing the log says can be trusted to
// survive a power loss. The server has to be restarted, and then reads
// what the disk kept.
var ErrNotDurable = errors.New("the write-ahead log could not be flushed to disk")

// walSync makes SQLite's commits durable outside SQLite, so that the next
// commit's statements run while the last one's flush is in progress.
// SQLite runs with synchronous=NORMAL, which writes a commit to the WAL
// and makes it visible without flushing it; the committer then flushes
// the WAL with fdatasync from its own goroutine before it answers. In
// the meantime other connections can already see the commit, so every
// read waits, after its snapshot is taken, until what it may have seen is
// durable (seen): nothing is ever served that a power loss could take
// back.
//
// Commits are numbered by a generation: visible is the newest that may
// have become visible to readers (taken before COMMIT is issued), written
// the newest whose COMMIT has returned (what a flush now covers), durable
// the newest a flush has covered. One write connection commits one
// transaction at a time, so written trails visible by at most one.
type walSync struct {
	path string

	visible, written, durable atomic.Int64

	mu sync.Mutex // serialises flushes; guards f
	f  *os.File
	// failed is the first flush's error, for good.
	failed atomic.Pointer[error]

	waitMu sync.Mutex
	moved  chan struct{} // closed, and replaced, when durable moves or a flush fails

	// beforeFlush and waiting, when set by a test, are called before each
	// flush's fdatasync and when a read starts to wait for one.
	beforeFlush func()
	waiting     func()
}

func newWALSync(path string) *walSync {
	return &walSync{path: path, moved: make(chan struct{})}
}

// wrote runs one write transaction (or autocommit statement) commit,
// whose COMMIT makes it visible, and marks it written when commit returns,
// whatever it returned: a failed COMMIT leaves nothing to flush, but the
// generation must be passed for readers not to wait on it.
func (w *walSync) wrote(commit func() error) error {
	g := w.visible.Add(1)
	err := commit()
	w.written.Store(g)
	return err
}

// flush makes every written commit durable: one fdatasync of the WAL
// covers all that were written before it began. A flush that fails fails
// every later one, and every read (ErrNotDurable).
func (w *walSync) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.failure(); err != nil {
		return err
	}
	g := w.written.Load()
	if w.durable.Load() >= g {
		return nil
	}
	if w.beforeFlush != nil {
		w.beforeFlush()
	}
	if err := w.syncFile(); err != nil {
		err = fmt.Errorf("%w: %w", ErrNotDurable, err)
		w.failed.Store(&err)
		w.signal()
		return err
	}
	w.durable.Store(g)
	w.signal()
	return nil
}

// syncFile flushes the WAL's data. The file is opened once and kept; it
// is opened again if SQLite replaced it (it deletes the WAL when its last
// connection closes, after folding it into the database, which it then
// flushes itself), so a flush never lands on a file no commit writes to.
func (w *walSync) syncFile() error {
	if w.f != nil {
		cur, err := os.Stat(w.path)
		held, herr := w.f.Stat()
		if err != nil || herr != nil || !os.SameFile(cur, held) {
			w.f.Close() //nolint:errcheck // read-only, and replaced
			w.f = nil
		}
	}
	if w.f == nil {
		f, err := os.Open(w.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil // nothing was written since SQLite folded and removed it
		}
		if err != nil {
			return fmt.Errorf("open %s to flush it: %w", w.path, err)
		}
		w.f = f
	}
	if err := syncData(w.f); err != nil {
		return fmt.Errorf("flush %s: %w", w.path, err)
	}
	return nil
}

func (w *walSync) signal() {
	w.waitMu.Lock()
	close(w.moved)
	w.moved = make(chan struct{})
	w.waitMu.Unlock()
}

// seen returns once every commit a read that has taken its snapshot may
// have seen is durable. Call it after the read's first statement (a read
// transaction's snapshot is taken then) and before anything it read
// leaves the store.
func (w *walSync) seen(ctx context.Context) error {
	want := w.visible.Load()
	for w.durable.Load() < want {
		w.waitMu.Lock()
		moved := w.moved
		w.waitMu.Unlock()
		if w.durable.Load() >= want {
			break // moved before the look at it
		}
		if err := w.failure(); err != nil {
			return err
		}
		if w.waiting != nil {
			w.waiting()
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("wait for the commits a read saw to be durable: %w", ctx.Err())
		}
	}
	return nil
}

// failure is the error of the flush that failed, if one has.
func (w *walSync) failure() error {
	if err := w.failed.Load(); err != nil {
		return *err
	}
	return nil
}

func (w *walSync) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
