// Package schema holds the backlog's schema migrations, embedded so that the
// binary carries the schema it expects and migrates any data directory it
// opens, with no files to ship beside it.
package schema

import "embed"

// Migrations are goose migrations, applied in version order by the backlog
// when it opens a database.
//
//go:embed migrations/*.sql
var Migrations embed.FS
