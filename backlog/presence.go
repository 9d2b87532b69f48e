package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Presence is who is subscribed now, across every process of one store
// (plan 050): the rows of announced subscriptions. A row is added and
// removed only by the commit that appends its announcement (a Publish
// with a PresenceOp), so the rows and the announcements in the log always
// agree; each row names the process that serves it (its owner), which
// holds a lease while it lives. Once a lease has expired, any process may
// end the owner's rows, each subscriber's in one commit that appends
// their end.

// PresenceOp makes a Publish add or remove one subscriber's presence rows
// in the transaction that commits its events (the announcement).
type PresenceOp struct {
	Subscriber, Owner string
	// Add are the rows to add (their start is announced); with none, the
	// op removes the subscriber's rows, which must be exactly Remove of
	// them, all of Owner's: if another commit removed them first (a
	// process that ended a dead owner's rows), the request is refused
	// with ErrPresenceGone and appends nothing, so no end is announced
	// twice.
	Add    []PresenceRow
	Remove int
}

// PresenceRow is one announced subscription: its id (unique in its
// tenant) and the body that lists it.
type PresenceRow struct {
	ID   string
	Body []byte
}

// ErrPresenceGone refuses a removal of presence rows that are no longer
// there: their end was announced already.
var ErrPresenceGone = errors.New("the subscriptions were ended already")

func (st *statements) presenceList() []statementSQL {
	return []statementSQL{
		{&st.countPresence, `SELECT count(*) FROM presence WHERE tenant = ? AND subscriber = ? AND owner = ?`},
		{&st.putPresence, `INSERT INTO presence (tenant, id, subscriber, owner, body) VALUES (?, ?, ?, ?, ?)`},
		{&st.dropPresence, `DELETE FROM presence WHERE tenant = ? AND subscriber = ? AND owner = ?`},
	}
}

// presenceCheck refuses a removal whose rows are gone; it writes nothing.
func (a *commitTx) presenceCheck(req *Publish) (*Result, error) {
	op := req.Presence
	if len(op.Add) > 0 {
		return nil, nil
	}
	var n int
	if err := a.countPresence.QueryRowContext(a.ctx, req.Tenant, op.Subscriber, op.Owner).Scan(&n); err != nil {
		return nil, fmt.Errorf("count the presence of subscriber %s of %s: %w", op.Subscriber, req.Tenant, err)
	}
	if n != op.Remove {
		return &Result{Err: ErrPresenceGone}, nil
	}
	return nil, nil
}

// presenceApply adds or removes the rows, once the request's events are
// in.
func (a *commitTx) presenceApply(req *Publish) error {
	op := req.Presence
	if len(op.Add) == 0 {
		if _, err := a.dropPresence.ExecContext(a.ctx, req.Tenant, op.Subscriber, op.Owner); err != nil {
			return fmt.Errorf("remove the presence of subscriber %s of %s: %w", op.Subscriber, req.Tenant, err)
		}
		return nil
	}
	for _, row := range op.Add {
		if _, err := a.putPresence.ExecContext(a.ctx, req.Tenant, row.ID, op.Subscriber, op.Owner, row.Body); err != nil {
			return fmt.Errorf("add the presence %s of %s: %w", row.ID, req.Tenant, err)
		}
	}
	return nil
}

// PresencePage is the tenant's presence rows whose ids start with a
// prefix, in byte order, and the tenant's head in the same snapshot: a
// row's start is at or before it exactly when the row is listed, and the
// announcements after it tell every change since.
type PresencePage struct {
	Head   int64
	Bodies [][]byte
}

// Presence reads the tenant's presence rows whose id starts with prefix
// (an ASCII prefix, not empty), at most limit, and its head, in one read
// transaction.
func (s *Store) Presence(ctx context.Context, tenant, prefix string, limit int) (PresencePage, error) {
	var p PresencePage
	tx, err := s.read.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return p, fmt.Errorf("begin a read of the presence of %s: %w", tenant, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	err = tx.QueryRowContext(ctx, s.q(`SELECT pos FROM usage WHERE tenant = ?`), tenant).Scan(&p.Head)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("read the head of %s: %w", tenant, err)
	}
	// The ids from prefix up to the first that does not start with it,
	// in byte order (SQLite's, and the C collation of PostgreSQL's
	// column): the prefix with its last byte one more. Ids are
	// percent-encoded, so that byte is ASCII.
	end := prefix
	if n := len(prefix); n > 0 {
		end = prefix[:n-1] + string(rune(prefix[n-1]+1))
	}
	rows, err := tx.QueryContext(ctx, s.q(`SELECT body FROM presence WHERE tenant = ? AND id >= ? AND id < ? ORDER BY id LIMIT ?`),
		tenant, prefix, end, limit)
	if err != nil {
		return p, fmt.Errorf("read the presence of %s: %w", tenant, err)
	}
	defer rows.Close()
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return p, fmt.Errorf("read the presence of %s: %w", tenant, err)
		}
		p.Bodies = append(p.Bodies, body)
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("read the presence of %s: %w", tenant, err)
	}
	return p, s.seen(ctx)
}

// RenewLease keeps owner's lease until until: its presence rows are its
// own while it holds it. A lease that lapsed and was taken back (its
// rows ended) is simply held again.
func (s *Store) RenewLease(ctx context.Context, owner string, until time.Time) error {
	_, err := s.exec(ctx, `INSERT INTO leases (owner, expires) VALUES (?1, ?2)
		ON CONFLICT (owner) DO UPDATE SET expires = excluded.expires`, owner, until.UnixNano())
	if err != nil {
		return fmt.Errorf("renew the lease of %s: %w", owner, err)
	}
	return nil
}

// DropLease gives owner's lease up: a process that ended its own
// subscriptions on its way out leaves nothing for the others to end.
func (s *Store) DropLease(ctx context.Context, owner string) error {
	if _, err := s.exec(ctx, `DELETE FROM leases WHERE owner = ?1`, owner); err != nil {
		return fmt.Errorf("drop the lease of %s: %w", owner, err)
	}
	return nil
}

// Orphan is one subscriber whose owner's lease expired (or is gone): its
// presence rows' ids and bodies, to announce their end.
type Orphan struct {
	Tenant, Subscriber, Owner string
	Rows                      []PresenceRow
}

// Orphans lists the subscribers, up to limit rows in all, whose owner
// holds no lease at now, and lets go of the expired leases that own no
// row any more.
func (s *Store) Orphans(ctx context.Context, now time.Time, limit int) ([]Orphan, error) {
	if _, err := s.exec(ctx, `DELETE FROM leases WHERE expires < ?1 AND NOT EXISTS
		(SELECT 1 FROM presence p WHERE p.owner = leases.owner)`, now.UnixNano()); err != nil {
		return nil, fmt.Errorf("drop expired leases: %w", err)
	}
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT p.tenant, p.subscriber, p.owner, p.id, p.body FROM presence p
		WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.owner = p.owner AND l.expires >= ?)
		ORDER BY p.tenant, p.subscriber, p.owner LIMIT ?`), now.UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("list orphaned subscriptions: %w", err)
	}
	defer rows.Close()
	var out []Orphan
	n := 0
	for ; rows.Next(); n++ {
		var o Orphan
		var row PresenceRow
		if err := rows.Scan(&o.Tenant, &o.Subscriber, &o.Owner, &row.ID, &row.Body); err != nil {
			return nil, fmt.Errorf("list orphaned subscriptions: %w", err)
		}
		if n := len(out); n > 0 && out[n-1].Tenant == o.Tenant && out[n-1].Subscriber == o.Subscriber && out[n-1].Owner == o.Owner {
			out[n-1].Rows = append(out[n-1].Rows, row)
			continue
		}
		o.Rows = []PresenceRow{row}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list orphaned subscriptions: %w", err)
	}
	if n > 0 && n == limit && len(out) > 1 {
		out = out[:len(out)-1] // the last subscriber's rows may go on past the limit
	}
	return out, nil
}
