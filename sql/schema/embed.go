// Package schema holds the backlog's schema migrations, embedded so that the
// binary carries the schema it expects and migrates any database it opens,
// with no files to ship beside it. Each store has its own: SQLite's carry
// the history of data directories written by earlier versions, Postgres's
// start from the schema those reached.
package schema

import "embed"

// SQLite and Postgres are goose migrations, under sqlite/ and postgres/,
// applied in version order by the backlog when it opens a database.
//
//go:embed sqlite/*.sql
var SQLite embed.FS

//go:embed postgres/*.sql
var Postgres embed.FS
