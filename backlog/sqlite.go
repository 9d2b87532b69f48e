package backlog

import (
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

	"github.com/edgehub/edgehub/sql/schema"
)

// Sync is how durable a commit is before it is answered.
type Sync string

const (
	// SyncFull (the default) makes a commit durable against power loss,
	// not just against the process dying, which is what "answered means
	// stored" needs: the WAL is flushed (fdatasync) before the answer,
	// once per group of commits, while the next commit's statements run,
	// and no read serves a commit before its flush (wal.go).
	SyncFull Sync = "full"
	// SyncNormal leaves flushing to SQLite's checkpoints
	// (synchronous=NORMAL in WAL mode): a power loss may lose the last
	// commits, a crash of the process loses none, since the WAL is
	// written before the answer.
	SyncNormal Sync = "normal"
)

// OpenSQLite opens (creating if needed) the backlog in dir and migrates it,
// with commits as durable as sync says. secure_delete overwrites what is
// deleted, so a deleted tenant's data is not left readable in the file's
// free pages.
func OpenSQLite(ctx context.Context, dir string, logger *slog.Logger, sync Sync) (*Store, error) {
	if sync != SyncFull && sync != SyncNormal {
		return nil, fmt.Errorf("open backlog in %s: sync must be %q or %q, not %q", dir, SyncFull, SyncNormal, sync)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dir, "edgehub.db")
	if err := ownerOnly(path); err != nil {
		return nil, err
	}
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	// SQLite itself never flushes a commit: in the full mode the store
	// does, after COMMIT, so that the next commit runs during the flush
	// (wal.go); in the normal mode only SQLite's checkpoints flush.
	write, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=secure_delete(1)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open backlog %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	if err := migrate(ctx, write, logger, goose.DialectSQLite3, schema.SQLite, "sqlite"); err != nil {
		return nil, errors.Join(err, write.Close())
	}
	read, err := sql.Open("sqlite", "file:"+path+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open backlog %s for reading: %w", path, err), write.Close())
	}
	read.SetMaxOpenConns(8)
	read.SetMaxIdleConns(8)
	s := &Store{write: write, read: read, now: time.Now, d: dialect{
		listToPurge:   listToPurgeSQL,
		checkpoint:    checkpointSQLite,
		databaseBytes: `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`,
	}}
	if sync == SyncFull {
		s.wal = newWALSync(path + "-wal")
		// What the migrations wrote is flushed before anything reads it.
		if err := s.wal.syncFile(); err != nil {
			return nil, errors.Join(err, read.Close(), write.Close())
		}
	}
	if err := s.prepareReads(ctx); err != nil {
		return nil, errors.Join(err, read.Close(), write.Close())
	}
	return s, nil
}

// ownerOnly makes the database file at path, and its -wal and -shm if
// they are there, readable and writable by their owner alone (0600): the
// database holds every tenant's secrets, and a data directory that was
// there before the server (0755, say) does not keep other users out, nor
// do files that an older version left 0644. The database file is created
// here if need be, since SQLite makes its own 0644 and gives the -wal and
// -shm it creates later the database file's mode.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open backlog %s: %w", path, err)
	}
	if err := errors.Join(f.Chmod(0o600), f.Close()); err != nil {
		return fmt.Errorf("make backlog %s its owner's alone: %w", path, err)
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make %s its owner's alone: %w", p, err)
		}
	}
	return nil
}

// migrate applies the embedded migrations under dir of files, and logs
// the schema's version and the migrations this start applied.
func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger, dialect goose.Dialect, files fs.FS, dir string, opts ...goose.ProviderOption) error {
	migrations, err := fs.Sub(files, dir)
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	p, err := goose.NewProvider(dialect, db, migrations,
		append(opts, goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger))...)
	if err != nil {
		return fmt.Errorf("prepare migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate backlog: %w", err)
	}
	version, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the backlog's schema version: %w", err)
	}
	applied := make([]string, len(results))
	for i, r := range results {
		applied[i] = filepath.Base(r.Source.Path)
	}
	logger.Info("backlog migrated", "version", version, "applied", applied)
	return nil
}

// checkpointSQLite folds the WAL into the database file and empties it.
func checkpointSQLite(ctx context.Context, write *sql.DB) error {
	var busy, frames, copied int64
	if err := write.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &copied); err != nil {
		return fmt.Errorf("checkpoint after purging deleted tenants: %w", err)
	}
	if busy != 0 {
		return fmt.Errorf("checkpoint after purging deleted tenants: readers kept it from finishing (%d of %d frames copied); it is tried again on the next purge", copied, frames)
	}
	return nil
}
