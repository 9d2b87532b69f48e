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
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	schema "edgehub/sql"
)

// SQLite is the embedded Log: one database file in WAL mode, one writer
// connection for commits and a pool of read-only connections for catch-up
// and reads, which WAL lets run beside the writer.
type SQLite struct {
	write *sql.DB
	read  *sql.DB
	now   func() time.Time
}

// OpenSQLite opens (creating if needed) the backlog in dir and migrates it.
// synchronous=FULL makes a commit durable against power loss, not just
// against the process dying, which is what "answered means stored" needs.
// secure_delete overwrites what is deleted, so a deleted tenant's data is
// not left readable in the file's free pages.
func OpenSQLite(ctx context.Context, dir string, logger *slog.Logger) (*SQLite, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dir, "edgehub.db")
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	write, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(1)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open backlog %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	if err := migrate(ctx, write, logger); err != nil {
		write.Close()
		return nil, err
	}
	read, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open backlog %s for reading: %w", path, err)
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
	return errors.Join(s.read.Close(), s.write.Close())
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
	p.Events = make([]Event, 0, min(limit, 256))
	size := 0
	for rows.Next() {
		var e Event
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

type topicState struct {
	id, head int64
}

// AppendBatch commits all requests in one write transaction.
func (s *SQLite) AppendBatch(ctx context.Context, reqs []*Append) ([]Result, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin commit: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	a := appender{ctx: ctx, tx: tx, topics: map[[2]string]*topicState{}, tenants: map[string]bool{}}
	if err := a.prepare(); err != nil {
		return nil, err
	}
	defer a.close()
	now := s.now().UTC()
	results := make([]Result, len(reqs))
	for i, req := range reqs {
		if results[i], err = a.append(req, now); err != nil {
			return nil, err
		}
	}
	for key, t := range a.topics {
		if _, err := a.setHead.ExecContext(ctx, t.head, t.id); err != nil {
			return nil, fmt.Errorf("advance head of %s/%s: %w", key[0], key[1], err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit %d requests: %w", len(reqs), err)
	}
	return results, nil
}

// appender holds one commit's prepared statements and the heads it has
// advanced so far, which are written back once per topic.
type appender struct {
	ctx                         context.Context
	tx                          *sql.Tx
	topics                      map[[2]string]*topicState
	insert, getIdem, putIdem    *sql.Stmt
	getTopic, newTopic, setHead *sql.Stmt
	upsertKey, deleteKey        *sql.Stmt
	getTenant                   *sql.Stmt
	tenants                     map[string]bool
}

func (a *appender) prepare() error {
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&a.insert, `INSERT INTO events (topic_id, seq, type, time, key, op, data) VALUES (?, ?, ?, ?, ?, ?, ?)`},
		{&a.getIdem, `SELECT hash, first, last, batch FROM idempotency WHERE topic_id = ? AND key = ?`},
		{&a.putIdem, `INSERT INTO idempotency (topic_id, key, hash, first, last, batch, created) VALUES (?, ?, ?, ?, ?, ?, ?)`},
		{&a.getTopic, `SELECT id, head FROM topics WHERE tenant = ? AND topic = ?`},
		{&a.newTopic, `INSERT INTO topics (tenant, topic) VALUES (?, ?) RETURNING id`},
		{&a.setHead, `UPDATE topics SET head = ? WHERE id = ?`},
		{&a.upsertKey, `INSERT INTO state (topic_id, key, seq, data) VALUES (?, ?, ?, ?)
			ON CONFLICT (topic_id, key) DO UPDATE SET seq = excluded.seq, data = excluded.data`},
		{&a.deleteKey, `DELETE FROM state WHERE topic_id = ? AND key = ?`},
		{&a.getTenant, `SELECT count(*) FROM tenants WHERE name = ?`},
	} {
		stmt, err := a.tx.PrepareContext(a.ctx, p.sql)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.stmt = stmt
	}
	return nil
}

func (a *appender) close() {
	for _, s := range []*sql.Stmt{a.insert, a.getIdem, a.putIdem, a.getTopic, a.newTopic, a.setHead, a.upsertKey, a.deleteKey, a.getTenant} {
		if s != nil {
			s.Close()
		}
	}
}

func (a *appender) topic(tenant, topic string) (*topicState, error) {
	key := [2]string{tenant, topic}
	if t, ok := a.topics[key]; ok {
		return t, nil
	}
	t := &topicState{}
	err := a.getTopic.QueryRowContext(a.ctx, tenant, topic).Scan(&t.id, &t.head)
	if errors.Is(err, sql.ErrNoRows) {
		err = a.newTopic.QueryRowContext(a.ctx, tenant, topic).Scan(&t.id)
	}
	if err != nil {
		return nil, fmt.Errorf("find topic %s/%s: %w", tenant, topic, err)
	}
	a.topics[key] = t
	return t, nil
}

// fold applies a keyed event to the topic's state, in the same transaction.
func (a *appender) fold(topicID int64, e *Event) error {
	var err error
	switch e.Op {
	case OpUpsert:
		_, err = a.upsertKey.ExecContext(a.ctx, topicID, e.Key, e.Seq, []byte(e.Data))
	case OpDelete:
		_, err = a.deleteKey.ExecContext(a.ctx, topicID, e.Key)
	}
	return err
}

// tenantExists answers, once per transaction and tenant, whether the
// tenant's row is there.
func (a *appender) tenantExists(name string) (bool, error) {
	if ok, seen := a.tenants[name]; seen {
		return ok, nil
	}
	var n int
	if err := a.getTenant.QueryRowContext(a.ctx, name).Scan(&n); err != nil {
		return false, fmt.Errorf("look up tenant %s: %w", name, err)
	}
	a.tenants[name] = n > 0
	return n > 0, nil
}

func (a *appender) append(req *Append, now time.Time) (Result, error) {
	if req.RequireTenant {
		ok, err := a.tenantExists(req.Tenant)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return Result{Err: ErrNoTenant}, nil
		}
	}
	t, err := a.topic(req.Tenant, req.Topic)
	if err != nil {
		return Result{}, err
	}
	if req.IdemKey != "" {
		var hash []byte
		var r Result
		err := a.getIdem.QueryRowContext(a.ctx, t.id, req.IdemKey).Scan(&hash, &r.First, &r.Last, &r.Batch)
		switch {
		case err == nil && bytes.Equal(hash, req.IdemHash):
			r.Duplicate = true
			return r, nil
		case err == nil:
			return Result{Err: ErrKeyReused}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return Result{}, fmt.Errorf("look up idempotency key: %w", err)
		}
	}
	r := Result{First: t.head + 1, Batch: req.Batch, Events: make([]Event, len(req.Events))}
	nanos := now.UnixNano()
	for i, e := range req.Events {
		t.head++
		e.Seq, e.Time = t.head, now
		if _, err := a.insert.ExecContext(a.ctx, t.id, e.Seq, e.Type, nanos, e.Key, e.Op, []byte(e.Data)); err != nil {
			return Result{}, fmt.Errorf("insert event %d of %s/%s: %w", e.Seq, req.Tenant, req.Topic, err)
		}
		if err := a.fold(t.id, &e); err != nil {
			return Result{}, fmt.Errorf("fold event %d of %s/%s into state: %w", e.Seq, req.Tenant, req.Topic, err)
		}
		r.Events[i] = e
	}
	r.Last = t.head
	if req.IdemKey != "" {
		if _, err := a.putIdem.ExecContext(a.ctx, t.id, req.IdemKey, req.IdemHash, r.First, r.Last, req.Batch, nanos); err != nil {
			return Result{}, fmt.Errorf("remember idempotency key: %w", err)
		}
	}
	return r, nil
}
