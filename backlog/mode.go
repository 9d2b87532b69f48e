package backlog

import (
	"context"
	"fmt"
)

// Modes a database is opened in; see ClaimMode.
const (
	ModeDev        = "dev"
	ModeProduction = "production"
)

// ClaimMode records mode as the database's mode if it has none yet, and
// returns the mode it has. A server refuses to open a database of the
// other mode: in dev mode every name is a tenant and nothing needs
// credentials, so a production tenant created later under a dev tenant's
// name would otherwise see that name's dev-mode events.
func (s *Store) ClaimMode(ctx context.Context, mode string) (string, error) {
	if _, err := s.exec(ctx,
		`INSERT INTO meta (key, value) VALUES ('mode', ?) ON CONFLICT (key) DO NOTHING`, mode); err != nil {
		return "", fmt.Errorf("record the database's mode: %w", err)
	}
	var got string
	if err := s.write.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'mode'`).Scan(&got); err != nil {
		return "", fmt.Errorf("read the database's mode: %w", err)
	}
	return got, nil
}
