package backlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgehub/edgehub/event"
)

// Store is the Log on a SQL database: SQLite embedded (OpenSQLite), or
// PostgreSQL shared by several processes (OpenPostgres). The commit, the
// reads, retention and tenants are written once, in SQL both accept;
// dialect holds the few places where the two differ.
type Store struct {
	write  *sql.DB
	read   *sql.DB
	now    func() time.Time
	quotas Quotas
	d      dialect
	// wal, on SQLite in its durable mode, flushes commits outside SQLite
	// (wal.go); nil where the database makes its commits durable itself.
	wal *walSync
	// stmts are the commit's statements, prepared once on the writer.
	stmtsMu sync.Mutex
	stmts   *statements
	// rebound caches each query in the dialect's placeholders.
	rebound sync.Map
	// reads are the read pool's prepared statements (prepareReads).
	reads readStatements
	// retries counts write transactions run again (Retries).
	retries atomic.Int64
	// BeforeRetentionTx, when set, is called by retention and by the purge
	// of deleted tenants after they have read what to do and before each
	// write transaction that does it ("age", "purge" or "doomed"), and
	// before the count trim's one statement ("count"), so tests can hold
	// that window open and change the data inside it, or see a duty run.
	BeforeRetentionTx func(duty string)
	// BeforeCommit, when set, is called inside each commit's transaction
	// once its events are numbered, before it commits, so that tests can
	// hold a commit open while another process commits.
	BeforeCommit func()
}

// dialect is what differs between the stores.
type dialect struct {
	// dollar says placeholders are $1, $2 (Postgres), not ? and ?1.
	dollar bool
	// readTx begins the transactions that read a topic's row and then its
	// events or state, which must agree with each other.
	readTx *sql.TxOptions
	// retryable says a write transaction was aborted only because it ran
	// beside another (Postgres's serialization failures and deadlocks)
	// and may be run again; nil when writes never race (SQLite's one
	// writer).
	retryable func(error) bool
	// listToPurge lists topics with trimmed rows left after an id.
	listToPurge string
	// checkpoint, if set, folds the write-ahead log into the database, so
	// that a deleted tenant's rows leave the files too.
	checkpoint func(ctx context.Context, write *sql.DB) error
	// lockTenants, if set, waits on conn, before an inTxOf transaction
	// begins, until no other process commits for any of tenants, and
	// returns what lets them go once it has ended (Postgres: the session
	// advisory locks that its commits take in their pipeline, here for
	// the deletion and rotation of a tenant, plan 033).
	lockTenants func(ctx context.Context, conn *sql.Conn, tenants []string) (unlock func(), err error)
	// hints, if set, tells other processes of a commit's ranges or of a
	// tenant's end, inside the transaction that makes them (Postgres).
	hints *hinter
	// commit, if set, is CommitBatch: the same commit logic on a pipeline
	// of its own (Postgres, postgres_commit.go), not on inTxOf's
	// database/sql transaction, whose every statement is a round trip.
	commit func(ctx context.Context, reqs []*Publish) ([]Result, error)
	// databaseBytes reads the size of the whole database.
	databaseBytes string
}

// q is query in the dialect's placeholders.
func (s *Store) q(query string) string {
	if !s.d.dollar {
		return query
	}
	if r, ok := s.rebound.Load(query); ok {
		return r.(string)
	}
	r := dollars(query)
	s.rebound.Store(query, r)
	return r
}

// readStatements are the reads every hub start and every catch-up page
// make, prepared once on the read pool (and once on each of its
// connections, as it is used there): parsed afresh each time, they were
// 9 % of the server's CPU when 100 000 topics are each published to once.
type readStatements struct {
	head, topic, page *sql.Stmt
}

// prepareReads prepares the read statements when the store opens, never
// on first use: a read prepares on the pool while its transaction holds
// one of the pool's connections, so reads that all held one and waited
// for another to prepare on would wait for each other forever.
func (s *Store) prepareReads(ctx context.Context) error {
	for _, r := range []struct {
		st    **sql.Stmt
		query string
	}{
		{&s.reads.head, `SELECT head FROM topics WHERE tenant = ? AND topic = ?`},
		{&s.reads.topic, `SELECT id, head, trimmed FROM topics WHERE tenant = ? AND topic = ?`},
		{&s.reads.page, `SELECT ` + eventRowColumns + ` FROM events WHERE topic_id = ? AND seq > ? ORDER BY seq LIMIT ?`},
	} {
		st, err := s.read.PrepareContext(ctx, s.q(r.query))
		if err != nil {
			return errors.Join(fmt.Errorf("prepare %q: %w", r.query, err), s.reads.close())
		}
		*r.st = st
	}
	return nil
}

// close closes the statements prepared so far.
func (r *readStatements) close() error {
	var errs []error
	for _, st := range []*sql.Stmt{r.head, r.topic, r.page} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// dollars turns ? and ?N placeholders into $N, outside quoted literals.
func dollars(query string) string {
	var b strings.Builder
	n, quoted := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			b.WriteByte('$')
			if j > i+1 {
				b.WriteString(query[i+1 : j])
			} else {
				n++
				b.WriteString(strconv.Itoa(n))
			}
			i = j - 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// maxAttempts bounds how often a write transaction that lost a race with
// another process's is run again before its error is given up.
const maxAttempts = 50

// retry runs a write transaction, again while the database aborts it for
// having run beside another one, with a short random pause between runs.
func (s *Store) retry(ctx context.Context, run func() error) error {
	for attempt := 1; ; attempt++ {
		err := run()
		if err == nil || s.d.retryable == nil || !s.d.retryable(err) || attempt == maxAttempts {
			return err
		}
		s.retries.Add(1)
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) * int64(min(attempt, 10))))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}

// Retries is how many write transactions ran again after the shared log
// aborted them for racing another process's: commits of one tenant queue
// instead (lockTenants), so a count that grows says something else races.
func (s *Store) Retries() int64 { return s.retries.Load() }

// exec runs one write statement, retried like a transaction.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := s.retry(ctx, func() error {
		return s.wrote(func() error {
			var err error
			res, err = s.write.ExecContext(ctx, s.q(query), args...)
			return err
		})
	})
	if err != nil {
		return res, err
	}
	return res, s.flush()
}

// wrote runs commit, the step that makes a write visible (COMMIT, or an
// autocommit statement), so that reads know to wait for its flush.
func (s *Store) wrote(commit func() error) error {
	if s.wal == nil {
		return commit()
	}
	return s.wal.wrote(commit)
}

// flush makes what was written durable, where the store does that itself.
func (s *Store) flush() error {
	if s.wal == nil {
		return nil
	}
	return s.wal.flush()
}

// seen returns once what a read may have seen is durable; a read calls it
// once its snapshot is taken, before anything it read leaves the store.
func (s *Store) seen(ctx context.Context) error {
	if s.wal == nil {
		return nil
	}
	return s.wal.seen(ctx)
}

// inTx runs fn in one write transaction and commits it, retried as a
// whole, and returns once it is durable: fn must not change anything
// outside the transaction.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	return s.inTxOf(ctx, what, nil, fn)
}

// inTxOf is inTx for a transaction that writes for tenants: with the
// dialect's lockTenants it first waits for the other processes' commits
// of those tenants.
func (s *Store) inTxOf(ctx context.Context, what string, tenants []string, fn func(tx *sql.Tx) error) error {
	if err := s.writeTx(ctx, what, tenants, fn); err != nil {
		return err
	}
	return s.flush()
}

// writeTx is inTxOf without the flush that makes the transaction durable:
// the committer's, which flushes many commits at once while the next ones
// run.
func (s *Store) writeTx(ctx context.Context, what string, tenants []string, fn func(tx *sql.Tx) error) error {
	return s.retry(ctx, func() error {
		conn, err := s.write.Conn(ctx)
		if err != nil {
			return fmt.Errorf("take a connection for %s: %w", what, err)
		}
		defer conn.Close() //nolint:errcheck // gives the connection back to the pool
		if s.d.lockTenants != nil && len(tenants) > 0 {
			unlock, err := s.d.lockTenants(ctx, conn, tenants)
			if err != nil {
				return fmt.Errorf("wait for other processes' commits before %s: %w", what, err)
			}
			defer unlock()
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin %s: %w", what, err)
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if err := fn(tx); err != nil {
			return err
		}
		if err := s.wrote(tx.Commit); err != nil {
			return fmt.Errorf("commit %s: %w", what, err)
		}
		return nil
	})
}

// Close closes both pools; the committer must have stopped first.
func (s *Store) Close() error {
	s.stmtsMu.Lock()
	var serr error
	if s.stmts != nil {
		serr = s.stmts.close()
	}
	s.stmtsMu.Unlock()
	var werr error
	if s.wal != nil {
		werr = s.wal.close()
	}
	return errors.Join(serr, werr, s.reads.close(), s.read.Close(), s.write.Close())
}

// Ping checks the read pool, which is what readiness depends on.
func (s *Store) Ping(ctx context.Context) error {
	return s.read.PingContext(ctx)
}

// Head reads a topic's head; a topic never published to has head 0.
func (s *Store) Head(ctx context.Context, tenant, topic string) (int64, error) {
	var head int64
	err := s.reads.head.QueryRowContext(ctx, tenant, topic).Scan(&head)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read head of %s/%s: %w", tenant, topic, err)
	}
	return head, s.seen(ctx)
}

// TenantHead is the position of the tenant's newest event, 0 for none:
// where a tenant hub starts.
func (s *Store) TenantHead(ctx context.Context, tenant string) (int64, error) {
	var head int64
	err := s.read.QueryRowContext(ctx, s.q(`SELECT pos FROM usage WHERE tenant = ?`), tenant).Scan(&head)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the head of tenant %s: %w", tenant, err)
	}
	return head, s.seen(ctx)
}

// Usage is what a tenant holds against its quotas: stored bytes (its
// events' data, types and keys and its topics' state, as the quotas
// count them), topics, and events retained (over all its topics).
type Usage struct {
	Bytes, Topics, Events int64
	// Quotas are the store's, which commits enforce.
	Quotas Quotas
}

// Usage reads what the tenant holds; a tenant that never stored anything
// holds nothing.
func (s *Store) Usage(ctx context.Context, tenant string) (Usage, error) {
	u := Usage{Quotas: s.quotas}
	err := s.read.QueryRowContext(ctx, s.q(`SELECT bytes, topics FROM usage WHERE tenant = ?`), tenant).Scan(&u.Bytes, &u.Topics)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return u, fmt.Errorf("read the usage of tenant %s: %w", tenant, err)
	}
	if err := s.read.QueryRowContext(ctx, s.q(`SELECT coalesce(sum(head - purged), 0) FROM topics WHERE tenant = ?`), tenant).Scan(&u.Events); err != nil {
		return u, fmt.Errorf("count the events of tenant %s: %w", tenant, err)
	}
	return u, s.seen(ctx)
}

// Totals are the server's sums over every tenant, for /metrics: stored
// bytes and topics as the quotas count them, and the database's size on
// disk (what its files hold, free pages included).
type Totals struct {
	Bytes, Topics, DatabaseBytes int64
}

// Totals reads them.
func (s *Store) Totals(ctx context.Context) (Totals, error) {
	var t Totals
	if err := s.read.QueryRowContext(ctx, `SELECT coalesce(sum(bytes), 0), coalesce(sum(topics), 0) FROM usage`).Scan(&t.Bytes, &t.Topics); err != nil {
		return t, fmt.Errorf("sum the tenants' usage: %w", err)
	}
	if err := s.read.QueryRowContext(ctx, s.d.databaseBytes).Scan(&t.DatabaseBytes); err != nil {
		return t, fmt.Errorf("read the database's size: %w", err)
	}
	return t, nil
}

// topicRow is a topic's row as a read transaction sees it.
type topicRow struct {
	id, head, trimmed int64
}

// readTopic begins a read transaction and reads the topic's row in it, so
// that what the caller reads next agrees with it. A topic never published
// to has no row: the transaction is then nil, and so is the error.
func (s *Store) readTopic(ctx context.Context, tenant, topic string) (*sql.Tx, topicRow, error) {
	var t topicRow
	tx, err := s.read.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return nil, t, fmt.Errorf("begin read of %s/%s: %w", tenant, topic, err)
	}
	err = tx.StmtContext(ctx, s.reads.topic).QueryRowContext(ctx, tenant, topic).Scan(&t.id, &t.head, &t.trimmed)
	if err != nil {
		tx.Rollback() //nolint:errcheck // read-only: nothing to undo
		if errors.Is(err, sql.ErrNoRows) {
			return nil, t, nil
		}
		return nil, t, fmt.Errorf("read topic %s/%s: %w", tenant, topic, err)
	}
	if err := s.seen(ctx); err != nil {
		tx.Rollback() //nolint:errcheck // read-only: nothing to undo
		return nil, t, err
	}
	return tx, t, nil
}

// Read returns a page after a position from one read transaction, so the
// head and trim point agree with the rows. The page ends before the event
// that would take its data past maxBytes, but holds at least one event:
// what a reader holds is bounded by its caller, not by the topic.
func (s *Store) Read(ctx context.Context, tenant, topic string, after int64, limit, maxBytes int) (Page, error) {
	var p Page
	tx, t, err := s.readTopic(ctx, tenant, topic)
	if tx == nil || err != nil {
		return p, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	id := t.id
	p.Head, p.Trimmed = t.head, t.trimmed
	// Rows at or below the trim point may still exist until they are
	// purged; readers never see them.
	from := max(after, p.Trimmed)
	rows, err := tx.StmtContext(ctx, s.reads.page).QueryContext(ctx, id, from, limit)
	if err != nil {
		return p, fmt.Errorf("read events of %s/%s after %d: %w", tenant, topic, after, err)
	}
	defer rows.Close()
	p.Events = make([]event.Event, 0, min(limit, 256))
	size, full := 0, false
	var row eventRow
	for !full && rows.Next() {
		if err := rows.Scan(row.scanArgs()...); err != nil {
			return p, fmt.Errorf("scan event of %s/%s: %w", tenant, topic, err)
		}
		err := row.each(from, func(e event.Event) bool {
			if len(p.Events) == limit || len(p.Events) > 0 && size+len(e.Data) > maxBytes {
				full = true
				return false
			}
			size += len(e.Data)
			e.Data = bytes.Clone(e.Data) // the row's bytes are the driver's
			p.Events = append(p.Events, e)
			return true
		})
		if err != nil {
			return p, fmt.Errorf("read event %d of %s/%s: %w", row.seq, tenant, topic, err)
		}
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("read events of %s/%s: %w", tenant, topic, err)
	}
	return p, nil
}

// TenantPage is a read of a tenant's order after a position (plan 038).
// Head is the tenant's newest position; Next is how far the read got, the
// position to read after next: past the events the filter left out, and
// at Head once nothing is left. Gaps are the topics whose trimmed events
// include one after the read's position and at or before Next: what
// retention removed that the reader was owed.
type TenantPage struct {
	Events []event.OfTenant
	Gaps   []TopicGap
	Head   int64
	Next   int64

	gapAt int64 // the position of the last of Gaps
}

// TopicGap says retention removed a topic's events up to sequence To.
type TopicGap struct {
	Topic string
	To    int64
}

const (
	// tenantScanMax bounds the events one tenant read looks at, matching
	// or not, so that a selector that matches little costs a bounded read.
	tenantScanMax = 100_000
	// tenantGapsMax bounds the gaps of one tenant read: a gap names its
	// topic, so a page of them is at most about 1 MiB.
	tenantGapsMax = 1000
)

// UpdatePosition is the tenant position of the earliest event whose Mercure
// update its publisher gave the id, so that a subscriber resuming after
// that id resumes there, whether the event is still kept or retention
// removed it not longer ago than the trimmed ids are remembered
// (ForgetTrimmedUpdates); found is false otherwise (ids may repeat: the
// protocol leaves them to publishers).
func (s *Store) UpdatePosition(ctx context.Context, tenant, id string) (int64, bool, error) {
	var pos sql.NullInt64
	err := s.read.QueryRowContext(ctx, s.q(`SELECT min(p) FROM (
			SELECT e.pos AS p FROM events e JOIN usage u ON u.id = e.tenant_key WHERE u.tenant = ?1 AND e.update_id = ?2
			UNION ALL
			SELECT tu.pos AS p FROM trimmed_updates tu JOIN topics t ON t.id = tu.topic_id WHERE t.tenant = ?1 AND tu.update_id = ?2
		) AS found`), tenant, id).Scan(&pos)
	if err != nil {
		return 0, false, fmt.Errorf("find the update %q of %s: %w", id, tenant, err)
	}
	return pos.Int64, pos.Valid, s.seen(ctx)
}

// ReadTenant returns the events of the tenant's order after a position,
// in position order, that sel selects (Selects: its topics tested once
// per page, an announcement's id never remembered), with the page bounds
// of Read: at most limit events, and none that would take the data past
// maxBytes unless the page is empty; and at most tenantGapsMax gaps of
// the topics sel matches, Next cut short to the last one's position if
// there are more.
// Events at or below their topic's trim point are left out. Everything
// comes from one read transaction, and only what is durable.
func (s *Store) ReadTenant(ctx context.Context, tenant string, after int64, sel TenantSelection, limit, maxBytes int) (TenantPage, error) {
	p := TenantPage{Next: after}
	tx, err := s.read.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return p, fmt.Errorf("begin read of tenant %s: %w", tenant, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	var orderKey int64
	err = tx.QueryRowContext(ctx, s.q(`SELECT id, pos FROM usage WHERE tenant = ?`), tenant).Scan(&orderKey, &p.Head)
	if errors.Is(err, sql.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("read the order of tenant %s: %w", tenant, err)
	}
	if err := s.seen(ctx); err != nil {
		return p, err
	}
	match := remembered(sel)
	selects := func(e *event.OfTenant) bool { return Selects(sel, e, match) }
	if err := s.readOrder(ctx, tx, orderKey, after, selects, limit, maxBytes, &p); err != nil {
		return p, fmt.Errorf("read the order of tenant %s after %d: %w", tenant, after, err)
	}
	if err := s.readGaps(ctx, tx, tenant, after, match, &p); err != nil {
		return p, fmt.Errorf("read the gaps of tenant %s after %d: %w", tenant, after, err)
	}
	return p, nil
}

// readOrder is ReadTenant's read of events.
func (s *Store) readOrder(ctx context.Context, tx *sql.Tx, orderKey, after int64, selects func(*event.OfTenant) bool, limit, maxBytes int, p *TenantPage) error {
	rows, err := tx.QueryContext(ctx, s.q(`SELECT t.topic, t.trimmed, `+eventColumns("e.")+`
		FROM events e JOIN topics t ON t.id = e.topic_id
		WHERE e.tenant_key = ? AND e.pos > ? ORDER BY e.pos`), orderKey, after)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		row           eventRow
		topic         string
		trimmed       int64
		size, scanned int
		stopped       bool
	)
	args := append([]any{&topic, &trimmed}, row.scanArgs()...)
	for !stopped && rows.Next() {
		if err := rows.Scan(args...); err != nil {
			return err
		}
		err := row.each(0, func(e event.Event) bool {
			of := event.OfTenant{Topic: topic, Event: e}
			switch {
			case e.Pos <= after:
				return true
			case scanned == tenantScanMax:
				stopped = true
				return false
			case e.Seq <= trimmed || !selects(&of):
			case len(p.Events) == limit || len(p.Events) > 0 && size+len(e.Data) > maxBytes:
				stopped = true
				return false
			default:
				size += len(e.Data)
				of.Data = bytes.Clone(e.Data) // the row's bytes are the driver's
				p.Events = append(p.Events, of)
			}
			scanned++
			p.Next = e.Pos
			return true
		})
		if err != nil {
			return fmt.Errorf("event %d of %s: %w", row.seq, topic, err)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if !stopped {
		p.Next = p.Head // nothing is left: rows purged or never there
	}
	return nil
}

// readGaps is ReadTenant's read of the gaps owed between the read's
// position and where it got.
func (s *Store) readGaps(ctx context.Context, tx *sql.Tx, tenant string, after int64, match func(string) bool, p *TenantPage) error {
	rows, err := tx.QueryContext(ctx, s.q(`SELECT topic, trimmed, trimmed_pos FROM topics
		WHERE tenant = ? AND trimmed_pos > ? AND trimmed_pos <= ? ORDER BY trimmed_pos`), tenant, after, p.Next)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var g TopicGap
		var at int64
		if err := rows.Scan(&g.Topic, &g.To, &at); err != nil {
			return err
		}
		if !match(g.Topic) {
			continue
		}
		if len(p.Gaps) == tenantGapsMax {
			// More gaps than a page holds: the page ends at the last one
			// it has, and so do its events.
			p.Next = p.gapAt
			for len(p.Events) > 0 && p.Events[len(p.Events)-1].Pos > p.Next {
				p.Events = p.Events[:len(p.Events)-1]
			}
			break
		}
		p.Gaps = append(p.Gaps, g)
		p.gapAt = at
	}
	return rows.Err()
}

// TopicInfo is a topic as the topic list shows it: its head, and First,
// its oldest retained sequence number (0 when none is retained).
type TopicInfo struct {
	Topic       string
	Head, First int64
}

// topicsScanMax bounds the topics one listing looks at, matching or not.
const topicsScanMax = 100_000

// Topics lists the tenant's topics after the name after, in byte order of
// their names, that match accepts, at most limit of them, and next, the
// name to list after next: the last one listed, or, when the listing
// looked at topicsScanMax topics without filling the page, the last it
// looked at; and whether it listed every topic after after (complete).
// Heads are durable ones.
func (s *Store) Topics(ctx context.Context, tenant, after string, match func(topic string) bool, limit int) (topics []TopicInfo, next string, complete bool, err error) {
	tx, err := s.read.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return nil, "", false, fmt.Errorf("begin listing of tenant %s: %w", tenant, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	const chunk = 1000
	scanned, seen := after, 0
	for len(topics) < limit && seen < topicsScanMax {
		ask := min(chunk, topicsScanMax-seen)
		n, err := s.topicsChunk(ctx, tx, tenant, scanned, ask, func(t TopicInfo) bool {
			scanned = t.Topic
			if match(t.Topic) {
				topics = append(topics, t)
			}
			return len(topics) < limit
		})
		if err != nil {
			return nil, "", false, fmt.Errorf("list topics of tenant %s: %w", tenant, err)
		}
		seen += n
		if n < ask {
			complete = true // no more topics
			break
		}
	}
	switch {
	case len(topics) == limit:
		next = topics[limit-1].Topic
	case seen >= topicsScanMax:
		next = scanned
	case len(topics) > 0:
		next = topics[len(topics)-1].Topic
	default:
		next = after
	}
	if err := s.seen(ctx); err != nil {
		return nil, "", false, err
	}
	return topics, next, complete, nil
}

// topicsChunk calls fn with up to n topics after after, in name order,
// until fn returns false, and says how many it looked at.
func (s *Store) topicsChunk(ctx context.Context, tx *sql.Tx, tenant, after string, n int, fn func(TopicInfo) bool) (int, error) {
	rows, err := tx.QueryContext(ctx, s.q(`SELECT topic, head, trimmed FROM topics WHERE tenant = ? AND topic > ?
		ORDER BY topic LIMIT ?`), tenant, after, n)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var t TopicInfo
		var trimmed int64
		if err := rows.Scan(&t.Topic, &t.Head, &trimmed); err != nil {
			return seen, err
		}
		seen++
		if t.Head > trimmed {
			t.First = trimmed + 1
		}
		if !fn(t) {
			return n, nil // stopped: as if the chunk was full
		}
	}
	return seen, rows.Err()
}
