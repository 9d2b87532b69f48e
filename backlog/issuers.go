package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
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
	out, err := s.issuers(ctx, s.read, tenant)
	if err != nil {
		return nil, err
	}
	return out, s.seen(ctx)
}

// issuerColumns are an issuer's columns, in the order scanIssuer reads
// and PutIssuer writes them.
const issuerColumns = `name, issuer, audience, jwks_url, alg, key, version, max_ttl, require_exp, actions`

// querier is a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// issuers reads the tenant's issuers through q.
func (s *Store) issuers(ctx context.Context, q querier, tenant string) ([]auth.Issuer, error) {
	rows, err := q.QueryContext(ctx, s.q(`SELECT `+issuerColumns+` FROM issuers WHERE tenant = ? ORDER BY name`), tenant)
	if err != nil {
		return nil, fmt.Errorf("read the issuers of %s: %w", tenant, err)
	}
	defer rows.Close()
	var out []auth.Issuer
	for rows.Next() {
		var (
			iss        auth.Issuer
			requireExp bool
			actions    string
		)
		if err := rows.Scan(&iss.Name, &iss.Issuer, &iss.Audience, &iss.JWKSURL, &iss.Alg, &iss.Key, &iss.Version,
			&iss.MaxTTL, &requireExp, &actions); err != nil {
			return nil, fmt.Errorf("scan an issuer of %s: %w", tenant, err)
		}
		iss.ExpOptional, iss.Actions = !requireExp, strings.Fields(actions)
		out = append(out, iss)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the issuers of %s: %w", tenant, err)
	}
	return out, nil
}

// PutIssuer registers iss for the tenant, with a new version, replacing
// the one of the same name; created tells which. It returns ErrNoTenant
// for a tenant the admin API never created, ErrTooManyIssuers past
// MaxIssuers. A replaced issuer's streams are told to end, as a removed
// one's are. The tenant's revocations are kept as long as the issuer's
// tokens may live (keepRevoked).
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
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO issuers (tenant, `+issuerColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, name) DO UPDATE SET issuer = excluded.issuer,
			audience = excluded.audience, jwks_url = excluded.jwks_url, alg = excluded.alg, key = excluded.key, version = excluded.version,
			max_ttl = excluded.max_ttl, require_exp = excluded.require_exp, actions = excluded.actions`),
			tenant, iss.Name, iss.Issuer, iss.Audience, iss.JWKSURL, iss.Alg, iss.Key, iss.Version,
			iss.MaxTTL, !iss.ExpOptional, strings.Join(iss.Actions, " ")); err != nil {
			return fmt.Errorf("write issuer %s of %s: %w", iss.Name, tenant, err)
		}
		if err := s.keepRevoked(ctx, tx, tenant, iss); err != nil {
			return err
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

// keepRevoked lengthens, in tx, the tenant's revocations to outlive any
// token iss may accept from now on: a revoked id stays revoked while a
// token with it can still be accepted, whichever issuer signs it.
func (s *Store) keepRevoked(ctx context.Context, tx *sql.Tx, tenant string, iss auth.Issuer) error {
	until, own := iss.RevokedUntil(time.Now())
	var err error
	switch {
	case !own: // the server's cap, which every revocation's end covers
	case until.IsZero():
		_, err = tx.ExecContext(ctx, s.q(`UPDATE revoked_tokens SET until = 0 WHERE tenant = ? AND until > 0`), tenant)
	default:
		_, err = tx.ExecContext(ctx, s.q(`UPDATE revoked_tokens SET until = ? WHERE tenant = ? AND until > 0 AND until < ?`),
			until.UnixNano(), tenant, until.UnixNano())
	}
	if err != nil {
		return fmt.Errorf("keep the revocations of %s for issuer %s: %w", tenant, iss.Name, err)
	}
	return nil
}

// Revoke refuses every token of the tenant with id jti, until (zero:
// for good), what the server's cap on lifetimes asks, or longer if an
// issuer of the tenant accepts longer-lived tokens (for good if one
// accepts tokens without exp or uncapped: auth.KeepRevoked), and has
// every process end the streams such tokens opened. ErrNoTenant for a
// tenant the admin API never made.
func (s *Store) Revoke(ctx context.Context, tenant, jti string, until time.Time) error {
	return s.inTxOf(ctx, "revocation of a token of "+tenant, []string{tenant}, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT count(*) FROM tenants WHERE name = ?`), tenant).Scan(&n); err != nil {
			return fmt.Errorf("look up tenant %s: %w", tenant, err)
		}
		if n == 0 {
			return ErrNoTenant
		}
		issuers, err := s.issuers(ctx, tx, tenant)
		if err != nil {
			return err
		}
		var at int64
		if until := auth.KeepRevoked(until, time.Now(), issuers); !until.IsZero() {
			at = until.UnixNano()
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
