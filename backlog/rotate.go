package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Rotate gives the tenant new secrets and a new generation, keeping its
// id and data: tokens and signatures made with the old secrets, and
// requests authorized against the old generation, are refused from then
// on.
func (s *SQLite) Rotate(ctx context.Context, name string) (Tenant, error) {
	signing, err := secret(32)
	if err != nil {
		return Tenant{}, err
	}
	webhook, err := secret(24)
	if err != nil {
		return Tenant{}, err
	}
	gen, err := generation()
	if err != nil {
		return Tenant{}, err
	}
	t := Tenant{Name: name, SigningSecret: signing, WebhookSecret: "whsec_" + webhook, Generation: gen}
	err = s.write.QueryRowContext(ctx, `UPDATE tenants SET signing_secret = ?, webhook_secret = ?, generation = ?
		WHERE name = ? RETURNING id`, t.SigningSecret, t.WebhookSecret, t.Generation, name).Scan(&t.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, ErrNoTenant
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("rotate tenant %s: %w", name, err)
	}
	return t, nil
}
