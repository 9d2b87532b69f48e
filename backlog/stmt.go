package backlog

import (
	"context"
	"database/sql"
)

// stmt is one of the commit's statements, bound to its transaction. The
// commit's logic (commit.go, streams.go) is written once against it; on
// SQLite it is a prepared *sql.Stmt (sqlStmt), on PostgreSQL a statement
// of the commit's pipeline (pgStmt), which sends the writes it is given
// with the next statement whose answer the logic waits for, so that a
// commit takes two round trips instead of one per statement.
type stmt interface {
	// ExecContext runs a write. On PostgreSQL it is queued: its error, if
	// any, comes from the next query or from the commit, and its result
	// is not known.
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
	// QueryRowContext runs a query for one row; Scan says sql.ErrNoRows
	// when there is none.
	QueryRowContext(ctx context.Context, args ...any) rowScanner
	// QueryContext runs a query for rows.
	QueryContext(ctx context.Context, args ...any) (rowsScanner, error)
	Close() error
}

// rowScanner is one row of a query's answer (*sql.Row on SQLite).
type rowScanner interface {
	Scan(dest ...any) error
}

// rowsScanner is a query's rows (*sql.Rows on SQLite).
type rowsScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// sqlStmt is a database/sql prepared statement as a stmt.
type sqlStmt struct{ *sql.Stmt }

func (s sqlStmt) QueryRowContext(ctx context.Context, args ...any) rowScanner {
	return s.Stmt.QueryRowContext(ctx, args...)
}

func (s sqlStmt) QueryContext(ctx context.Context, args ...any) (rowsScanner, error) {
	return s.Stmt.QueryContext(ctx, args...)
}
