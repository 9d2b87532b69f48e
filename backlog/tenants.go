package backlog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/edgehub/edgehub/auth"
)

// ErrNoTenant answers a lookup of a tenant the admin API never created (or
// deleted).
var ErrNoTenant = errors.New("unknown tenant")

// CreateTenant creates the tenant with fresh secrets, or returns the one
// that exists; created tells which.
func (s *Store) CreateTenant(ctx context.Context, name string) (auth.Tenant, bool, error) {
	t, err := freshSecrets(name)
	if err != nil {
		return auth.Tenant{}, false, err
	}
	err = s.retry(ctx, func() error {
		return s.wrote(func() error {
			return s.write.QueryRowContext(ctx, s.q(`INSERT INTO tenants (name, signing_secret, webhook_secret, generation, created)
				VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING id`),
				t.Name, t.SigningSecret, t.WebhookSecret, t.Generation, s.now().UnixNano()).Scan(&t.ID)
		})
	})
	if err == nil {
		return t, true, s.flush()
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return auth.Tenant{}, false, fmt.Errorf("create tenant %s: %w", name, err)
	}
	t, err = s.Tenant(ctx, name)
	return t, false, err
}

// Tenant looks a tenant up, with its Mercure settings.
func (s *Store) Tenant(ctx context.Context, name string) (auth.Tenant, error) {
	t := auth.Tenant{Name: name}
	var origins string
	err := s.read.QueryRowContext(ctx, s.q(`SELECT id, generation, signing_secret, webhook_secret,
		mercure_anonymous, mercure_subscriptions, mercure_publish_origins FROM tenants WHERE name = ?`), name).
		Scan(&t.ID, &t.Generation, &t.SigningSecret, &t.WebhookSecret,
			&t.Mercure.Anonymous, &t.Mercure.Subscriptions, &origins)
	if errors.Is(err, sql.ErrNoRows) {
		return auth.Tenant{}, ErrNoTenant
	}
	if err != nil {
		return auth.Tenant{}, fmt.Errorf("read tenant %s: %w", name, err)
	}
	if err := json.Unmarshal([]byte(origins), &t.Mercure.PublishOrigins); err != nil {
		return auth.Tenant{}, fmt.Errorf("read the publish origins of tenant %s: %w", name, err)
	}
	if t.Mercure.PublishOrigins == nil {
		t.Mercure.PublishOrigins = []string{}
	}
	return t, s.seen(ctx)
}

// UpdateMercureSettings changes the tenant's Mercure settings with
// change, in one transaction (two admins' changes of different settings
// both land), and returns them as stored; change's error refuses the
// update, and ErrNoTenant answers a tenant the admin API never created.
func (s *Store) UpdateMercureSettings(ctx context.Context, name string, change func(*auth.MercureSettings) error) (auth.MercureSettings, error) {
	var m auth.MercureSettings
	err := s.inTx(ctx, "the Mercure settings of tenant "+name, func(tx *sql.Tx) error {
		m = auth.MercureSettings{}
		var origins string
		err := tx.QueryRowContext(ctx, s.q(`SELECT mercure_anonymous, mercure_subscriptions, mercure_publish_origins
			FROM tenants WHERE name = ?`), name).Scan(&m.Anonymous, &m.Subscriptions, &origins)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNoTenant
		}
		if err != nil {
			return fmt.Errorf("read the Mercure settings of tenant %s: %w", name, err)
		}
		if err := json.Unmarshal([]byte(origins), &m.PublishOrigins); err != nil {
			return fmt.Errorf("read the publish origins of tenant %s: %w", name, err)
		}
		if err := change(&m); err != nil {
			return err
		}
		if m.PublishOrigins == nil {
			m.PublishOrigins = []string{}
		}
		encoded, err := json.Marshal(m.PublishOrigins)
		if err != nil {
			return fmt.Errorf("encode the publish origins of tenant %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE tenants SET mercure_anonymous = ?, mercure_subscriptions = ?,
			mercure_publish_origins = ? WHERE name = ?`), m.Anonymous, m.Subscriptions, string(encoded), name); err != nil {
			return fmt.Errorf("write the Mercure settings of tenant %s: %w", name, err)
		}
		return nil
	})
	return m, err
}

// TenantEntry is one tenant of the admin API's list: its name and when it
// was created. It holds no secret: a list is for finding a tenant, and
// its secrets are one GET away.
type TenantEntry struct {
	Name    string
	Created time.Time
}

// Tenants lists up to limit tenants whose names come after after, in byte
// order of their names: the tenants the admin API created and has not
// deleted (dev mode's tenants that no PUT created have no row, as a GET
// of them is 404).
func (s *Store) Tenants(ctx context.Context, after string, limit int) ([]TenantEntry, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT name, created FROM tenants WHERE name > ? ORDER BY name LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	var list []TenantEntry
	for rows.Next() {
		var e TenantEntry
		var created int64
		if err := rows.Scan(&e.Name, &created); err != nil {
			return nil, fmt.Errorf("list tenants: %w", err)
		}
		e.Created = time.Unix(0, created).UTC()
		list = append(list, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return list, s.seen(ctx)
}

// DeleteTenant removes the tenant in one short transaction, whatever it
// stores: its row, its usage and its topics go (so new requests are
// refused and its names are free again), and its topic ids are written to
// doomed_topics, whose events, state and keys PurgeDoomed removes later in
// small chunks. Topic ids are never reused, so that purge cannot reach a
// topic created after this. It returns ErrNoTenant when the tenant had no
// row; its topics (dev mode has tenants without rows) are still removed.
func (s *Store) DeleteTenant(ctx context.Context, name string) error {
	var found bool
	// Under the tenant's lock, as its commits (PostgreSQL): one that
	// creates a topic must be seen by this deletion, or see it.
	err := s.inTxOf(ctx, "delete of tenant "+name, []string{name}, func(tx *sql.Tx) error {
		var id int64
		err := tx.QueryRowContext(ctx, s.q(`DELETE FROM tenants WHERE name = ? RETURNING id`), name).Scan(&id)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delete tenant %s: %w", name, err)
		}
		found = err == nil
		for _, step := range []struct {
			what, sql string
			args      []any
		}{
			{"usage", `DELETE FROM usage WHERE tenant = ?`, []any{name}},
			{"doomed topics", `INSERT INTO doomed_topics (id) SELECT id FROM topics WHERE tenant = ?`, []any{name}},
			{"doomed webhook keys", `INSERT INTO doomed_tenants (name, id, deleted) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
				[]any{name, id, s.now().UnixNano()}},
			{"topics", `DELETE FROM topics WHERE tenant = ?`, []any{name}},
			{"issuers", `DELETE FROM issuers WHERE tenant = ?`, []any{name}},
			{"revoked tokens", `DELETE FROM revoked_tokens WHERE tenant = ?`, []any{name}},
			// Its subscribers' ends are announced nowhere: the log they
			// would go to is gone with it.
			{"presence", `DELETE FROM presence WHERE tenant = ?`, []any{name}},
		} {
			if _, err := tx.ExecContext(ctx, s.q(step.sql), step.args...); err != nil {
				return fmt.Errorf("delete %s of tenant %s: %w", step.what, name, err)
			}
		}
		return s.tenantEnded(ctx, tx, name)
	})
	if err != nil {
		return err
	}
	if !found {
		return ErrNoTenant
	}
	return nil
}

// PurgeDoomed removes what deleted tenants left: the events, state and
// idempotency keys of doomed topics and the webhook keys of doomed
// tenants, at most purgeChunk rows per transaction, so other tenants'
// commits run between chunks. Once a batch of doomed topics is empty it
// checkpoints the WAL with TRUNCATE before it forgets them: with
// secure_delete on, the deleted data is then gone from the database file
// and from the WAL, and a checkpoint that readers kept from finishing is
// tried again next time. It returns the number of rows removed.
func (s *Store) PurgeDoomed(ctx context.Context) (int64, error) {
	var removed int64
	for {
		ids, names, err := s.listDoomed(ctx)
		if err != nil || len(ids)+len(names) == 0 {
			return removed, err
		}
		for _, id := range ids {
			for more := true; more; {
				s.beforeTx("doomed")
				var n int64
				n, err = s.purgeDoomedTopic(ctx, id)
				removed += n
				if err != nil {
					return removed, err
				}
				more = n > 0
			}
		}
		for _, t := range names {
			for more := true; more; {
				s.beforeTx("doomed")
				res, err := s.exec(ctx, `DELETE FROM webhook_keys WHERE tenant = ?1 AND key IN
					(SELECT key FROM webhook_keys WHERE tenant = ?1 AND tenant_id = ?2 AND created <= ?3 LIMIT ?4)`,
					t.name, t.id, t.deleted, purgeChunk)
				if err != nil {
					return removed, fmt.Errorf("purge webhook keys of deleted tenant %s: %w", t.name, err)
				}
				n, err := res.RowsAffected()
				if err != nil {
					return removed, fmt.Errorf("count purged webhook keys of deleted tenant %s: %w", t.name, err)
				}
				removed += n
				more = n > 0
			}
		}
		if err := s.checkpoint(ctx); err != nil {
			return removed, err
		}
		if err := s.forgetDoomed(ctx, ids, names); err != nil {
			return removed, err
		}
	}
}

// doomedTenant is a row of doomed_tenants.
type doomedTenant struct {
	name        string
	id, deleted int64
}

// listDoomed reads a batch of doomed topics and tenants.
func (s *Store) listDoomed(ctx context.Context) ([]int64, []doomedTenant, error) {
	ids, err := s.listTopics(ctx, `SELECT id FROM doomed_topics WHERE id > ?1 ORDER BY id LIMIT ?2`, 0)
	if err != nil {
		return nil, nil, err
	}
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT name, id, deleted FROM doomed_tenants LIMIT ?`), topicChunk)
	if err != nil {
		return nil, nil, fmt.Errorf("list deleted tenants: %w", err)
	}
	defer rows.Close()
	var names []doomedTenant
	for rows.Next() {
		var t doomedTenant
		if err := rows.Scan(&t.name, &t.id, &t.deleted); err != nil {
			return nil, nil, fmt.Errorf("scan deleted tenant: %w", err)
		}
		names = append(names, t)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list deleted tenants: %w", err)
	}
	return ids, names, nil
}

// purgeDoomedTopic deletes up to purgeChunk rows of a doomed topic, events
// first, then state, then idempotency keys, in one transaction, and
// returns how many it deleted: 0 means none are left.
func (s *Store) purgeDoomedTopic(ctx context.Context, id int64) (int64, error) {
	var deleted int64
	err := s.inTx(ctx, fmt.Sprintf("purge of deleted topic %d", id), func(tx *sql.Tx) error {
		deleted = 0
		for _, q := range []struct{ table, sql string }{
			{"events", `DELETE FROM events WHERE topic_id = ?1 AND seq IN
				(SELECT seq FROM events WHERE topic_id = ?1 ORDER BY seq LIMIT ?2)`},
			{"state", `DELETE FROM state WHERE topic_id = ?1 AND key IN
				(SELECT key FROM state WHERE topic_id = ?1 LIMIT ?2)`},
			{"idempotency", `DELETE FROM idempotency WHERE topic_id = ?1 AND key IN
				(SELECT key FROM idempotency WHERE topic_id = ?1 LIMIT ?2)`},
			{"trimmed update ids", `DELETE FROM trimmed_updates WHERE topic_id = ?1 AND update_id IN
				(SELECT update_id FROM trimmed_updates WHERE topic_id = ?1 LIMIT ?2)`},
		} {
			if deleted == purgeChunk {
				break
			}
			res, err := tx.ExecContext(ctx, s.q(q.sql), id, purgeChunk-deleted)
			if err != nil {
				return fmt.Errorf("purge %s of deleted topic %d: %w", q.table, id, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("count purged %s of deleted topic %d: %w", q.table, id, err)
			}
			deleted += n
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return deleted, nil
}

// checkpoint lets the store take what the purge deleted out of its files
// (SQLite's WAL kept the pages that held it before secure_delete zeroed
// them); it fails when readers kept it from finishing.
func (s *Store) checkpoint(ctx context.Context) error {
	if s.d.checkpoint == nil {
		return nil
	}
	return s.d.checkpoint(ctx, s.write)
}

// forgetDoomed deletes the doomed rows whose data is gone.
func (s *Store) forgetDoomed(ctx context.Context, ids []int64, names []doomedTenant) error {
	return s.inTx(ctx, "forgetting deleted tenants", func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM doomed_topics WHERE id = ?`), id); err != nil {
				return fmt.Errorf("forget deleted topic %d: %w", id, err)
			}
		}
		for _, t := range names {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM doomed_tenants WHERE name = ? AND id = ? AND deleted = ?`),
				t.name, t.id, t.deleted); err != nil {
				return fmt.Errorf("forget deleted tenant %s: %w", t.name, err)
			}
		}
		return nil
	})
}

// Rotate gives the tenant new signing and webhook secrets and a new
// generation, keeping its id: tokens and webhook signatures made with the
// old secrets stop verifying, and a request authorized before the rotation
// no longer commits. It returns ErrNoTenant for an unknown tenant.
func (s *Store) Rotate(ctx context.Context, name string) (auth.Tenant, error) {
	t, err := freshSecrets(name)
	if err != nil {
		return auth.Tenant{}, err
	}
	// Under the tenant's lock (PostgreSQL): a commit authorized by the old
	// secrets lands before the rotation returns, or not at all.
	err = s.inTxOf(ctx, "rotation of tenant "+name, []string{name}, func(tx *sql.Tx) error {
		var origins string
		err := tx.QueryRowContext(ctx, s.q(`UPDATE tenants SET signing_secret = ?, webhook_secret = ?, generation = ?
			WHERE name = ? RETURNING id, mercure_anonymous, mercure_subscriptions, mercure_publish_origins`),
			t.SigningSecret, t.WebhookSecret, t.Generation, name).Scan(&t.ID, &t.Mercure.Anonymous, &t.Mercure.Subscriptions, &origins)
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(origins), &t.Mercure.PublishOrigins); err != nil {
			return fmt.Errorf("read the publish origins of tenant %s: %w", name, err)
		}
		return s.tenantEnded(ctx, tx, name)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return auth.Tenant{}, ErrNoTenant
	}
	if err != nil {
		return auth.Tenant{}, fmt.Errorf("rotate secrets of tenant %s: %w", name, err)
	}
	return t, nil
}

// freshSecrets makes a tenant's secrets and generation, as a creation or
// a rotation gives them: 32 random bytes of signing secret, 24 of webhook
// secret, both base64.
func freshSecrets(name string) (auth.Tenant, error) {
	signing, err := secret(32)
	if err != nil {
		return auth.Tenant{}, err
	}
	webhook, err := secret(24)
	if err != nil {
		return auth.Tenant{}, err
	}
	gen, err := generation()
	if err != nil {
		return auth.Tenant{}, err
	}
	return auth.Tenant{Name: name, SigningSecret: signing, WebhookSecret: "whsec_" + webhook, Generation: gen}, nil
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
