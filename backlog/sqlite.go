package backlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"edgehub/event"
	"edgehub/sql/schema"
)

// SQLite is the embedded Log: one database file in WAL mode, one writer
// connection for commits and a pool of read-only connections for catch-up
// and reads, which WAL lets run beside the writer.
type SQLite struct {
	write  *sql.DB
	read   *sql.DB
	now    func() time.Time
	quotas Quotas
	// stmts are the commit's statements, prepared once on the writer.
	stmtsMu sync.Mutex
	stmts   *statements
	// BeforeRetentionTx, when set, is called by retention and by the purge
	// of deleted tenants after they have read what to do and before each
	// write transaction that does it ("age", "purge" or "doomed"), and
	// before the count trim's one statement ("count"), so tests can hold
	// that window open and change the data inside it, or see a duty run.
	BeforeRetentionTx func(duty string)
}

// Sync is how durable a commit is before it is answered.
type Sync string

const (
	// SyncFull (synchronous=FULL, the default) makes a commit durable
	// against power loss, not just against the process dying, which is
	// what "answered means stored" needs: an fsync per commit group.
	SyncFull Sync = "full"
	// SyncNormal (synchronous=NORMAL) in WAL mode fsyncs only at
	// checkpoints: a power loss may lose the last commits, a crash of the
	// process loses none, since the WAL is written before the answer.
	SyncNormal Sync = "normal"
)

// OpenSQLite opens (creating if needed) the backlog in dir and migrates it,
// with commits as durable as sync says. secure_delete overwrites what is
// deleted, so a deleted tenant's data is not left readable in the file's
// free pages.
func OpenSQLite(ctx context.Context, dir string, logger *slog.Logger, sync Sync) (*SQLite, error) {
	if sync != SyncFull && sync != SyncNormal {
		return nil, fmt.Errorf("open backlog in %s: sync must be %q or %q, not %q", dir, SyncFull, SyncNormal, sync)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dir, "edgehub.db")
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	write, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous("+strings.ToUpper(string(sync))+")&_pragma=secure_delete(1)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open backlog %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	if err := migrate(ctx, write, logger); err != nil {
		return nil, errors.Join(err, write.Close())
	}
	read, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open backlog %s for reading: %w", path, err), write.Close())
	}
	read.SetMaxOpenConns(8)
	read.SetMaxIdleConns(8)
	return &SQLite{write: write, read: read, now: time.Now}, nil
}

func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	migrations, err := fs.Sub(schema.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations,
		goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger))
	if err != nil {
		return fmt.Errorf("prepare migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate backlog: %w", err)
	}
	return nil
}

// Close closes both pools; the committer must have stopped first.
func (s *SQLite) Close() error {
	s.stmtsMu.Lock()
	var serr error
	if s.stmts != nil {
		serr = s.stmts.close()
	}
	s.stmtsMu.Unlock()
	return errors.Join(serr, s.read.Close(), s.write.Close())
}

// Ping checks the read pool, which is what readiness depends on.
func (s *SQLite) Ping(ctx context.Context) error {
	return s.read.PingContext(ctx)
}

// Head reads a topic's head; a topic never published to has head 0.
func (s *SQLite) Head(ctx context.Context, tenant, topic string) (int64, error) {
	var head int64
	err := s.read.QueryRowContext(ctx,
		`SELECT head FROM topics WHERE tenant = ? AND topic = ?`, tenant, topic).Scan(&head)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read head of %s/%s: %w", tenant, topic, err)
	}
	return head, nil
}

// topicRow is a topic's row as a read transaction sees it.
type topicRow struct {
	id, head, trimmed int64
}

// readTopic begins a read transaction and reads the topic's row in it, so
// that what the caller reads next agrees with it. A topic never published
// to has no row: the transaction is then nil, and so is the error.
func (s *SQLite) readTopic(ctx context.Context, tenant, topic string) (*sql.Tx, topicRow, error) {
	var t topicRow
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, t, fmt.Errorf("begin read of %s/%s: %w", tenant, topic, err)
	}
	err = tx.QueryRowContext(ctx, `SELECT id, head, trimmed FROM topics WHERE tenant = ? AND topic = ?`,
		tenant, topic).Scan(&t.id, &t.head, &t.trimmed)
	if err != nil {
		tx.Rollback() //nolint:errcheck // read-only: nothing to undo
		if errors.Is(err, sql.ErrNoRows) {
			return nil, t, nil
		}
		return nil, t, fmt.Errorf("read topic %s/%s: %w", tenant, topic, err)
	}
	return tx, t, nil
}

// Read returns a page after a position from one read transaction, so the
// head and trim point agree with the rows. The page ends before the event
// that would take its data past maxBytes, but holds at least one event:
// what a reader holds is bounded by its caller, not by the topic.
func (s *SQLite) Read(ctx context.Context, tenant, topic string, after int64, limit, maxBytes int) (Page, error) {
	var p Page
	tx, t, err := s.readTopic(ctx, tenant, topic)
	if tx == nil || err != nil {
		return p, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	id := t.id
	p.Head, p.Trimmed = t.head, t.trimmed
	// Rows at or below the trim point may still exist until they are
	// purged; readers never see them.
	rows, err := tx.QueryContext(ctx, `SELECT seq, type, time, key, op, data FROM events
		WHERE topic_id = ? AND seq > ? ORDER BY seq LIMIT ?`, id, max(after, p.Trimmed), limit)
	if err != nil {
		return p, fmt.Errorf("read events of %s/%s after %d: %w", tenant, topic, after, err)
	}
	defer rows.Close()
	p.Events = make([]event.Event, 0, min(limit, 256))
	size := 0
	for rows.Next() {
		var e event.Event
		var nanos int64
		var data sql.RawBytes // copied only if the event joins the page
		if err := rows.Scan(&e.Seq, &e.Type, &nanos, &e.Key, &e.Op, &data); err != nil {
			return p, fmt.Errorf("scan event of %s/%s: %w", tenant, topic, err)
		}
		if len(p.Events) > 0 && size+len(data) > maxBytes {
			break
		}
		size += len(data)
		e.Time = time.Unix(0, nanos).UTC()
		e.Data = bytes.Clone(data)
		p.Events = append(p.Events, e)
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("read events of %s/%s: %w", tenant, topic, err)
	}
	return p, nil
}
