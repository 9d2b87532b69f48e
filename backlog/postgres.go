package backlog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/edgehub/edgehub/sql/schema"
)

// OpenPostgres opens the shared log at url (postgres://...) and migrates
// it; several processes may open one database at once, and the first to
// take goose's advisory lock migrates it. Writes run SERIALIZABLE, so that
// the commit, retention and the admin API keep the invariants they keep
// on SQLite's single writer, and are retried when PostgreSQL aborts one
// for having raced another process's. Reads run REPEATABLE READ, so a
// topic's row and its events agree.
func OpenPostgres(ctx context.Context, url string, logger *slog.Logger) (*Store, error) {
	return openPostgres(ctx, url, logger, nil)
}

// openPostgres is OpenPostgres; tune, if set, adjusts the write pool's
// connections (tests count their round trips).
func openPostgres(ctx context.Context, url string, logger *slog.Logger, tune func(*pgx.ConnConfig)) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse --store: %w", err)
	}
	where := fmt.Sprintf("postgres %s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	writeCfg := cfg.Copy()
	writeCfg.RuntimeParams["default_transaction_isolation"] = "serializable"
	// A peer that holds a tenant's commit lock and hangs must not stop
	// this process's committer for good: the commit fails instead.
	writeCfg.RuntimeParams["lock_timeout"] = "10s"
	if tune != nil {
		tune(writeCfg)
	}
	write := stdlib.OpenDB(*writeCfg)
	write.SetMaxOpenConns(4)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("lock migrations of %s: %w", where, err), write.Close())
	}
	if err := migrate(ctx, write, logger, goose.DialectPostgres, schema.Postgres, "postgres", goose.WithSessionLocker(locker)); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", where, err), write.Close())
	}
	readCfg := cfg.Copy()
	readCfg.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	readCfg.RuntimeParams["default_transaction_read_only"] = "on"
	read := stdlib.OpenDB(*readCfg)
	read.SetMaxOpenConns(8)
	read.SetMaxIdleConns(8)
	// The listener names itself, so that operators (and tests) can find
	// its backend among the pools'.
	listenCfg := cfg.Copy()
	listenCfg.RuntimeParams["application_name"] = ListenerName
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, errors.Join(fmt.Errorf("make a process id: %w", err), read.Close(), write.Close())
	}
	s := &Store{write: write, read: read, now: time.Now, d: dialect{
		dollar:        true,
		readTx:        &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead},
		retryable:     raced,
		lockTenants:   lockTenants,
		listToPurge:   `SELECT id FROM topics WHERE trimmed > purged AND id > ?1 ORDER BY id LIMIT ?2`,
		hints:         &hinter{process: hex.EncodeToString(id), listen: listenCfg},
		databaseBytes: `SELECT pg_database_size(current_database())`,
	}}
	plan := s.pgPlan()
	s.d.commit = func(ctx context.Context, reqs []*Publish) ([]Result, error) {
		return s.commitPipelined(ctx, reqs, plan)
	}
	if err := s.prepareReads(ctx); err != nil {
		return nil, errors.Join(err, read.Close(), write.Close())
	}
	return s, nil
}

// ListenerName is the application_name of a process's hint listener.
const ListenerName = "edgehub-hints"

// raced says PostgreSQL aborted a transaction only because another ran
// beside it: a serialization failure, a deadlock, or a unique row that a
// concurrent transaction inserted first (this store inserts a row only
// after it looked and found none).
func raced(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	switch pg.Code {
	case "40001", "40P01", "23505":
		return true
	}
	return false
}

// lockTenants takes, on conn, the session advisory locks of tenants that
// the pipelined commit takes (commitPipelined), for the admin API's
// transactions that must not run beside a commit of the tenant.
func lockTenants(ctx context.Context, conn *sql.Conn, tenants []string) (func(), error) {
	unlock := func() {
		// A lock left behind would stop the tenant's commits everywhere: if
		// the unlock fails, the connection goes, and its locks with it.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), unlockSQL); err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // discards the connection
		}
	}
	for _, k := range tenantKeys(tenants) {
		if _, err := conn.ExecContext(ctx, lockSQL, int32(tenantLocks), k); err != nil {
			unlock()
			return nil, fmt.Errorf("lock tenant commits: %w", err)
		}
	}
	return unlock, nil
}
