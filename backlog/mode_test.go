package backlog

import (
	"context"
	"database/sql"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/edgehub/edgehub/sql/schema"
)

// A data directory written before servers recorded their mode, holding
// topics of tenants that have no row (which only dev mode makes), is
// dev-mode data once migrated: a production server cannot claim it. One
// whose topics all belong to tenants is left for the first server.
func TestDataWrittenBeforeModesIsDevWhenItHasRowlessTenants(t *testing.T) {
	for _, c := range []struct {
		name     string
		rowless  bool
		wantMode string
	}{{"rowless tenant", true, ModeDev}, {"tenants only", false, ModeProduction}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "edgehub.db"))
			if err != nil {
				t.Fatal(err)
			}
			migrations, _ := fs.Sub(schema.SQLite, "sqlite")
			p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations, goose.WithDisableGlobalRegistry(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.UpTo(context.Background(), 8); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`INSERT INTO tenants (name, signing_secret, webhook_secret, generation, created) VALUES ('acme', 's', 'w', 1, 0)`); err != nil {
				t.Fatal(err)
			}
			tenant := "acme"
			if c.rowless {
				tenant = "devname"
			}
			if _, err := db.Exec(`INSERT INTO topics (tenant, topic, head) VALUES (?, 'x', 0)`, tenant); err != nil {
				t.Fatal(err)
			}
			db.Close()
			l, err := OpenSQLite(context.Background(), dir, slog.New(slog.NewTextHandler(io.Discard, nil)), SyncFull)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got, err := l.ClaimMode(context.Background(), ModeProduction); err != nil || got != c.wantMode {
				t.Fatalf("mode %q (%v), want %q", got, err, c.wantMode)
			}
		})
	}
}
