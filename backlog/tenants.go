package backlog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrNoTenant answers a lookup of a tenant the admin API never created (or
// deleted).
var ErrNoTenant = errors.New("unknown tenant")

// Tenant is a tenant with its secrets, as the admin API returns it.
type Tenant struct {
	Name          string `json:"tenant"`
	SigningSecret string `json:"signing_secret"`
	WebhookSecret string `json:"webhook_secret"`
	// ID is the incarnation (never reused); Generation changes with every
	// rotation. A request authorized against one commits only while the
	// tenant still has it.
	ID         int64 `json:"-"`
	Generation int64 `json:"-"`
}

// CreateTenant creates the tenant with fresh secrets, or returns the one
// that exists; created tells which.
func (s *SQLite) CreateTenant(ctx context.Context, name string) (Tenant, bool, error) {
	signing, err := secret(32)
	if err != nil {
		return Tenant{}, false, err
	}
	webhook, err := secret(24)
	if err != nil {
		return Tenant{}, false, err
	}
	gen, err := generation()
	if err != nil {
		return Tenant{}, false, err
	}
	t := Tenant{Name: name, SigningSecret: signing, WebhookSecret: "whsec_" + webhook, Generation: gen}
	err = s.write.QueryRowContext(ctx, `INSERT INTO tenants (name, signing_secret, webhook_secret, generation, created)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING id`,
		t.Name, t.SigningSecret, t.WebhookSecret, t.Generation, s.now().UnixNano()).Scan(&t.ID)
	if err == nil {
		return t, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, false, fmt.Errorf("create tenant %s: %w", name, err)
	}
	t, err = s.Tenant(ctx, name)
	return t, false, err
}

// Tenant looks a tenant up.
func (s *SQLite) Tenant(ctx context.Context, name string) (Tenant, error) {
	t := Tenant{Name: name}
	err := s.read.QueryRowContext(ctx, `SELECT id, generation, signing_secret, webhook_secret FROM tenants WHERE name = ?`, name).
		Scan(&t.ID, &t.Generation, &t.SigningSecret, &t.WebhookSecret)
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, ErrNoTenant
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("read tenant %s: %w", name, err)
	}
	return t, nil
}

// DeleteTenant removes the tenant and every topic, event, key and state of
// it in one transaction.
func (s *SQLite) DeleteTenant(ctx context.Context, name string) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin delete of tenant %s: %w", name, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, `DELETE FROM tenants WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete tenant %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNoTenant
	}
	for _, table := range []string{"events", "state", "idempotency"} {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE topic_id IN (SELECT id FROM topics WHERE tenant = ?)`, name); err != nil {
			return fmt.Errorf("delete %s of tenant %s: %w", table, name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM topics WHERE tenant = ?`, name); err != nil {
		return fmt.Errorf("delete topics of tenant %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit delete of tenant %s: %w", name, err)
	}
	return nil
}

// generation makes a tenant's random generation: positive, so that the
// zero value never matches one.
func generation() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("make a generation: %w", err)
	}
	return int64(binary.BigEndian.Uint64(b[:])>>1) | 1, nil
}

func secret(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a secret: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}
