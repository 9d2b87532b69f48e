package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/edgehub/edgehub/auth"
)

// ErrNoIssuer answers a removal of an issuer the tenant does not have.
var ErrNoIssuer = errors.New("unknown issuer")

// ErrTooManyIssuers refuses a registration past MaxIssuers.
var ErrTooManyIssuers = fmt.Errorf("a tenant trusts at most %d issuers", MaxIssuers)

// MaxIssuers is how many issuers one tenant may register: each token
// without a key of its own may be tried against all of them.
const MaxIssuers = 16

// Issuers are the issuers the tenant trusts, by name.
func (s *Store) Issuers(ctx context.Context, tenant string) ([]auth.Issuer, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT name, issuer, audience, jwks_url, alg, key, version
		FROM issuers WHERE tenant = ? ORDER BY name`), tenant)
	if err != nil {
		return nil, fmt.Errorf("read the issuers of %s: %w", tenant, err)
	}
	defer rows.Close()
	var out []auth.Issuer
	for rows.Next() {
		var iss auth.Issuer
		if err := rows.Scan(&iss.Name, &iss.Issuer, &iss.Audience, &iss.JWKSURL, &iss.Alg, &iss.Key, &iss.Version); err != nil {
			return nil, fmt.Errorf("scan an issuer of %s: %w", tenant, err)
		}
		out = append(out, iss)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the issuers of %s: %w", tenant, err)
	}
	return out, s.seen(ctx)
}

// PutIssuer registers iss for the tenant, with a new version, replacing
// the one of the same name; created tells which. It returns ErrNoTenant
// for a tenant the admin API never created, ErrTooManyIssuers past
// MaxIssuers. A replaced issuer's streams are told to end, as a removed
// one's are.
func (s *Store) PutIssuer(ctx context.Context, tenant string, iss auth.Issuer) (_ auth.Issuer, created bool, _ error) {
	version, err := generation()
	if err != nil {
		return iss, false, err
	}
	iss.Version = version
	err = s.inTxOf(ctx, "registration of an issuer of "+tenant, []string{tenant}, func(tx *sql.Tx) error {
		var n, same int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT count(*) FROM tenants WHERE name = ?`), tenant).Scan(&n); err != nil {
			return fmt.Errorf("look up tenant %s: %w", tenant, err)
		}
		if n == 0 {
			return ErrNoTenant
		}
		if err := tx.QueryRowContext(ctx, s.q(`SELECT count(*), coalesce(sum(CASE WHEN name = ? THEN 1 ELSE 0 END), 0) FROM issuers WHERE tenant = ?`),
			iss.Name, tenant).Scan(&n, &same); err != nil {
			return fmt.Errorf("count the issuers of %s: %w", tenant, err)
		}
		created = same == 0
		if created && n >= MaxIssuers {
			return ErrTooManyIssuers
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO issuers (tenant, name, issuer, audience, jwks_url, alg, key, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, name) DO UPDATE SET issuer = excluded.issuer,
			audience = excluded.audience, jwks_url = excluded.jwks_url, alg = excluded.alg, key = excluded.key, version = excluded.version`),
			tenant, iss.Name, iss.Issuer, iss.Audience, iss.JWKSURL, iss.Alg, iss.Key, iss.Version); err != nil {
			return fmt.Errorf("write issuer %s of %s: %w", iss.Name, tenant, err)
		}
		if created {
			return nil
		}
		return s.revoked(ctx, tx, tenant, RevokedIssuer, iss.Name)
	})
	return iss, created, err
}

// DeleteIssuer removes an issuer: its tokens are refused from the commit
// on, and every process ends the streams they opened. ErrNoIssuer if
// there is none of that name.
func (s *Store) DeleteIssuer(ctx context.Context, tenant, name string) error {
	return s.inTxOf(ctx, "removal of an issuer of "+tenant, []string{tenant}, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM issuers WHERE tenant = ? AND name = ?`), tenant, name)
		if err != nil {
			return fmt.Errorf("delete issuer %s of %s: %w", name, tenant, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(ErrNoIssuer, err)
		}
		return s.revoked(ctx, tx, tenant, RevokedIssuer, name)
	})
}

// Revoke refuses every token of the tenant with id jti, until (zero:
// for as long as the row is kept, which a token's exp cannot outlive
// when the server caps lifetimes), and has every process end the streams
// such tokens opened. ErrNoTenant for a tenant the admin API never made.
func (s *Store) Revoke(ctx context.Context, tenant, jti string, until time.Time) error {
	var at int64
	if !until.IsZero() {
		at = until.UnixNano()
	}
	return s.inTxOf(ctx, "revocation of a token of "+tenant, []string{tenant}, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT count(*) FROM tenants WHERE name = ?`), tenant).Scan(&n); err != nil {
			return fmt.Errorf("look up tenant %s: %w", tenant, err)
		}
		if n == 0 {
			return ErrNoTenant
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO revoked_tokens (tenant, jti, until) VALUES (?, ?, ?)
			ON CONFLICT (tenant, jti) DO UPDATE SET until = excluded.until`), tenant, jti, at); err != nil {
			return fmt.Errorf("revoke token %q of %s: %w", jti, tenant, err)
		}
		return s.revoked(ctx, tx, tenant, RevokedToken, jti)
	})
}

// Revoked says whether the tenant's token id jti was revoked.
func (s *Store) Revoked(ctx context.Context, tenant, jti string) (bool, error) {
	var n int
	if err := s.read.QueryRowContext(ctx, s.q(`SELECT count(*) FROM revoked_tokens WHERE tenant = ? AND jti = ?`), tenant, jti).Scan(&n); err != nil {
		return false, fmt.Errorf("look up revoked token %q of %s: %w", jti, tenant, err)
	}
	return n > 0, s.seen(ctx)
}

// PurgeRevoked forgets revocations of tokens that have expired for sure,
// and returns how many.
func (s *Store) PurgeRevoked(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM revoked_tokens WHERE until > 0 AND until < ?`, now.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("purge expired revocations: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("count purged revocations: %w", err)
	}
	return n, nil
}

// What a revocation hint names: an issuer's registration, or a token id.
const (
	RevokedIssuer = "i"
	RevokedToken  = "j"
)

// revoked tells the other processes, inside the revoking transaction, to
// end the streams opened with what it names.
func (s *Store) revoked(ctx context.Context, tx *sql.Tx, tenant, kind, name string) error {
	if s.d.hints == nil {
		return nil
	}
	return s.d.hints.send(ctx, tx, "r "+s.d.hints.process+" "+tenant+" "+kind+" "+url.PathEscape(name))
}
