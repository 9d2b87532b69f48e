package backlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edgehub/edgehub/event"
)

// Quotas bound what one tenant, or one topic's state, may store. They are
// checked inside the committing transaction, against the usage that the
// same transaction sees, so concurrent publishes cannot overshoot them
// together. Zero turns one off.
type Quotas struct {
	TenantBytes  int64 // bytes of events (data, type, key) and state of a tenant
	TenantTopics int64 // topics of a tenant
	StateBytes   int64 // bytes of one topic's state (keys and data)
}

// SetQuotas sets the quotas that commits enforce; call it before the
// first commit.
func (s *Store) SetQuotas(q Quotas) { s.quotas = q }

// eventBytes is what one event adds to its tenant's stored bytes; purge
// takes the same measure away (length(data)+length(type)+length(key)
// +length(attrs), or a segment's weight: the sum of its events').
func eventBytes(e *event.Event) int64 {
	return int64(len(e.Data) + len(e.Type) + len(e.Key) + len(event.EncodeUpdate(e.Update)))
}

// CommitBatch commits all requests in one write transaction, and returns
// once it is durable.
func (s *Store) CommitBatch(ctx context.Context, reqs []*Publish) ([]Result, error) {
	results, err := s.commitVisible(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if err := s.flush(); err != nil {
		return nil, err
	}
	return results, nil
}

// commitVisible is CommitBatch without the flush, which the committer
// runs for many commits at once while the next ones run (pipelined).
func (s *Store) commitVisible(ctx context.Context, reqs []*Publish) ([]Result, error) {
	if s.wal != nil {
		if err := s.wal.failure(); err != nil {
			return nil, err // a failed flush ends the log's commits for good
		}
	}
	if s.d.commit != nil {
		return s.d.commit(ctx, reqs)
	}
	// Before the transaction: the writer has one connection, which the
	// transaction then holds.
	prepared, err := s.statements(ctx)
	if err != nil {
		return nil, err
	}
	var results []Result
	tenants := make([]string, 0, 1)
	for _, r := range reqs {
		if !slices.Contains(tenants, r.Tenant) {
			tenants = append(tenants, r.Tenant)
		}
	}
	err = s.writeTx(ctx, fmt.Sprintf("commit of %d requests", len(reqs)), tenants, func(tx *sql.Tx) error {
		a := commitTx{ctx: ctx, tx: tx, quotas: s.quotas,
			topics: map[[2]string]*topicState{}, tenants: map[string]*tenantState{}}
		a.bind(ctx, tx, prepared) // the transaction's statements close with it
		now := s.now().UTC()
		results = make([]Result, len(reqs))
		for i, req := range reqs {
			var err error
			if results[i], err = a.append(req, now); err != nil {
				return err
			}
		}
		if err := a.writeBack(now); err != nil {
			return err
		}
		if s.BeforeCommit != nil {
			s.BeforeCommit()
		}
		return s.committed(ctx, tx, reqs, results)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// topicState is a topic's row as this commit has advanced it so far.
// noOldest says its oldest may be NULL (no event retained), so that the
// write back sets it: a row whose oldest is set is written without it,
// and its entry in the index on oldest is left alone (plan 056).
type topicState struct {
	id, head, stateBytes int64
	changed, noOldest    bool
}

// tenantState is what the commit knows of a tenant: its row (id 0 and
// no generation for a dev-mode tenant that has none), its usage, and its
// order (plan 038): the order's key (0 until its usage row exists) and
// the position of its newest event.
type tenantState struct {
	id, generation int64
	bytes, topics  int64
	orderKey, pos  int64
	usageChanged   bool
}

// commitTx holds one commit's prepared statements and the heads and usage
// it has advanced so far, which are written back once per topic and
// tenant.
type commitTx struct {
	ctx     context.Context
	tx      *sql.Tx
	quotas  Quotas
	topics  map[[2]string]*topicState
	tenants map[string]*tenantState
	segment []byte // the segment being inserted, reused across them
	// held are the events of this commit's requests with no stream
	// operation, numbered but not inserted yet, by topic in the order of
	// their first append: the single publishes of a group are stored as
	// segments, O(1) statements per topic per group as a batch is (plan
	// 054).
	held   []heldEvents
	heldAt map[int64]int // index in held by topic id

	statements
}

// heldEvents are one topic's events held for insertHeld.
type heldEvents struct {
	tenant, topic            string
	topicID, orderKey, nanos int64
	events                   []event.Event
}

// hold keeps events of a topic for insertHeld.
func (a *commitTx) hold(tenant, topic string, topicID, orderKey, nanos int64, events []event.Event) {
	if a.heldAt == nil {
		a.heldAt = map[int64]int{}
	}
	i, ok := a.heldAt[topicID]
	if !ok {
		i = len(a.held)
		a.heldAt[topicID] = i
		a.held = append(a.held, heldEvents{tenant: tenant, topic: topic, topicID: topicID, orderKey: orderKey, nanos: nanos})
	}
	a.held[i].events = append(a.held[i].events, events...)
}

// insertHeld inserts the held events, as insertEvents lays out each
// topic's.
func (a *commitTx) insertHeld() error {
	for _, h := range a.held {
		if err := a.insertEvents(h.topicID, h.orderKey, h.events, h.nanos); err != nil {
			return fmt.Errorf("insert events %d..%d of %s/%s: %w", h.events[0].Seq, h.events[len(h.events)-1].Seq, h.tenant, h.topic, err)
		}
	}
	a.held, a.heldAt = a.held[:0], nil
	return nil
}

// statements are the commit's prepared statements. They are prepared
// once on the writer connection and bound to each transaction with
// Tx.StmtContext: preparing them afresh per commit was most of the CPU
// of a one-event commit.
type statements struct {
	// insert writes one event as a row, insertSegment many (segment.go).
	insert, insertSegment, getIdem, putIdem, getWebhook, putWebhook stmt
	deletedSince                                                    stmt
	getTopic, newTopic, setTopic, setTopicOldest                    stmt
	upsertKey, deleteKey, keySize                                   stmt
	getTenant, getUsage, newUsage, setUsage, putUsage               stmt
	// Durable Streams' (streams.go).
	getStream, putStream, setStream, dropStream, softDelete, addForks stmt
	getProducer, putProducer, dropProducers                           stmt
	trimAll, dropState, setTrimmed, forkEvents                        stmt
	// Presence's (presence.go).
	countPresence, putPresence, dropPresence stmt
}

type statementSQL struct {
	stmt *stmt
	sql  string
}

func (st *statements) list() []statementSQL {
	return append(append(st.streamList(), st.presenceList()...), []statementSQL{
		{&st.insert, `INSERT INTO events (topic_id, seq, type, time, key, op, data, raw, tenant_key, pos, attrs, update_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.insertSegment, `INSERT INTO events (topic_id, seq, n, type, time, key, op, data, raw, weight, tenant_key, pos)
			VALUES (?, ?, ?, '', ?, '', '', ?, ?, ?, ?, ?)`},
		{&st.getIdem, `SELECT hash, first, last, batch, coalesce(pos, 0) FROM idempotency WHERE topic_id = ? AND key = ?`},
		{&st.putIdem, `INSERT INTO idempotency (topic_id, key, hash, first, last, batch, created, pos) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.getWebhook, `SELECT tenant_id, topic, hash, first, last, batch, created, coalesce(pos, 0) FROM webhook_keys WHERE tenant = ? AND key = ?`},
		{&st.deletedSince, `SELECT count(*) FROM doomed_tenants WHERE name = ? AND id = ? AND deleted >= ?`},
		{&st.putWebhook, `INSERT INTO webhook_keys (tenant, key, tenant_id, topic, hash, first, last, batch, created, pos)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, key) DO UPDATE SET tenant_id = excluded.tenant_id,
			topic = excluded.topic, hash = excluded.hash, first = excluded.first, last = excluded.last,
			batch = excluded.batch, created = excluded.created, pos = excluded.pos`},
		{&st.getTopic, `SELECT id, head, state_bytes, oldest IS NULL FROM topics WHERE tenant = ? AND topic = ?`},
		// A topic's row is made with the head, state size and oldest its
		// first request leaves, so that a new topic is one write.
		{&st.newTopic, `INSERT INTO topics (tenant, topic, head, state_bytes, oldest) VALUES (?, ?, ?, ?, ?) RETURNING id`},
		// oldest is NULL exactly when no event is retained; the first one
		// retained after that is committed now. A statement that names a
		// column rewrites the entries of the indexes on it, whatever its
		// value, so a row whose oldest is set is written by setTopic.
		{&st.setTopic, `UPDATE topics SET head = ?, state_bytes = ? WHERE id = ?`},
		{&st.setTopicOldest, `UPDATE topics SET head = ?, state_bytes = ?, oldest = coalesce(oldest, ?) WHERE id = ?`},
		{&st.upsertKey, `INSERT INTO state (topic_id, key, seq, data) VALUES (?, ?, ?, ?)
			ON CONFLICT (topic_id, key) DO UPDATE SET seq = excluded.seq, data = excluded.data`},
		{&st.deleteKey, `DELETE FROM state WHERE topic_id = ? AND key = ?`},
		{&st.keySize, `SELECT length(key) + length(data) FROM state WHERE topic_id = ? AND key = ?`},
		{&st.getTenant, `SELECT id, generation FROM tenants WHERE name = ?`},
		{&st.getUsage, `SELECT bytes, topics, id, pos FROM usage WHERE tenant = ?`},
		{&st.newUsage, `INSERT INTO usage (tenant) VALUES (?) RETURNING id`},
		// An insert into usage, even one that ends as an update, writes
		// its AUTOINCREMENT counter too: setUsage updates the row that
		// order made, and putUsage makes one only where there is none.
		{&st.setUsage, `UPDATE usage SET bytes = ?, topics = ?, pos = ? WHERE tenant = ?`},
		{&st.putUsage, `INSERT INTO usage (tenant, bytes, topics, pos) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant) DO UPDATE SET bytes = excluded.bytes, topics = excluded.topics, pos = excluded.pos`},
	}...)
}

// statements prepares the commit's statements on the writer, once.
func (s *Store) statements(ctx context.Context) (*statements, error) {
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	if s.stmts != nil {
		return s.stmts, nil
	}
	st := &statements{}
	for _, p := range st.list() {
		ps, err := s.write.PrepareContext(ctx, s.q(p.sql))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("prepare %q: %w", p.sql, err), st.close())
		}
		*p.stmt = sqlStmt{ps}
	}
	s.stmts = st
	return st, nil
}

// bind makes the statements of tx from the prepared ones. Each is bound
// on its first use: a one-event commit uses 6 of them, and binding all
// of them cost as much as running those.
func (st *statements) bind(ctx context.Context, tx *sql.Tx, prepared *statements) {
	*st = *prepared
	list := st.list()
	lazy := make([]txStmt, len(list))
	for i, p := range list {
		lazy[i] = txStmt{ctx: ctx, tx: tx, prepared: (*p.stmt).(sqlStmt).Stmt}
		*p.stmt = &lazy[i]
	}
}

// txStmt is a prepared statement bound to a transaction when first used.
type txStmt struct {
	ctx             context.Context
	tx              *sql.Tx
	prepared, bound *sql.Stmt
}

func (s *txStmt) get() *sql.Stmt {
	if s.bound == nil {
		s.bound = s.tx.StmtContext(s.ctx, s.prepared)
	}
	return s.bound
}

func (s *txStmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return s.get().ExecContext(ctx, args...)
}

func (s *txStmt) QueryRowContext(ctx context.Context, args ...any) rowScanner {
	return s.get().QueryRowContext(ctx, args...)
}

func (s *txStmt) QueryContext(ctx context.Context, args ...any) (rowsScanner, error) {
	return s.get().QueryContext(ctx, args...)
}

// Close closes the bound statement; the transaction closes it too.
func (s *txStmt) Close() error {
	if s.bound == nil {
		return nil
	}
	return s.bound.Close()
}

func (st *statements) close() error {
	var errs []error
	for _, p := range st.list() {
		if *p.stmt != nil {
			errs = append(errs, (*p.stmt).Close())
		}
	}
	return errors.Join(errs...)
}

// writeBack stores the held events, and the heads, state sizes and usage
// this commit changed.
func (a *commitTx) writeBack(now time.Time) error {
	if err := a.insertHeld(); err != nil {
		return err
	}
	for key, t := range a.topics {
		if !t.changed {
			continue
		}
		var err error
		if t.noOldest {
			_, err = a.setTopicOldest.ExecContext(a.ctx, t.head, t.stateBytes, now.UnixNano(), t.id)
		} else {
			_, err = a.setTopic.ExecContext(a.ctx, t.head, t.stateBytes, t.id)
		}
		if err != nil {
			return fmt.Errorf("advance head of %s/%s: %w", key[0], key[1], err)
		}
	}
	for name, t := range a.tenants {
		if !t.usageChanged {
			continue
		}
		if err := a.setUsageOf(name, t); err != nil {
			return fmt.Errorf("record usage of tenant %s: %w", name, err)
		}
	}
	return nil
}

// setUsageOf writes a tenant's usage back to its row, which this
// transaction read or made if the tenant has an order's key; a stream's
// deletion changes usage without an append, and may find no row.
func (a *commitTx) setUsageOf(name string, t *tenantState) error {
	var err error
	if t.orderKey != 0 {
		_, err = a.setUsage.ExecContext(a.ctx, t.bytes, t.topics, t.pos, name)
	} else {
		_, err = a.putUsage.ExecContext(a.ctx, name, t.bytes, t.topics, t.pos)
	}
	return err
}

// tenant reads, once per transaction, the tenant's row and usage.
func (a *commitTx) tenant(name string) (*tenantState, error) {
	if t, ok := a.tenants[name]; ok {
		return t, nil
	}
	t := &tenantState{}
	err := a.getTenant.QueryRowContext(a.ctx, name).Scan(&t.id, &t.generation)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("look up tenant %s: %w", name, err)
	}
	err = a.getUsage.QueryRowContext(a.ctx, name).Scan(&t.bytes, &t.topics, &t.orderKey, &t.pos)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read usage of tenant %s: %w", name, err)
	}
	a.tenants[name] = t
	return t, nil
}

// findTopic returns the topic as this commit sees it, or nil if it has no
// row yet.
func (a *commitTx) findTopic(tenant, topic string) (*topicState, error) {
	key := [2]string{tenant, topic}
	if t, ok := a.topics[key]; ok {
		return t, nil
	}
	t := &topicState{}
	err := a.getTopic.QueryRowContext(a.ctx, tenant, topic).Scan(&t.id, &t.head, &t.stateBytes, &t.noOldest)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find topic %s/%s: %w", tenant, topic, err)
	}
	a.topics[key] = t
	return t, nil
}

// order makes the tenant's usage row, and so its order's key, if the
// tenant has none yet: once per incarnation, at its first append.
func (a *commitTx) order(name string, t *tenantState) error {
	if t.orderKey != 0 {
		return nil
	}
	if err := a.newUsage.QueryRowContext(a.ctx, name).Scan(&t.orderKey); err != nil {
		return fmt.Errorf("start the order of tenant %s: %w", name, err)
	}
	return nil
}

// createTopic makes the row of t, a topic its first request has just
// numbered, with what that request left in it: nothing for writeBack to
// change unless a later request of the commit appends to it too.
func (a *commitTx) createTopic(tenant, topic string, t *topicState, nanos int64) error {
	if err := a.newTopic.QueryRowContext(a.ctx, tenant, topic, t.head, t.stateBytes, nanos).Scan(&t.id); err != nil {
		return fmt.Errorf("create topic %s/%s: %w", tenant, topic, err)
	}
	a.topics[[2]string{tenant, topic}] = t
	return nil
}

// stateDelta is how much the request's keyed events change the topic's
// state size, folding them in order over the sizes stored now.
func (a *commitTx) stateDelta(t *topicState, events []event.Event) (int64, error) {
	var delta int64
	var sizes map[string]int64
	for i := range events {
		e := &events[i]
		if e.Op == "" {
			continue
		}
		if sizes == nil {
			sizes = map[string]int64{}
		}
		cur, seen := sizes[e.Key]
		if !seen && t != nil {
			err := a.keySize.QueryRowContext(a.ctx, t.id, e.Key).Scan(&cur)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return 0, fmt.Errorf("read size of key %s: %w", e.Key, err)
			}
		}
		next := int64(0)
		if e.Op == event.OpUpsert {
			next = int64(len(e.Key) + len(e.Data))
		}
		delta += next - cur
		sizes[e.Key] = next
	}
	return delta, nil
}

// fold applies a keyed event to the topic's state, in the same transaction.
func (a *commitTx) fold(topicID int64, e *event.Event) error {
	var err error
	switch e.Op {
	case event.OpUpsert:
		_, err = a.upsertKey.ExecContext(a.ctx, topicID, e.Key, e.Seq, []byte(e.Data))
	case event.OpDelete:
		_, err = a.deleteKey.ExecContext(a.ctx, topicID, e.Key)
	}
	return err
}

// repeat looks the request's idempotency key up. It returns the original's
// result for a true repeat, ErrKeyReused for a different request under the
// key, and nothing for a new key. A tenant-wide key (a webhook-id) binds
// its topic too, and a row of an earlier incarnation of the tenant's name
// does not count.
func (a *commitTx) repeat(req *Publish, ten *tenantState, t *topicState) (*Result, error) {
	var hash []byte
	var r Result
	var err error
	if req.TenantWideKey {
		var tenantID int64
		var topic string
		var created int64
		err = a.getWebhook.QueryRowContext(a.ctx, req.Tenant, req.IdemKey).
			Scan(&tenantID, &topic, &hash, &r.First, &r.Last, &r.Batch, &created, &r.Pos)
		if err == nil && tenantID != ten.id {
			return nil, nil
		}
		if err == nil {
			// A dev-mode tenant with no row keeps id 0 across a deletion:
			// a key used before the deletion is gone with its events.
			var doomed int
			if err := a.deletedSince.QueryRowContext(a.ctx, req.Tenant, tenantID, created).Scan(&doomed); err != nil {
				return nil, fmt.Errorf("look up deletions of tenant %s: %w", req.Tenant, err)
			}
			if doomed > 0 {
				return nil, nil
			}
		}
		if err == nil && topic != req.Topic {
			return &Result{Err: ErrKeyReused}, nil
		}
	} else {
		if t == nil {
			return nil, nil
		}
		err = a.getIdem.QueryRowContext(a.ctx, t.id, req.IdemKey).Scan(&hash, &r.First, &r.Last, &r.Batch, &r.Pos)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up idempotency key: %w", err)
	case bytes.Equal(hash, req.IdemHash):
		r.Duplicate = true
		return &r, nil
	default:
		return &Result{Err: ErrKeyReused}, nil
	}
}

func (a *commitTx) remember(req *Publish, ten *tenantState, t *topicState, r *Result, nanos int64) error {
	var err error
	if req.TenantWideKey {
		_, err = a.putWebhook.ExecContext(a.ctx, req.Tenant, req.IdemKey, ten.id, req.Topic, req.IdemHash,
			r.First, r.Last, req.Batch, nanos, r.Pos)
	} else {
		_, err = a.putIdem.ExecContext(a.ctx, t.id, req.IdemKey, req.IdemHash, r.First, r.Last, req.Batch, nanos, r.Pos)
	}
	if err != nil {
		return fmt.Errorf("remember idempotency key: %w", err)
	}
	return nil
}

// quota refuses a request that would take its tenant's stored bytes or
// topics, or its topic's state, past a quota. A request that frees bytes
// (a delete of a large key) is never refused for bytes.
func (a *commitTx) quota(ten *tenantState, t *topicState, added, stateDelta int64) error {
	newTopic := t == nil
	q := a.quotas
	state := int64(0)
	if t != nil {
		state = t.stateBytes
	}
	switch {
	case newTopic && q.TenantTopics > 0 && ten.topics >= q.TenantTopics:
		return fmt.Errorf("%w: the tenant has %d topics, as many as it may", ErrQuota, ten.topics)
	case q.StateBytes > 0 && stateDelta > 0 && state+stateDelta > q.StateBytes:
		return fmt.Errorf("%w: the topic's state would be over %d bytes", ErrQuota, q.StateBytes)
	case q.TenantBytes > 0 && added > 0 && ten.bytes+added > q.TenantBytes:
		return fmt.Errorf("%w: the tenant would store over %d bytes", ErrQuota, q.TenantBytes)
	}
	return nil
}

func (a *commitTx) append(req *Publish, now time.Time) (Result, error) {
	plain := req.Stream == nil
	if !plain {
		// A stream's logic reads what was written before it (a fork reads
		// its source's events, a trim finds positions in rows).
		if err := a.insertHeld(); err != nil {
			return Result{}, err
		}
	}
	ten, err := a.tenant(req.Tenant)
	if err != nil {
		return Result{}, err
	}
	if req.RequireTenant && (ten.id == 0 || ten.generation != req.Generation) {
		return Result{Err: ErrNoTenant}, nil
	}
	t, err := a.findTopic(req.Tenant, req.Topic)
	if err != nil {
		return Result{}, err
	}
	var sx *streamTx
	if req.Stream != nil {
		if t != nil {
			t.noOldest = true // a stream's operation may trim all of it (trimAll)
		}
		var r *Result
		if sx, r, err = a.streamBegin(req, ten, t, now); err != nil || r != nil {
			if r == nil {
				return Result{}, err
			}
			return *r, nil
		}
	}
	if req.Presence != nil {
		if r, err := a.presenceCheck(req); err != nil || r != nil {
			if r == nil {
				return Result{}, err
			}
			return *r, nil
		}
	}
	if req.IdemKey != "" {
		if r, err := a.repeat(req, ten, t); err != nil || r != nil {
			if r == nil {
				return Result{}, err
			}
			return *r, nil
		}
	}
	delta, err := a.stateDelta(t, req.Events)
	if err != nil {
		return Result{}, err
	}
	var forked []event.Event
	if sx != nil {
		forked = sx.forked
	}
	added := delta
	for i := range req.Events {
		added += eventBytes(&req.Events[i])
	}
	for i := range forked {
		added += eventBytes(&forked[i])
	}
	// The end of subscriptions is paid for when they start: refusing it
	// would leave them listed for ever.
	ending := req.Presence != nil && req.Presence.Remove > 0
	if err := a.quota(ten, t, added, delta); err != nil && !ending {
		return Result{Err: err}, nil
	}
	if err := a.order(req.Tenant, ten); err != nil {
		return Result{}, err
	}
	created := t == nil
	if created {
		t = &topicState{} // its row is made once it is numbered
		ten.topics++
	}
	ten.bytes += added
	ten.usageChanged = true
	t.stateBytes += delta
	t.changed = !created
	r := Result{First: t.head + 1, Batch: req.Batch, Events: make([]event.Event, 0, len(forked)+len(req.Events))}
	nanos := now.UnixNano()
	for _, e := range forked { // numbered as in the fork's source
		t.head = e.Seq
		ten.pos++
		e.Time, e.Pos = now, ten.pos
		r.Events = append(r.Events, e)
	}
	if len(forked) > 0 {
		r.First = forked[0].Seq
	}
	for _, e := range req.Events {
		t.head++
		ten.pos++
		e.Seq, e.Time, e.Pos = t.head, now, ten.pos
		r.Events = append(r.Events, e)
	}
	if created {
		if err := a.createTopic(req.Tenant, req.Topic, t, nanos); err != nil {
			return Result{}, err
		}
	}
	if plain {
		a.hold(req.Tenant, req.Topic, t.id, ten.orderKey, nanos, r.Events)
	} else if err := errors.Join(a.insertEvents(t.id, ten.orderKey, r.Events[:len(forked)], nanos),
		a.insertEvents(t.id, ten.orderKey, r.Events[len(forked):], nanos)); err != nil {
		// Forked events are numbered as in their source, the request's
		// after them: each part is consecutive, and laid out apart.
		return Result{}, fmt.Errorf("insert events %d..%d of %s/%s: %w", r.First, t.head, req.Tenant, req.Topic, err)
	}
	for i := range r.Events {
		if err := a.fold(t.id, &r.Events[i]); err != nil {
			return Result{}, fmt.Errorf("fold event %d of %s/%s into state: %w", r.Events[i].Seq, req.Tenant, req.Topic, err)
		}
	}
	r.Last = t.head
	if len(r.Events) > 0 {
		r.Pos = r.Events[0].Pos
	}
	if sx != nil {
		if err := a.finish(sx, t, &r, now); err != nil {
			return Result{}, err
		}
	}
	if req.IdemKey != "" {
		if err := a.remember(req, ten, t, &r, nanos); err != nil {
			return Result{}, err
		}
	}
	if req.Presence != nil {
		if err := a.presenceApply(req); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

// insertEvents writes events of a topic, numbered already and
// consecutive in it, as layout (segment.go) lays them out in rows.
func (a *commitTx) insertEvents(topicID, orderKey int64, events []event.Event, nanos int64) error {
	return layout(events, func(run []event.Event, weight int64) error {
		last := &run[len(run)-1]
		if len(run) == 1 {
			var updateID any // NULL: only an update's own id is looked up
			if ownRow(last) {
				updateID = last.Update.ID
			}
			_, err := a.insert.ExecContext(a.ctx, topicID, last.Seq, last.Type, nanos, last.Key, last.Op, []byte(last.Data), last.Raw,
				orderKey, last.Pos, event.EncodeUpdate(last.Update), updateID)
			return err
		}
		a.segment = encodeSegment(a.segment[:0], run)
		_, err := a.insertSegment.ExecContext(a.ctx, topicID, last.Seq, len(run), nanos, a.segment, false, weight, orderKey, last.Pos)
		return err
	})
}
